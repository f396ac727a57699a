"""Date shifting that keeps each date's written form.

A date span is read into *units* (day, month, year, each optional) from its numbers, month names and
weekday names; every unit is moved by the patient's offset and written back in the exact style it
had: separators, zero padding, two- or four-digit years, full or abbreviated month names and their
case, ordinal suffixes, weekday names recomputed. Words, numbers and punctuation the reader does not
understand make the whole span unparseable; the caller then asks ``same_kind`` for a surrogate
that still reads as a date (other digits, another month or weekday name), never random letters.

Partial dates move by the offset rounded to their own precision, and by at least one unit, so they
never stay as they were: month + year by whole months, a season by whole seasons, a year alone by
whole years. Day + month (or a month, or a season) without a year is moved within a leap reference
year, and never lands on itself. Compact forms ("26JUN95") and apostrophe years ("'98") are read;
a named holiday becomes another holiday of the language's list. Times of day ("10:30") are left as
they are.
"""

from __future__ import annotations

import calendar
import random
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import cached_property

from hybriddeid.surrogates.language import DateWords, fold
from hybriddeid.surrogates.shape import copy_case

REFERENCE_YEAR = 2000  # leap, so "29 Feb" without a year stays valid
TWO_DIGIT_PIVOT = 50  # "04" -> 2004, "61" -> 1961
DAYS_PER_MONTH = 30.436875
DAYS_PER_YEAR = 365.2425

_NUMERIC_TRIPLE = re.compile(r"(?<![\d/.\-])(\d{1,4})([/.\-]{1,2})(\d{1,3})([/.\-]{1,2})(\d{1,4})(?![\d])")
_NUMERIC_PAIR = re.compile(r"(?<![\d/.\-])(\d{1,4})([/.\-])(\d{1,4})(?![\d]|[/.\-]\d)")
_TIME = re.compile(r"(?<!\d)\d{1,2}:\d{2}(?::\d{2})?(?!\d)")
_WORD = re.compile(r"[^\W\d_]+")
_NUMBER = re.compile(r"\d+")
_LONE_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)")
_APOSTROPHE_YEAR = re.compile(r"(?<![\w'’])['’](\d{2})(?!\d)")
DAYS_PER_SEASON = DAYS_PER_YEAR / 4
_PUNCT_GAP = r"[\s\-/.,']"


@dataclass
class _Part:
    """One written component of a date: where it is and how it was written."""

    start: int
    end: int
    text: str
    full_name: bool = True  # month/weekday names: full name or abbreviation


@dataclass
class _Unit:
    """One date read from a span; ``year``/``month`` values may be borrowed from a neighbour."""

    day: int | None = None
    month: int | None = None
    year: int | None = None
    parts: dict[str, _Part] = field(default_factory=dict)  # field name -> written part
    borrowed_year: bool = False
    spaced_day: bool = False  # a day set apart from its month name by a space ("Dec 23", not "23-dic")

    @property
    def anchor(self) -> int:
        return min(part.start for part in self.parts.values())


def _gap_patterns(words: DateWords) -> tuple[re.Pattern[str], ...]:
    """Regexes for a day before a month name, a day after it, a year after it, and a year after a
    day range ("March 3-5, 2020"); ``re`` caches the compiled patterns."""
    connectors = "|".join(sorted((re.escape(w) for w in words.connectors), key=len, reverse=True)) or "(?!)"
    gap = rf"(?:{_PUNCT_GAP}|\b(?:{connectors})\b)"
    ordinals = "|".join(sorted((re.escape(s) for s in words.ordinal_suffixes), key=len, reverse=True)) or "(?!)"
    # a day may touch the month name ("26JUN95"), as may the year after it
    day_before = re.compile(rf"(?<!\d)(?P<day>\d{{1,2}})(?P<ord>{ordinals})?(?P<gap>{gap}*)$", re.IGNORECASE)
    day_after = re.compile(rf"(?P<gap>{gap}+)(?<!')(?P<day>\d{{1,2}})(?P<ord>{ordinals})?(?!\d)", re.IGNORECASE)
    year_after = re.compile(rf"(?P<gap>{gap}*)(?P<year>\d{{4}}|\d{{2}})(?!\d)", re.IGNORECASE)
    year_after_range = re.compile(rf"{gap}*\d{{1,2}}{gap}+(?P<year>\d{{4}})(?!\d)", re.IGNORECASE)
    return day_before, day_after, year_after, year_after_range


def _full_year(digits: str) -> int:
    value = int(digits)
    if len(digits) > 2:
        return value
    return value + (2000 if value < TWO_DIGIT_PIVOT else 1900)


def _valid(day: int | None, month: int | None, year: int | None) -> bool:
    if month is not None and not 1 <= month <= 12:
        return False
    if year is not None and not 1000 <= year <= 2999:
        return False
    if day is None:
        return True
    limit = calendar.monthrange(year or REFERENCE_YEAR, month)[1] if month else 31
    return 1 <= day <= limit


def _add_months(year: int, month: int, months: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + months
    return index // 12, index % 12 + 1


def _at_least_one(offset_days: int, unit_days: float) -> int:
    """``offset_days`` in whole units, never 0 when the offset is not 0."""
    units = round(offset_days / unit_days)
    return units if units or not offset_days else (1 if offset_days > 0 else -1)


def _write_number(original: str, value: int, padded: bool) -> str:
    """``value`` zero-padded to the width of ``original`` when its date pads numbers ("04/09"), else bare."""
    return str(value).zfill(len(original)) if padded else str(value)


class DateShifter:
    """Moves every date of one patient by the same number of days, keeping how each was written."""

    def __init__(self, words: DateWords, offset_days: int, keep_years: bool = False) -> None:
        self.words = words
        self.offset_days = offset_days
        self.keep_years = keep_years
        self._readings: dict[
            str, tuple | None
        ] = {}  # text -> _parse's result: a date is read for its years, then shifted

    # -- reading ----------------------------------------------------------------------------
    def _read(self, text: str) -> tuple[list[_Unit], list[tuple[_Part, int]], list[tuple[_Part, int]]] | None:
        """``_parse``'s reading of ``text``, parsed once per shifter (readings are never changed after)."""
        if text not in self._readings:
            self._readings[text] = self._parse(text)
        return self._readings[text]

    def _parse(self, text: str) -> tuple[list[_Unit], list[tuple[_Part, int]], list[tuple[_Part, int]]] | None:
        """The units, weekday names and holiday names of ``text``, or None when some of it cannot be read."""
        claimed = [False] * len(text)

        def claim(start: int, end: int) -> None:
            claimed[start:end] = [True] * (end - start)

        def free(start: int, end: int) -> bool:
            return not any(claimed[start:end])

        for match in _TIME.finditer(text):
            claim(match.start(), match.end())
        holidays: list[tuple[_Part, int]] = []
        for match in self._holiday_pattern.finditer(text):
            holidays.append(
                (_Part(match.start(), match.end(), match.group()), self._holiday_index[fold(match.group())])
            )
            claim(match.start(), match.end())
        units: list[_Unit] = []
        for match in _NUMERIC_TRIPLE.finditer(text):
            unit = self._numeric_triple(match)
            if unit is None:
                return None
            units.append(unit)
            claim(match.start(), match.end())
        weekdays: list[tuple[_Part, int]] = []
        for match in _WORD.finditer(text):
            key = fold(match.group())
            if key in self.words.month_lookup:
                unit = self._month_unit(text, match, claim, free)
                if unit is not None:
                    units.append(unit)
                    continue
            if key in self.words.season_lookup and free(match.start(), match.end()):
                units.append(self._season_unit(text, match, claim, free))
                continue
            if key in self.words.weekday_lookup:
                index, full = self.words.weekday_lookup[key]
                weekdays.append((_Part(match.start(), match.end(), match.group(), full), index))
                claim(match.start(), match.end())
        for match in _APOSTROPHE_YEAR.finditer(text):
            if free(match.start(), match.end()):
                year = _Part(match.start(1), match.end(1), match.group(1))
                units.append(_Unit(year=_full_year(year.text), parts={"year": year}))
                claim(match.start(), match.end())
        for match in _NUMERIC_PAIR.finditer(text):
            if free(match.start(), match.end()):
                unit = self._numeric_pair(match)
                if unit is not None:
                    units.append(unit)
                    claim(match.start(), match.end())
        for match in _LONE_YEAR.finditer(text):
            number = int(match.group(1))
            if free(match.start(), match.end()) and _valid(None, None, number):
                units.append(_Unit(year=number, parts={"year": _Part(match.start(), match.end(), match.group(1))}))
                claim(match.start(), match.end())
        units.sort(key=lambda unit: unit.anchor)
        if not self._read_range_days(text, units, claim, free):
            return None
        if any(char.isdigit() and not claimed[i] for i, char in enumerate(text)):
            return None
        if not units and not weekdays and not holidays:
            return None
        self._share_years(units)
        return units, weekdays, holidays

    def _numeric_triple(self, match: re.Match[str]) -> _Unit | None:
        first, _, second, _, third = match.groups()
        starts = [match.start(1), match.start(3), match.start(5)]
        if len(first) == 4:
            orders = ["ymd"]
        else:
            preferred = self.words.numeric_order
            orders = [preferred, "mdy" if preferred == "dmy" else "dmy"]
        values = [first, second, third]
        for order in orders:
            fields = dict(zip(order, range(3)))
            day, month = int(values[fields["d"]]), int(values[fields["m"]])
            year_digits = values[fields["y"]]
            if len(year_digits) not in (2, 4):
                continue
            year = _full_year(year_digits)
            if _valid(day, month, year):
                parts = {
                    name: _Part(starts[i], starts[i] + len(values[i]), values[i])
                    for name, i in (("day", fields["d"]), ("month", fields["m"]), ("year", fields["y"]))
                }
                return _Unit(day, month, year, parts)
        return None

    def _numeric_pair(self, match: re.Match[str]) -> _Unit | None:
        first, _, second = match.groups()
        spans = [(match.start(1), match.end(1), first), (match.start(3), match.end(3), second)]
        if len(first) == 4 or len(second) == 4:  # month and year, either order
            y, m = (0, 1) if len(first) == 4 else (1, 0)
            year, month = int(spans[y][2]), int(spans[m][2])
            if len(spans[m][2]) <= 2 and _valid(None, month, year):
                return _Unit(None, month, year, {"year": _Part(*spans[y]), "month": _Part(*spans[m])})
            return None
        if len(first) > 2 or len(second) > 2:
            return None
        preferred = self.words.pair_order
        for order in (preferred, preferred[::-1]):
            d, m = (0, 1) if order == "dm" else (1, 0)
            day, month = int(spans[d][2]), int(spans[m][2])
            if _valid(day, month, None):
                return _Unit(day, month, None, {"day": _Part(*spans[d]), "month": _Part(*spans[m])})
        return None

    def _month_unit(self, text: str, match: re.Match[str], claim, free) -> _Unit | None:
        month, full = self.words.month_lookup[fold(match.group())]
        start, end = match.span()
        if not free(start, end):
            return None
        unit = _Unit(month=month, parts={"month": _Part(start, end, match.group(), full)})
        day_before, day_after, year_after, year_after_range = _gap_patterns(self.words)
        before = day_before.search(text, 0, start)
        if before and free(before.start("day"), before.end("day")) and _valid(int(before["day"]), month, None):
            self._take_day(unit, before, claim)
        cursor = end
        after = day_after.match(text, cursor)
        if after and unit.day is None and free(after.start("day"), after.end("day")):
            takes_day = self.words.numeric_order.startswith("m") or after["ord"]
            if takes_day and _valid(int(after["day"]), month, None):
                self._take_day(unit, after, claim)
                cursor = after.end()
        self._take_year(
            unit,
            year_after.match(text, cursor) or (year_after_range.match(text, cursor) if unit.day else None),
            claim,
            free,
        )
        if unit.day is not None and not _valid(unit.day, month, unit.year):
            return None
        claim(start, end)
        return unit

    def _season_unit(self, text: str, match: re.Match[str], claim, free) -> _Unit:
        """A season, as the first month of its quarter (winter: January), with the year after it."""
        season = self.words.season_lookup[fold(match.group())]
        unit = _Unit(month=3 * season + 1, parts={"season": _Part(match.start(), match.end(), match.group())})
        claim(match.start(), match.end())
        self._take_year(unit, _gap_patterns(self.words)[2].match(text, match.end()), claim, free)
        return unit

    @cached_property
    def _holiday_index(self) -> dict[str, int]:
        return {fold(name): index for index, name in enumerate(self.words.holidays)}

    @cached_property
    def _holiday_pattern(self) -> re.Pattern[str]:
        names = sorted(self.words.holidays, key=len, reverse=True)
        alternatives = "|".join(re.escape(name).replace("'", "['’]") for name in names) or "(?!)"
        return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)

    @staticmethod
    def _take_year(unit: _Unit, match: re.Match[str] | None, claim, free) -> None:
        """The year a pattern found after a month or season, when it is free and valid."""
        if match and free(match.start("year"), match.end("year")) and _valid(None, None, _full_year(match["year"])):
            unit.year = _full_year(match["year"])
            unit.parts["year"] = _Part(match.start("year"), match.end("year"), match["year"])
            claim(match.start("year"), match.end("year"))

    @staticmethod
    def _take_day(unit: _Unit, match: re.Match[str], claim) -> None:
        unit.day = int(match["day"])
        unit.spaced_day = any(char.isspace() for char in match["gap"])
        unit.parts["day"] = _Part(match.start("day"), match.end("day"), match["day"])
        claim(match.start("day"), match.end("day"))
        if match["ord"]:
            unit.parts["ordinal"] = _Part(match.start("ord"), match.end("ord"), match["ord"])
            claim(match.start("ord"), match.end("ord"))

    def _read_range_days(self, text: str, units: list[_Unit], claim, free) -> bool:
        """Bare day numbers joined to a dated unit by range words ("3 al 5 de marzo", "March 3-5")."""
        joiners = self.words.range_words | self.words.connectors
        for match in _NUMBER.finditer(text):
            if not free(match.start(), match.end()) or len(match.group()) > 2:
                continue
            neighbours = [u for u in units if "day" in u.parts and u.month]
            if not neighbours:
                return False
            nearest = min(neighbours, key=lambda u: abs(u.parts["day"].start - match.start()))
            day_part = nearest.parts["day"]
            gap = (
                text[match.end() : day_part.start]
                if day_part.start > match.start()
                else text[day_part.end : match.start()]
            )
            gap_words = [fold(w) for w in _WORD.findall(gap)]
            if not all(word in joiners for word in gap_words) or re.search(r"\d", gap):
                return False
            day = int(match.group())
            if not _valid(day, nearest.month, nearest.year):
                return False
            units.append(
                _Unit(
                    day,
                    nearest.month,
                    nearest.year,
                    {"day": _Part(match.start(), match.end(), match.group())},
                    borrowed_year=True,
                )
            )
            claim(match.start(), match.end())
        units.sort(key=lambda unit: unit.anchor)
        return True

    @staticmethod
    def _share_years(units: list[_Unit]) -> None:
        """Units without a year borrow the next unit's (else the previous one's): "marzo y abril de 2002"."""
        for index, unit in enumerate(units):
            if unit.year is not None or unit.month is None:
                continue
            later = [u for u in units[index + 1 :] if u.year is not None]
            earlier = [u for u in units[:index] if u.year is not None]
            donor = later[0] if later else (earlier[-1] if earlier else None)
            if donor is not None:
                unit.year, unit.borrowed_year = donor.year, True

    # -- shifting and writing -------------------------------------------------------------------
    def years(self, text: str) -> list[int]:
        """The years written in ``text`` (none borrowed from a neighbour); [] when it cannot be read."""
        read = self._read(text)
        return [unit.year for unit in read[0] if unit.year is not None and "year" in unit.parts] if read else []

    def shift(self, text: str) -> str | None:
        """``text`` with every date moved by the offset, or None when it cannot be read."""
        read = self._read(text)
        if read is None:
            return None
        units, weekdays, holidays = read
        replacements: list[tuple[_Part, str]] = []
        full_dates: list[tuple[_Unit, date]] = []
        for unit in units:
            moved = self._move(unit)
            if moved is None:
                return None
            day, month, year = moved
            if day is not None and month is not None and year is not None:
                full_dates.append((unit, date(year, month, day)))
            replacements.extend(self._write(unit, day, month, year))
        for part, weekday in weekdays:
            replacements.append((part, self._weekday_text(part, self._moved_weekday(part, weekday, full_dates))))
        for part, index in holidays:
            replacements.append((part, copy_case(part.text, self._other_holiday(index))))
        out = text
        for part, new in sorted(replacements, key=lambda item: item[0].start, reverse=True):
            out = out[: part.start] + new + out[part.end :]
        return out

    def _move(self, unit: _Unit) -> tuple[int | None, int | None, int | None] | None:
        offset = self.offset_days
        day, month, year = unit.day, unit.month, unit.year
        if day is not None and month is not None:
            base = date(year or REFERENCE_YEAR, month, day)
            moved = base + timedelta(days=offset)
            if year is None and (moved.month, moved.day) == (month, day):  # a whole year: move one day more
                moved += timedelta(days=1 if offset > 0 else -1)
            new_year = moved.year if year is not None else None
            if self.keep_years and year is not None:
                new_year = year
                last = calendar.monthrange(year, moved.month)[1]
                return min(moved.day, last), moved.month, new_year
            return moved.day, moved.month, new_year
        if month is not None:
            step = 3 if "season" in unit.parts else 1
            months = step * _at_least_one(offset, DAYS_PER_SEASON if step == 3 else DAYS_PER_MONTH)
            if months % 12 == 0 and (year is None or self.keep_years):  # would land on itself
                months += step if offset > 0 else -step
            shifted_year, shifted_month = _add_months(year or REFERENCE_YEAR, month, months)
            if self.keep_years:
                return None, shifted_month, year
            return None, shifted_month, shifted_year if year is not None else None
        if year is not None:
            return None, None, year if self.keep_years else year + _at_least_one(offset, DAYS_PER_YEAR)
        return None

    def _write(self, unit: _Unit, day: int | None, month: int | None, year: int | None) -> list[tuple[_Part, str]]:
        words = self.words
        numbers = [part.text for name, part in unit.parts.items() if name in ("day", "month") and part.text.isdigit()]
        padded = all(len(text) >= 2 for text in numbers)  # "4-8-04" stays unpadded, "04/08/2004" padded
        if "day" in unit.parts and ("ordinal" in unit.parts or unit.spaced_day):  # "Dec 23" -> "Feb 1", "23rd" -> "1st"
            padded = unit.parts["day"].text.startswith("0")
        out: list[tuple[_Part, str]] = []
        for name, part in unit.parts.items():
            # _move gives a value for each part the unit has
            if name == "day":
                assert day is not None
                out.append((part, _write_number(part.text, day, padded)))
            elif name == "ordinal":
                assert day is not None
                out.append((part, copy_case(part.text, words.ordinal(day))))
            elif name == "season":
                assert month is not None
                out.append((part, copy_case(part.text, words.seasons[(month - 1) // 3])))
            elif name == "month" and part.text.isdigit():
                assert month is not None
                out.append((part, _write_number(part.text, month, padded)))
            elif name == "month":
                assert month is not None
                names = words.months if part.full_name else words.month_abbreviations
                out.append((part, copy_case(part.text, names[month - 1])))
            elif name == "year":
                assert year is not None
                out.append((part, f"{year % 100:02d}" if len(part.text) == 2 else str(year).zfill(len(part.text))))
        return out

    def _moved_weekday(self, part: _Part, weekday: int, full_dates: list[tuple[_Unit, date]]) -> int:
        """The weekday of the nearest full date after shifting, else the weekday moved by the offset."""
        if full_dates:
            _, nearest = min(full_dates, key=lambda item: abs(item[0].anchor - part.start))
            return nearest.weekday()
        return (weekday + self.offset_days) % 7

    def same_kind(self, text: str, rng: random.Random) -> str:
        """A stand-in for a date that cannot be read, still written as a date: each number becomes
        another of the same length (a four-digit year a year near it, a day or month, or a
        zero-padded number up to 31, one of 1-12), each month or weekday
        name another of the same kind and spelling; other words stay."""

        def number(match: re.Match[str]) -> str:
            digits = match.group()
            if len(digits) == 4 and _valid(None, None, int(digits)):
                return str(int(digits) + rng.choice((-2, -1, 1, 2)))
            if len(digits) <= 2 or digits[0] == "0" and int(digits) <= 31:  # 1-12 reads as a day and as a month
                return str(rng.randint(1, 12)).zfill(len(digits))  # "018" (a typo) stays zero-padded: "011"
            return "".join(str(rng.randrange(10)) for _ in digits)

        def word(match: re.Match[str]) -> str:
            key = fold(match.group())
            for lookup, full_names, short_names in (
                (self.words.month_lookup, self.words.months, self.words.month_abbreviations),
                (self.words.weekday_lookup, self.words.weekdays, self.words.weekday_abbreviations),
            ):
                if key in lookup:
                    index, full = lookup[key]
                    names = full_names if full else short_names
                    first = 1 if lookup is self.words.month_lookup else 0
                    others = [name for i, name in enumerate(names, first) if i != index]
                    return copy_case(match.group(), rng.choice(others))
            return match.group()

        return _WORD.sub(word, _NUMBER.sub(number, text))

    def _other_holiday(self, index: int) -> str:
        """Another holiday than ``index``, the same one for every holiday of the patient."""
        names = self.words.holidays
        return names[(index + 1 + abs(self.offset_days) % (len(names) - 1)) % len(names)]

    def _weekday_text(self, part: _Part, weekday: int) -> str:
        names = self.words.weekdays if part.full_name else self.words.weekday_abbreviations
        return copy_case(part.text, names[weekday])
