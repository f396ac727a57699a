"""The two types every part of hybriddeid exchanges: ``Span`` and ``Document``.

Offsets are Python string indices (code points) into the original note text, end exclusive.
Token and character label schemes (BIO, BIOES) stay private to the taggers that use them.
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import regex

# Characters written for an apostrophe inside names ("O‘Brien", "Ulugʻbek", "O´Donnell"): the left
# quotation mark (autocorrect), the modifier letters (U+02BC, U+02BB: Uzbek and Hawaiian romanization), the
# grave and acute accents (typewriter habits; a Spanish keyboard's dead key). The classifiers and rule packs read
# "'" and "’" (U+2019); these are read as "'" (``Document.apostrophes_folded``), one character for one, so
# offsets hold.
APOSTROPHE_LOOKALIKES = "\u2018\u02bc\u02bb\u0060\u00b4"
_FOLD_APOSTROPHES = str.maketrans(dict.fromkeys(APOSTROPHE_LOOKALIKES, "'"))
# What typed text does not hold: invisible format characters (Unicode category Cf: soft hyphen, zero-width space
# and joiners, direction marks, word joiner, byte order mark), as text copied from PDFs, web pages and word
# processors carries them inside words and numbers ("Mar\u00adgaret", "4512\u200b3987Z" read as two tokens each),
# and letters followed by combining marks (decomposed text: "Bogota\u0301").
_UNTYPED = regex.compile(r"(?P<invisible>\p{Cf}+)|\P{M}\p{M}+")


@dataclass(frozen=True, order=True, slots=True)
class Span:
    """One PHI mention: ``text[start:end]`` has type ``label``; ``source`` names who found it."""

    start: int
    end: int
    label: str
    source: str = "gold"
    score: float = 1.0

    def record(self) -> dict[str, Any]:
        """The span as the JSON outputs write it (JSON Lines notes, ``phi_spans`` columns, Spark rows,
        the review page): offsets, label, source and score, never the text it covers."""
        return {
            "start": self.start,
            "end": self.end,
            "label": self.label,
            "source": self.source,
            "score": float(self.score),
        }

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)):
            raise TypeError("span offsets must be integers")
        if self.start < 0 or self.end <= self.start:
            raise ValueError(f"invalid span offsets [{self.start}, {self.end})")
        if not self.label:
            raise ValueError("span label must not be empty")

    def __len__(self) -> int:
        return self.end - self.start

    def overlaps(self, other: Span) -> bool:
        return self.start < other.end and other.start < self.end

    def with_label(self, label: str) -> Span:
        return Span(self.start, self.end, label, self.source, self.score)  # not replace(): half the cost

    def with_source(self, source: str) -> Span:
        return Span(self.start, self.end, self.label, source, self.score)


# A span's sort key: the dataclass's own order (start, end, label, source, score) compared as one tuple
# in C; ``sorted(spans)`` calls a generated ``__lt__`` per comparison, seconds on a long note's hundreds
# of thousands of spans. An attrgetter, not a Python function: a 20 MB note's spans are sorted several
# times, millions of calls.
span_order: Callable[[Span], tuple[int, int, str, str, float]] = attrgetter("start", "end", "label", "source", "score")


@dataclass(frozen=True, slots=True)
class Document:
    """A note: its ``name`` (file stem), full ``text``, gold or predicted ``spans`` and free ``meta``."""

    name: str
    text: str
    spans: tuple[Span, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spans = tuple(sorted(self.spans, key=span_order))
        for span in spans:
            if span.end > len(self.text):
                raise ValueError(
                    f"{self.name}: span [{span.start}, {span.end}) lies outside the text (length {len(self.text)})"
                )
        object.__setattr__(self, "spans", spans)

    def with_spans(self, spans: Iterable[Span]) -> Document:
        """A copy of this document holding ``spans`` instead of its own."""
        return Document(self.name, self.text, tuple(spans), self.meta)

    def flattened(self) -> Document:
        """This note on one line, each line-break character a space, so spans keep their offsets:
        a note as a careless CSV or database export leaves it."""
        return Document(self.name, self.text.replace("\r", " ").replace("\n", " "), self.spans, self.meta)

    def recased(self, case: str) -> Document | None:
        """This note in ``case`` ("upper", "lower" or "title"), spans kept, as notes typed in capitals
        or in lower case are; None where a character changes length in that case (German "ß"), which
        would move the offsets."""
        text = {"upper": str.upper, "lower": str.lower, "title": str.title}[case](self.text)
        return Document(self.name, text, self.spans, self.meta) if len(text) == len(self.text) else None

    def apostrophes_folded(self) -> Document:
        """This note with each apostrophe look-alike (``APOSTROPHE_LOOKALIKES``) written "'", as the classifiers
        read it, offsets and spans kept; itself when it has none (most notes: one scan, no copy)."""
        text = self.text
        if not any(char in text for char in APOSTROPHE_LOOKALIKES):
            return self
        return Document(self.name, text.translate(_FOLD_APOSTROPHES), self.spans, self.meta)

    def span_text(self, span: Span) -> str:
        return self.text[span.start : span.end]


@dataclass(frozen=True, slots=True)
class ReadingCopy:
    """A note as the classifiers read it when its characters differ from typed text (``reading_copy``): ``doc``
    is what they read, ``spans_back`` puts spans found in it back on the note's own offsets."""

    doc: Document
    # where each character left out would stand in ``doc.text`` (non-decreasing): the character of ``doc.text`` at
    # index i stands at i + (the number of cuts <= i) in the note
    cuts: tuple[int, ...]
    # the cuts that belong to the character before them (combining marks composed into their letter)
    attached: tuple[int, ...] = ()

    def offset_back(self, index: int) -> int:
        """The note's offset of character ``index`` of ``doc.text``."""
        return index + bisect.bisect_right(self.cuts, index)

    def end_back(self, end: int) -> int:
        """The note's offset of the end of ``doc.text[:end]``: after the marks composed into its last letter."""
        attached = self.attached
        return self.offset_back(end - 1) + 1 + bisect.bisect_right(attached, end) - bisect.bisect_left(attached, end)

    def bounds_back(self, start: int, end: int) -> tuple[int, int]:
        """``doc.text[start:end]``'s bounds in the note: an invisible character inside stays inside and one at an
        edge stays out; a letter's combining marks go with it."""
        return self.offset_back(start), self.end_back(end)

    def spans_back(self, spans: Iterable[Span]) -> list[Span]:
        """``spans`` on the note's offsets (``bounds_back``)."""
        return [Span(*self.bounds_back(span.start, span.end), span.label, span.source, span.score) for span in spans]


def reading_copy(doc: Document) -> ReadingCopy | None:
    """``doc`` as typed text, spans left out (they would be on the wrong offsets): its apostrophe look-alikes
    written "'" (``Document.apostrophes_folded``), without its invisible format characters (``_UNTYPED``: soft
    hyphens, zero-width spaces) and with each letter and its combining marks composed where Unicode has one
    character for them (NFC: "i" + U+0301 as "í", as decomposed text from PDFs and some systems writes it; word
    lists, rules and features know the composed forms). None when nothing differs (most notes: one scan)."""
    folded = doc.apostrophes_folded()
    text = folded.text
    found = _UNTYPED.search(text)
    if found is None:
        return None if folded is doc else ReadingCopy(Document(doc.name, text, (), doc.meta), ())
    cuts: list[int] = []
    attached: list[int] = []
    pieces: list[str] = []
    kept = 0  # characters of the note already taken into ``pieces``
    length = 0  # characters of the copy so far
    while found is not None:
        start, end = found.span()
        pieces.append(text[kept:start])
        length += start - kept
        if found.group("invisible") is not None:
            cuts.extend([length] * (end - start))
        else:
            composed = unicodedata.normalize("NFC", found.group())
            if len(composed) >= end - start:  # nothing composes (or NFC would grow it): read as written
                composed = found.group()
            pieces.append(composed)
            length += len(composed)
            cuts.extend([length] * (end - start - len(composed)))
            attached.extend([length] * (end - start - len(composed)))
        kept = end
        found = _UNTYPED.search(text, end)
    pieces.append(text[kept:])
    if not cuts and folded is doc:
        return None
    return ReadingCopy(Document(doc.name, "".join(pieces), (), doc.meta), tuple(cuts), tuple(attached))
