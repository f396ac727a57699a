"""Line, sentence and section context of a note, shared by the token and character CRFs.

The paper's "sentence information" (length, final end mark, unmatched brackets) and "section
information" (which header the text sits under) are computed once per line here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache

import regex

from hybriddeid.core.languages import language_pack, register_cache
from hybriddeid.text.tokenize import iter_lines

_END_MARKS = frozenset(".?!")
# A line this long holding this many field labels is a header block exported on one line.
FIELD_LINE_MIN_CHARS = 200
FIELD_LINE_MIN_LABELS = 3


@register_cache
@cache
def section_headers(language: str) -> frozenset[str]:
    """The section headers of ``language``'s pack (its ``sections.txt``)."""
    entries = (line.strip() for line in language_pack(language).read_text("sections").splitlines())
    return frozenset(entry for entry in entries if entry and not entry.startswith("#"))


@register_cache
@cache
def field_labels(language: str) -> frozenset[str]:
    """The field labels of ``language``'s pack (its ``fields.txt``; none without one)."""
    pack = language_pack(language)
    if not pack.has("fields"):
        return frozenset()
    entries = (line.strip() for line in pack.read_text("fields").splitlines())
    return frozenset(entry for entry in entries if entry and not entry.startswith("#"))


@dataclass(frozen=True)
class _FieldLabels:
    """A pack's field labels and section headers as word tuples (lower-case), for ``_field_cuts``."""

    labels: frozenset[tuple[str, ...]]
    titles: frozenset[tuple[str, ...]]  # those of several words: they may end in a full stop
    longest: int


@register_cache
@cache
def _labels_of(language: str) -> _FieldLabels | None:
    labels = frozenset(tuple(label.split()) for label in field_labels(language) | section_headers(language))
    if not labels:
        return None
    return _FieldLabels(labels, frozenset(label for label in labels if len(label) > 1), max(map(len, labels)))


# After a label: ":", "#", or " - " / " = "; after a title of several words, a full stop and a capital.
_SEPARATOR = regex.compile(r"[ \t]*(?::|#|[-=](?=[ \t]))|(?P<stop>\.)(?=[ \t]+\p{Lu})", regex.V1)
_WORD_BEFORE = regex.compile(r"(?r)(?<=[ \t])[^ \t]+", regex.V1)


def _field_cuts(text: str, start: int, end: int, labels: _FieldLabels) -> list[int]:
    """The offsets in ``text[start:end]`` of the space before each field label ("... Name: X", "... MRN -
    12") or title of several words ending in a full stop ("... Datos del paciente. Nombre", not "PT.
    GIVEN"): the words just before a separator, looked up in ``labels``, longest first, so
    "Patient Name -" is one field. The label must follow a space that follows other text."""
    line = text[start:end]
    text_starts = start + len(line) - len(line.lstrip(" \t"))  # a cut must come after this
    cuts = []
    for separator in _SEPARATOR.finditer(text, start, end):
        words: list[tuple[int, str]] = []  # (start, word), the nearest first
        at = separator.start()
        while len(words) < labels.longest:
            word = _WORD_BEFORE.search(text, start, at)
            if word is None or word.end() != at:
                break
            words.append((word.start(), word.group().lower()))
            at = word.start() - 1
            while at > start and text[at - 1] in " \t":
                at -= 1
        known = labels.titles if separator.group("stop") else labels.labels
        for size in range(len(words), 0, -1):
            first = words[size - 1][0]
            if (
                first - 1 > text_starts
                and tuple(word for _, word in reversed(words[:size])) in known
                and (not separator.group("stop") or text[first].isupper())
            ):
                cuts.append(first - 1)
                break
    return cuts


# "== Header ==" and "[Header]": a line of their own in a header block, with a cut before and after.
_HEADER_MARK = regex.compile(
    r"(?<=\S[ \t]*)(?P<cut>[ \t])(?:==[ \t]+\p{Lu}[^=\n]{0,60}?[ \t]+==|\[\p{Lu}[\p{L} ]*\])"
    r"(?:(?P<after>[ \t])|$)",
    regex.V1,
)


def layout_lines(text: str, language: str) -> Iterator[tuple[int, int]]:
    """The note's lines as the CRFs read them: its own lines, except that a long line holding
    several field labels (a header block exported on one line, ``FIELD_LINE_MIN_*``) is read as
    if a line break stood before each label and around each "== Header ==" or "[Header]" mark. The text
    is not changed: a line break is a space left out between two lines, so offsets stay."""
    labels = _labels_of(language)
    for start, end in iter_lines(text):
        if labels is None or end - start < FIELD_LINE_MIN_CHARS:
            yield start, end
            continue
        cuts = _field_cuts(text, start, end, labels)
        if len(cuts) < FIELD_LINE_MIN_LABELS:
            yield start, end
            continue
        for match in _HEADER_MARK.finditer(text, start, end):
            cuts.extend(match.start(group) for group in ("cut", "after") if match.start(group) != -1)
        cuts = sorted(set(cuts))
        for cut in cuts:
            if cut > start:
                yield start, cut
            start = cut + 1
        if start < end:
            yield start, end


def with_line_breaks(text: str, lines: Iterable[tuple[int, int]]) -> str:
    """``text`` with a line break at each cut that ``layout_lines`` made inside a line (the character
    between two consecutive ``lines`` when no line break stands there): for readers of the raw text,
    the rules, so they read the note's lines as the CRFs do. Same length and offsets; ``text`` itself
    when there is no such cut."""
    cuts, previous_end = [], None
    for start, end in lines:
        if previous_end is not None and "\n" not in text[previous_end:start]:
            cuts.append(start - 1)
        previous_end = end
    if not cuts:
        return text
    chars = list(text)
    for cut in cuts:
        chars[cut] = "\n"
    return "".join(chars)


def _header_of(line: str, headers: frozenset[str]) -> str | None:
    """The header a line opens with ("Exploración física: ..." -> "exploración física"), if any."""
    head = line.split(":", 1)[0].strip().rstrip(".").lower()
    if head in headers:
        return head
    stripped = line.strip().rstrip(".:").lower()
    return stripped if stripped in headers else None


@dataclass(frozen=True, slots=True)
class LineContext:
    """What the CRFs know about one line: offsets plus the line-level feature strings."""

    start: int
    end: int
    features: tuple[str, ...]
    key_end: int  # offset just after the line's "Field:" key (start if none)
    key: str  # lower-cased "Field" label of a "Field: value" line, "" if none


def line_contexts(text: str, language: str) -> tuple[LineContext, ...]:
    """Per-line sentence and section facts for ``text`` (``hybriddeid.features.analysis`` computes them
    once per note for every classifier)."""
    return tuple(iter_line_contexts(text, language))


def iter_line_contexts(text: str, language: str) -> Iterator[LineContext]:
    """``line_contexts`` one line at a time, for a long note read in pieces: the section a line
    sits under comes from the lines before it, so the contexts are always computed from the start."""
    headers = section_headers(language)
    section = "none"
    for start, end in layout_lines(text, language):
        line = text[start:end]
        header = _header_of(line, headers)
        if header is not None:
            section = header
        stripped = line.rstrip()
        colon = line.find(":")
        key = ""
        key_end = start
        if 0 < colon <= 40:
            key = " ".join(line[:colon].lower().split()[-3:])
            key_end = start + colon + 1
        feats = [
            f"sec={section}",
            f"linelen={min(len(line) // 20, 10)}",
            "endmark" if stripped[-1:] in _END_MARKS else "noendmark",
        ]
        if line.count("(") != line.count(")") or line.count("[") != line.count("]"):
            feats.append("unbalanced")
        if header is not None:
            feats.append("headerline")
        yield LineContext(start, end, tuple(feats), key_end, key)
