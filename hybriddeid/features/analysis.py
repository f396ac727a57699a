"""The analysed note: a note's lines, tokens and section facts, computed once and read by every
classifier (as spaCy's ``Doc`` is). The pipeline builds one per note; a classifier handed a plain
``Document`` builds its own. Nothing is cached by text: the note object is the cache.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hybriddeid.core.document import Document, Span
from hybriddeid.features.context import LineContext, iter_line_contexts, line_contexts, with_line_breaks
from hybriddeid.text.tokenize import Token, tokenize


@dataclass(frozen=True, slots=True)
class AnalysedLine:
    """One non-empty line: its sentence and section facts, its tokens and their lower-case forms."""

    context: LineContext
    tokens: tuple[Token, ...]
    lowers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of one line that a sequence tagger reads as if it were the line: ``line`` holds the
    stretch's bounds (in ``line.context``; its sentence and section facts are the whole line's), its
    tokens (those cut by an edge keep their part inside) and their lower-case forms. ``core`` is the
    part whose units the tagger keeps (the rest is context shared with the neighbouring segments);
    None when the segment is the whole line."""

    line: AnalysedLine
    core: tuple[int, int] | None


class AnalysedNote:
    """A ``Document`` analysed for one language: lines with tokens and section facts, every token
    of the note, and a per-note memo for further facts (a POS tagger's output) that several
    classifiers read."""

    __slots__ = ("doc", "language", "lines", "tokens", "_line_starts", "_token_starts", "_token_ends", "_memo")

    def __init__(self, doc: Document, language: str, contexts: Iterable[LineContext] | None = None) -> None:
        """``contexts``: the lines' facts when they come from elsewhere (a piece of a long note
        gets its lines' facts from the whole note: ``analysed_pieces``); else computed here. The note is read
        with its apostrophe look-alikes folded (``Document.apostrophes_folded``: "O‘Brien" as "O'Brien"),
        in training and tagging alike."""
        doc = doc.apostrophes_folded()
        self.doc = doc
        self.language = language
        text = doc.text
        lines = []
        for context in line_contexts(text, language) if contexts is None else contexts:
            tokens = tuple(tokenize(text, context.start, context.end))
            lines.append(AnalysedLine(context, tokens, tuple([tok.text.lower() for tok in tokens])))
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

    def segments(self, max_chars: int, overlap: int) -> Iterator[Segment]:
        """The note's lines as bounded segments, for taggers whose cost grows with a line's length
        (a CRF's features and forward-backward pass): a line of at most ``max_chars`` characters is
        one segment, the line itself (so it is read exactly as before); a longer one is cut into
        segments of at most ``max_chars`` that overlap by about ``overlap`` characters, each core
        at least ``overlap // 2`` characters from its segment's cut edges. Cuts fall at the start of
        a word (a token after whitespace) where one lies near, else at any token start, else (in a
        run of characters without breaks, e.g. 100,000 digits) at a fixed length inside the token."""
        for line in self.lines:
            start, end = line.context.start, line.context.end
            if end - start <= max_chars:
                yield Segment(line, None)
                continue
            starts = [tok.start for tok in line.tokens]
            half = overlap // 2
            seg_start, core_start = start, start
            while True:
                seg_end = min(seg_start + max_chars, end)
                if seg_end == end:
                    core_end = end
                else:  # keep at least ``half`` characters of right context after the core
                    core_end = self._cut(starts, seg_end - half, max(core_start + 1, seg_end - overlap), end)
                yield Segment(self._segment_line(line, starts, seg_start, seg_end), (core_start, core_end))
                if core_end == end:
                    break
                # the next segment starts ``half`` or more characters before the cut, at a word if one is near
                seg_start = self._cut(starts, core_end - half, max(core_end - overlap, seg_start + 1), end)
                core_start = core_end

    def _cut(self, starts: Sequence[int], at: int, lowest: int, end: int) -> int:
        """The cut at or before ``at`` and not below ``lowest``: the last word start there, else the
        last token start, else ``at`` itself (inside a long token)."""
        text = self.text
        first = bisect.bisect_left(starts, lowest)
        last = bisect.bisect_right(starts, at)
        for index in range(last - 1, first - 1, -1):
            if text[starts[index] - 1].isspace():
                return starts[index]
        return starts[last - 1] if last > first else min(at, end)

    def _segment_line(self, line: AnalysedLine, starts: Sequence[int], start: int, end: int) -> AnalysedLine:
        """``line`` cut to ``text[start:end]``: its tokens there (cut ones keep their part inside)."""
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        if first < len(starts) and line.tokens[first].end <= start:
            first += 1
        last = bisect.bisect_left(starts, end)
        tokens = list(line.tokens[first:last])
        lowers = list(line.lowers[first:last])
        text = self.text
        for i in {0, len(tokens) - 1} if tokens else ():
            tok = tokens[i]
            if tok.start < start or tok.end > end:
                cut_start, cut_end = max(tok.start, start), min(tok.end, end)
                tokens[i] = Token(text[cut_start:cut_end], cut_start, cut_end)
                lowers[i] = tokens[i].text.lower()
        return AnalysedLine(replace(line.context, start=start, end=end), tuple(tokens), tuple(lowers))

    @property
    def layout_text(self) -> str:
        """``text`` with a line break at each cut that ``features.context.layout_lines`` made inside a
        line (a header block exported on one line): ``features.context.with_line_breaks``."""
        return self.memo("layout_text", self._layout_text)

    def _layout_text(self) -> str:
        return with_line_breaks(self.doc.text, ((line.context.start, line.context.end) for line in self.lines))

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per note and ``key`` (e.g. a POS tag source's output)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


@dataclass(frozen=True, slots=True)
class Piece:
    """A stretch ``text[start:end]`` of a long note, read as a note of its own (so what a note
    costs is bounded by the piece, not the note); of its spans, those starting in its core
    ``[core_start, core_end)`` are kept. Consecutive pieces overlap, and their cores meet."""

    start: int
    end: int
    core_start: int
    core_end: int

    def keep(self, spans: Iterable[Span]) -> list[Span]:
        """The piece's ``spans`` (offsets into the piece) that start in its core, at note offsets."""
        shift, low, high = self.start, self.core_start - self.start, self.core_end - self.start
        return [
            span if shift == 0 else Span(span.start + shift, span.end + shift, span.label, span.source, span.score)
            for span in spans
            if low <= span.start < high
        ]

    def inside(self, spans: Sequence[Span]) -> list[Span]:
        """The note's ``spans`` (sorted) that lie inside the piece, at piece offsets."""
        first = bisect.bisect_left(spans, self.start, key=lambda span: span.start)
        last = bisect.bisect_left(spans, self.end, key=lambda span: span.start)
        shift = self.start
        return [
            Span(span.start - shift, span.end - shift, span.label, span.source, span.score)
            for span in spans[first:last]
            if span.end <= self.end
        ]


def note_pieces(text: str, max_chars: int, overlap: int) -> Iterator[Piece]:
    """``text`` as pieces of at most ``max_chars`` characters overlapping by about ``overlap``: one
    piece, the whole text, when it is no longer. Each core edge lies at least ``overlap // 2``
    characters inside its piece (a span starting in a core and shorter than that is read whole,
    with that much context on either side). Cuts fall at a line start where one is near, else
    after a space, else at a fixed length (inside a run of characters without breaks)."""
    if max_chars <= 2 * overlap:
        raise ValueError(f"pieces of {max_chars} characters cannot overlap by {overlap}")
    length = len(text)
    half = overlap // 2
    start = core_start = 0
    while True:
        end = min(start + max_chars, length)
        core_end = length if end == length else _piece_cut(text, end - half, max(core_start + 1, end - overlap))
        yield Piece(start, end, core_start, core_end)
        if core_end == length:
            return
        start = _piece_cut(text, core_end - half, max(core_end - overlap, start + 1))
        core_start = core_end


def _piece_cut(text: str, at: int, lowest: int) -> int:
    """The cut at or before ``at`` and not below ``lowest``: the last line start there, else the
    last position after a space, else ``at``."""
    for mark in ("\n", " "):
        found = text.rfind(mark, max(lowest - 1, 0), at)
        if found != -1:
            return found + 1
    return at


def analysed_pieces(doc: Document, language: str, max_chars: int, overlap: int) -> Iterator[tuple[Piece, AnalysedNote]]:
    """``doc`` read piece by piece (``note_pieces``): each piece analysed as a note of its own text,
    its lines keeping the facts they have in the whole note (the section they sit under; a line cut
    by a piece edge keeps the whole line's facts), so memory is bounded by a piece. One piece at a
    time is analysed; the previous one can be freed before the next is built."""
    text = doc.text
    contexts = iter_line_contexts(text, language)
    waiting: list[LineContext] = []  # contexts of lines not yet behind the current piece
    exhausted = False
    for piece in note_pieces(text, max_chars, overlap):
        waiting = [context for context in waiting if context.end > piece.start]
        while not exhausted and (not waiting or waiting[-1].start < piece.end):
            context = next(contexts, None)
            if context is None:
                exhausted = True
            elif context.end > piece.start:
                waiting.append(context)
        shift = piece.start
        inside = []
        for context in waiting:
            if context.start >= piece.end:
                break
            start, end = max(context.start, piece.start) - shift, min(context.end, piece.end) - shift
            inside.append(replace(context, start=start, end=end, key_end=min(max(context.key_end - shift, start), end)))
        piece_doc = Document(doc.name, text[piece.start : piece.end], meta=doc.meta)
        yield piece, AnalysedNote(piece_doc, language, inside)


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
