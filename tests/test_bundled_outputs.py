"""The bundled models' spans stay exactly what they were when tests/fixtures/bundled_spans.json
was written (``python benchmarks/same_spans.py --save``): refactors and faster engines must not
change a single offset, label or score."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "bundled_spans.json"


def _benchmark():
    spec = importlib.util.spec_from_file_location("same_spans", REPO / "benchmarks" / "same_spans.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


same_spans = _benchmark()
EXPECTED = json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("note_set", sorted(EXPECTED))
def test_bundled_model_spans_unchanged(note_set: str) -> None:
    name, _, threshold = note_set.partition("@")
    sets = same_spans.note_sets()
    if name not in sets:
        pytest.skip(f"{name} needs ../shared/corpora/meddocan")
    model, docs = sets[name]
    got = same_spans.digests(model, docs, float(threshold) if threshold else None)
    texts, spans = same_spans.compare(EXPECTED[note_set], got)
    assert texts == 0, f"{texts} notes of {note_set} are not the notes the fixture was made from"
    assert spans == 0, f"{spans} of {len(got)} notes of {note_set} changed spans"


def test_digest_sees_a_changed_score() -> None:
    from hybriddeid.core.document import Span

    assert same_spans.span_digest([Span(0, 4, "NAME", "token", 0.5)]) != same_spans.span_digest(
        [Span(0, 4, "NAME", "token", 0.5 + 1e-8)]
    )
