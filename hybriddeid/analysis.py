"""The analysed note: a note's lines, tokens and section facts, computed once and read by every
classifier (as spaCy's ``Doc`` is). The pipeline builds one per note; a classifier handed a plain
``Document`` builds its own. Nothing is cached by text: the note object is the cache.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from hybriddeid.document import Document
from hybriddeid.features.context import LineContext, line_contexts
from hybriddeid.text.tokenize import Token, tokenize


@dataclass(frozen=True, slots=True)
class AnalysedLine:
    """One non-empty line: its sentence and section facts, its tokens and their lower-case forms."""

    context: LineContext
    tokens: tuple[Token, ...]
    lowers: tuple[str, ...]


class AnalysedNote:
    """A ``Document`` analysed for one language: lines with tokens and section facts, every token
    of the note, and a per-note memo for further facts (a POS tagger's output) that several
    classifiers read."""

    __slots__ = ("doc", "language", "lines", "tokens", "_line_starts", "_token_starts", "_token_ends", "_memo")

    def __init__(self, doc: Document, language: str) -> None:
        self.doc = doc
        self.language = language
        text = doc.text
        lines = []
        for context in line_contexts(text, language):
            tokens = tuple(tokenize(text, context.start, context.end))
            lines.append(AnalysedLine(context, tokens, tuple(tok.text.lower() for tok in tokens)))
        self.lines: tuple[AnalysedLine, ...] = tuple(lines)
        # Tokens never cross a line break, so the note's tokens are its lines' tokens in order.
        self.tokens: tuple[Token, ...] = tuple(tok for line in lines for tok in line.tokens)
        self._line_starts = [line.context.start for line in lines]
        self._token_starts = [tok.start for tok in self.tokens]
        self._token_ends = [tok.end for tok in self.tokens]
        self._memo: dict[Any, Any] = {}

    @property
    def text(self) -> str:
        return self.doc.text

    @property
    def token_bounds(self) -> list[tuple[int, int]]:
        """(start, end) of every token of the note."""
        return list(zip(self._token_starts, self._token_ends))

    def line_at(self, offset: int) -> LineContext | None:
        """The line holding character ``offset`` (None between lines, e.g. on a line break)."""
        at = bisect.bisect_right(self._line_starts, offset) - 1
        if at >= 0 and offset < self.lines[at].context.end:
            return self.lines[at].context
        return None

    def tokens_in(self, start: int, end: int) -> list[Token]:
        """The tokens of ``text[start:end]``, as ``tokenize(text, start, end)`` gives them: tokens
        cut by an edge keep their part inside (tokens are maximal runs of one character class, so a
        cut run is still one token)."""
        if end <= start:
            return []
        first = bisect.bisect_right(self._token_ends, start)
        last = bisect.bisect_left(self._token_starts, end)
        found = list(self.tokens[first:last])
        if found and (found[0].start < start or found[-1].end > end):
            text = self.text
            for i in (0, len(found) - 1):
                tok = found[i]
                if tok.start < start or tok.end > end:
                    cut_start, cut_end = max(tok.start, start), min(tok.end, end)
                    found[i] = Token(text[cut_start:cut_end], cut_start, cut_end)
        return found

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per note and ``key`` (e.g. a POS tag source's output)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


def analyse(doc_or_note: Document | AnalysedNote, language: str) -> AnalysedNote:
    """``doc_or_note`` as a note analysed for ``language`` (itself when it already is one)."""
    if isinstance(doc_or_note, AnalysedNote) and doc_or_note.language == language:
        return doc_or_note
    doc = doc_or_note.doc if isinstance(doc_or_note, AnalysedNote) else doc_or_note
    if not isinstance(doc, Document):
        raise TypeError(f"expected a Document or an AnalysedNote, not {type(doc).__name__}")
    return AnalysedNote(doc, language)


def analyse_all(docs: Sequence[Document], language: str) -> list[AnalysedNote]:
    """Each document analysed for ``language`` (what a classifier's ``fit`` reads)."""
    return [analyse(doc, language) for doc in docs]
