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

``--reviewed`` takes a list (``1,2,5,10,20,50,100``): each count is run on the same splits, and a last
table per corpus gives, for each count, how many splits the default estimate's interval (``auto``, as
``hybriddeid risk`` and the review page give it) held the truth in, how many fell back to the raw sum for
too little review (``risk.uncalibrated_because``), and the interval's median width over the truth.

    python benchmarks/risk.py [--n 500] [--splits 5] [--reviewed 50|1,2,5,...] [--plot docs/images] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from hybriddeid.evaluation.risk import Reviewed, estimate, outcomes, plot_reliability
from hybriddeid.io import read_corpus
from hybriddeid.review.folders import ReadNote
from hybriddeid.runs.processing import NoteSettings, load_model, process_notes
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
        row = {
            "split": split,
            "notes": len(rest),
            "tokens": sum(n[1] for n in notes),
            "true_missed": truth,
            "reviewed_missed": float(sample.y.sum()),
        }
        for method, reviewed in (("raw", None), ("isotonic", sample), ("platt", sample), ("auto", sample)):
            result = estimate(notes, reviewed, "isotonic" if method == "raw" else method, seed=split)
            row[method] = {
                "estimate": result.expected_missed,
                "low": result.low,
                "high": result.high,
                "relative_error": _error(result.expected_missed, truth),
                "covers": result.low <= truth <= result.high,
                "chose": result.calibration.get("method"),
                "uncalibrated_because": result.uncalibrated_because,
            }
        untagged_rest = sum(len(chances) for _, _, chances in notes)
        rate = row["reviewed_missed"] / len(sample.y) * untagged_rest if len(sample.y) else 0.0
        row["rate"] = {"estimate": rate, "relative_error": _error(rate, truth)}
        rows.append(row)
        if plot_dir is not None and split == 0:
            plot_reliability(sample, "isotonic", plot_dir / f"risk_reliability_{name}.png")
    return {"corpus": name, "reviewed": reviewed_count, "splits": rows}


def _error(estimate: float, truth: float) -> float:
    return (estimate - truth) / truth if truth else float("nan")


def sampling_within(reviewed_missed: float, true_missed: float, limit: float = 0.30) -> float:
    """The chance that an unbiased estimator lands within ``limit`` of the truth when sampling is its
    only error: relative error ~ normal with standard deviation sqrt(1/m + 1/M) (m missed tokens
    seen in the reviewed notes, M in the estimated ones; at least 1 each)."""
    deviation = math.sqrt(1 / max(reviewed_missed, 1.0) + 1 / max(true_missed, 1.0))
    return math.erf(limit / (deviation * math.sqrt(2)))


def show(result: dict) -> None:
    print(f"\n== {result['corpus']}, {result['reviewed']} reviewed notes a split")
    print(
        f"{'split':>5} {'notes':>5} {'tokens':>7} {'true':>6} | "
        + " | ".join(f"{m:>8} est [95% interval]   err  in" for m in METHODS)
        + " | auto chose"
    )
    for row in result["splits"]:
        cells = []
        for method in METHODS:
            r = row[method]
            cells.append(
                f"{r['estimate']:8.1f} [{r['low']:6.1f},{r['high']:6.1f}] {100 * r['relative_error']:+5.0f}% "
                f"{'y' if r['covers'] else 'n':>2}"
            )
        print(
            f"{row['split']:>5} {row['notes']:>5} {row['tokens']:>7} {row['true_missed']:>6.0f} | "
            + " | ".join(cells)
            + f" | {row['auto']['chose']}"
        )
    for method in METHODS:
        errors = [abs(row[method]["relative_error"]) for row in result["splits"]]
        within = sum(error <= 0.30 for error in errors)
        covers = sum(row[method]["covers"] for row in result["splits"])
        print(
            f"  {method:>8}: mean |relative error| {100 * np.mean(errors):.0f}%, within 30% in {within}/{len(errors)} "
            f"splits, interval holds the truth in {covers}/{len(errors)}"
        )
    splits = result["splits"]
    rate_errors = [abs(row["rate"]["relative_error"]) for row in splits]
    print(
        f"  {'rate':>8}: mean |relative error| {100 * np.mean(rate_errors):.0f}%, within 30% in "
        f"{sum(error <= 0.30 for error in rate_errors)}/{len(splits)} splits (no model: the reviewed notes' miss rate)"
    )
    expected = sum(sampling_within(row["reviewed_missed"], row["true_missed"]) for row in splits)
    seen = [row["reviewed_missed"] for row in splits]
    print(
        f"  sampling alone: an unbiased estimator is within 30% in about {expected:.1f}/{len(splits)} splits "
        f"(missed tokens among the reviewed notes: {min(seen):.0f}-{max(seen):.0f} a split)"
    )


def show_coverage(results: list[dict]) -> None:
    """One line per number of reviewed notes: the default (auto) interval's coverage, fallbacks, width."""
    print(f"\n== {results[0]['corpus']}: the default estimate (auto) by number of reviewed notes")
    print(f"{'reviewed':>8} {'holds truth':>11} {'fell back':>9} {'width/truth':>11} {'missed seen':>11}")
    for result in results:
        rows = result["splits"]
        covers = sum(row["auto"]["covers"] for row in rows)
        fell = sum(row["auto"]["uncalibrated_because"] is not None for row in rows)
        widths = [(row["auto"]["high"] - row["auto"]["low"]) / row["true_missed"] for row in rows if row["true_missed"]]
        seen = [row["reviewed_missed"] for row in rows]
        print(
            f"{result['reviewed']:>8} {covers:>5}/{len(rows):<5} {fell:>4}/{len(rows):<4} "
            f"{np.median(widths) if widths else float('nan'):>11.2f} {min(seen):>5.0f}-{max(seen):<5.0f}"
        )


def _counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("a list of positive numbers of reviewed notes, e.g. 1,2,5,10,20,50,100")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="generated English test-mix notes (default 500)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument(
        "--reviewed",
        type=_counts,
        default=[50],
        help="reviewed notes per split, or a comma-separated list of such numbers (default 50)",
    )
    parser.add_argument("--meddocan-notes", type=int, default=0, help="MEDDOCAN dev notes to use (default: all)")
    parser.add_argument("--plot", type=Path, help="folder for the reliability diagrams")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    started = time.perf_counter()
    english = list(generate_corpus(args.n, args.seed, "test", "en"))
    corpora = [("en-test-mix", lambda: read("en", english))]
    if MEDDOCAN_DEV.is_dir():
        dev = read_corpus(MEDDOCAN_DEV)
        dev = dev[: args.meddocan_notes] if args.meddocan_notes else dev
        corpora.append(("meddocan-dev", lambda: read("es", dev)))
    for name, reading in corpora:
        items = reading()
        by_count = [
            run_corpus(name, items, args.splits, count, args.plot if count == args.reviewed[0] else None)
            for count in args.reviewed
        ]
        for result in by_count:
            show(result)
        if len(by_count) > 1:
            show_coverage(by_count)
        results.extend(by_count)
        print(f"  ({time.perf_counter() - started:.0f} s so far)")
    if not MEDDOCAN_DEV.is_dir():
        print(f"\n(MEDDOCAN dev not found at {MEDDOCAN_DEV}: skipped)", file=sys.stderr)
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
