"""Residual risk: calibration maths, token chances from processing, and ``hybriddeid risk``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation.risk import (
    Calibrator,
    Reviewed,
    TokenChance,
    choose_calibration,
    estimate,
    logit_bins,
    outcomes,
    reliability,
    untagged,
)
from hybriddeid.io import read_corpus, write_documents
from hybriddeid.runs.processing import NoteSettings, load_model, process_notes
from hybriddeid.synth import generate_corpus

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "notes"


@pytest.fixture(scope="module")
def english():
    return load_model("en")


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_calibration_recovers_a_known_miscalibration(method):
    # Raw probabilities that are three times too low: the truth is min(1, 3p).
    rng = np.random.default_rng(4)
    p = rng.beta(0.3, 20, 60_000)
    y = (rng.random(len(p)) < np.minimum(1, 3 * p)).astype(float)
    calibrated = Calibrator(method).fit(p, y)(p)
    assert abs(calibrated.sum() - y.sum()) / y.sum() < 0.05
    assert abs(p.sum() - y.sum()) / y.sum() > 0.5  # the raw sum is far off: the test can fail
    grid = np.linspace(0, 1, 101)
    assert np.all(np.diff(Calibrator(method).fit(p, y)(grid)) >= -1e-12)  # monotone


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_the_bootstrap_bins_give_the_token_by_token_sums(method):
    """The interval's rounds read the tokens as narrow logit bins: the sums they take stay within a
    millionth of the exact ones, for both calibrators and tokens of any P(PHI)."""
    rng = np.random.default_rng(5)
    p = np.concatenate([rng.beta(0.3, 20, 200_000), rng.random(2_000), [0.0, 1.0, 1e-9]])
    counts, centres = logit_bins(p)
    assert counts.sum() == len(p) and len(centres) < len(p) / 10
    fit_p = rng.beta(0.3, 20, 20_000)
    calibrator = Calibrator(method).fit(fit_p, (rng.random(len(fit_p)) < np.minimum(1, 3 * fit_p)).astype(float))
    exact, binned = calibrator(p), calibrator(centres)
    assert abs((counts * binned).sum() - exact.sum()) < 1e-6 * exact.sum()
    assert abs((counts * binned * (1 - binned)).sum() - (exact * (1 - exact)).sum()) < 1e-6 * exact.sum()


def test_untagged_and_outcomes():
    chances = [TokenChance(0, 4, 0.9), TokenChance(5, 9, 0.2), TokenChance(10, 14, 0.01)]
    output = [Span(0, 4, "PATIENT")]
    assert [c.start for c in untagged(chances, output)] == [5, 10]
    p, y = outcomes(chances, output, [Span(0, 9, "PATIENT")])
    assert p.tolist() == [0.2, 0.01] and y.tolist() == [1.0, 0.0]


def test_estimate_interval_and_types():
    chances = [TokenChance(i, i + 1, 0.1, {"DATE": 0.075, "AGE": 0.025}) for i in range(100)]
    result = estimate([("a", 1000, chances)])
    assert result.expected_missed == pytest.approx(10.0)
    assert result.low < 10.0 < result.high
    assert result.per_1000() == pytest.approx(10.0)
    assert result.per_type["DATE"] == pytest.approx(7.5) and result.per_type["AGE"] == pytest.approx(2.5)
    assert result.uncalibrated_because.startswith("no reviewed notes")
    # Three reviewed notes without a miss are too little to calibrate on: the raw sum, saying why, and an
    # interval that holds both no miss at all and the raw sum
    few = estimate([("a", 1000, chances)], Reviewed.collect([(chances, [], [])] * 3))
    assert few.expected_missed == pytest.approx(10.0) and few.calibration["method"] == "none"
    assert "3 reviewed notes with 0 missed tokens" in few.uncalibrated_because
    assert few.low == 0.0 and few.high >= 10.0
    # Enough reviewed notes where few such tokens were PHI (5 of 2,500): calibrated, the estimate falls towards 0
    many = Reviewed.collect([(chances, [], [Span(0, 1, "DATE")] if i < 5 else []) for i in range(25)])
    calibrated = estimate([("a", 1000, chances)], many)
    assert calibrated.uncalibrated_because is None and calibrated.expected_missed < 1.0
    assert calibrated.low < calibrated.expected_missed < calibrated.high


def test_reliability_bins_count_every_token():
    p = np.array([0.0, 0.00005, 0.002, 0.5, 1.0])
    bins = reliability(p, np.array([0, 0, 1, 1, 1.0]))
    assert sum(b["tokens"] for b in bins) == len(p)


def test_chances_leave_the_spans_unchanged(english):
    docs = read_corpus(EXAMPLES)
    plain = process_notes(english, docs)
    with_chances = process_notes(english, docs, NoteSettings(chances=True))
    for a, b in zip(plain, with_chances):
        assert a.document.spans == b.document.spans
        assert b.chances and all(0.0 <= c.p_phi <= 1.0 for c in b.chances)
        tagged = [
            c
            for c in b.chances
            if any(s.start <= c.start and c.end <= s.end for s in b.document.spans if s.source == "token")
        ]
        # tokens inside the token CRF's own spans are the ones it believed PHI
        assert all(c.p_phi > 0.5 for c in tagged)


def test_chances_of_a_note_with_invisible_characters_are_on_its_own_offsets(english):
    """A soft hyphen and a zero-width space inside PHI: the note is read without them
    (``core.document.reading_copy``) and its spans and token chances come back on its own offsets."""
    text = "Patient: Mar\u00adgaret Hollis, MRN 44\u200b31200.\n"
    plain = text.replace("\u00ad", "").replace("\u200b", "")
    (note,) = process_notes(english, [Document("n", text)], NoteSettings(chances=True))
    (clean,) = process_notes(english, [Document("n", plain)], NoteSettings(chances=True))
    assert [text[s.start : s.end] for s in note.document.spans] == ["Mar\u00adgaret Hollis", "44\u200b31200"]
    assert [s.label for s in note.document.spans] == [s.label for s in clean.document.spans]
    assert note.chances is not None and clean.chances is not None
    assert [text[c.start : c.end].replace("\u00ad", "").replace("\u200b", "") for c in note.chances] == [
        plain[c.start : c.end] for c in clean.chances
    ]
    assert [c.p_phi for c in note.chances] == [c.p_phi for c in clean.chances]


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    # Run outside the checkout, so the installed package (with its resources) is imported, not ./hybriddeid.
    return subprocess.run(
        [sys.executable, "-m", "hybriddeid.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or Path(__file__).parent,
    )


def test_risk_command(tmp_path):
    notes, reviewed = tmp_path / "notes", tmp_path / "reviewed"
    write_documents(list(generate_corpus(6, 3, "test", "en")), notes, "brat")
    write_documents(list(generate_corpus(8, 4, "test", "en")), reviewed, "brat")
    (notes / "broken.ann").write_text("")
    (notes / "broken.txt").write_bytes(b"Seen \xff today.\n")  # not UTF-8
    out = tmp_path / "out"
    done = _cli("risk", str(notes), "--reviewed", str(reviewed), "--out", str(out), "--calibration", "platt")
    assert done.returncode == 1, done.stderr  # the broken file fails alone, the others are estimated
    assert "broken.txt" in done.stderr and "Seen" not in done.stderr
    report = json.loads((out / "risk.json").read_text())
    # 8 reviewed notes are too few to calibrate on (risk.MIN_REVIEWED_NOTES): the raw sum, and why
    assert report["reviewed_notes"] == 8 and report["calibration"]["method"] == "none"
    assert report["uncalibrated_because"].startswith("8 reviewed notes with")
    assert len(report["notes"]) == 6
    low, high = report["interval"]
    assert low <= report["expected_missed"] <= high
    assert report["per_1000"] == pytest.approx(1000 * report["expected_missed"] / report["tokens"])
    assert (out / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "expected missed PHI tokens" in done.stdout
    assert report["corrected_notes"] == 0  # the reviewed notes are other notes


def test_a_reviewed_note_of_the_folder_counts_as_corrected(tmp_path):
    """A note whose correction is in --reviewed (same name, same text) is released as corrected: it adds
    tokens to the folder but no expected misses; a reviewed note with the same name and other text does not."""
    docs = list(generate_corpus(6, 3, "test", "en"))
    notes, reviewed = tmp_path / "notes", tmp_path / "reviewed"
    write_documents(docs, notes, "brat")
    write_documents(docs[:3], reviewed, "brat")
    changed = docs[3].text.replace("\n", "\n\n", 1)
    write_documents([docs[3].__class__(docs[3].name, changed)], reviewed, "brat")  # same name, other text
    done = _cli("risk", str(notes), "--reviewed", str(reviewed), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "out" / "risk.json").read_text())
    assert report["corrected_notes"] == 3  # not the fourth: its text differs
    by_name = {note["name"]: note for note in report["notes"]}
    assert all(by_name[doc.name]["expected_missed"] == 0 for doc in docs[:3])
    assert all(by_name[doc.name]["tokens"] > 0 for doc in docs[:3])
    assert report["expected_missed"] == pytest.approx(sum(note["expected_missed"] for note in report["notes"]))
    assert "3 of them reviewed: counted as corrected" in done.stdout


def test_next_picks_the_most_uncertain_unreviewed_notes(english, tmp_path):
    from hybriddeid.review.folders import Corrections, ReadNote, most_informative, read_folder
    from hybriddeid.review.server import build_state

    notes = tmp_path / "notes"
    write_documents(list(generate_corpus(5, 8, "test", "en")), notes, "text")
    read, _, _ = read_folder(english, notes)
    sure = ReadNote(read[0].doc, tuple(TokenChance(c.start, c.end, 0.0) for c in read[0].chances))
    unsure = ReadNote(read[1].doc, tuple(TokenChance(c.start, c.end, 0.5) for c in read[1].chances))
    assert [n.name for n in most_informative([sure, unsure], 1)] == [unsure.name]
    assert unsure.uncertainty() == pytest.approx(len(unsure.chances))  # one bit per token at P = 0.5
    corrections = Corrections(tmp_path / "corrections", notes)
    top = max(read, key=ReadNote.uncertainty)
    corrections.save(top.doc, list(top.doc.spans), "r", True)
    state = build_state(english, read, corrections, next_count=2)
    assert len(state.queue) == 2 and top.name not in state.queue
    assert state.queue == [n.name for n in most_informative([n for n in read if n.name != top.name], 2)]
    # the reviewed note now calibrates the folder's estimate
    assert state.risk.reviewed_notes == 1
    with pytest.raises(ValueError, match="notes' own folder"):
        Corrections(notes, notes)


def test_a_note_that_fails_is_named_without_its_text_and_the_rest_go_on(english, tmp_path, monkeypatch, caplog):
    from hybriddeid.review import folders

    docs = list(generate_corpus(3, 7, "test"))
    write_documents(docs, tmp_path / "notes", "brat")
    planted = docs[1].text[:40]
    real = folders.process_notes

    def failing_on_the_second(pipeline, notes, settings):
        if notes[0].name == docs[1].name:
            raise ValueError(f"cannot read {planted!r}")  # a message quoting the note, as library errors may
        return real(pipeline, notes, settings)

    monkeypatch.setattr(folders, "process_notes", failing_on_the_second)
    with caplog.at_level("ERROR"):
        read, _, failed = folders.read_folder(english, tmp_path / "notes")
    assert (len(read), failed) == (2, 1)
    assert "ValueError" in caplog.text and planted not in caplog.text


def test_the_review_page_counts_a_note_marked_reviewed_as_corrected(english, tmp_path):
    """Once a note is marked reviewed its expected misses drop to none (its tokens calibrate the others,
    which still count); the folder's total follows."""
    from hybriddeid.review.folders import Corrections, read_folder
    from hybriddeid.review.server import ReviewState

    folder = tmp_path / "notes"
    write_documents([doc.with_spans(()) for doc in generate_corpus(4, 5, "test", "en")], folder, "text")
    notes, _, _ = read_folder(english, folder)
    state = ReviewState(notes, Corrections(tmp_path / "corrections", folder), list(english.labels))
    riskiest = max(state.risk.notes, key=lambda note: note.expected_missed)
    assert riskiest.expected_missed > 0
    note = state.by_name[riskiest.name]
    missed = max(note.untagged(), key=lambda chance: chance.p_phi)  # the reviewer finds one miss
    spans = [*note.doc.spans, Span(missed.start, missed.end, "PATIENT")]
    state.corrections.save(note.doc, spans, reviewer="test", done=True)
    state.refresh_risk()
    assert state.note_risks[riskiest.name].expected_missed == 0
    assert state.risk.expected_missed > 0  # one reviewed note calibrates nothing: the raw chances stand
    assert state.risk.expected_missed == pytest.approx(sum(n.expected_missed for n in state.risk.notes))


def test_auto_calibration_keeps_the_method_whose_cross_fitted_counts_come_closer():
    rng = np.random.default_rng(7)
    chances_of = lambda p: [TokenChance(i, i + 1, float(v)) for i, v in enumerate(p)]  # noqa: E731
    # A step: every token above P(PHI) 0.3 was PHI, none below. Isotonic fits it exactly, a logistic curve cannot.
    notes = [rng.beta(0.5, 3, 200) for _ in range(20)]
    reviewed = Reviewed.collect(
        [(chances_of(p), [], [Span(i, i + 1, "NAME") for i, v in enumerate(p) if v > 0.3]) for p in notes]
    )
    method, errors = choose_calibration(reviewed)
    assert set(errors) == {"isotonic", "platt"} and method == "isotonic" and errors["isotonic"] < errors["platt"]
    target = [("t", 200, chances_of(rng.beta(0.5, 3, 200)))]
    auto = estimate(target, reviewed, "auto")
    assert auto.expected_missed == estimate(target, reviewed, method).expected_missed
    assert auto.calibration["method"] == method and auto.calibration["cross_fitted_count_errors"] == errors
    # Nothing to choose by: no reviewed PHI, or a single note.
    assert choose_calibration(Reviewed.collect([(chances_of(p), [], []) for p in notes])) == ("isotonic", {})
    assert choose_calibration(Reviewed.collect([(chances_of(notes[0]), [], [Span(0, 1, "NAME")])])) == ("isotonic", {})
    assert "cross_fitted_count_errors" not in estimate(target, None, "auto").calibration
