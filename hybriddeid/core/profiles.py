"""PHI sets: which spans count as PHI. Defined here once for the pipeline, the CLI and evaluation.

* ``i2b2-2014`` (the default): every span, whatever its label, as the i2b2 2014 track counts them.
* ``hipaa``: HIPAA Safe Harbor's identifiers only (45 CFR 164.514(b)(2)(i)): spans whose label the
  taxonomy flags ``safe_harbor`` (``resources/taxonomy/*.toml``), of the age category only those
  stating an age over 89, and of the date category none that is only a weekday ("Monday") or only a
  year ("2019", "'84": Safe Harbor removes "all elements of dates (except year)", 164.514(b)(2)(i)(C)),
  except a year of birth that reveals an age over 89. Labels the taxonomy does not know, and ages
  that cannot be read, are kept: a PHI set may only drop what it knows to be outside it.

The age threshold lives in ``resources/profiles/phi_sets.toml``; the number words for ages written
out in each language pack's ``numbers.toml``, the weekday names and the words that announce a birth
date in its ``surrogates.toml`` (every pack's words are read in every note).
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import available_languages, language_pack, register_cache, shared_resource
from hybriddeid.core.taxonomy import Taxonomy, guess_taxonomy

PHI_SETS = ("i2b2-2014", "hipaa")
DEFAULT_PHI_SET = "i2b2-2014"
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[^\W\d_]+")
# A year alone: four digits of 1600-2099, or two after an apostrophe ("'84"), brackets and blanks aside.
_YEAR_ONLY = re.compile(r"[\s(\[]*(?:(?:1[6-9]|20)\d\d|['’]\d\d)[\s)\].,;:]*")
BIRTH_CONTEXT_CHARS = 24  # how far before a year a birth word is looked for, on its line


def check_phi_set(name: object) -> str:
    """``name`` if it is a known PHI set, else a ValueError that lists them."""
    if name not in PHI_SETS:
        raise ValueError(f"unknown PHI set {name!r}; known: {', '.join(PHI_SETS)}")
    return str(name)


@dataclass(frozen=True)
class AgeRule:
    """Spans of ``category`` are identifiers only when they state an age of at least ``min_age``."""

    category: str
    min_age: int
    number_words: Mapping[str, int]  # word -> value, summed
    multipliers: Mapping[str, int]  # word -> factor applied to the sum so far ("hundred")

    def stated_age(self, text: str) -> int | None:
        """The age ``text`` states: its largest number in digits, else its number words read as one
        number ("ninety-two", "one hundred and one"); None when it has neither."""
        numbers = [int(digits) for digits in _DIGITS.findall(text)]
        if numbers:
            return max(numbers)
        total, seen = 0, False
        for word in _WORD.findall(text.lower()):
            if word in self.multipliers:
                total, seen = max(total, 1) * self.multipliers[word], True
            elif word in self.number_words:
                total, seen = total + self.number_words[word], True
        return total if seen else None

    def keeps(self, text: str) -> bool:
        """True for an age over the threshold, or one that cannot be read (erring towards privacy)."""
        age = self.stated_age(text)
        return age is None or age >= self.min_age


@dataclass(frozen=True)
class WeekdayRule:
    """Spans of ``category`` that hold only weekday names are not identifiers."""

    category: str
    weekdays: frozenset[str]  # lower-case names and abbreviations of every language pack

    def keeps(self, text: str) -> bool:
        """False for text made only of weekday names (and punctuation), True otherwise."""
        words = [word.lower() for word in _WORD.findall(text)]
        return not words or _DIGITS.search(text) is not None or not all(word in self.weekdays for word in words)


@dataclass(frozen=True)
class YearRule:
    """Spans of ``category`` that are only a year are not identifiers, except a year of birth (a
    ``birth_words`` word shortly before it on its line) at least ``min_age`` years ago, or of a
    two-digit year, whose century cannot be told (erring towards privacy)."""

    category: str
    min_age: int
    birth_words: frozenset[str]  # lower-case, every language pack's

    def keeps(self, text: str, start: int, end: int) -> bool:
        """False for a year alone that reveals no age over the threshold, True otherwise."""
        surface = text[start:end]
        if not _YEAR_ONLY.fullmatch(surface):
            return True
        line_start = max(text.rfind("\n", 0, start) + 1, start - BIRTH_CONTEXT_CHARS)
        if not self.birth_words.intersection(word.lower() for word in _WORD.findall(text[line_start:start])):
            return False
        digits = _DIGITS.search(surface)
        return (
            digits is None
            or len(digits.group()) == 2
            or datetime.date.today().year - int(digits.group()) >= self.min_age
        )


def _pack_date_words(*keys: str) -> set[str]:
    """The lower-case words under ``keys`` of every language pack's ``surrogates.toml`` [dates] (a key
    holding lists of spellings, "weekday_abbreviations", is flattened); a malformed file is a ValueError."""
    words: set[str] = set()
    for code in available_languages():
        pack = language_pack(code)
        try:
            dates = tomllib.loads(pack.read_text("surrogates")).get("dates", {})
            for key in keys:
                for item in dates.get(key, ()):
                    words.update(str(name).lower() for name in (item if isinstance(item, list) else [item]))
        except (tomllib.TOMLDecodeError, TypeError, AttributeError) as exc:
            raise ValueError(
                f"{pack.origin('surrogates')}: not a valid surrogate file ({type(exc).__name__})"
            ) from None
    return words


@register_cache
@cache
def hipaa_year_rule() -> YearRule:
    """The ``hipaa`` set's year rule: the date category and age threshold of ``phi_sets.toml`` and every
    language pack's birth words (``surrogates.toml`` [dates] ``birth_words``)."""
    data = tomllib.loads(shared_resource("profiles", "phi_sets.toml").read_text("utf-8"))
    return YearRule(
        str(data["hipaa"].get("date_category", "DATE")),
        int(data["hipaa"]["min_age"]),
        frozenset(_pack_date_words("birth_words")),
    )


@register_cache
@cache
def hipaa_weekday_rule() -> WeekdayRule:
    """The ``hipaa`` set's weekday rule: the date category of ``phi_sets.toml`` and every language
    pack's weekday names (``surrogates.toml`` [dates] ``weekdays`` and ``weekday_abbreviations``)."""
    data = tomllib.loads(shared_resource("profiles", "phi_sets.toml").read_text("utf-8"))
    category = str(data["hipaa"].get("date_category", "DATE"))
    names = _pack_date_words("weekdays", "weekday_abbreviations")
    # a month is a date element: "mar" (Spanish martes, English March) stays
    months = _pack_date_words("months", "month_abbreviations")
    return WeekdayRule(category, frozenset(names - months))


@register_cache
@cache
def hipaa_age_rule() -> AgeRule:
    """The ``hipaa`` set's age rule, from ``resources/profiles/phi_sets.toml`` and the number words
    of every language pack that has a ``numbers.toml`` (in code order; a later pack's value wins)."""
    origin = "profiles/phi_sets.toml"
    data = tomllib.loads(shared_resource("profiles", "phi_sets.toml").read_text("utf-8"))
    try:
        category, min_age = str(data["hipaa"]["age_category"]), int(data["hipaa"]["min_age"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{origin}: not a valid PHI set file ({exc!r})") from None
    words: dict[str, int] = {}
    multipliers: dict[str, int] = {}
    for code in available_languages():
        pack = language_pack(code)
        if not pack.has("numbers"):
            continue
        try:
            numbers = tomllib.loads(pack.read_text("numbers"))
            words.update({word.lower(): int(value) for word, value in numbers.get("values", {}).items()})
            multipliers.update({word.lower(): int(value) for word, value in numbers.get("multipliers", {}).items()})
        except (tomllib.TOMLDecodeError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{pack.origin('numbers')}: not a valid number-word file ({type(exc).__name__})") from None
    return AgeRule(category, min_age, words, multipliers)


def in_phi_set(span: Span, text: str, taxonomy: Taxonomy, phi_set: str) -> bool:
    """Whether ``span`` of a note with ``text`` counts as PHI under ``phi_set``, its label read through ``taxonomy``."""
    if check_phi_set(phi_set) == "i2b2-2014":
        return True
    if taxonomy.is_safe_harbor(span.label) is False:
        return False
    category = taxonomy.category(span.label)
    age, weekday = hipaa_age_rule(), hipaa_weekday_rule()
    if category == age.category:
        return age.keeps(text[span.start : span.end])
    if category == weekday.category:
        return weekday.keeps(text[span.start : span.end]) and hipaa_year_rule().keeps(text, span.start, span.end)
    return True


def split_spans(spans: Iterable[Span], text: str, taxonomy: Taxonomy, phi_set: str) -> tuple[list[Span], list[Span]]:
    """(spans inside ``phi_set``, spans outside it), each in input order."""
    inside: list[Span] = []
    outside: list[Span] = []
    for span in spans:
        (inside if in_phi_set(span, text, taxonomy, phi_set) else outside).append(span)
    return inside, outside


def filter_spans(spans: Iterable[Span], text: str, taxonomy: Taxonomy, phi_set: str) -> list[Span]:
    """The spans that count as PHI under ``phi_set`` (all of them under i2b2-2014)."""
    return split_spans(spans, text, taxonomy, phi_set)[0]


def filter_document(doc: Document, phi_set: str, taxonomy: Taxonomy | None = None) -> Document:
    """``doc`` with only its spans inside ``phi_set``; labels read through ``taxonomy``, by default the
    bundled one that knows most of the document's labels (for annotations of unknown origin)."""
    if check_phi_set(phi_set) == "i2b2-2014":
        return doc
    taxonomy = taxonomy or guess_taxonomy(span.label for span in doc.spans)
    return doc.with_spans(filter_spans(doc.spans, doc.text, taxonomy, phi_set))
