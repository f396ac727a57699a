"""A note longer than ``piece_chars`` is read in overlapping pieces (``analysis.analysed_pieces``,
``Pipeline.pieces``) so that its cost is bounded by a piece: the pieces partition the note, a note
with lines gets the spans of a whole reading, and a PHI mention crossing a cut is found whole."""

from __future__ import annotations

import pytest

from hybriddeid import Pipeline
from hybriddeid.core.document import Document, Span
from hybriddeid.features.analysis import analyse, analysed_pieces, note_pieces
from hybriddeid.pipeline.core import ConfigError, build_config
from hybriddeid.synth import generate_corpus

PIECE, OVERLAP = 10_000, 2_000


@pytest.fixture(scope="module")
def english() -> Pipeline:
    return Pipeline.load("en")


def _with_pieces(pipeline: Pipeline, piece_chars: int, overlap: int = OVERLAP) -> Pipeline:
    pipeline.config["pipeline"].update(piece_chars=piece_chars, piece_overlap=overlap)
    return pipeline


def _keys(spans: list[Span]) -> list[tuple[int, int, str, str]]:
    return [(span.start, span.end, span.label, span.source) for span in spans]


def test_pieces_partition_a_note_with_bounded_overlap() -> None:
    text = "Seen today.\n" + "word " * 4000 + "\n" + "Lab: " + "7" * 30_000 + "\n" + "short line\n" * 3000
    pieces = list(note_pieces(text, PIECE, OVERLAP))
    assert len(pieces) > 8
    assert pieces[0].start == pieces[0].core_start == 0 and pieces[-1].core_end == pieces[-1].end == len(text)
    for a, b in zip(pieces, pieces[1:]):
        assert a.core_end == b.core_start and b.start < a.end  # cores meet, pieces overlap
    for piece in pieces:
        assert piece.end - piece.start <= PIECE
        assert piece.core_start - piece.start >= OVERLAP // 2 or piece.core_start == 0  # context before the core
        assert piece.end - piece.core_end >= OVERLAP // 2 or piece.core_end == len(text)  # and after it
    cuts = [piece.core_end for piece in pieces[:-1]]
    assert any(text[cut - 1] == "\n" for cut in cuts)  # at a line start where one is near,
    assert any(text[cut - 1] == " " and text[cut] == "w" for cut in cuts)  # else at a word,
    assert any(text[cut - 1 : cut + 1] == "77" for cut in cuts)  # else inside a run without breaks
    assert list(note_pieces("short", PIECE, OVERLAP))[0].end == 5  # a short note is one piece
    with pytest.raises(ValueError, match="cannot overlap"):
        next(note_pieces(text, 1000, 600))


def test_a_piece_keeps_the_facts_its_lines_have_in_the_whole_note() -> None:
    # a section header far before the piece still names the section of the piece's lines
    text = "HISTORY OF PRESENT ILLNESS:\n" + "The patient is well today.\n" * 2000 + "A" * 15_000 + " end.\n"
    whole = analyse(Document("n", text), "en")
    by_start = {line.context.start: line.context for line in whole.lines}
    for piece, note in analysed_pieces(Document("n", text), "en", PIECE, OVERLAP):
        assert note.text == text[piece.start : piece.end]
        for line in note.lines:
            start = line.context.start + piece.start
            original = by_start.get(start) or next(c for c in by_start.values() if c.start < start < c.end)
            assert line.context.features == original.features  # section, length, end mark: the whole line's
            assert [tok.text for tok in line.tokens] == [
                tok.text for tok in whole.tokens_in(start, line.context.end + piece.start)
            ]
    assert any(
        "sec=history of present illness" in line.context.features
        for _, note in list(analysed_pieces(Document("n", text), "en", PIECE, OVERLAP))[-1:]
        for line in note.lines
    )


@pytest.fixture(scope="module")
def notes_on_lines() -> Document:
    """About 60,000 characters of generated English notes, their lines kept."""
    text = "\n".join(doc.text for doc in generate_corpus(60, 3, "test"))
    assert len(text) > 5 * PIECE
    return Document("lines", text)


@pytest.mark.parametrize("threshold", [None, 0.5])
def test_a_note_with_lines_gets_the_spans_of_a_whole_reading(
    english: Pipeline, notes_on_lines: Document, threshold: float | None
) -> None:
    whole = _with_pieces(english, 10**9).predict(notes_on_lines, threshold=threshold)
    cut = _with_pieces(english, PIECE).predict(notes_on_lines, threshold=threshold)
    assert len(whole) > 300
    assert len(list(note_pieces(notes_on_lines.text, PIECE, OVERLAP))) > 5
    assert _keys(cut) == _keys(whole)
    assert max(abs(a.score - b.score) for a, b in zip(cut, whole)) < 1e-9


def test_by_source_spans_are_the_pieces_spans_in_their_cores(english: Pipeline, notes_on_lines: Document) -> None:
    pipeline = _with_pieces(english, PIECE)
    joined = pipeline.predict_by_source(notes_on_lines)
    pieces = list(pipeline.pieces(notes_on_lines))
    assert len(pieces) > 5
    for name in pipeline.components:
        expected = [span for piece, note in pieces for span in piece.keep(pipeline.predict_by_source(note)[name])]
        assert joined[name] == expected
        assert all(0 <= span.start < span.end <= len(notes_on_lines.text) for span in joined[name])


MENTIONS = (("Dr. Beatrice Harlowe", "Harlowe"), ("on March 14, 2019", "2019"), ("at (617) 555-0199", "555-0199"))


def _straddling_note(mention: str, cut_word: str) -> str:
    """One line of sentences where the first cut (after the last space before ``PIECE - OVERLAP // 2``)
    falls inside ``mention``, just before ``cut_word``."""
    filler = "The patient reports mild pain in the left knee and takes ibuprofen twice daily. "
    lead = PIECE - OVERLAP // 2 - 1 - mention.index(cut_word)  # cut_word starts one before the cut point
    return ("Seen at clinic today. " + filler * 200)[: lead - 1] + " " + mention + " " + filler * 300


@pytest.mark.parametrize("mention, cut_word", MENTIONS)
def test_a_mention_crossing_a_cut_is_found_whole(english: Pipeline, mention: str, cut_word: str) -> None:
    text = _straddling_note(mention, cut_word)
    start = text.index(mention)
    first = next(note_pieces(text, PIECE, OVERLAP))
    assert start < first.core_end < start + len(mention)  # the cut falls inside the mention
    whole = _with_pieces(english, 10**9).predict(text)
    cut = _with_pieces(english, PIECE).predict(text)
    covering = [span for span in cut if span.start < first.core_end < span.end]
    assert covering, f"nothing found across the cut in {mention!r}"
    assert _keys(covering) == [key for key in _keys(whole) if key[0] < first.core_end < key[1]]
    near = lambda spans: [k for k in _keys(spans) if abs(k[0] - first.core_end) < OVERLAP]  # noqa: E731
    assert near(cut) == near(whole)


def test_piece_settings_are_checked_and_default_for_saved_models() -> None:
    config = build_config({})
    assert config["pipeline"]["piece_chars"] == 1_000_000 and config["pipeline"]["piece_overlap"] == 10_000
    assert Pipeline.load("es").config["pipeline"]["piece_chars"] == 1_000_000  # saved before the keys existed
    for bad in (
        {"piece_chars": 5_000},
        {"piece_chars": 20_000, "piece_overlap": 6_000},
        {"piece_overlap": -1},
        {"piece_chars": 1.5e6},
    ):
        with pytest.raises(ConfigError, match="piece_chars"):
            build_config({"pipeline": bad})
