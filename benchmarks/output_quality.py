"""Is the de-identified output something a reader can trust? Issue 23's figures, in one run.

On generated English test-mix notes (and MEDDOCAN dev for Spanish, when ``../shared`` is there):

- **surrogates from gold spans** (the surrogate code alone, no model): dates not understood (the
  ``date-fallback`` method), and per surrogate kind the share of surrogates that keep the
  original's written form (``written_form`` below);
- **the bundled model, surrogate mode**: PHI strings of 4+ characters (sex words excluded) still in
  the output verbatim, as a share of gold spans;
- **layout**: binary token recall (and precision) of the same notes with their line breaks and
  flattened to one line (each line break a space, so offsets stay), and the recall gap in points;
- **names across a patient's notes**: probe pairs in which a first name stands alone in a second
  note of the patient whose full name the first note gives; the share replaced;
- **neighbours**: probe notes that give one name beside varied dates and numbers; the share of
  names found, and of names whose finding flips with the neighbour;
- **meaning kept** (the surrogate code on made-up gold spans, English and Spanish; issue 43): DNI,
  NIE and IBAN surrogates that are valid (check letter or digits) and new, also for a DNI whose
  letter was mistyped; relation words kept and the names beside them replaced; name parts of the
  right kind (a given name becomes a given name, a surname a surname, a surname alone after a title
  a surname, a full name two different words). Values and names come from benchmarks/probes.

    python benchmarks/output_quality.py [--n 500] [--seed 23] [--json out.json] [--languages en es]
        [--en-model DIR] [--es-model DIR]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from hybriddeid import Pipeline
from hybriddeid.core.document import Document
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.runs.processing import NoteSettings, process_notes
from hybriddeid.surrogates import DeidOptions, deidentify_patient
from hybriddeid.surrogates.generator import is_abbreviation
from hybriddeid.surrogates.language import load_kinds, load_language
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
KEY = bytes(range(32))
MIN_VERBATIM_CHARS = 4
# Kinds whose surrogates must keep the original's characters one for one (digits, letters, separators).
EXACT_KINDS = frozenset({"phone", "id", "zip"})
# Kinds whose surrogates keep the classes of their words in order.
WORD_ORDER_KINDS = frozenset({"date", "person", "street", "age", "relative"})
# Kinds whose numbers are part of their form (a ward "6 West"; a place by its shape).
NUMBERED_PLACE_KINDS = frozenset({"department", "location"})
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"(?:https?://)?(?:www\.)?[\w-]+(?:\.[\w-]+)+(?:[/?#][^\s]*)?", re.IGNORECASE)
_TOKEN = re.compile(r"\d+|[^\W\d_]+(?:['’-][^\W\d_]+)*|\S")


def _word_form(word: str, titles: frozenset[str], abbreviations: bool) -> str:
    """One word's written form: digits, a word by its case (all-capitals words of up to three
    letters as abbreviations when ``abbreviations``), punctuation as itself; titles as themselves."""
    if word.isdigit():
        return "9"
    if not word[0].isalpha():
        return word
    if word.lower() in titles:
        return word
    if word.isupper() and len(word) > 1:
        return "ABBR" if abbreviations and len(word) <= 3 else "UPPER"
    if word.islower():
        return "lower"
    return "Title"


def _case_style(text: str) -> str:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return "no letters"
    if all(c.isupper() for c in letters):
        return "capitals"
    return "lower case" if all(c.islower() for c in letters) else "mixed case"


def written_form(kind: str, text: str, titles: frozenset[str]) -> str:
    """What a reader sees of a value's form, by kind.

    Numbers and codes: every character's class (digit, upper, lower) and every separator. IP
    addresses: their version. E-mails and URLs: valid, and a URL's scheme. Dates, names, streets and
    ages: the words' classes in order (runs of one class folded: "Mary Ann" reads as "Title"), titles
    ("Dr.") as themselves. User names: the case and the number of digits. Other places,
    institutions and professions (whose surrogates may rightly have more or fewer words): the case
    and whether the value is an abbreviation ("MA", "GBMC"); for wards and unnamed places, whether
    it holds a number ("6 West").
    """
    if kind in EXACT_KINDS:
        return re.sub(r"[^\W\d_]", lambda m: "A" if m.group().isupper() else "a", re.sub(r"\d", "9", text))
    if kind == "ip":
        try:
            return f"IPv{ipaddress.ip_address(text.strip()).version}"
        except ValueError:
            return "not an IP address"
    if kind == "email":
        return "email" if _EMAIL.fullmatch(text.strip()) else "not an email"
    if kind == "url":
        scheme = text.lower().startswith(("http:", "https:"))
        return f"url scheme={scheme}" if _URL.fullmatch(text.strip()) else "not a url"
    words = _TOKEN.findall(text)
    if kind in WORD_ORDER_KINDS:
        forms = [_word_form(word, titles, abbreviations=False) for word in words]
        return " ".join(form for i, form in enumerate(forms) if i == 0 or form != forms[i - 1] or not form[0].isalpha())
    digits = sum(c.isdigit() for c in text)
    if kind == "username":
        return f"{_case_style(text)}, {digits} digits"
    form = f"{_case_style(text)}, abbreviation={is_abbreviation(text)}"
    return f"{form}, digits={digits > 0}" if kind in NUMBERED_PLACE_KINDS else form


def kept_form(kind: str, original: str, surrogate: str, method: str, titles: frozenset[str]) -> bool:
    """Whether a surrogate keeps the original's written form (an aggregated age counts as kept)."""
    if method == "safe-harbor":
        return True
    if kind == "date" and method == "date-fallback":
        return False
    if kind in ("email", "url"):  # a gold span may hold a broken address; its surrogate must be valid
        return written_form(kind, surrogate, titles).startswith(kind)
    return written_form(kind, original, titles) == written_form(kind, surrogate, titles)


def surrogate_forms(docs: Sequence[Document], language: str) -> dict:
    """Gold spans through surrogate mode: dates not understood and the form kept, per kind."""
    options = DeidOptions(mode="surrogate", language=language, key=KEY)
    lang = load_language(language)
    titles = frozenset(t for title in lang.titles for t in (title, title + "."))
    kept: Counter[str] = Counter()
    total: Counter[str] = Counter()
    not_understood = dates = 0
    examples: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for doc in docs:
        result = deidentify_patient([doc], options, doc.name)[0]
        for rec in result.replacements:
            original = doc.text[rec.start : rec.end]
            if rec.kind == "date":
                dates += 1
                not_understood += rec.method == "date-fallback"
            total[rec.kind] += 1
            if kept_form(rec.kind, original, rec.replacement, rec.method, titles):
                kept[rec.kind] += 1
            elif len(examples[rec.kind]) < 5:
                examples[rec.kind].append(
                    (written_form(rec.kind, original, titles), written_form(rec.kind, rec.replacement, titles))
                )
    return {
        "dates": dates,
        "dates_not_understood": not_understood,
        "form_kept": {kind: (kept[kind], total[kind]) for kind in sorted(total)},
        "form_examples": {kind: examples[kind] for kind in sorted(examples)},
    }


def output_region(replacements: Sequence, start: int, end: int) -> tuple[int, int]:
    """Where input characters [start, end) stand in the output, through the audit's replacements (a
    replacement that holds either end is taken whole)."""
    ordered = sorted(replacements, key=lambda rec: rec.start)

    def shift(position: int) -> int:  # the output offset of an input position outside every replacement
        before = [rec for rec in ordered if rec.end <= position]
        return position + (before[-1].out_end - before[-1].end if before else 0)

    out_start = next((rec.out_start for rec in ordered if rec.start <= start < rec.end), None)
    out_end = next((rec.out_end for rec in ordered if rec.start < end <= rec.end), None)
    return (shift(start) if out_start is None else out_start, shift(end) if out_end is None else out_end)


def verbatim_left(gold: Sequence[Document], results: Sequence) -> tuple[Counter[str], int]:
    """(gold spans of 4+ characters whose text still stands where it stood, as a whole word of the
    output, by label; the number of such spans). Sex words are left out (common words drawn again from
    a pair); a value found elsewhere (a shifted date landing on another date's original) is not left."""
    kinds = load_kinds()
    left: Counter[str] = Counter()
    counted = 0
    for doc, result in zip(gold, results):
        for span in doc.spans:
            value = doc.span_text(span).strip()
            if len(value) < MIN_VERBATIM_CHARS or kinds.kind(span.label) == "sex":
                continue
            counted += 1
            out_start, out_end = output_region(result.replacements, span.start, span.end)
            if re.search(rf"(?<!\w){re.escape(value)}(?!\w)", result.text[out_start:out_end]):
                left[span.label] += 1
    return left, counted


def model_run(pipeline: Pipeline, gold: Sequence[Document], language: str) -> dict:
    """Binary token recall with and without line breaks, and PHI left verbatim after surrogate mode."""
    settings = NoteSettings(deid=DeidOptions(mode="surrogate", language=language, key=KEY))
    processed = [process_notes(pipeline, [doc], settings)[0] for doc in gold]  # each note its own patient
    flat_gold = [doc.flattened() for doc in gold]
    flat_found = [process_notes(pipeline, [doc])[0].document for doc in flat_gold]
    as_written = evaluate(gold, [note.document for note in processed]).score("binary_token")
    flat = evaluate(flat_gold, flat_found).score("binary_token")
    recall, flat_recall = as_written.recall, flat.recall
    left, counted = verbatim_left(gold, [note.deid for note in processed])
    return {
        "binary_token_recall": recall,
        "flattened_binary_token_recall": flat_recall,
        "binary_token_precision": as_written.precision,
        "flattened_binary_token_precision": flat.precision,
        "flattened_gap_points": 100 * (recall - flat_recall),
        "verbatim_left": sum(left.values()),
        "verbatim_left_by_label": dict(left.most_common()),
        "verbatim_counted": counted,
    }


FIRST_NOTES = [
    "Patient: {first} {last}\nDOB: {dob}\nSeen in clinic for follow-up of hypertension.",
    "{last}, {first} is a {age} yo with COPD admitted for dyspnea.",
    "Discharge summary for {first} {last}. Admitted {dob} with chest pain.",
    "Mrs. {first} {last} presents with knee pain after a fall.",
]
SECOND_NOTES = [
    "Call {first} at home tomorrow about her labs.",
    "Spoke with {first} by phone; she agrees with the plan.",
    "{first} was seen walking in the hall, tolerating diet.",
    "Reviewed results with {first} and her husband.",
    "Pt {first} reports less pain today.",
    "Message left for {first} to schedule the MRI.",
]
PROBE_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "it_IT", "pl_PL", "es_ES", "nl_NL", "tr_TR", "pt_BR")
NEIGHBOURS = ["seen {date}", "on {date}", "MRN {number}", "room {room}", "BP {bp}", "{date} 10:30", "call {phone}"]


def _probe_cast(rng: random.Random) -> dict[str, str]:
    from faker import Faker

    faker = Faker(rng.choice(PROBE_LOCALES))
    faker.seed_instance(rng.randrange(2**32))
    return {
        "first": faker.first_name_female(),
        "last": faker.last_name(),
        "age": str(rng.randint(25, 85)),
        "dob": f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(1940, 2000)}",
    }


def name_probes(pipeline: Pipeline, n: int, seed: int) -> dict:
    """First names alone in a patient's second note (the first note gives the full name): the share
    replaced in surrogate mode. Names beside varied neighbours: the share of names found, and of
    names whose finding changes with the neighbour."""
    rng = random.Random(seed)
    settings = NoteSettings(deid=DeidOptions(mode="surrogate", language="en", key=KEY))
    replaced = 0
    for i in range(n):
        cast = _probe_cast(rng)
        notes = [
            Document(f"p{i}-a", rng.choice(FIRST_NOTES).format(**cast)),
            Document(f"p{i}-b", rng.choice(SECOND_NOTES).format(**cast)),
        ]
        second = process_notes(pipeline, notes, settings, f"p{i}")[1].deid.text
        replaced += not re.search(rf"(?<!\w){re.escape(cast['first'])}(?!\w)", second)
    found = flips = total = 0
    for i in range(n):
        cast = _probe_cast(rng)
        name = f"{cast['first']} {cast['last']}"
        results = []
        for neighbour in NEIGHBOURS:
            filled = neighbour.format(
                date=f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}/20{rng.randint(10, 25)}",
                number=rng.randint(10**5, 10**7),
                room=f"{rng.randint(100, 999)}{rng.choice('ABC')}",
                bp=f"{rng.randint(100, 160)}/{rng.randint(60, 95)}",
                phone=f"617-555-{rng.randint(1000, 9999)}",
            )
            text = f"Pt {name} {filled}, doing well."
            start = text.index(name)
            letters = {start + i for i, char in enumerate(name) if not char.isspace()}
            spans = process_notes(pipeline, [Document(f"n{i}", text)])[0].document.spans
            results.append(
                letters <= {at for span in spans for at in range(span.start, span.end)}
            )  # every letter hidden
        found += sum(results)
        total += len(results)
        flips += len(set(results)) > 1
    return {
        "first_names_replaced": replaced,
        "first_name_probes": n,
        "names_found": found,
        "name_probes": total,
        "names_flipping": flips,
        "names": n,
    }


PERSON_LABEL = {"en": "PATIENT", "es": "NOMBRE_SUJETO_ASISTENCIA"}
RELATIVE_LABEL = {"en": "PATIENT", "es": "FAMILIARES_SUJETO_ASISTENCIA"}  # i2b2 has no label of its own for them
ID_LABEL = {"en": "IDNUM", "es": "ID_SUJETO_ASISTENCIA"}
VEHICLE_LABEL = {"en": "VEHICLE", "es": "IDENTIF_VEHICULOS_NRSERIE_PLACAS"}
BIOMETRIC_LABEL = {"en": "BIOID", "es": "IDENTIF_BIOMETRICOS"}
RELATIVE_NOTES = {
    "en": ["Her {rel}, {first} {last}, is at bedside.", "{Rel} {first} called."],
    "es": ["Su {rel}, {first} {last}, la acompaña.", "{Rel} {first} llama por teléfono."],
}


def _valid_id(kind: str, value: str) -> bool:
    from hybriddeid.classifiers.validators import dni_letter, iban_check_digits, nie_number

    compact = re.sub(r"[\s.-]", "", value)
    if kind == "iban":
        return (
            bool(re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact))
            and iban_check_digits(compact[:2], compact[4:]) == compact[2:4]
        )
    if kind == "nie":
        return (
            bool(re.fullmatch(r"[XYZ]\d{7}[A-Z]", compact.upper()))
            and dni_letter(nie_number(compact[0], compact[1:8])) == compact[8].upper()
        )
    return bool(re.fullmatch(r"\d{7,8}[A-Z]", compact.upper())) and dni_letter(int(compact[:-1])) == compact[-1].upper()


def _mistyped(value: str) -> str:
    """``value`` with another check letter (a DNI as a note may write it wrong)."""
    letter = value[-1]
    return value[:-1] + ("A" if letter != "A" else "B")


def _every_part_in(word: str, names: frozenset[str]) -> bool:
    """Whether each part of a (hyphenated) name word is in ``names``: "Ford-Bell" is a surname."""
    from hybriddeid.surrogates.language import fold

    return all(fold(part) in names for part in word.split("-"))


def meaning_checks(language: str, n: int) -> dict:
    """Surrogates of made-up gold spans that must keep a meaning: valid DNI/NIE/IBAN, VINs and Spanish plates,
    file names with their extension, relation words kept beside replaced names, name parts of the right kind."""
    import probes
    from hybriddeid.surrogates.generator import name_lists
    from hybriddeid.surrogates.language import fold

    lang = load_language(language)
    options = DeidOptions(mode="surrogate", language=language, key=KEY)
    lists = probes.load_fillers()
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # check -> [passed, total]
    examples: dict[str, list[str]] = defaultdict(list)

    def check(name: str, ok: bool, shown: str) -> None:
        counts[name][0] += ok
        counts[name][1] += 1
        if not ok and len(examples[name]) < 3:
            examples[name].append(shown)

    def surrogate_of(text: str, phi: list[tuple[str, str]], patient: str) -> tuple[list[str], str]:
        spans, at = [], 0
        for value, label in phi:
            start = text.index(value, at)
            spans.append((start, start + len(value), label))
            at = start + len(value)
        from hybriddeid.core.document import Span

        doc = Document(patient, text, tuple(Span(s, e, label) for s, e, label in spans))
        result = deidentify_patient([doc], options, patient)[0]
        return [rec.replacement for rec in result.replacements], result.text

    for kind, generator in (("dni", "gen:dni"), ("nie", "gen:nie"), ("iban", "gen:iban_es")):
        values = probes.fillers_for(generator, f"quality-{kind}", lists)
        values = (values * (n // len(values) + 1))[:n]
        for index, value in enumerate(values):
            original = _mistyped(value) if kind == "dni" and index % 2 else value
            (new,), _ = surrogate_of(f"ID {original}.", [(original, ID_LABEL[language])], f"{kind}{index}")
            check(
                f"valid {kind.upper()}" + (" (original's letter mistyped)" if original != value else ""),
                _valid_id(kind, new) and re.sub(r"\W", "", new) != re.sub(r"\W", "", original),
                f"{original} -> {new}",
            )
    from hybriddeid.classifiers.validators import vin_check_digit
    from hybriddeid.surrogates.identifiers import identifier_format

    def vin_kept(original: str, new: str) -> bool:
        checked = vin_check_digit(original) == original[8]
        return identifier_format(new) == "vin" and (not checked or vin_check_digit(new) == new[8])

    forms = [
        (
            "VIN (alphabet; check digit where the original's held)",
            probes.fillers_for("gen:vin_es", "quality-vin", lists),
            VEHICLE_LABEL[language],
            vin_kept,
        ),
        (
            "file name keeps its extension",
            lists["biometric_en" if language == "en" else "biometric_es"],
            BIOMETRIC_LABEL[language],
            lambda original, new: new.rsplit(".", 1)[-1] == original.rsplit(".", 1)[-1],
        ),
    ]
    if language == "es":
        plates = [
            value
            for value in probes.fillers_for("gen:plate_es", "quality-plate", lists)
            if identifier_format(value) == "plate_es"
        ]
        forms.append(
            (
                "Spanish plate stays a plate",
                plates,
                VEHICLE_LABEL[language],
                lambda original, new: identifier_format(new) == "plate_es",
            )
        )
    for name, values, label, kept in forms:
        for index, value in enumerate((values * (n // max(len(values), 1) + 1))[:n]):
            if "." not in value and "file" in name:
                continue  # a biometric record code, not a file name
            (new,), _ = surrogate_of(f"ID {value} ok", [(value, label)], f"form{index}")
            check(name, kept(value, new) and new != value, f"{value} -> {new}")
    given, surnames = name_lists(language, lang.faker_locale)
    firsts, lasts = lists["first_names"], lists["last_names"]
    relation_words = sorted(lang.relative_terms)
    for index in range(n):
        first, last = firsts[index % len(firsts)], lasts[(index * 7 + 3) % len(lasts)].split()[0]
        rel = relation_words[index % len(relation_words)]
        template = RELATIVE_NOTES[language][index % 2]
        text = template.format(rel=rel, Rel=rel.capitalize(), first=first, last=last)
        shown_rel = rel if "{rel}" in template else rel.capitalize()
        phi = (
            [(rel, RELATIVE_LABEL[language]), (f"{first} {last}", PERSON_LABEL[language])]
            if "{rel}" in template
            else [(f"{shown_rel} {first}", RELATIVE_LABEL[language])]
        )
        _, out = surrogate_of(text, phi, f"rel{index}")
        check("relation word kept", bool(re.search(rf"(?<!\w){re.escape(shown_rel)}(?!\w)", out)), f"{text} -> {out}")
        check(
            "name beside a relation word replaced",
            not re.search(rf"(?<!\w){re.escape(first)}(?!\w)", out),
            f"{text} -> {out}",
        )
        (full, alone), _ = surrogate_of(
            f"{first} {last} was seen; Dr. {last} called.",
            [(f"{first} {last}", PERSON_LABEL[language]), (last, PERSON_LABEL[language])],
            f"name{index}",
        )
        words = full.split()
        check(
            "full name: two different words",
            len(words) == 2 and fold(words[0]) != fold(words[1]),
            f"{first} {last} -> {full}",
        )
        check("given name -> given name", len(words) == 2 and _every_part_in(words[0], given), f"{first} -> {words[0]}")
        check("surname -> surname", len(words) == 2 and _every_part_in(words[-1], surnames), f"{last} -> {words[-1]}")
        check(
            "surname alone after a title -> the same surname", alone == words[-1], f"Dr. {last} -> Dr. {alone} ({full})"
        )
    return {"checks": {name: tuple(value) for name, value in counts.items()}, "examples": dict(examples)}


def print_meaning(language: str, meaning: dict) -> None:
    print(f"\n## Meaning kept ({language}, surrogate code on made-up gold spans)\n")
    print("| check | passed |\n| --- | ---: |")
    for name, (passed, total) in meaning["checks"].items():
        print(f"| {name} | {_share(passed, total)} |")
    for name, shown in meaning["examples"].items():
        print(f"  {name}: " + "; ".join(shown))


def _share(kept: int, total: int) -> str:
    return f"{kept / total:.4f} ({kept}/{total})" if total else "-"


def print_part(title: str, forms: dict, model: dict | None) -> None:
    print(f"\n## {title}\n")
    print(f"dates not understood: {forms['dates_not_understood']} of {forms['dates']}")
    print("\n| kind | form kept |\n| --- | ---: |")
    for kind, (kept, total) in forms["form_kept"].items():
        print(f"| {kind} | {_share(kept, total)} |")
    for kind, pairs in forms["form_examples"].items():
        print(f"  {kind}: " + "; ".join(f"{a!r} -> {b!r}" for a, b in pairs))
    if model:
        print(
            f"\nbinary token recall {model['binary_token_recall']:.4f}, flattened "
            f"{model['flattened_binary_token_recall']:.4f}: gap {model['flattened_gap_points']:.2f} points; "
            f"precision {model['binary_token_precision']:.4f}, flattened {model['flattened_binary_token_precision']:.4f}"
        )
        print(
            f"PHI strings left verbatim after surrogate mode: {_share(model['verbatim_left'], model['verbatim_counted'])}"
            f" (by label: {model['verbatim_left_by_label']})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--probes", type=int, default=100, help="names in each probe set")
    parser.add_argument("--no-model", action="store_true", help="surrogate forms from gold spans only")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--en-model", default="en", help="English model folder (default: the bundled one)")
    parser.add_argument("--es-model", default="es", help="Spanish model folder (default: the bundled one)")
    parser.add_argument("--languages", nargs="+", default=["en", "es"], choices=["en", "es"])
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict = {}
    if "en" in args.languages:
        english = list(generate_corpus(args.n, args.seed, "test"))
        results["en"] = {"forms": surrogate_forms(english, "en")}
        if not args.no_model:
            english_model = Pipeline.load(args.en_model)
            results["en"]["model"] = model_run(english_model, english, "en")
            results["en"]["probes"] = name_probes(english_model, args.probes, args.seed)
        print_part(
            f"English: {args.n} generated test-mix notes (seed {args.seed})",
            results["en"]["forms"],
            results["en"].get("model"),
        )
        if "probes" in results["en"]:
            probes = results["en"]["probes"]
            print(
                "first names alone replaced in a patient's other note: "
                f"{_share(probes['first_names_replaced'], probes['first_name_probes'])}"
            )
            print(
                f"names beside varied dates and numbers found: {_share(probes['names_found'], probes['name_probes'])}; "
                f"names whose finding flips with the neighbour: {probes['names_flipping']} of {probes['names']}"
            )
    if MEDDOCAN_DEV.is_dir() and "es" in args.languages:
        spanish = read_corpus(MEDDOCAN_DEV)
        results["es"] = {"forms": surrogate_forms(spanish, "es")}
        if not args.no_model:
            results["es"]["model"] = model_run(Pipeline.load(args.es_model), spanish, "es")
        print_part(f"Spanish: MEDDOCAN dev ({len(spanish)} notes)", results["es"]["forms"], results["es"].get("model"))
    for language in args.languages:
        results.setdefault(language, {})["meaning"] = meaning_checks(language, args.probes)
        print_meaning(language, results[language]["meaning"])
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
