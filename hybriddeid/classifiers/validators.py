"""Validators that rule files name in their ``validator`` key.

A validator receives the regex match of a rule and says whether the hit is plausible PHI, for
checks a pattern cannot express well (a day that exists in its month, a checksum, an octet range).
Date validators read the named groups ``day``, ``month`` and ``year`` when the pattern has them.
New validators are added with :func:`register_validator`; rule files are checked against the
registry when they load, so a misspelt name fails early.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable

import regex

Validator = Callable[["regex.Match[str]"], bool]

_VALIDATORS: dict[str, Validator] = {}


def register_validator(name: str) -> Callable[[Validator], Validator]:
    """Decorator: register ``func`` under ``name`` (names are unique)."""

    def decorator(func: Validator) -> Validator:
        if name in _VALIDATORS:
            raise ValueError(f"validator {name!r} is already registered")
        _VALIDATORS[name] = func
        return func

    return decorator


def get_validator(name: str) -> Validator:
    """The validator registered as ``name``; ``KeyError`` if there is none."""
    return _VALIDATORS[name]


def validator_names() -> tuple[str, ...]:
    return tuple(sorted(_VALIDATORS))


def _phi(match: regex.Match[str]) -> str:
    """The PHI part of a match: group ``phi`` when the pattern has it, else the whole match."""
    return match.group("phi") if "phi" in match.re.groupindex else match.group()


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def _group(match: regex.Match[str], name: str) -> str | None:
    return match.group(name) if name in match.re.groupindex else None


# Two-digit years are read as 19xx/20xx; a date outside these years is not a note's date.
_MIN_YEAR, _MAX_YEAR = 1900, 2099


def _valid_date(match: regex.Match[str], two_digit_year_ok: bool) -> bool:
    day, month, year = (_group(match, key) for key in ("day", "month", "year"))
    year_value: int | None = None
    if year is not None:
        if len(year) == 2 and two_digit_year_ok:
            year_value = 2000 + int(year)  # a leap year stand-in good enough for Feb 29 checks
        elif len(year) == 4:
            year_value = int(year)
            if not _MIN_YEAR <= year_value <= _MAX_YEAR:
                return False
        else:
            return False
    if month is not None:
        month_value = int(month)
        if not 1 <= month_value <= 12:
            return False
        if day is not None:
            last = calendar.monthrange(year_value if year_value else 2000, month_value)[1]
            return 1 <= int(day) <= last
    elif day is not None:
        return 1 <= int(day) <= 31
    return True


_NUMERIC_ONLY = regex.compile(r"[\d\s/.\-'’]+")
_NUMBER = regex.compile(r"\d+")
_DECIMAL = regex.compile(r"\d+\.\d")
_SLASHED_NUMBERS = regex.compile(r"\d+(?:/\d+)+")


def numeric_date_possible(text: str) -> bool:
    """Whether ``text`` could be a date as far as its numbers tell. False only for a run of numbers
    that no numeric date writing reads, when none of its numbers is a year of 1900-2099:
    - its first two numbers are neither month/day, day/month nor month/two-digit year
      ("40/1000/15" ventilator settings, "70-84" a pressure range, "07-1530" a shift's hours);
    - or it is a decimal: two numbers joined by a point, one digit after it ("HCT 27.9 (29.3)");
    - or it mixes a decimal with slashes or dashes ("5/3.27/928": cardiac output, index, resistance);
    - or it is four or more numbers joined by slashes alone ("24/06/12/18", hours of a schedule): a
      date has at most three (a range of two dates joins them with a dash: "8/1-8/3").
    Text with a letter, a lone number ("2030", "'84"), or a typo around a year ("14/14/2014",
    "16/018/1961": MEDDOCAN dev writes birth dates so) or in a day ("2/31") is left to the
    taggers: a mistyped date is still a date."""
    if not _NUMERIC_ONLY.fullmatch(text):
        return True
    numbers = _NUMBER.findall(text)
    if len(numbers) < 2:
        return True
    if any(len(n) == 4 and _MIN_YEAR <= int(n) <= _MAX_YEAR for n in numbers):
        return True
    if len(numbers) == 2 and len(numbers[1]) == 1 and _DECIMAL.fullmatch(text.strip()):
        return False
    if "." in text and ("/" in text or "-" in text) and _DECIMAL.search(text):
        return False  # a decimal among slashes or dashes: "5/3.27/928" (CO/CI/SVR), "7.36/42/-1"
    if len(numbers) > 3 and _SLASHED_NUMBERS.fullmatch(text.strip()):
        return False
    first, second = numbers[0], numbers[1]
    a, b = int(first), int(second)
    return (1 <= a <= 12 and (b <= 31 or len(second) == 2)) or (1 <= a <= 31 and 1 <= b <= 12)


_IPV4 = regex.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def ip_address_possible(text: str) -> bool:
    """Whether ``text`` could hold an IP address: four dotted numbers or an IPv6 run of colons.
    "7.45" (a blood pH) tagged IPADDR is not one, and surrogate mode would replace the value."""
    return bool(_IPV4.search(text)) or text.count(":") >= 2


# A number glued to three or more letters ("2lnc", "500mls"; not "5th", "221B", "2ºB").
_NUMBER_GLUED_TO_WORD = regex.compile(r"\d[^\W\d_]{3,}")


def street_possible(text: str) -> bool:
    """Whether ``text`` could be a street address as far as its layout tells: not one run without a
    blank in which a number is glued to a word ("2lnc.Lungsounds": 2 litres by nasal cannula, read as
    a street). An address writes its number apart from the street's name (USPS Publication 28,
    section 2); a number alone, "5th" or "221B" are left to the taggers."""
    return any(c.isspace() for c in text) or not _NUMBER_GLUED_TO_WORD.search(text)


# A short number (a measurement: "48", "7.45") glued to a span by a slash, before or after it.
_SHORT_NUMBER_SLASH_BEFORE = regex.compile(r"(?<![\d.])\d{1,3}(?:\.\d+)?/$")
_SHORT_NUMBER_SLASH_AFTER = regex.compile(r"^/\d{1,3}(?:\.\d+)?(?![\d.])")
_SHORT_GROUPS = regex.compile(r"\d{1,3}(?:[-.]\d{1,3})*")
_SHORT_RANGE = regex.compile(r"(\d{1,3})-(\d{1,3})")


def measurement_piece(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]``, read as an identifier, is a piece of a series of measurements:
    short number groups glued by a slash to another short number ("abg 80/48/7.45.34.7", "BP
    114-17-49/52-67"), or an ascending range of two short numbers ("FS 178-224"). Nursing notes
    write vital signs and blood gases so; surrogate mode would rewrite the values. No identifier of
    4,990 in 2,000 generated notes has either shape."""
    surface = text[start:end]
    pair = _SHORT_RANGE.fullmatch(surface)
    if pair and int(pair[1]) < int(pair[2]):
        return True
    if not _SHORT_GROUPS.fullmatch(surface):
        return False
    return bool(
        _SHORT_NUMBER_SLASH_BEFORE.search(text[max(0, start - 12) : start])
        or _SHORT_NUMBER_SLASH_AFTER.search(text[end : end + 12])
    )


# A pair of short numbers ("5/12", "90-110"): what a date without a year and a reading share.
MAX_AGE = 125  # above the oldest recorded human age (122)
_NUMBER_RUN_BEFORE = regex.compile(r"[\d./-]*$")
_NUMBER_RUN_AROUND = regex.compile(r"[\d./-]+")
_NUMBER_PAIR = regex.compile(r"\d{1,3}\s?[/-]\s?\d{1,3}")
_LABEL_BEFORE = regex.compile(r"(?<![\w/])([^\W\d_][\w/]*)\s*[:=]?\s*$")


def series_piece(text: str, start: int, end: int) -> bool:
    """Whether the numbers ``text[start:end]`` (a run joined by "/" or "-") are glued by a slash to a
    short number beyond them ("7.35/[45/80]", "[10/5]/40"): a piece of a series of readings. A date
    written with numbers is whole: nothing numeric continues it past its year."""
    if not _SHORT_GROUPS.fullmatch(text[start:end].replace("/", "-")):
        return False
    if not (
        _SHORT_NUMBER_SLASH_BEFORE.search(text[max(0, start - 12) : start])
        or _SHORT_NUMBER_SLASH_AFTER.search(text[end : end + 12])
    ):
        return False
    before = _NUMBER_RUN_BEFORE.search(text, max(0, start - 40), start)
    assert before is not None  # the pattern matches the empty string
    run = _NUMBER_RUN_AROUND.match(text, before.start())
    whole = run.group() if run else text[start:end]
    # "3/4" of "3/4/95" cut short is still a date: a run of at most three numbers that reads as one
    return not (len(_NUMBER.findall(whole)) <= 3 and "." not in whole and numeric_date_possible(whole))


_NUMBERS_ONLY = regex.compile(r"[\d\s./-]*\d[\d\s./-]*")
# not an ordinal's or a decade's ending, nor ISO 8601's "T" between a date and its time ("2024-03-14T14:35")
_UNIT_AFTER = regex.compile(r"%|(?!(?i:st|nd|rd|th|s)\b|T\d)\p{L}")


def reading_with_unit(text: str, start: int, end: int) -> bool:
    """Whether the numbers ``text[start:end]`` carry a unit glued right after them ("10/5/50%",
    "5/12PEEP"): a reading. A date written in numbers ends before a blank or a sign, never a percent
    or a letter (but an ordinal's or a decade's: "3rd", "1990s"; ISO 8601's time separator: "2024-03-14T14:35").
    Not for ages, which take theirs ("59yo")."""
    return bool(_NUMBERS_ONLY.fullmatch(text[start:end])) and _UNIT_AFTER.match(text, end) is not None


_DECIMAL_AFTER = regex.compile(r"[.:]\d")


def decimal_cut(text: str, start: int, end: int) -> bool:
    """Whether the numbers ``text[start:end]``, joined by "/" or "-", run on into a decimal point or a
    clock time ("11/31/7" of "11/31/7.45", a blood gas; "10-10" of "10-10:30 PM"): a date written with
    slashes or dashes ends at its year, never inside a decimal number or a time. A run holding a year of 1900-2099 is kept ("3/4/2021.5 days
    later", a blank typed as a point)."""
    surface = text[start:end]
    return (
        bool(_NUMBERS_ONLY.fullmatch(surface))
        and ("/" in surface or "-" in surface)
        and surface[-1:].isdigit()
        and _DECIMAL_AFTER.match(text, end) is not None
        and not any(len(n) == 4 and _MIN_YEAR <= int(n) <= _MAX_YEAR for n in _NUMBER.findall(surface))
    )


_AGE_UNIT = regex.compile(r"(?i)(?:y(?:/?o|rs?|ears?)?|mo?s?)\b")


def name_possible(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]``, read as a person's name, could hold PHI: a name has a letter, and
    digits a tagger took for a name are kept only where they could be a mislabelled age ("Hale, 92,"
    or "92yo": at most ``MAX_AGE``, no unit but an age's glued on). "811" of a peak flow and "8" of
    "8GM" are neither."""
    surface = text[start:end]
    if any(char.isalpha() for char in surface):
        return True
    if not age_possible(surface):
        return False
    return not reading_with_unit(text, start, end) or _AGE_UNIT.match(text, end) is not None


def age_possible(text: str) -> bool:
    """Whether an age written in digits could be one: no number in it above ``MAX_AGE`` ("1000-2000"
    of a fluid balance is none). Text without digits ("ninety") is left to other checks."""
    return all(int(number) <= MAX_AGE for number in _NUMBER.findall(text))


def reading_after_label(text: str, start: int, end: int, labels: frozenset[str]) -> bool:
    """Whether ``text[start:end]`` is a pair of short numbers right after a measurement label of
    ``labels`` (lower case) on its line, at most a colon or "=" between ("PEEP 5/5", "HR: 90-110"):
    a reading, which a date without a year would otherwise look like."""
    if not labels or not _NUMBER_PAIR.fullmatch(text[start:end]):
        return False
    label = _LABEL_BEFORE.search(text, max(text.rfind("\n", 0, start) + 1, start - 24), start)
    return label is not None and label.group(1).lower() in labels


_SCORE = regex.compile(r"(\d{1,2})/(10|5)")
_CLAUSE_END = regex.compile(r"\n|[.;!?](?!\d)")  # a line's or a sentence's end, not a decimal point
_CLAUSE_END_BEFORE = regex.compile(r"(?r)\n|[.;!?](?!\d)")
_WORD = regex.compile(r"\p{L}+")


def score_on_scale(text: str, start: int, end: int, words: tuple[frozenset[str], frozenset[str]]) -> bool:
    """Whether ``text[start:end]`` is a score out of 10 or 5 ("7/10", "4/5", at most the scale's top) with
    a rating word of ``words[0]`` among the three words before or after it in its clause ("Pain: 7/10", "5/10
    abdominal pain", "Strength 4/5"), and no word of ``words[1]`` right before it ("seen on 7/10 for pain"
    is a date): a score on a pain or strength scale, which a date without a year would otherwise look like."""
    ratings, date_words = words
    score = _SCORE.fullmatch(text, start, end)
    if not ratings or score is None or int(score.group(1)) > int(score.group(2)):
        return False
    # the words of its clause: back to the line's start or a sentence's end, on to the next
    stop = _CLAUSE_END_BEFORE.search(text, max(0, start - 60), start)
    before = list(_WORD.finditer(text, stop.end() if stop else max(0, start - 60), start))[-3:]
    stop = _CLAUSE_END.search(text, end, min(len(text), end + 60))
    after = _WORD.findall(text, end, stop.start() if stop else min(len(text), end + 60))[:3]
    last = before[-1] if before else None
    if last is not None and last.group().lower() in date_words and not text[last.end() : start].strip(" \t"):
        return False
    return any(word.lower() in ratings for word in [match.group() for match in before] + after)


@register_validator("date")
def valid_date(match: regex.Match[str]) -> bool:
    """Numeric groups ``day``/``month``/``year`` form a real calendar date in 1900-2099."""
    return _valid_date(match, two_digit_year_ok=True)


@register_validator("date_4digit_year")
def valid_date_4digit_year(match: regex.Match[str]) -> bool:
    """As ``date`` but the year must have four digits."""
    return _valid_date(match, two_digit_year_ok=False)


@register_validator("luhn")
def valid_luhn(match: regex.Match[str]) -> bool:
    """The digits of the PHI pass the Luhn checksum (payment cards, some record numbers)."""
    digits = _digits(_phi(match))
    if len(digits) < 2:
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        value = int(ch)
        if i % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


@register_validator("ipv4")
def valid_ipv4(match: regex.Match[str]) -> bool:
    """Four dot-separated octets, each 0-255, without leading zeros (so not a version number)."""
    parts = _phi(match).split(".")
    return len(parts) == 4 and all(
        part.isdigit() and int(part) <= 255 and (part == "0" or not part.startswith("0")) for part in parts
    )


@register_validator("us_ssn")
def valid_us_ssn(match: regex.Match[str]) -> bool:
    """A US social security number the SSA could issue: area not 000/666/9xx, group and serial not 0."""
    digits = _digits(_phi(match))
    if len(digits) != 9:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and not area.startswith("9") and group != "00" and serial != "0000"


@register_validator("age_over_89")
def valid_age_over_89(match: regex.Match[str]) -> bool:
    """An age HIPAA requires removed: 90 to 125 years."""
    digits = _digits(_phi(match))
    return bool(digits) and 90 <= int(digits) <= 125


# Spanish identity numbers (Real Decreto 1553/2005, Orden INT/2058/2008): a DNI is 8 digits and the
# letter DNI_LETTERS[number % 23]; a NIE is X, Y or Z (read as 0, 1, 2), 7 digits and the same letter;
# a person's NIF is their DNI or NIE.
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
NIE_PREFIXES = "XYZ"


def dni_letter(number: int) -> str:
    """The check letter of a DNI number, or of a NIE read with its prefix as a digit."""
    return DNI_LETTERS[number % 23]


def nie_number(prefix: str, digits: str) -> int:
    """The number whose check letter a NIE carries: its X/Y/Z prefix as 0/1/2 before its digits."""
    return int(f"{NIE_PREFIXES.index(prefix.upper())}{digits}")


@register_validator("dni_nie")
def valid_dni_nie(match: regex.Match[str]) -> bool:
    """Groups ``number`` (digits, dots allowed), ``letter`` and optional ``nie`` (X/Y/Z): a DNI of 7-8
    digits or a NIE of 7 whose letter is its check letter."""
    digits, letter, prefix = _digits(match.group("number")), match.group("letter"), _group(match, "nie")
    if not letter:
        return False
    if prefix:
        return len(digits) == 7 and dni_letter(nie_number(prefix, digits)) == letter.upper()
    return len(digits) in (7, 8) and dni_letter(int(digits)) == letter.upper()


def iban_check_digits(country: str, bban: str) -> str:
    """The two check digits of an IBAN with this country code and BBAN (ISO 13616: 98 minus the
    remainder mod 97 of BBAN + country + "00", letters read as 10-35)."""
    number = int("".join(str(int(char, 36)) for char in (bban + country + "00").upper()))
    return f"{98 - number % 97:02d}"


@register_validator("iban")
def valid_iban(match: regex.Match[str]) -> bool:
    """The PHI, blanks removed, is 15-34 letters and digits whose ISO 13616 check digits hold."""
    compact = "".join(_phi(match).split()).upper()
    if not 15 <= len(compact) <= 34 or not compact.isalnum() or not compact[:2].isalpha():
        return False
    return iban_check_digits(compact[:2], compact[4:]) == compact[2:4]


@register_validator("nss")
def valid_nss(match: regex.Match[str]) -> bool:
    """A Spanish Social Security number: 2 province digits, 8 of the number and 2 control digits that
    are the rest mod 97 of province and number (the number without its leading zero when it is below
    10,000,000, as the Seguridad Social computes it)."""
    digits = _digits(_phi(match))
    if len(digits) != 12:
        return False
    province, number, control = int(digits[:2]), int(digits[2:10]), int(digits[10:])
    base = province * 10_000_000 + number if number < 10_000_000 else int(digits[:10])
    return base % 97 == control


def gs1_check_digit(digits: str) -> str:
    """The check digit GS1 keys end with (GTIN, GS1 General Specifications 7.9.1): the digits before it
    weighted 3 and 1 alternately from the right, the sum's complement to a multiple of ten."""
    total = sum(int(digit) * (3 if i % 2 == 0 else 1) for i, digit in enumerate(reversed(digits)))
    return str(-total % 10)


@register_validator("gs1")
def valid_gs1(match: regex.Match[str]) -> bool:
    """A GS1 unique device identifier whose GTIN (group ``gtin``) ends with its check digit."""
    gtin = match.group("gtin")
    return len(gtin) == 14 and gtin.isdigit() and gs1_check_digit(gtin[:-1]) == gtin[-1]


_VIN_VALUES = {
    **{str(d): d for d in range(10)},
    **dict(zip("ABCDEFGH", range(1, 9))),
    **dict(zip("JKLMN", range(1, 6))),
    "P": 7,
    "R": 9,
    **dict(zip("STUVWXYZ", range(2, 10))),
}
_VIN_WEIGHTS = (8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2)


def vin_check_digit(vin: str) -> str:
    """The check digit a 17-character VIN carries in its ninth place (49 CFR 565.15): the weighted
    sum of its characters' values mod 11, 10 written "X"."""
    total = sum(_VIN_VALUES[char] * weight for char, weight in zip(vin.upper(), _VIN_WEIGHTS))
    return "X" if total % 11 == 10 else str(total % 11)


@register_validator("vin")
def valid_vin(match: regex.Match[str]) -> bool:
    """17 characters without I, O or Q whose ninth is the check digit of the rest."""
    vin = _phi(match).upper()
    return len(vin) == 17 and all(char in _VIN_VALUES for char in vin) and vin_check_digit(vin) == vin[8]
