"""Residual risk (``hybriddeid risk``) against the truth: the estimated number of PHI tokens a
model missed, beside the number it really missed (gold known), uncalibrated and calibrated on 50
reviewed notes (gold spans standing in for a reviewer's).

Corpora: generated English notes of the test mix (``hybriddeid synth --mix test``; the bundled
English model) and MEDDOCAN dev (the bundled Spanish model, ``../shared/corpora/meddocan/dev``).
Each corpus is read by the model once; then ``--splits`` times, 50 notes drawn at random are the
reviewed ones and the estimate is made for the others. Printed per corpus and split: tokens,
true missed PHI tokens, the raw estimate and the isotonic, Platt and auto (the one cross-fitting
picks, ``risk.choose_calibration``) estimates with their 95% intervals, the relative error of each
and whether the interval holds the truth; then the mean absolute relative error and how many
splits are within 30%. Beside them, for scale, the plain rate
(missed PHI tokens among the reviewed notes' untagged tokens, times the others' untagged tokens:
no model) and how many splits sampling noise alone lets an unbiased estimator bring within 30%:
with m missed tokens among the reviewed notes and M in the others, its relative error has a standard
deviation of about sqrt(1/m + 1/M) (``sampling_within``). ``--plot DIR`` draws each corpus's
reliability diagram (first split's reviewed notes) into ``DIR/risk_reliability_<corpus>.png``.

    python benchmarks/risk.py [--n 500] [--splits 5] [--reviewed 50] [--plot docs/images] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from hybriddeid.io import read_corpus
from hybriddeid.processing import NoteSettings, load_model, process_notes
from hybriddeid.reviewing import ReadNote
from hybriddeid.risk import Reviewed, estimate, outcomes, plot_reliability
from hybriddeid.synth import generate_corpus

METHODS = ("raw", "isotonic", "platt", "auto")
MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"


def read(model: str, docs: list) -> list[tuple[ReadNote, object]]:
    pipeline = load_model(model)
    settings = NoteSettings(chances=True)
    out = []
    for doc in docs:
        note = process_notes(pipeline, [doc.with_spans(())], settings)[0]
        out.append((ReadNote(note.document, note.chances), doc))
    return out


def run_corpus(name: str, items: list, splits: int, reviewed_count: int, plot_dir: Path | None) -> dict:
    rows = []
    for split in range(splits):
        rng = np.random.default_rng(split)
        order = rng.permutation(len(items))
        review, rest = [items[i] for i in order[:reviewed_count]], [items[i] for i in order[reviewed_count:]]
        sample = Reviewed.collect([(note.chances, note.doc.spans, gold.spans) for note, gold in review])
        truth = sum(float(outcomes(note.chances, note.doc.spans, gold.spans)[1].sum()) for note, gold in rest)
        notes = [(note.name, len(note.chances), note.untagged()) for note, _ in rest]
        row = {"split": split, "notes": len(rest), "tokens": sum(n[1] for n in notes), "true_missed": truth,
               "reviewed_missed": float(sample.y.sum())}
        for method, reviewed in (("raw", None), ("isotonic", sample), ("platt", sample), ("auto", sample)):
            result = estimate(notes, reviewed, "isotonic" if method == "raw" else method, seed=split)
            row[method] = {"estimate": result.expected_missed, "low": result.low, "high": result.high,
                           "relative_error": _error(result.expected_missed, truth),
                           "covers": result.low <= truth <= result.high, "chose": result.calibration.get("method")}
        untagged_rest = sum(len(chances) for _, _, chances in notes)
        rate = row["reviewed_missed"] / len(sample.y) * untagged_rest if len(sample.y) else 0.0
        row["rate"] = {"estimate": rate, "relative_error": _error(rate, truth)}
        rows.append(row)
        if plot_dir is not None and split == 0:
            plot_reliability(sample, "isotonic", plot_dir / f"risk_reliability_{name}.png")
    return {"corpus": name, "splits": rows}


def _error(estimate: float, truth: float) -> float:
    return (estimate - truth) / truth if truth else float("nan")


def sampling_within(reviewed_missed: float, true_missed: float, limit: float = 0.30) -> float:
    """The chance that an unbiased estimator lands within ``limit`` of the truth when sampling is its
    only error: relative error ~ normal with standard deviation sqrt(1/m + 1/M) (m missed tokens
    seen in the reviewed notes, M in the estimated ones; at least 1 each)."""
    deviation = math.sqrt(1 / max(reviewed_missed, 1.0) + 1 / max(true_missed, 1.0))
    return math.erf(limit / (deviation * math.sqrt(2)))


def show(result: dict) -> None:
    print(f"\n== {result['corpus']}")
    print(f"{'split':>5} {'notes':>5} {'tokens':>7} {'true':>6} | " + " | ".join(
        f"{m:>8} est [95% interval]   err  in" for m in METHODS) + " | auto chose")
    for row in result["splits"]:
        cells = []
        for method in METHODS:
            r = row[method]
            cells.append(f"{r['estimate']:8.1f} [{r['low']:6.1f},{r['high']:6.1f}] {100 * r['relative_error']:+5.0f}% "
                         f"{'y' if r['covers'] else 'n':>2}")
        print(f"{row['split']:>5} {row['notes']:>5} {row['tokens']:>7} {row['true_missed']:>6.0f} | " + " | ".join(cells)
              + f" | {row['auto']['chose']}")
    for method in METHODS:
        errors = [abs(row[method]["relative_error"]) for row in result["splits"]]
        within = sum(error <= 0.30 for error in errors)
        covers = sum(row[method]["covers"] for row in result["splits"])
        print(f"  {method:>8}: mean |relative error| {100 * np.mean(errors):.0f}%, within 30% in {within}/{len(errors)} "
              f"splits, interval holds the truth in {covers}/{len(errors)}")
    splits = result["splits"]
    rate_errors = [abs(row["rate"]["relative_error"]) for row in splits]
    print(f"  {'rate':>8}: mean |relative error| {100 * np.mean(rate_errors):.0f}%, within 30% in "
          f"{sum(error <= 0.30 for error in rate_errors)}/{len(splits)} splits (no model: the reviewed notes' miss rate)")
    expected = sum(sampling_within(row["reviewed_missed"], row["true_missed"]) for row in splits)
    seen = [row["reviewed_missed"] for row in splits]
    print(f"  sampling alone: an unbiased estimator is within 30% in about {expected:.1f}/{len(splits)} splits "
          f"(missed tokens among the reviewed notes: {min(seen):.0f}-{max(seen):.0f} a split)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="generated English test-mix notes (default 500)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--reviewed", type=int, default=50, help="reviewed notes per split (default 50)")
    parser.add_argument("--meddocan-notes", type=int, default=0, help="MEDDOCAN dev notes to use (default: all)")
    parser.add_argument("--plot", type=Path, help="folder for the reliability diagrams")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    started = time.perf_counter()
    english = list(generate_corpus(args.n, args.seed, "test", "en"))
    results.append(run_corpus("en-test-mix", read("en", english), args.splits, args.reviewed, args.plot))
    show(results[-1])
    print(f"  ({time.perf_counter() - started:.0f} s so far)")
    if MEDDOCAN_DEV.is_dir():
        dev = read_corpus(MEDDOCAN_DEV)
        dev = dev[:args.meddocan_notes] if args.meddocan_notes else dev
        results.append(run_corpus("meddocan-dev", read("es", dev), args.splits, args.reviewed, args.plot))
        show(results[-1])
    else:
        print(f"\n(MEDDOCAN dev not found at {MEDDOCAN_DEV}: skipped)", file=sys.stderr)
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
