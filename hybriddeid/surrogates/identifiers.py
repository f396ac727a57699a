"""Surrogate identifiers of documented formats that stay valid: a Spanish DNI becomes another DNI with
its check letter recomputed, a NIE another NIE, an IBAN another IBAN with its check digits
recomputed, a VIN another VIN (its alphabet, its check digit where the original's held), a Spanish
number plate another plate (consonants only), and a file name keeps its extension ("IMG_2093.JPG" ->
"KQD_5120.JPG": the extension says what the file is, not whose). Separators, letter case and length
are kept, as for any identifier; a value of no such format is left to the shape surrogate.

The check letters and digits are the rule validators' (:mod:`hybriddeid.classifiers.validators`), so
a surrogate DNI is one the rules would take as a DNI.
"""

from __future__ import annotations

import random
import re

from hybriddeid.classifiers.validators import dni_letter, iban_check_digits, nie_number, vin_check_digit
from hybriddeid.surrogates.shape import shape_surrogate

# A DNI: 7-8 digits (dots allowed: "45.123.987"), an optional blank or dash, its letter.
_DNI = re.compile(r"(?P<number>\d{1,2}\.?\d{3}\.?\d{3})(?P<sep>[ -]?)(?P<letter>[A-Za-z])")
# A NIE: X, Y or Z, 7 digits and the letter, each part perhaps after a blank or a dash.
_NIE = re.compile(r"(?P<prefix>[XYZxyz])(?P<sep1>[ -]?)(?P<digits>\d{7})(?P<sep2>[ -]?)(?P<letter>[A-Za-z])")
# An IBAN: country letters, check digits, 11-30 letters and digits, in groups or not.
_IBAN = re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}")
# A VIN (ISO 3779): 17 letters and digits without I, O or Q, at least one of each.
_VIN_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"
_VIN = re.compile(r"(?=[A-HJ-NPR-Z0-9]*[A-HJ-NPR-Z])(?=[A-HJ-NPR-Z0-9]*\d)[A-HJ-NPR-Z0-9]{17}")
# A Spanish plate since 2000 (RD 2822/1998, annex XVIII): four digits and three consonants, no Ñ or Q.
_PLATE_CONSONANTS = "BCDFGHJKLMNPRSTVWXYZ"
_PLATE_ES = re.compile(
    rf"(?P<prefix>[ECR][ -]?)?(?P<digits>\d{{4}})(?P<sep>[ -]?)(?P<letters>[{_PLATE_CONSONANTS}]{{3}})"
)
# A file name: a stem holding a digit, "_" or "-", and the extension of an image, a recording, a biometric
# template or a document (any other ending may be part of the identifier, and is replaced with it).
_FILE = re.compile(
    r"(?P<stem>(?=[\w.-]*[\d_-])[A-Za-z0-9][\w.-]*)"
    r"(?P<ext>\.(?i:jpe?g|png|gif|bmp|tiff?|hei[cf]|dcm|wsq|webp|mp4|mov|avi|wav|mp3|m4a|dat|bin|tmpl|pdf|docx?|txt))"
)


def identifier_format(value: str) -> str | None:
    """``"dni"``, ``"nie"``, ``"iban"``, ``"vin"``, ``"plate_es"`` or ``"file"`` when ``value`` is
    written in that format (an IBAN only when its check digits hold: other codes start with two
    letters and two digits too), else None."""
    if _NIE.fullmatch(value):
        return "nie"
    if _VIN.fullmatch(value):
        return "vin"
    if _PLATE_ES.fullmatch(value):
        return "plate_es"
    if _FILE.fullmatch(value):
        return "file"
    if _DNI.fullmatch(value) and len(re.sub(r"\D", "", value)) in (7, 8):
        return "dni"
    if _IBAN.fullmatch(value):
        compact = value.replace(" ", "")
        if iban_check_digits(compact[:2], compact[4:]) == compact[2:4]:
            return "iban"
    return None


def _same_case(original: str, letter: str) -> str:
    return letter.lower() if original.islower() else letter


def valid_identifier(value: str, rng: random.Random) -> str | None:
    """Another identifier of ``value``'s format, valid (check letter or digits recomputed), with its
    separators and case; None when ``value`` is of no format known here."""
    kind = identifier_format(value)
    if kind == "dni":
        match = _DNI.fullmatch(value)
        assert match is not None  # identifier_format matched it
        number = shape_surrogate(match["number"], rng)
        letter = dni_letter(int(number.replace(".", "")))
        return f"{number}{match['sep']}{_same_case(match['letter'], letter)}"
    if kind == "nie":
        match = _NIE.fullmatch(value)
        assert match is not None  # identifier_format matched it
        digits = "".join(str(rng.randrange(10)) for _ in range(7))
        letter = dni_letter(nie_number(match["prefix"], digits))
        return f"{match['prefix']}{match['sep1']}{digits}{match['sep2']}{_same_case(match['letter'], letter)}"
    if kind == "iban":
        compact = value.replace(" ", "")
        country, bban = compact[:2], shape_surrogate(compact[4:], rng)
        new = country + iban_check_digits(country, bban) + bban
        out, at = [], 0
        for char in value:  # the blanks where the original had them
            if char == " ":
                out.append(" ")
            else:
                out.append(new[at])
                at += 1
        return "".join(out)
    if kind == "vin":
        chars = [rng.choice(_VIN_LETTERS) if char.isalpha() else str(rng.randrange(10)) for char in value]
        if vin_check_digit(value) == value[8]:  # a North American VIN: the new one checks too
            chars[8] = vin_check_digit("".join(chars))
        return "".join(chars)
    if kind == "plate_es":
        match = _PLATE_ES.fullmatch(value)
        assert match is not None  # identifier_format matched it
        letters = "".join(rng.choice(_PLATE_CONSONANTS) for _ in range(3))
        digits = f"{rng.randrange(10000):04d}"
        return f"{match['prefix'] or ''}{digits}{match['sep']}{letters}"
    if kind == "file":
        match = _FILE.fullmatch(value)
        assert match is not None  # identifier_format matched it
        return shape_surrogate(match["stem"], rng) + match["ext"]
    return None
