"""The clinical safe-list: words and phrases that look like names or places but are not PHI.

A language's list (its pack's ``safelist.txt``, one entry a line) holds eponyms, drug names,
lab tests, units and abbreviations. After merging, a predicted span is dropped when it is made only
of single-word entries ("Foley", "Parkinson's") or lies inside an occurrence of a phrase entry
("Murphy" in "Murphy sign": eponyms that are common surnames are listed only as phrases). It stops
the over-redaction that hurts a note's clinical value most, without touching real PHI:

- a span holding a digit is never dropped (dates, IDs, addresses);
- nor one right after a title ("Dr. Foley", "Mr. Parkinson"; the titles of the language's
  surrogate resources);
- nor one touching another span ("FOLEY, JOHN" found as two names);
- nor, made of single safe words, a name of two or more words each written capitalised in mixed case ("Tia Ng",
  "Peg Foley": a patient's name made of safe terms; an eponym of two names is listed as a phrase, "Passy Muir",
  and a span inside a listed phrase is dropped as before).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache

import regex

from hybriddeid.core.document import Span, span_order
from hybriddeid.core.languages import language_pack, register_cache
from hybriddeid.knowledge.dictionaries import read_entries
from hybriddeid.surrogates.language import fold, load_language

_WORD = regex.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
_POSSESSIVE = regex.compile(r"['’]s?$")
_TITLE_BEFORE = regex.compile(r"([^\W\d_]+)\.?\s*$")
# A word written capitalised in mixed case: a capital, then letters holding a lower-case one ("Ng", "Foley", "McKay");
# a hyphenated eponym ("Reed-Sternberg") is one word.
_CAPITALISED = regex.compile(r"\p{Lu}(?=[\p{L}'’-]*\p{Ll})[\p{L}'’-]*")
ADJACENT = 2  # characters between two spans that still make them one mention ("FOLEY, JOHN")


def _key(word: str) -> str:
    return _POSSESSIVE.sub("", fold(word))


# Accented Latin letters whose only case partner is their capital (casefold() is lower(), one letter): a
# case-insensitive pattern matches one where text.casefold() holds it (SafeList.phrase_ranges).
_PLAIN_CASE_LETTERS = frozenset("áéíóúàèìòùâêîôûäëïöüãõñç")


@dataclass(frozen=True)
class SafeList:
    """Single safe words, a pattern of safe phrases, and the titles that protect a span.

    ``phrase_list``: the phrases in the pattern's order, when it was made from them (``from_entries``):
    a note is then searched only for the phrases whose first word it holds (``phrase_ranges``)."""

    words: frozenset[str]
    phrases: regex.Pattern[str] | None
    titles: frozenset[str]
    phrase_list: tuple[str, ...] = ()
    _first_words: tuple[tuple[str, tuple[int, ...]], ...] = field(init=False, repr=False, compare=False)
    _always: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_first: dict[str, list[int]] = {}
        always: list[int] = []
        for i, phrase in enumerate(self.phrase_list):
            first = phrase.split()[0]
            if all(c.isascii() or c.lower() in _PLAIN_CASE_LETTERS for c in first):
                by_first.setdefault(first.casefold(), []).append(i)
            else:
                always.append(i)
        object.__setattr__(self, "_first_words", tuple((word, tuple(found)) for word, found in by_first.items()))
        object.__setattr__(self, "_always", tuple(always))

    @classmethod
    def from_entries(cls, entries: Sequence[str], titles: frozenset[str] = frozenset()) -> SafeList:
        words = frozenset(_key(e) for e in entries if len(_WORD.findall(e)) == 1 and _WORD.fullmatch(e.strip()))
        phrase_list = tuple(sorted({e.strip() for e in entries if _key(e) not in words}, key=len, reverse=True))
        return cls(words, _phrases_pattern(phrase_list) if phrase_list else None, frozenset(titles), phrase_list)

    def phrase_ranges(self, text: str) -> list[tuple[int, int]]:
        """Where ``finditer`` of the phrase pattern matches in ``text``, found without that pattern: only
        the phrases whose first word ``text`` holds (case-folded, anywhere) are searched, each with its own
        pattern, compiled once (a pattern of a note's own phrases would be compiled for most notes). A
        phrase matches only where its first word does, and what the case-insensitive pattern matches
        there case-folds to that word (ASCII letters, the Kelvin sign and the long s included, and the
        accented letters of ``_PLAIN_CASE_LETTERS``), so the phrases left out match nowhere here; a phrase
        whose first word holds another letter is searched in every note."""
        if self.phrases is None:
            return []
        if not self.phrase_list:
            return [m.span() for m in self.phrases.finditer(text)]
        folded = text.casefold()
        chosen = sorted([*self._always, *(i for word, found in self._first_words if word in folded for i in found)])
        if len(chosen) == 1:
            return [m.span() for m in _phrases_pattern((self.phrase_list[chosen[0]],)).finditer(text)]
        # Each chosen phrase's own pattern (compiled once), every place it matches; where several match
        # at one place the alternation takes the first in order, and its scan goes on after that match.
        first_at: dict[int, tuple[int, int]] = {}  # start -> (phrase, end)
        for i in chosen:
            for m in _phrases_pattern((self.phrase_list[i],)).finditer(text, overlapped=True):
                first_at.setdefault(m.start(), (i, m.end()))
        ranges: list[tuple[int, int]] = []
        after = 0
        for start in sorted(first_at):
            if start >= after:
                after = first_at[start][1]
                ranges.append((start, after))
        return ranges

    def is_safe_text(self, text: str) -> bool:
        """Whether ``text`` is made only of safe single words (and holds no digit)."""
        words = _WORD.findall(text)
        return bool(words) and not any(c.isdigit() for c in text) and all(_key(w) in self.words for w in words)

    def split(self, text: str, spans: Sequence[Span]) -> tuple[list[Span], list[Span]]:
        """(kept, dropped): ``spans`` of ``text`` with the safe ones set apart."""
        phrase_ranges = self.phrase_ranges(text)
        ordered = sorted(spans, key=span_order)
        kept, dropped = [], []
        facts: dict[str, tuple[bool, bool]] = {}  # a long note repeats its surfaces many times
        for i, span in enumerate(ordered):
            surface = text[span.start : span.end]
            if surface not in facts:
                # a name of safe words ("Tia Ng") is kept, an eponym the list holds as a phrase ("Passy Muir") is not
                safe_name = self.is_safe_text(surface) and not _capitalised_name(surface)
                facts[surface] = (safe_name, any(c.isdigit() for c in surface))
            safe_words, has_digit = facts[surface]
            safe = safe_words or (not has_digit and _inside_one(phrase_ranges, span.start, span.end))
            if safe and not self._protected(text, ordered, i):
                dropped.append(span)
            else:
                kept.append(span)
        return kept, dropped

    def _protected(self, text: str, spans: Sequence[Span], i: int) -> bool:
        span = spans[i]
        title = _TITLE_BEFORE.search(text, max(0, span.start - 12), span.start)
        if title and fold(title.group(1)) in self.titles:
            return True
        before = spans[i - 1] if i > 0 else None
        after = spans[i + 1] if i + 1 < len(spans) else None
        return (before is not None and span.start - before.end <= ADJACENT) or (
            after is not None and after.start - span.end <= ADJACENT
        )


def _capitalised_name(surface: str) -> bool:
    """Two or more words, each capitalised in mixed case ("Tia Ng", "Peg Foley"): a person's name, though each
    word is a safe term (TIA, NG, PEG, Foley)."""
    words = surface.split()
    return len(words) > 1 and all(_CAPITALISED.fullmatch(word.rstrip(".,;:")) for word in words)


@lru_cache(maxsize=1024)
def _phrases_pattern(phrases: tuple[str, ...]) -> regex.Pattern[str]:
    """One pattern of ``phrases``, tried in their order, each a whole word sequence with any blanks between
    its words, in any case."""
    body = "|".join(regex.escape(p).replace(r"\ ", r"\s+") for p in phrases)
    return regex.compile(rf"(?<!\w)(?:{body})(?!\w)", regex.IGNORECASE)


@register_cache
@cache
def load_safelist(language: str) -> SafeList:
    """The safe-list of ``language``'s pack, protected by that language's name titles."""
    text = language_pack(language).read_text("safelist")
    return SafeList.from_entries(read_entries(text), load_language(language).titles)


def _inside_one(ranges: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) lies inside one of ``ranges`` (sorted, not overlapping: ``finditer``'s
    matches), found by bisection (a scan of all of them made long notes quadratic)."""
    at = bisect.bisect_right(ranges, (start, float("inf"))) - 1
    return at >= 0 and ranges[at][1] >= end
