"""Line, sentence and section context of a note, shared by the token and character CRFs.

The paper's "sentence information" (length, final end mark, unmatched brackets) and "section
information" (which header the text sits under) are computed once per line here.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

from hybriddeid.languages import language_pack, register_cache
from hybriddeid.text.tokenize import iter_lines

_END_MARKS = frozenset(".?!")


@register_cache
@lru_cache(maxsize=None)
def section_headers(language: str) -> frozenset[str]:
    """The section headers of ``language``'s pack (its ``sections.txt``)."""
    entries = (line.strip() for line in language_pack(language).read_text("sections").splitlines())
    return frozenset(entry for entry in entries if entry and not entry.startswith("#"))


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
    """Per-line sentence and section facts for ``text`` (``hybriddeid.analysis`` computes them
    once per note for every classifier)."""
    return tuple(iter_line_contexts(text, language))


def iter_line_contexts(text: str, language: str) -> Iterator[LineContext]:
    """``line_contexts`` one line at a time, for a long note read in pieces: the section a line
    sits under comes from the lines before it, so the contexts are always computed from the start."""
    headers = section_headers(language)
    section = "none"
    for start, end in iter_lines(text):
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
