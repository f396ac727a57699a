"""Synthetic clinical notes with PHI at exact offsets, for training a model without real notes.

Everything that reads as text lives in the language's resource file (its pack's ``synth.toml``):
note types built from sections, section titles, line templates (see ``hybriddeid.synth.template``),
clinical vocabulary, label and header styles, date formats, identifier shapes and name sources. This
module only draws from it. A note's *cast* (patient, relative, clinicians, places, numbers) is drawn
once per note from the surrogate generators' Faker locales and templates, so a patient keeps one name
and one address throughout the note, as in real notes.

Two *mixes* fight template overfitting when measuring: the resource's ``[mix.train]`` and
``[mix.test]`` weigh note types, layouts, date formats and name locales differently and each holds
some out (note types, label and header styles, date formats and name locales that only the test mix
uses), so a model trained on one mix and scored on the other meets layouts and names it never saw.
"""

from __future__ import annotations

import random
import string
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from functools import cache, partial
from typing import Any

from faker import Faker

from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import language_pack, register_cache
from hybriddeid.knowledge.dictionaries import bundled_entries
from hybriddeid.surrogates.generator import faker_for, fill_template, name_word
from hybriddeid.surrogates.language import LanguageResources, load_language
from hybriddeid.synth.template import NoteWriter, TemplateError, render

MIXES = ("train", "test")
# Slots drawn afresh at every use (a note has many dates); all others keep one value per note.
FRESH_SLOTS = frozenset(
    {"date", "date_past", "date_future", "date_short", "month_year", "year", "weekday", "age_other"}
)
_NO_WRAP = 0


@dataclass(frozen=True)
class SynthResources:
    """A language's synthetic-note resource file, parsed."""

    language: str
    data: Mapping[str, Any]
    lang: LanguageResources

    def mix(self, name: str) -> Mapping[str, Any]:
        if name not in self.data["mix"]:
            raise ValueError(f"unknown mix {name!r}; known: {', '.join(self.data['mix'])}")
        return self.data["mix"][name]


@register_cache
@cache
def load_synth_resources(language: str = "en") -> SynthResources:
    """The ``synth.toml`` of ``language``'s pack, checked: every section a note names exists."""
    pack = language_pack(language)
    origin = pack.origin("synth")
    data = tomllib.loads(pack.read_text("synth"))
    for note_name, note in data["notes"].items():
        missing = [s.strip("?!") for s in note["sections"] if s.strip("?!") not in data["sections"]]
        if missing:
            raise ValueError(f"{origin}: note {note_name!r} names unknown sections {missing}")
    for mix_name, mix in data["mix"].items():
        unknown = sorted(set(mix["note_types"]) - set(data["notes"]))
        if unknown:
            raise ValueError(f"{origin}: mix {mix_name!r} names unknown note types {unknown}")
        unknown = sorted(set(mix.get("extra_templates", ())) - set(data.get("extra_templates", {})))
        if unknown:
            raise ValueError(f"{origin}: mix {mix_name!r} names unknown template sets {unknown}")
    return SynthResources(language, data, load_language(language))


def _weighted(rng: random.Random, table: Mapping[str, float]) -> str:
    keys = list(table)
    return rng.choices(keys, weights=[float(table[k]) for k in keys])[0]


def _case_safe_upper(text: str) -> str:
    """Upper case that never changes the length ("ß" stays), so offsets survive."""
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in text)


@dataclass
class Person:
    first: str
    last: str
    middle: str = ""
    sex: str = "female"

    @property
    def full(self) -> str:
        return " ".join(part for part in (self.first, self.middle, self.last) if part)


class Note:
    """One note being generated: its random source, style choices and cast of PHI values."""

    def __init__(self, res: SynthResources, mix: Mapping[str, Any], rng: random.Random) -> None:
        self.res = res
        self.data = res.data
        self.mix = mix
        self.rng = rng
        layout = self.data["layout"]
        self.label_style = _weighted(rng, mix["label_styles"])
        self.label_pad = rng.randint(*layout["label_pad"]) if "{pad}" in self.label_style else 0
        self.header_style = _weighted(rng, mix["header_styles"])
        self.date_format = _weighted(rng, mix["date_formats"])
        self.date_variety = float(layout["date_variety"])
        self.cast: dict[str, tuple[str, str]] = {}
        # The language's own label names for the generator's generic ones ([labels]) and for single
        # slots ([slot_labels]: a relative's name is a label of its own in MEDDOCAN).
        self.labels: Mapping[str, str] = self.data.get("labels", {})
        self.slot_labels: Mapping[str, str] = self.data.get("slot_labels", {})
        years = self.data["dates"]["years"]
        self.anchor = date(rng.randint(*years), 1, 1) + timedelta(days=rng.randint(0, 364))
        low, high = (int(x) for x in _weighted(rng, self.data["ages"]["bands"]).split("-"))
        self.age = rng.randint(low, high)
        self.patient = self._person()
        self.relative = self._person(last=self.patient.last if rng.random() < 0.6 else None)
        self.doctors = [self._person() for _ in range(3)]
        self.nurse = self._person()
        self.slots: dict[str, Callable[[], tuple[str, str]]] = self._slot_table()

    # -- template context ------------------------------------------------------------------------
    def choose(self, options: list[str]) -> str:
        return self.rng.choice(options)

    def vocab(self, name: str) -> str:
        try:
            return self.rng.choice(self.data["vocab"][name])
        except KeyError:
            raise TemplateError(f"unknown vocabulary list {name!r}") from None

    def number(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def gendered(self, word: str) -> str:
        """The form of ``word`` ("he", "Mr.") for the patient's sex, from the resource's [gender]."""
        try:
            forms = self.data["gender"][word]
        except KeyError:
            raise TemplateError(f"unknown gendered word {word!r}") from None
        return forms[0] if self.patient.sex == "male" else self.rng.choice(forms[1:])

    def field_label(self, label: str) -> str:
        text = self.label_style.replace("{LABEL}", label.upper()).replace("{label}", label)
        return text.replace("{pad}", " " * max(1, self.label_pad - len(label)))

    def slot(self, name: str) -> tuple[str, str]:
        if name in self.cast:
            return self.cast[name]
        try:
            make = self.slots[name]
        except KeyError:
            raise TemplateError(f"unknown PHI slot {name!r}") from None
        text, label = make()
        value = (text, self.slot_labels.get(name) or self.labels.get(label, label))
        if name not in FRESH_SLOTS:
            self.cast[name] = value  # one value per note
        return value

    # -- draws -----------------------------------------------------------------------------------
    def faker(self, locale: str | None = None) -> Faker:
        faker = faker_for(locale or self.res.lang.faker_locale)
        faker.seed_instance(self.rng.getrandbits(48))
        return faker

    def _name_word(self, kind: str, sex: str, locale: str) -> str:
        names = self.data["names"]
        if self.rng.random() < float(names["common_word_rate"]):
            return self.rng.choice(names[f"common_word_{kind}"])
        if locale == "dictionary":  # the pack's own name lists (dictionaries/first_names.txt, last_names.txt)
            return self.rng.choice(bundled_entries(self.res.language, f"{kind}_names"))
        return name_word(self.faker(locale), kind, sex)

    def _person(self, last: str | None = None) -> Person:
        locale = _weighted(self.rng, self.mix["name_locales"])
        sex = self.rng.choice(("female", "male"))
        names = self.data["names"]
        surname = last or self._name_word("last", sex, locale)
        if last is None and self.rng.random() < float(names["hyphenated_rate"]):
            surname = f"{surname}-{self._name_word('last', sex, locale)}"
        elif float(names.get("second_surname_rate", 0)) and self.rng.random() < float(names["second_surname_rate"]):
            # both surnames, as Spanish names are written
            surname = f"{surname} {self._name_word('last', sex, locale)}"
        middle = ""
        if self.rng.random() < float(names["middle_initial_rate"]):
            middle = self.rng.choice(string.ascii_uppercase) + "."
        return Person(self._name_word("first", sex, locale), surname, middle, sex)

    def _formal(self, person: Person) -> str:
        """ "LAST, FIRST" or "Last, First M." as headers write it."""
        text = f"{person.last}, {person.first}" + (f" {person.middle}" if person.middle else "")
        return _case_safe_upper(text) if self.rng.random() < 0.5 else text

    def _pattern(self, label: str) -> str:
        return self.faker().bothify(self.rng.choice(self.data["ids"][label]), letters=string.ascii_uppercase)

    def _labelled_pattern(self, label: str) -> tuple[str, str]:
        return self._pattern(label), label

    def _phone(self) -> str:
        return self.faker().numerify(self.rng.choice(self.data["contact"]["phone_formats"]))

    def _date_text(self, day: date, fmt: str | None = None) -> str:
        if fmt is None:
            fmt = (
                self.date_format
                if self.rng.random() > self.date_variety
                else _weighted(self.rng, self.mix["date_formats"])
            )
        return format_date(day, fmt, self.res.lang)

    def _shifted(self, low: int, high: int) -> date:
        return self.anchor + timedelta(days=self.rng.randint(low, high))

    def _place(self, kind: str, invented: Callable[[], str], rate_key: str = "real_place_rate") -> str:
        """A real name from the bundled dictionary ``kind`` (real notes name real places, employers and
        trades) as often as the layout's ``rate_key`` says, else an ``invented`` one. A rate the pack
        does not set is 0 and draws nothing (the other packs' notes stay as they were)."""
        rate = float(self.data["layout"].get(rate_key, 0))
        if rate and self.rng.random() < rate:
            return self.rng.choice(bundled_entries(self.res.language, kind))
        return invented()

    def _templates(self, kind: str) -> tuple[str, ...]:
        """The resource's ``[templates]`` of ``kind`` and those of the mix's ``extra_templates`` sets."""
        sets = self.mix.get("extra_templates", ())
        return tuple(self.data["templates"][kind]) + tuple(
            t for name in sets for t in self.data["extra_templates"][name].get(kind, ())
        )

    def _hospital(self) -> str:
        templates = self.res.lang.templates["hospital"] + self._templates("hospital")
        return self._place("hospitals", lambda: fill_template(self.faker(), self.rng.choice(templates), self.res.lang))

    def _ward(self) -> str:
        """A named ward or unit ("Ellison 8", "BLAKE 12 ICU", "Phillips House"), as real notes name them;
        specialties ("Cardiology") are not PHI and come from the resource's non-PHI vocabulary."""
        template = self.rng.choice(self.data["templates"]["department"])
        ward = fill_template(self.faker(), template, self.res.lang).replace("#", str(self.rng.randint(2, 19)))
        return _case_safe_upper(ward) if self.rng.random() < 0.4 else ward

    def _hospital_short(self) -> str:
        """A hospital as notes and queries shorten it: a known abbreviation or a short invented form."""
        if self.rng.random() < 0.5:
            return self.vocab("hospital_short")
        return fill_template(self.faker(), self.rng.choice(self._templates("hospital_short")), self.res.lang)

    def _email(self, person: Person) -> str:
        faker = self.faker()
        if self.rng.random() < 0.5:
            return faker.email()
        user = self.rng.choice(
            (
                f"{person.first}.{person.last}",
                f"{person.first[:1]}{person.last}",
                f"{person.last}{self.rng.randint(1, 99)}",
            )
        )
        user = "".join(c for c in user.lower() if c.isascii() and (c.isalnum() or c == "."))
        return f"{user or 'user'}@{faker.domain_name()}"

    def _url(self) -> str:
        faker = self.faker()
        return self.rng.choice(
            (
                faker.url().rstrip("/"),
                f"www.{faker.domain_name()}",
                f"https://portal.{faker.domain_name()}/{faker.uri_path()}",
            )
        )

    def _slot_table(self) -> dict[str, Callable[[], tuple[str, str]]]:
        rng, lang, data = self.rng, self.res.lang, self.data
        patient, relative, nurse = self.patient, self.relative, self.nurse
        doc1, doc2, doc3 = self.doctors
        age_format = str(
            data["ages"].get("format", "{n}")
        )  # "{n} años": the unit inside the span, as MEDDOCAN marks it

        def doctor_name(person: Person) -> str:
            return rng.choice(
                (person.full, f"{person.first} {person.last}", f"{person.first[:1]}. {person.last}", person.last)
            )

        table: dict[str, Callable[[], tuple[str, str]]] = {
            "patient": lambda: (f"{patient.first} {patient.last}" if rng.random() < 0.6 else patient.full, "PATIENT"),
            "patient_first": lambda: (patient.first, "PATIENT"),
            "patient_last": lambda: (patient.last, "PATIENT"),
            "patient_formal": lambda: (self._formal(patient), "PATIENT"),
            "patient_upper": lambda: (_case_safe_upper(f"{patient.first} {patient.last}"), "PATIENT"),
            "relative": lambda: (f"{relative.first} {relative.last}", "PATIENT"),
            "relative_first": lambda: (relative.first, "PATIENT"),
            "doctor": lambda: (doctor_name(doc1), "DOCTOR"),
            "doctor_last": lambda: (doc1.last, "DOCTOR"),
            "doctor_full": lambda: (doc1.full, "DOCTOR"),
            "doctor_formal": lambda: (self._formal(doc1), "DOCTOR"),
            "doctor2": lambda: (doctor_name(doc2), "DOCTOR"),
            "doctor2_last": lambda: (doc2.last, "DOCTOR"),
            "doctor3": lambda: (doctor_name(doc3), "DOCTOR"),
            "nurse": lambda: (rng.choice((nurse.first, f"{nurse.first} {nurse.last}")), "DOCTOR"),
            "username": lambda: (
                rng.choice(
                    (
                        f"{doc1.first[:1]}{doc1.last}".lower(),
                        self.faker().user_name().lower(),
                        f"{doc1.first[:1]}{doc1.last[:1]}{rng.randint(1, 99)}".upper(),
                    )
                ),
                "USERNAME",
            ),
            "hospital": lambda: (self._hospital(), "HOSPITAL"),
            "hospital2": lambda: (self._hospital(), "HOSPITAL"),
            "street2": lambda: (self.faker().street_address(), "STREET"),
            "city2": lambda: (self._place("cities", self.faker().city), "CITY"),
            "state2": lambda: (self.faker().state_abbr(), "STATE"),
            "zip2": lambda: (self.faker().zipcode(), "ZIP"),
            "department": lambda: (self._ward(), "DEPARTMENT"),
            "hospital_short": lambda: (self._hospital_short(), "HOSPITAL"),
            "health_center": lambda: (
                fill_template(self.faker(), rng.choice(lang.templates["health_center"]), lang),
                "HEALTH_CENTER",
            ),
            # the relative's relation word ("hija"), for a taxonomy that labels it (MEDDOCAN does)
            "relation": lambda: (rng.choice(data["vocab"]["relation"]), "RELATION"),
            # the patient's sex as a word or letter ([gender] sex, sex_letter), for a taxonomy that labels it
            "sex": lambda: (self.gendered("sex"), "SEX"),
            "sex_letter": lambda: (self.gendered("sex_letter"), "SEX"),
            "patient_initial": lambda: (f"{patient.first} {patient.last[:1]}.", "PATIENT"),
            "patient_first_lower": lambda: (patient.first.lower(), "PATIENT"),
            "relative_first_lower": lambda: (relative.first.lower(), "PATIENT"),
            "doctor_last_lower": lambda: (doc1.last.lower(), "DOCTOR"),
            "doctor2_last_lower": lambda: (doc2.last.lower(), "DOCTOR"),
            "doctor_initial": lambda: (f"{doc1.first[:1]}.", "DOCTOR"),
            "nurse_first": lambda: (nurse.first, "DOCTOR"),
            "room": lambda: (self._pattern("ROOM"), "ROOM"),
            "organization": lambda: (
                self._place(
                    "employers",
                    lambda: (
                        fill_template(self.faker(), rng.choice(data["templates"]["organization"]), lang)
                        if rng.random() < 0.5
                        else self.faker().company()
                    ),
                    "real_employer_rate",
                ),
                "ORGANIZATION",
            ),
            "profession": lambda: (
                self._place(
                    "professions",
                    lambda: rng.choice(data["vocab"]["profession"]) if rng.random() < 0.7 else self.faker().job(),
                    "real_profession_rate",
                ),
                "PROFESSION",
            ),
            "street": lambda: (self.faker().street_address(), "STREET"),
            "city": lambda: (self._place("cities", self.faker().city), "CITY"),
            "state": lambda: (self.faker().state_abbr() if rng.random() < 0.6 else self.faker().state(), "STATE"),
            "province": lambda: (self._place("states", self.faker().state), "STATE"),
            # a county ("Franklin County"): a subdivision smaller than a state, removed as a city is
            "county": lambda: (fill_template(self.faker(), rng.choice(data["templates"]["county"]), lang), "CITY"),
            "postcode": lambda: (self.faker().postcode(), "ZIP"),
            "zip": lambda: (self.faker().zipcode() if rng.random() < 0.85 else self.faker().zipcode_plus4(), "ZIP"),
            "country": lambda: (rng.choice(data["vocab"]["country"]), "COUNTRY"),
            "location_other": lambda: (rng.choice(data["vocab"]["location_other"]), "LOCATION-OTHER"),
            "phone": lambda: (self._phone(), "PHONE"),
            "phone2": lambda: (self._phone(), "PHONE"),
            "fax": lambda: (self._phone(), "FAX"),
            "pager": lambda: (self.faker().numerify(rng.choice(data["contact"]["pager_formats"])), "PHONE"),
            "email": lambda: (self._email(patient), "EMAIL"),
            "doctor_email": lambda: (self._email(doc1), "EMAIL"),
            "url": lambda: (self._url(), "URL"),
            "ip": lambda: (self.faker().ipv4() if rng.random() < 0.9 else self.faker().ipv6(), "IPADDR"),
            "age": lambda: (age_format.format(n=self.age), "AGE"),
            "age_other": lambda: (age_format.format(n=rng.randint(1, 104)), "AGE"),
            "dob": lambda: (
                self._date_text(self.anchor - timedelta(days=int(self.age * 365.25) + rng.randint(0, 364))),
                "DATE",
            ),
            "date_admit": lambda: (self._date_text(self.anchor), "DATE"),
            "date_discharge": lambda: (self._date_text(self.anchor + timedelta(days=rng.randint(1, 12))), "DATE"),
            "date": lambda: (self._date_text(self._shifted(-30, 30)), "DATE"),
            "date_past": lambda: (self._date_text(self._shifted(-3650, -40)), "DATE"),
            "date_future": lambda: (self._date_text(self._shifted(7, 120)), "DATE"),
            "date_short": lambda: (
                self._date_text(self._shifted(-30, 30), _weighted(rng, data["dates"]["short_formats"])),
                "DATE",
            ),
            "month_year": lambda: (
                self._date_text(self._shifted(-3650, -30), _weighted(rng, data["dates"]["month_year_formats"])),
                "DATE",
            ),
            "year": lambda: (str(self._shifted(-7300, -365).year), "DATE"),
            "weekday": lambda: (rng.choice(lang.dates.weekdays), "DATE"),
        }
        for label in data["ids"]:
            if label != "ROOM":
                table[label.lower()] = partial(self._labelled_pattern, label)
        if "medicalrecord" in table:
            table["mrn"] = table["medicalrecord"]
        return table


def format_date(day: date, fmt: str, lang: LanguageResources) -> str:
    """``day`` written with ``fmt``'s fields: {m} {mm} {d} {dd} {dth} {yy} {yyyy} {Mon} {MON} {Month}
    {MONTH} {Weekday}; month and weekday names come from the language's surrogate resources."""
    words = lang.dates
    month, abbreviation = words.months[day.month - 1], words.month_abbreviations[day.month - 1]
    fields = {
        "m": str(day.month),
        "mm": f"{day.month:02d}",
        "d": str(day.day),
        "dd": f"{day.day:02d}",
        "dth": f"{day.day}{words.ordinal(day.day)}",
        "yy": f"{day.year % 100:02d}",
        "yyyy": str(day.year),
        "Mon": abbreviation.capitalize(),
        "MON": abbreviation.upper(),
        "Month": month,
        "MONTH": month.upper(),
        "Weekday": words.weekdays[day.weekday()],
    }
    out = fmt
    for key in sorted(fields, key=len, reverse=True):
        out = out.replace("{" + key + "}", fields[key])
    return out


def _wrap(text: str, spans: list[Span], width: int) -> str:
    """Hard-wrap ``text`` at ``width`` by turning spaces outside PHI into line breaks (offsets stay)."""
    inside = bytearray(len(text))
    for span in spans:
        inside[span.start : span.end] = b"\x01" * (span.end - span.start)
    chars, column, last_space = list(text), 0, -1
    for i, char in enumerate(chars):
        if char == "\n":
            column, last_space = 0, -1
            continue
        column += 1
        if char == " " and not inside[i]:
            last_space = i
        if column > width and last_space >= 0:
            chars[last_space] = "\n"
            column, last_space = i - last_space, -1
    return "".join(chars)


def _section(note: Note, name: str, out: NoteWriter, inline_title_rate: float) -> None:
    """Write one section: its title in the note's header style, then some of its lines (a
    narrative section joins them into one paragraph, possibly on the title's line)."""
    section = note.data["sections"][name]
    lines = list(section["lines"])
    low, high = section.get("pick", [len(lines), len(lines)])
    picked = note.rng.sample(range(len(lines)), min(len(lines), note.rng.randint(low, high)))
    if not section.get("shuffle", True):
        picked.sort()  # header fields keep their order
    chosen = [lines[i] for i in picked]
    titles = section.get("titles", [])
    body = NoteWriter()
    narrative = section.get("narrative", False)
    for i, line in enumerate(chosen):
        if i and narrative:
            body.text(" ")
        render(line, note, body)
        if not narrative:
            body.text("\n")
    if narrative:
        body.text("\n")
    if titles:
        title = note.rng.choice(titles)
        header = note.header_style.replace("{TITLE}", title.upper()).replace("{Title}", title)
        inline = narrative and header.endswith(":") and note.rng.random() < inline_title_rate
        out.text(header + (" " if inline else "\n"))
    out.append(body)


def generate_note(res: SynthResources, mix_name: str, rng: random.Random, name: str) -> Document:
    """One synthetic note of the ``mix_name`` mix, drawn from ``rng``, as a gold ``Document``."""
    mix = res.mix(mix_name)
    note_type = _weighted(rng, mix["note_types"])
    spec = res.data["notes"][note_type]
    note = Note(res, mix, rng)
    layout = res.data["layout"]
    sections = [s for s in spec["sections"] if not s.startswith("?") or rng.random() < float(layout["optional_rate"])]
    sections = [s.strip("?") for s in sections]
    movable = [i for i, s in enumerate(sections) if not s.startswith("!")]
    for i, j in zip(movable, movable[1:]):  # nearby sections swap places now and then
        if rng.random() < float(layout["swap_rate"]):
            sections[i], sections[j] = sections[j], sections[i]
    out = NoteWriter()
    if spec.get("titles"):
        render(rng.choice(spec["titles"]), note, out)
        out.text("\n" * rng.randint(1, 2))
    gap = rng.choice(layout["section_gaps"])
    for index, section in enumerate(sections):
        if index:
            out.text("\n" * gap)
        _section(note, section.strip("!"), out, float(layout["inline_title_rate"]))
    text, spans, values = out.getvalue(), list(out.spans), list(out.values)
    width = int(_weighted(rng, mix["wrap_widths"]))
    if width != _NO_WRAP:
        text = _wrap(text, spans, width)
    if rng.random() < float(mix["upper_case_rate"]):
        text, values = _case_safe_upper(text), [_case_safe_upper(v) for v in values]
    if rng.random() < float(mix["crlf_rate"]):
        text, spans = _crlf(text, spans)
    doc = Document(name, text, tuple(spans), {"note_type": note_type, "mix": mix_name, "values": tuple(values)})
    # drawn last, so a mix without flattened notes draws as before: a note exported on one line
    if float(mix.get("flatten_rate", 0)) and rng.random() < float(mix["flatten_rate"]):
        return doc.flattened()
    return doc


def _crlf(text: str, spans: list[Span]) -> tuple[str, list[Span]]:
    """Windows line ends, spans moved by the carriage returns before them."""
    before = [0] * (len(text) + 1)
    count = 0
    for i, char in enumerate(text):
        before[i] = count
        count += char == "\n"
    before[len(text)] = count
    moved = [Span(s.start + before[s.start], s.end + before[s.end], s.label, s.source) for s in spans]
    return text.replace("\n", "\r\n"), moved


def generate_corpus(n: int, seed: int = 0, mix: str = "train", language: str = "en") -> Iterator[Document]:
    """``n`` synthetic notes (gold ``Document``s); the same arguments give the same notes."""
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {', '.join(MIXES)}")
    res = load_synth_resources(language)
    rng = random.Random(f"hybriddeid-synth:{language}:{mix}:{seed}")
    for index in range(1, n + 1):
        yield generate_note(res, mix, random.Random(rng.getrandbits(64)), f"synth-{mix}-{seed}-{index:05d}")


def check_offsets(doc: Document) -> list[str]:
    """Problems with a generated note's spans (empty when every span holds the value written there)."""
    values = doc.meta.get("values", ())
    problems = [
        f"span {i}: {doc.span_text(s)!r} != {v!r}"
        for i, (s, v) in enumerate(zip(doc.spans, values))
        if doc.span_text(s) != v
    ]
    if len(values) != len(doc.spans):
        problems.append(f"{len(doc.spans)} spans but {len(values)} values")
    return problems
