"""Behavioural probes (issue 43): every identifier kind in every common context, English and Spanish.

Each language's file (``benchmarks/probes/<lang>.toml``) lists identifier kinds, the contexts forms,
letters and notes put them in (and, for labelled kinds, shared layout frames with each label of the
kind), and the fillers they are read with (``probes/fillers.toml``, or values made here with a fixed
seed: DNI and NIE with their check letter, IBAN with its check digits, US phone numbers...). A probe is
one context filled with one value, read by the bundled model as a user's note:

- an identifier probe passes when every letter and digit of the value lies inside a predicted span
  (any label: the question is whether it would be removed);
- a must-stay probe (clinical words, drug names, vital signs, relation words) passes when no predicted
  span touches the word (``check = "untagged"``), or, for ``check = "kept"``, when surrogate mode
  writes the word back unchanged (MEDDOCAN tags relation words, so tag mode may mark them; a surrogate
  must not change the relation).

Pass rates per language, kind and context are printed; ``--docs`` writes them to
docs/explanation/probes.md with the command and commit. ``tests/test_probes.py`` runs a subset.

The listed names have been read by everyone who changed a model since: rates on them flatter. ``--names
LOCALE ...`` draws the first and last names from Faker locales instead (seeded, none of the listed names),
a redraw for the question the suite stands for, whether names nobody listed are found. Keep the locales of
such a check out of the generators' training mixes (``resources/languages/*/synth.toml``).

    python benchmarks/probes.py [--languages en es] [--per-context N] [--names LOCALE ...] [--json out.json] [--docs]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
import tomllib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hybriddeid.classifiers.validators import dni_letter, iban_check_digits, nie_number, vin_check_digit
from hybriddeid.surrogates.language import load_language

HERE = Path(__file__).resolve().parent
PROBE_DIR = HERE / "probes"
DOCS_PAGE = HERE.parent / "docs" / "explanation" / "probes.md"
SEED = 43
N_GENERATED = 30  # values a generator makes per kind
KEY = bytes(range(32))  # surrogate key of the "kept" checks
_ALNUM = re.compile(r"[^\W_]")


def _dni(rng: random.Random, i: int) -> str:
    number = rng.randrange(10**8)
    letter = dni_letter(number)
    return [f"{number:08d}{letter}", f"{number:08d}-{letter}", f"{number:08d} {letter}"][i % 3]


def _nie(rng: random.Random, i: int) -> str:
    prefix, digits = rng.choice("XYZ"), rng.randrange(10**7)
    letter = dni_letter(nie_number(prefix, f"{digits:07d}"))
    return [f"{prefix}{digits:07d}{letter}", f"{prefix}-{digits:07d}-{letter}", f"{prefix}{digits:07d}-{letter}"][i % 3]


def _nss(rng: random.Random, i: int) -> str:
    province, number = rng.randint(1, 52), rng.randrange(10**7, 10**8)
    control = int(f"{province:02d}{number}") % 97
    return [
        f"{province:02d}/{number}/{control:02d}",
        f"{province:02d} {number} {control:02d}",
        f"{province:02d}{number}{control:02d}",
    ][i % 3]


def _cip(rng: random.Random, i: int) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTVZ") for _ in range(4))
    digits = "".join(str(rng.randrange(10)) for _ in range(12))
    return [f"{letters}{digits}", f"AN{digits[:10]}", f"{letters}{digits[:10]}", f"BBBBBBBB{letters[:2]}{digits[:6]}"][
        i % 4
    ]


def _mrn(rng: random.Random, i: int) -> str:
    forms = [
        str(rng.randrange(10**6, 10**7)),
        f"{rng.randrange(10**7, 10**8):08d}",
        f"NE-{rng.randrange(10**5, 10**6)}",
        f"{rng.randrange(100, 999)}-{rng.randrange(10, 99)}-{rng.randrange(10, 99)}",
        f"A{rng.randrange(10**6, 10**7)}",
    ]
    return forms[i % len(forms)]


def _ssn(rng: random.Random, i: int) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    digits = f"{area:03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"
    return [f"{digits[:3]}-{digits[3:5]}-{digits[5:]}", f"{digits[:3]} {digits[3:5]} {digits[5:]}", digits][i % 3]


def _nhc(rng: random.Random, i: int) -> str:
    return str(rng.randrange(10 ** (5 + i % 3), 10 ** (6 + i % 3)))


def _colegiado(rng: random.Random, i: int) -> str:
    province, number = rng.randint(1, 52), rng.randrange(10000, 100000)
    return [
        f"{province:02d} {province:02d} {number}",
        f"{province:02d}/{number}",
        f"{province:02d}{province:02d}{number}",
        f"{province:02d}-{province:02d}-{number}",
    ][i % 4]


def _iban_es(rng: random.Random, i: int) -> str:
    bban = "".join(str(rng.randrange(10)) for _ in range(20))
    iban = f"ES{iban_check_digits('ES', bban)}{bban}"
    return " ".join(iban[k : k + 4] for k in range(0, 24, 4)) if i % 2 == 0 else iban


def _phone_es(rng: random.Random, i: int) -> str:
    first = rng.choice("6789" if i % 2 else "69")
    d = first + "".join(str(rng.randrange(10)) for _ in range(8))
    forms = [
        f"{d[:3]} {d[3:6]} {d[6:]}",
        f"+34 {d[:3]} {d[3:6]} {d[6:]}",
        f"+34{d}",
        f"{d[:3]} {d[3:5]} {d[5:7]} {d[7:]}",
        f"(+34) {d[:3]} {d[3:6]} {d[6:]}",
        f"0034 {d}",
        f"{d[:3]}-{d[3:5]}-{d[5:7]}-{d[7:]}",
        d,
    ]
    return forms[i % len(forms)]


def _phone_en(rng: random.Random, i: int) -> str:
    area, exchange, line = rng.randint(201, 989), rng.randint(200, 999), rng.randrange(10000)
    forms = [
        f"({area}) {exchange}-{line:04d}",
        f"{area}-{exchange}-{line:04d}",
        f"{area}.{exchange}.{line:04d}",
        f"+1 {area} {exchange} {line:04d}",
        f"{area}{exchange}{line:04d}",
        f"1-{area}-{exchange}-{line:04d}",
        f"({area}){exchange}-{line:04d}",
        f"{area}-{exchange}-{line:04d} x{rng.randint(100, 9999)}",
    ]
    return forms[i % len(forms)]


def _email(rng: random.Random, i: int, names: dict[str, list[str]]) -> str:
    first = _ascii(rng.choice(names["first_names"])).lower()
    last = _ascii(rng.choice(names["last_names"])).lower().replace(" ", "")
    forms = [
        f"{first}.{last}@gmail.com",
        f"{first}+results@mail.example.org",
        f"{first[0]}_{last}{rng.randint(1, 99)}@hospital.sub.example.co.uk",
        f"{first.upper()}.{last.upper()}@EXAMPLE.COM",
        f"{last}-{first}@clinic-name.net",
        f"{first}.{last}@salud.example.es",
        f"{first}{rng.randint(10, 99)}@yahoo.es",
        f'"{first} {last}"@example.org',
        f"{first}.o'{last}@example.ie",
        f"{first}!{last}@example.com",
    ]
    return forms[i % len(forms)]


def _url(rng: random.Random, i: int) -> str:
    n = rng.randint(1000, 99999)
    forms = [
        f"https://portal.example.org/patients/{n}?visit=22&tab=notes",
        f"www.clinic-name.com/forms/intake_{n}.pdf",
        f"http://10.2.{n % 250}.4:8080/pacs/viewer?study=1.2.840.{n}",
        f"https://drive.google.com/file/d/1AbC{n}/view?usp=sharing",
        f"mychart.hospital{n % 97}.org/login",
        f"https://www.facebook.com/profile.php?id={n}",
        f"https://example.com/u/{n}#photos",
        f"http://www.familyblog{n % 50}.net/2021/03/mom-update.html",
    ]
    return forms[i % len(forms)]


def _ip(rng: random.Random, i: int) -> str:
    if i % 5 == 4:
        return ":".join(f"{rng.randrange(65536):x}" for _ in range(8))
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def _plan_id(rng: random.Random, i: int) -> str:
    letters = "ACDEFGHJKMNPQRTUVWXY"
    mbi = (
        f"{rng.randint(1, 9)}{rng.choice(letters)}{rng.choice(letters + '0123456789')}{rng.randint(0, 9)}-"
        f"{rng.choice(letters)}{rng.choice(letters + '0123456789')}{rng.randint(0, 9)}-{rng.choice(letters)}{rng.choice(letters)}"
        f"{rng.randint(0, 9)}{rng.randint(0, 9)}"
    )
    forms = [
        f"XJH{rng.randrange(10**8, 10**9)}",
        mbi,
        f"W{rng.randrange(10**8, 10**9)}",
        f"H{rng.randrange(10**7, 10**8)}-0{rng.randint(1, 9)}",
    ]
    return forms[i % len(forms)]


def _account(rng: random.Random, i: int) -> str:
    return [
        str(rng.randrange(10**7, 10**10)),
        f"ACC-{rng.randrange(10**6, 10**7)}",
        f"{rng.randrange(100, 999)}-{rng.randrange(10**5, 10**6)}",
    ][i % 3]


def _dea(rng: random.Random) -> str:
    d = [rng.randrange(10) for _ in range(6)]
    check = (d[0] + d[2] + d[4] + 2 * (d[1] + d[3] + d[5])) % 10
    return rng.choice("ABFM") + rng.choice("ABCDEFGHJKLMNPRSTW") + "".join(map(str, d)) + str(check)


def _license(rng: random.Random, i: int) -> str:
    forms = [
        _dea(rng),
        f"S{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}-{rng.randrange(1000, 9999)}",
        f"MD-{rng.randrange(10000, 99999)}",
        f"D{rng.randrange(10**6, 10**7)}",
    ]
    return forms[i % len(forms)]


_VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"


def _vin(rng: random.Random) -> str:
    chars = [rng.choice(_VIN_CHARS) for _ in range(17)]
    chars[8] = vin_check_digit("".join(chars))
    return "".join(chars)


def _vehicle(rng: random.Random, i: int) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(3))
    return [
        _vin(rng),
        f"{rng.randint(1, 9)}{letters}{rng.randrange(100, 999)}",
        f"{letters}-{rng.randrange(1000, 9999)}",
    ][i % 3]


_PLATE_CONSONANTS = "BCDFGHJKLMNPRSTVWXYZ"  # Spain's plates since 2000: no vowels, no Ñ, no Q
_PROVINCES = ["M", "B", "GC", "V", "SE", "BI", "MU", "TF", "Z", "AL", "PM", "O"]


def _plate_es(rng: random.Random, i: int) -> str:
    digits = f"{rng.randrange(10000):04d}"
    letters = "".join(rng.choice(_PLATE_CONSONANTS) for _ in range(3))
    province = rng.choice(_PROVINCES)
    pair = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(rng.randint(1, 2)))
    return [
        f"{digits} {letters}",
        f"{digits}-{letters}",
        f"{digits}{letters}",
        f"{province}-{digits}-{pair}",
        f"{province} {digits} {pair}",
        f"E {digits} {letters}",
    ][i % 6]


def _vin_es(rng: random.Random, i: int) -> str:
    """VINs of European makers (no check digit: its ninth character is any) and checked ones."""
    if i % 3 == 2:
        return _vin(rng)
    maker = rng.choice(["VSS", "WVW", "VF1", "ZFA", "WBA", "VF3", "TMB", "SJN"])
    middle = "".join(rng.choice(_VIN_CHARS) for _ in range(6))
    return maker + middle + rng.choice(_VIN_CHARS) + rng.choice(_VIN_CHARS) + f"{rng.randrange(10**6):06d}"


def _room(rng: random.Random, i: int) -> str:
    letter = rng.choice("ABCDEFGHJKLMNPRSTUVW")
    return [
        str(rng.randint(100, 999)),
        f"{rng.randint(1, 40)}",
        f"{rng.randint(1, 9)}{letter}",
        f"{rng.randint(100, 999)}{letter}",
        f"{rng.randint(1, 30)}-{letter}",
        f"{rng.randint(1, 9)}{letter}-{rng.randint(100, 999)}",
    ][i % 6]


def _device(rng: random.Random, i: int) -> str:
    letters = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(3))
    return [
        f"{letters}{rng.randrange(10**6, 10**7)}",
        str(rng.randrange(10**7, 10**8)),
        f"{letters[:1]}{rng.randrange(10, 99)}-{rng.randrange(10000, 99999)}-{letters[1]}",
    ][i % 3]


# Month names as each language pack writes them ([dates] months of surrogates.toml).
_MONTHS_EN = load_language("en").dates.months
_MONTHS_ES = load_language("es").dates.months


def _date_en(rng: random.Random, i: int) -> str:
    y, m, d = rng.randint(1950, 2024), rng.randint(1, 12), rng.randint(1, 28)
    mon = _MONTHS_EN[m - 1]
    forms = [
        f"{m:02d}/{d:02d}/{y}",
        f"{m}/{d}/{y % 100:02d}",
        f"{mon} {d}, {y}",
        f"{d} {mon[:3]} {y}",
        f"{y}-{m:02d}-{d:02d}",
        f"{mon[:3]} {d}",
        f"{d:02d}-{mon[:3].upper()}-{y}",
        f"{m}.{d}.{y}",
        f"{mon} {y}",
        f"{m}/{d}",
    ]
    return forms[i % len(forms)]


def _date_es(rng: random.Random, i: int) -> str:
    y, m, d = rng.randint(1950, 2024), rng.randint(1, 12), rng.randint(1, 28)
    mes = _MONTHS_ES[m - 1]
    forms = [
        f"{d:02d}/{m:02d}/{y}",
        f"{d}-{m}-{y}",
        f"{d} de {mes} de {y}",
        f"{mes} de {y}",
        f"{d:02d}.{m:02d}.{y % 100:02d}",
        f"{d}/{m}/{y}",
        f"{d} de {mes} del {y}",
        f"{d:02d}-{m:02d}-{y}",
    ]
    return forms[i % len(forms)]


def _age_en(rng: random.Random, i: int) -> str:
    return str(90 + i % 21)


_UNITS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _age_words_en(rng: random.Random, i: int) -> str:
    n = 90 + i % 12
    if n < 100:
        word = "ninety" + (f"-{_UNITS[n - 91]}" if n > 90 else "")
        return word if i % 4 else word.replace("-", " ")
    return "one hundred" + (f" and {_UNITS[n - 101]}" if n > 100 else "")


def _age_es(rng: random.Random, i: int) -> str:
    return [
        f"{rng.randint(18, 99)} años",
        f"{rng.randint(2, 11)} meses",
        f"{rng.randint(90, 104)} años",
        f"{rng.randint(2, 17)} años",
        f"{rng.randint(3, 20)} días",
    ][i % 5]


def _zip(rng: random.Random, i: int) -> str:
    z = f"{rng.randrange(1000, 99999):05d}"
    return f"{z}-{rng.randrange(10000):04d}" if i % 3 == 2 else z


def _street_en(rng: random.Random, i: int, names: dict[str, list[str]]) -> str:
    name = rng.choice(
        [
            "Maple",
            "Oak",
            "Elm",
            "Cedar",
            "Washington",
            "Lincoln",
            "Kowalczyk",
            "Okonkwo",
            "Whitfield",
            "Lakeview",
            "Hillcrest",
            "Sunset",
            "Main",
            "Park",
            "Church",
            "Ridge",
        ]
    )
    kind = ["Street", "St.", "Avenue", "Ave", "Road", "Rd.", "Boulevard", "Blvd", "Lane", "Drive", "Court", "Way"][
        i % 12
    ]
    number = rng.randint(1, 9999)
    forms = [
        f"{number} {name} {kind}",
        f"{number} N. {name} {kind}",
        f"{number} {name} {kind}, Apt {rng.randint(1, 40)}",
        f"{number} West {name} {kind}",
    ]
    return forms[i % len(forms)]


def _address_es(rng: random.Random, i: int, names: dict[str, list[str]]) -> str:
    street = rng.choice(
        [
            "Mayor",
            "Real",
            "de la Paz",
            "del Carmen",
            "Goya",
            "Alfonso XIII",
            "San Francisco",
            "Gran Vía",
            "de Colón",
            "Rosalía de Castro",
            "Sabino Arana",
            "Doctor Fleming",
            "Puigdomènech",
            "Etxeberria",
        ]
    )
    kind = ["C/", "Calle", "Avda.", "Avenida", "Plaza", "Paseo", "Rúa", "Carrer"][i % 8]
    town, cp = rng.choice(
        [
            ("Madrid", "28013"),
            ("Sevilla", "41004"),
            ("Vigo", "36202"),
            ("Bilbao", "48009"),
            ("Lugo", "27002"),
            ("Zaragoza", "50004"),
            ("Girona", "17001"),
            ("Cáceres", "10003"),
            ("Murcia", "30008"),
            ("Soria", "42002"),
        ]
    )
    number = rng.randint(1, 150)
    forms = [
        f"{kind} {street} {number}, {rng.randint(1, 9)}º {rng.choice('ABCD')}, {cp} {town}",
        f"{kind} {street} {number}, {cp} {town}",
        f"{kind} {street}, {number} - {cp} {town}",
        f"{kind} {street} nº {number}, {rng.randint(1, 6)}º izq., CP {cp}, {town}",
    ]
    return forms[i % len(forms)]


def _ascii(text: str) -> str:
    import unicodedata

    return "".join(c for c in unicodedata.normalize("NFKD", text) if c.isascii() and (c.isalnum() or c in " -'"))


GENERATORS: dict[str, Callable[..., str]] = {
    "mrn": _mrn,
    "ssn": _ssn,
    "dni": _dni,
    "nie": _nie,
    "nss": _nss,
    "cip": _cip,
    "nhc": _nhc,
    "colegiado": _colegiado,
    "iban_es": _iban_es,
    "phone_es": _phone_es,
    "phone_en": _phone_en,
    "email": _email,
    "url": _url,
    "ip": _ip,
    "plan_id": _plan_id,
    "account": _account,
    "license": _license,
    "vehicle": _vehicle,
    "plate_es": _plate_es,
    "vin_es": _vin_es,
    "device": _device,
    "room": _room,
    "date_en": _date_en,
    "date_es": _date_es,
    "age_en": _age_en,
    "age_words_en": _age_words_en,
    "age_es": _age_es,
    "zip": _zip,
    "street_en": _street_en,
    "address_es": _address_es,
}
_NEEDS_NAMES = frozenset({"email", "street_en", "address_es"})


# -- the suite -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    """One filled context: ``text`` with the value (or protected word) at ``start:end``."""

    language: str
    kind: str
    context: str
    value: str
    text: str
    start: int
    end: int
    check: str = "covered"  # "covered" (an identifier), "untagged" or "kept" (a must-stay word)

    @property
    def must_stay(self) -> bool:
        return self.check != "covered"


def drawn_names(locales: Sequence[str], listed: Mapping[str, Sequence[str]], count: int = 40) -> dict[str, list[str]]:
    """``count`` distinct first and last names drawn from Faker's ``locales`` in turn (seeded), in Latin
    letters, none of them ``listed``: a redraw of the name fillers, to see whether pass rates hold for
    names the suite does not list."""
    from hybriddeid.surrogates.generator import faker_for, name_word

    drawn: dict[str, list[str]] = {"first_names": [], "last_names": []}
    for kind, key in (("first", "first_names"), ("last", "last_names")):
        names = drawn[key]
        for attempt in range(count * 50):
            if len(names) == count:
                break
            faker = faker_for(locales[attempt % len(locales)])
            faker.seed_instance(f"{SEED}:{kind}:{attempt}")
            name = name_word(faker, kind, ("female", "male")[attempt // len(locales) % 2])
            if name not in names and name not in listed[key]:
                names.append(name)
    return drawn


def load_fillers(names_from: Sequence[str] = ()) -> dict[str, list[str]]:
    """The filler lists, with full names made from the first and last names (30+ of each); with
    ``names_from`` (Faker locales) the first and last names are drawn from those locales instead."""
    lists = tomllib.loads((PROBE_DIR / "fillers.toml").read_text(encoding="utf-8"))
    if names_from:
        lists.update(drawn_names(names_from, lists))
    firsts, lasts = lists["first_names"], lists["last_names"]
    lists["full_names"] = [
        f"{first} {lasts[(i * 7 + 3) % len(lasts)]}" + (f" {lasts[(i * 11 + 5) % len(lasts)]}" if i % 3 == 2 else "")
        for i, first in enumerate(firsts)
    ]
    return lists


def fillers_for(spec: str, kind: str, lists: dict[str, list[str]]) -> list[str]:
    """The values of ``spec``: a list of fillers.toml, or ``gen:NAME`` (seeded by the kind's name)."""
    if not spec.startswith("gen:"):
        return list(lists[spec])
    name = spec[4:]
    rng = random.Random(f"{SEED}:{kind}:{name}")
    make = GENERATORS[name]
    return [make(rng, i, lists) if name in _NEEDS_NAMES else make(rng, i) for i in range(N_GENERATED)]


def _fill(context: str, placeholder: str, value: str, label: str = "") -> tuple[str, int, int]:
    """``context`` with its label fields and its one value field filled: (text, value start, value end)."""
    context = context.replace("{label}", label).replace("{LABEL}", label.upper()).replace("{llabel}", label.lower())
    forms = {
        f"{{{placeholder}}}": value,
        f"{{{placeholder.upper()}}}": value.upper(),
        f"{{l{placeholder}}}": value.lower(),
    }
    found = [(context.index(field), field) for field in forms if field in context]
    if len(found) != 1:
        raise ValueError(f"probe context {context!r} must hold exactly one value field")
    at, field = found[0]
    text = context[:at] + forms[field] + context[at + len(field) :]
    return text, at, at + len(forms[field])


def contexts_of(kind: dict, frames: Sequence[str]) -> list[tuple[str, str]]:
    """(context, label) pairs of a kind: its own contexts, then every frame with its labels in turn."""
    pairs = [(context, "") for context in kind.get("contexts", [])]
    labels = kind.get("labels", [])
    if labels:
        pairs += [(frame, labels[i % len(labels)]) for i, frame in enumerate(frames)]
    return pairs


def load_probes(language: str, per_context: int | None = None, names_from: Sequence[str] = ()) -> list[Probe]:
    """Every probe of ``language`` (each context with every filler), or ``per_context`` fillers per
    context (taken in turn along the contexts, so each filler is used: the fast subset); ``names_from``:
    names drawn from these Faker locales instead of the listed ones."""
    suite = tomllib.loads((PROBE_DIR / f"{language}.toml").read_text(encoding="utf-8"))
    lists = load_fillers(names_from)
    frames = suite.get("frames", {}).get("labelled", [])
    probes: list[Probe] = []

    def chosen(values: list[str], index: int) -> list[str]:
        if per_context is None:
            return values
        return [values[(index * per_context + k) % len(values)] for k in range(per_context)]

    for kind in suite.get("kind", []):
        values = fillers_for(kind["fillers"], kind["name"], lists)
        for index, (context, label) in enumerate(contexts_of(kind, frames)):
            shown = (
                context.replace("{label}", label).replace("{LABEL}", label.upper()).replace("{llabel}", label.lower())
            )
            for value in chosen(values, index):
                text, start, end = _fill(context, "v", value, label)
                probes.append(Probe(language, kind["name"], shown, value, text, start, end))
    for keep in suite.get("keep", []):
        for index, context in enumerate(keep["contexts"]):
            for word in chosen(keep["words"], index):
                text, start, end = _fill(context, "w", word)
                probes.append(Probe(language, keep["name"], context, word, text, start, end, keep["check"]))
    return probes


# Label words a value may hold that identify nobody, so need not be covered: "CP" (código postal) in
# "C/ Mayor 12, 3º izq., CP 28013, Madrid" (MEDDOCAN marks the street, the postcode and the town, not it).
_LABEL_IN_VALUE = re.compile(r"(?<!\w)(?i:CP|C\.P\.)(?!\w)")
# An article opening a value that English grammar asks for ("the Philippines", "the Salvation Army"):
# i2b2-2014 marks the name without it, as the models learn, so it need not be covered either.
_ARTICLE_OPENING_VALUE = re.compile(r"(?i:the)\s+")


def covered(text: str, start: int, end: int, spans: Iterable[tuple[int, int]]) -> bool:
    """Whether every letter and digit of ``text[start:end]`` lies inside one of ``spans`` (label words
    inside the value, ``_LABEL_IN_VALUE``, and an opening "the", ``_ARTICLE_OPENING_VALUE``, excepted)."""
    inside = set()
    for s, e in spans:
        inside.update(range(max(s, start), min(e, end)))
    for label in _LABEL_IN_VALUE.finditer(text, start, end):
        inside.update(range(label.start(), label.end()))
    article = _ARTICLE_OPENING_VALUE.match(text, start, end)
    if article:
        inside.update(range(article.start(), article.end()))
    return all(i in inside for i in range(start, end) if _ALNUM.match(text[i]))


def touched(start: int, end: int, spans: Iterable[tuple[int, int]]) -> bool:
    return any(s < end and e > start for s, e in spans)


def _whole_word_count(word: str, text: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(word)}(?!\w)", text))


def passes(pipeline, probe: Probe) -> bool:
    """Whether ``pipeline`` (loaded for the probe's language) passes ``probe``."""
    if probe.check == "kept":
        out = pipeline.deidentify(probe.text, mode="surrogate", key=KEY).text
        return _whole_word_count(probe.value, out) == _whole_word_count(probe.value, probe.text)
    spans = [(span.start, span.end) for span in pipeline.predict(probe.text)]
    if probe.check == "untagged":
        return not touched(probe.start, probe.end, spans)
    return covered(probe.text, probe.start, probe.end, spans)


def run_probes(pipeline, probes: Sequence[Probe]) -> list[bool]:
    return [passes(pipeline, probe) for probe in probes]


@dataclass
class Tally:
    passed: int = 0
    total: int = 0

    def add(self, ok: bool) -> None:
        self.passed += ok
        self.total += 1

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 1.0


def tally(probes: Sequence[Probe], results: Sequence[bool]) -> dict:
    """Pass counts: overall identifiers, must-stay, per kind and per (kind, context)."""
    out = {"identifiers": Tally(), "must_stay": Tally(), "kinds": defaultdict(Tally), "contexts": defaultdict(Tally)}
    for probe, ok in zip(probes, results):
        out["must_stay" if probe.must_stay else "identifiers"].add(ok)
        out["kinds"][probe.kind].add(ok)
        out["contexts"][(probe.kind, probe.context)].add(ok)
    return out


def failures(probes: Sequence[Probe], results: Sequence[bool]) -> list[Probe]:
    return [probe for probe, ok in zip(probes, results) if not ok]


# -- output ---------------------------------------------------------------------------------------
def _pct(t: Tally) -> str:
    return f"{100 * t.rate:.1f}%"


def _cell(text: str) -> str:
    return text.replace("\n", "⏎").replace("\t", "⇥").replace("|", "\\|").replace("`", "'")


def report_lines(language: str, counts: dict, kinds_order: Sequence[str]) -> list[str]:
    lines = [
        f"{language}: identifiers {counts['identifiers'].passed}/{counts['identifiers'].total} "
        f"({_pct(counts['identifiers'])}), must-stay {counts['must_stay'].passed}/{counts['must_stay'].total} "
        f"({_pct(counts['must_stay'])})"
    ]
    for kind in kinds_order:
        t = counts["kinds"][kind]
        worst = sorted(((c, ctx) for (k, ctx), c in counts["contexts"].items() if k == kind), key=lambda x: x[0].rate)[
            :3
        ]
        worst_text = "; ".join(f"{_pct(c)} {ctx!r}" for c, ctx in worst if c.rate < 1)
        lines.append(
            f"  {kind:<22} {t.passed:>5}/{t.total:<5} {_pct(t):>7}" + (f"   worst: {worst_text}" if worst_text else "")
        )
    return lines


def _baseline_rate(baseline: dict | None, language: str, *keys: str) -> str:
    """A pass rate of a ``--json`` dump of an earlier run ("-" where it has none)."""
    value = (baseline or {}).get(language, {})
    for key in keys:
        value = value.get(key, {}) if isinstance(value, dict) else {}
    return f"{100 * value['passed'] / value['total']:.1f}%" if value.get("total") else "-"


def docs_page(
    results: dict[str, tuple[list[Probe], dict]],
    command: str,
    commit: str,
    seconds: float,
    baseline: dict | None = None,
    baseline_label: str = "",
) -> str:
    """The docs page: per language the kinds and every context with their pass rates (beside an
    earlier run's, ``baseline``, when given)."""
    lines = [
        "# Identifier probes",
        "",
        "Behavioural probes of the bundled models (issue 43, in the manner of CheckList: Ribeiro et al., ACL 2020):",
        "each identifier kind of each language in the contexts forms, letters, signatures and nursing notes",
        "put it (header lines with and without separators, labels in capitals, tables flattened to a line,",
        "narrative, family mentions, titles with a surname alone, lower case and capitals, punctuation glued",
        "on), filled with at least 30 values of varied origin: names from many countries, and values of",
        "documented formats made with a fixed seed (a DNI or NIE with its check letter, an IBAN with its",
        "check digits). The contexts are written for these probes, not taken from any corpus; they are in",
        "`benchmarks/probes/` and `benchmarks/probes.py` makes the values.",
        "",
        "An identifier probe passes when every letter and digit of the value is inside a predicted span,",
        "whatever its label. A must-stay probe passes when no span touches the word (`untagged`), or,",
        "for Spanish relation words, which MEDDOCAN tags, when surrogate mode writes the word back",
        "unchanged (`kept`). `tests/test_probes.py` runs one value per context in CI.",
        "",
        f"Made by `{command}` at commit `{commit}` ({seconds:.0f} s on 2 shared cores).",
    ]
    before = f" ({baseline_label})" if baseline_label else ""
    if baseline is not None:
        lines += [
            "",
            f"The `before` columns are the same probes run by this script in a checkout of `{baseline_label}` "
            "(`--baseline`, that run's `--json`).",
        ]
    lines += [
        "",
        "## Summary",
        "",
        "| language | identifier probes | passed | before | must-stay probes | kept | before |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for language, (_probes, counts) in results.items():
        ids, keep = counts["identifiers"], counts["must_stay"]
        lines.append(
            f"| {language} | {ids.total} | {_pct(ids)} | {_baseline_rate(baseline, language, 'identifiers')} | "
            f"{keep.total} | {_pct(keep)} | {_baseline_rate(baseline, language, 'must_stay')} |"
        )
    for language, (probes, counts) in results.items():
        kinds = list(dict.fromkeys(p.kind for p in probes))
        lines += [
            "",
            f"## {language}: kinds",
            "",
            f"| kind | probes | passed | before{before} |",
            "| --- | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {kind} | {counts['kinds'][kind].total} | {_pct(counts['kinds'][kind])} | "
            f"{_baseline_rate(baseline, language, 'kinds', kind)} |"
            for kind in kinds
        ]
        lines += [
            "",
            f"## {language}: contexts",
            "",
            f"| kind | context | probes | passed | before{before} |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        earlier = {(c["kind"], c["context"]): c for c in (baseline or {}).get(language, {}).get("contexts", [])}
        for (kind, context), t in counts["contexts"].items():
            old = earlier.get((kind, context))
            shown = f"{100 * old['passed'] / old['total']:.1f}%" if old and old["total"] else "-"
            lines.append(f"| {kind} | `{_cell(context)}` | {t.total} | {_pct(t)} | {shown} |")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", nargs="+", default=["en", "es"])
    parser.add_argument(
        "--per-context",
        type=int,
        default=None,
        metavar="N",
        help="N values per context instead of every value (a quick look)",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="LANG=DIR",
        help="a saved model for a language instead of the bundled one (repeatable)",
    )
    parser.add_argument(
        "--names",
        nargs="+",
        default=[],
        metavar="LOCALE",
        help="draw the first and last names from these Faker locales (seeded) instead of fillers.toml's: "
        "a redraw, to check that the rates hold for names the suite does not list",
    )
    parser.add_argument("--failures", type=int, default=0, metavar="N", help="print up to N failed probes per language")
    parser.add_argument("--json", type=Path, help="write every count and failed probe here")
    parser.add_argument("--docs", action="store_true", help=f"write {DOCS_PAGE.relative_to(HERE.parent)}")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="JSON",
        help="an earlier run's --json output, shown beside this run's rates on the docs page",
    )
    parser.add_argument("--baseline-label", default="", help="what the baseline ran (a commit), for the page")
    args = parser.parse_args(argv)
    from hybriddeid import Pipeline

    models = dict(item.split("=", 1) for item in args.model)
    started = time.perf_counter()
    results: dict[str, tuple[list[Probe], dict]] = {}
    dump: dict[str, object] = {}
    for language in args.languages:
        pipeline = Pipeline.load(models[language]) if language in models else Pipeline.load(language)
        probes = load_probes(language, args.per_context, args.names)
        outcome = run_probes(pipeline, probes)
        counts = tally(probes, outcome)
        results[language] = (probes, counts)
        print("\n".join(report_lines(language, counts, list(dict.fromkeys(p.kind for p in probes)))))
        failed = failures(probes, outcome)
        for probe in failed[: args.failures]:
            print(f"    FAIL {probe.kind}: {probe.text!r}")
        dump[language] = {
            "identifiers": vars(counts["identifiers"]),
            "must_stay": vars(counts["must_stay"]),
            "kinds": {k: vars(t) for k, t in counts["kinds"].items()},
            "contexts": [{"kind": k, "context": c, **vars(t)} for (k, c), t in counts["contexts"].items()],
            "failed": [{"kind": p.kind, "text": p.text, "value": p.value} for p in failed],
        }
    seconds = time.perf_counter() - started
    print(f"{seconds:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(dump, ensure_ascii=False, indent=1), encoding="utf-8")
    if args.docs:
        command = "python benchmarks/probes.py " + " ".join(argv if argv is not None else sys.argv[1:])
        baseline = json.loads(args.baseline.read_text(encoding="utf-8")) if args.baseline else None
        DOCS_PAGE.write_text(
            docs_page(results, command.strip(), _commit(), seconds, baseline, args.baseline_label), encoding="utf-8"
        )
        print(f"wrote {DOCS_PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
