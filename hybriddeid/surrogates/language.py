"""Per-language resources for de-identified output (each language pack's ``surrogates.toml``, see
:mod:`hybriddeid.core.languages`) and the language-independent label -> surrogate-kind table
(``resources/surrogates/kinds.toml``).

Month names, date orders, titles, Faker locale, Safe Harbor ZIP prefixes and the like are data, so a
language is added by adding one TOML file to its pack. Everything is validated on load.
"""

from __future__ import annotations

import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib.resources.abc import Traversable
from typing import Any

from hybriddeid.core.languages import language_pack, register_cache, shared_resource
from hybriddeid.core.taxonomy import BUNDLED_TAXONOMIES, load_taxonomy

# Kinds drawn from a Faker method or, where the language has one, a template.
GENERATED_KINDS = (
    "username",
    "profession",
    "city",
    "state",
    "country",
    "organization",
    "hospital",
    "health_center",
    "department",
)
KINDS = frozenset(
    {
        "person",
        "username",
        "profession",
        "location",
        "city",
        "street",
        "state",
        "country",
        "zip",
        "hospital",
        "organization",
        "department",
        "health_center",
        "age",
        "date",
        "phone",
        "email",
        "url",
        "ip",
        "id",
        "sex",
        "relative",
        "shape",
    }
)


@lru_cache(maxsize=1 << 16)  # names and safe words recur: a long note folds the same words many times
def fold(text: str) -> str:
    """Case- and accent-insensitive form of ``text`` with runs of whitespace made one space."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).split())


def _read(path: Traversable, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except (FileNotFoundError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{origin}: cannot be read ({type(exc).__name__})") from None


def _lookup(groups: list[list[str]]) -> dict[str, int]:
    """Folded spelling -> index of its group (first group wins)."""
    table: dict[str, int] = {}
    for index, group in enumerate(groups):
        for word in group:
            table.setdefault(fold(word), index)
    return table


@dataclass(frozen=True)
class DateWords:
    """What reading and writing dates needs to know about a language."""

    numeric_order: str  # "dmy" or "mdy"
    pair_order: str  # "dm" or "md"
    months: tuple[str, ...]
    month_abbreviations: tuple[str, ...]  # the one written for each month
    month_lookup: Mapping[str, tuple[int, bool]]  # folded spelling -> (month 1-12, is full name)
    weekdays: tuple[str, ...]
    weekday_abbreviations: tuple[str, ...]
    weekday_lookup: Mapping[str, tuple[int, bool]]  # folded spelling -> (0 = Monday, is full name)
    ordinal_suffixes: frozenset[str]
    ordinal_rules: Mapping[str, str]
    ordinal_default: str
    connectors: frozenset[str]
    range_words: frozenset[str]
    seasons: tuple[str, ...] = ()  # winter, spring, summer, autumn, as written
    season_lookup: Mapping[str, int] = field(default_factory=dict)  # folded spelling -> 0 (winter) .. 3
    holidays: tuple[str, ...] = ()  # named days a shifted date is written as another of

    def ordinal(self, day: int) -> str:
        """The ordinal suffix for ``day`` ("st" for 1, "th" for 11...)."""
        for digits in (str(day % 100), str(day % 10)):
            if digits in self.ordinal_rules:
                return self.ordinal_rules[digits]
        return self.ordinal_default


@dataclass(frozen=True)
class LanguageResources:
    """Everything language-specific that de-identified output needs, read from one TOML file."""

    language: str
    faker_locale: str
    faker_methods: Mapping[str, str]
    tag_format: str
    dates: DateWords
    titles: frozenset[str]
    particles: frozenset[str]
    age_cap: str
    age_words_cap: str  # an age over 89 written in words ("ninety-two"): its number words become this
    number_words: Mapping[int, str]  # value -> the pack's first word for it (numbers.toml; {} without one)
    date_cap: str
    restricted_zip_prefixes: frozenset[str]
    restricted_zip_replacement: str
    sex_pairs: tuple[tuple[str, str], ...]
    sex_lookup: Mapping[str, int]  # folded term -> index of its pair
    relative_terms: frozenset[str]  # folded relation words, kept as written in surrogates ("daughter", "hija")
    street_words: frozenset[str]
    ward_words: frozenset[str]
    templates: Mapping[str, tuple[str, ...]]


def _spellings(words: list[str]) -> frozenset[str]:
    """Lower-case words as written and folded ("año" and "ano"): regexes see the text as written."""
    return frozenset(w.lower() for w in words) | frozenset(fold(w) for w in words)


def _named_with_spellings(names: list[str], extra: list[list[str]], first: int) -> dict[str, tuple[int, bool]]:
    """Folded spelling -> (number of the name counted from ``first``, whether it is the full name)."""
    lookup = {fold(name): (index, True) for index, name in enumerate(names, first)}
    for index, spellings in enumerate(extra, first):
        for spelling in spellings:
            lookup.setdefault(fold(spelling), (index, False))
    return lookup


def _number_words(pack) -> dict[int, str]:
    """Value -> the first word the pack's ``numbers.toml`` gives for it ({} without the file): a
    surrogate age is written in words where the original was and one word says it."""
    if not pack.has("numbers"):
        return {}
    try:
        values = tomllib.loads(pack.read_text("numbers")).get("values", {})
        words: dict[int, str] = {}
        for word, value in values.items():
            words.setdefault(int(value), str(word))
        return words
    except (tomllib.TOMLDecodeError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{pack.origin('numbers')}: not a valid number-word file ({type(exc).__name__})") from None


@register_cache
@cache
def load_language(language: str) -> LanguageResources:
    """The surrogate resources of ``language``'s pack (``surrogates.toml``)."""
    pack = language_pack(language)
    origin = pack.origin("surrogates")
    data = _read(pack.surrogates, origin)
    try:
        dates = data["dates"]
        months, weekdays = list(dates["months"]), list(dates["weekdays"])
        month_abbr, weekday_abbr = dates["month_abbreviations"], dates["weekday_abbreviations"]
        if len(months) != 12 or len(month_abbr) != 12 or len(weekdays) != 7 or len(weekday_abbr) != 7:
            raise ValueError("12 months and 7 weekdays are needed")
        if dates["numeric_order"] not in ("dmy", "mdy") or dates["pair_order"] not in ("dm", "md"):
            raise ValueError("numeric_order must be dmy or mdy, pair_order dm or md")
        date_words = DateWords(
            numeric_order=dates["numeric_order"],
            pair_order=dates["pair_order"],
            months=tuple(months),
            month_abbreviations=tuple(group[0] for group in month_abbr),
            month_lookup=_named_with_spellings(months, month_abbr, 1),
            weekdays=tuple(weekdays),
            weekday_abbreviations=tuple(group[0] for group in weekday_abbr),
            weekday_lookup=_named_with_spellings(weekdays, weekday_abbr, 0),
            ordinal_suffixes=frozenset(fold(s) for s in dates["ordinal_suffixes"]),
            ordinal_rules=dict(dates["ordinal_rules"]),
            ordinal_default=dates["ordinal_default"],
            connectors=_spellings(dates["connectors"]),
            range_words=_spellings(dates["range_words"]),
            seasons=tuple(dates.get("seasons", ())),
            season_lookup={
                fold(spelling): index
                for index, spellings in enumerate(dates.get("season_spellings", ()))
                for spelling in spellings
            },
            holidays=tuple(dates.get("holidays", ())),
        )
        if date_words.seasons and len(date_words.seasons) != 4:
            raise ValueError("seasons: winter, spring, summer and autumn, or none")
        sex_pairs = tuple((pair[0], pair[1]) for pair in data["sex"]["pairs"])
        relatives = data["relatives"]
        # "terms"; packs written before issue 43 list groups of terms and their replacements instead
        relative_terms = [
            *relatives.get("terms", ()),
            *(
                term
                for group in relatives.get("groups", ())
                for term in [*group["terms"], *group.get("replace_with", ())]
            ),
        ]
        if not relative_terms:
            raise ValueError("[relatives] terms: the relation words, kept as written")
        templates = {key: tuple(value) for key, value in data["templates"].items()}
        missing = [kind for kind in GENERATED_KINDS if not templates.get(kind) and kind not in data["faker_methods"]]
        if missing:
            raise ValueError(f"no Faker method nor template for {', '.join(missing)}")
        return LanguageResources(
            language=language,
            faker_locale=data["faker_locale"],
            faker_methods=dict(data["faker_methods"]),
            tag_format=data["tags"]["format"],
            dates=date_words,
            titles=frozenset(fold(t) for t in data["names"]["titles"]),
            particles=frozenset(fold(p) for p in data["names"]["particles"]),
            age_cap=data["ages"]["cap"],
            age_words_cap=data["ages"].get("words_cap", data["ages"]["cap"]),
            number_words=_number_words(pack),
            date_cap=data["ages"]["date_cap"],
            restricted_zip_prefixes=frozenset(data["zip"]["restricted_prefixes"]),
            restricted_zip_replacement=data["zip"]["restricted_replacement"],
            sex_pairs=sex_pairs,
            sex_lookup=_lookup([list(pair) for pair in sex_pairs]),
            relative_terms=frozenset(fold(term) for term in relative_terms),
            street_words=frozenset(fold(w) for w in data["streets"]["keep"]),
            ward_words=frozenset(fold(w) for w in data.get("wards", {}).get("keep", ())),
            templates=templates,
        )
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ValueError(f"{origin}: invalid ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class KindTable:
    """Fine label -> surrogate kind: the label's own entry, else its category's, else the fallback."""

    by_label: Mapping[str, str]
    by_category: Mapping[str, str]
    fallback: str

    def category(self, label: str) -> str:
        """The label's parent category in the first bundled taxonomy that knows it (else the label)."""
        return _bundled_category(label)

    def kind(self, label: str) -> str:
        if label in self.by_label:
            return self.by_label[label]
        return self.by_category.get(self.category(label), self.fallback)


@lru_cache(maxsize=4096)  # asked once per replaced span: a long note has hundreds of thousands
def _bundled_category(label: str) -> str:
    for name in BUNDLED_TAXONOMIES:
        taxonomy = load_taxonomy(name)
        if taxonomy.knows(label):
            return taxonomy.category(label)
    return label


@cache
def load_kinds() -> KindTable:
    """The bundled label -> kind table, checked against the known kinds."""
    data = _read(shared_resource("surrogates", "kinds.toml"), "surrogates/kinds.toml")
    table = KindTable(dict(data.get("labels", {})), dict(data.get("categories", {})), data.get("fallback", "shape"))
    unknown = {table.fallback, *table.by_label.values(), *table.by_category.values()} - KINDS
    if unknown:
        raise ValueError(f"surrogates/kinds.toml: unknown kinds {sorted(unknown)}")
    return table
