"""How much of a note the focused character CRF reads, per bundled model and focus setting.

With ``focus``, the character CRF reads only the runs of tokens around stretches where the token
CRF is unsure (P(O) below ``focus_below``) or tags PHI, widened by ``focus_margin`` tokens. This
prints, for the bundled English model on the generated test mix (seed 2) and the bundled Spanish
model on MEDDOCAN dev (first ``--notes`` notes each), the share of token characters inside those
runs and the share of lines touched, at the shipped setting and narrower ones, beside what makes
the two sets differ: tokens per line and the share of tokens inside gold PHI.

    python benchmarks/experiments/focus_share.py [--notes 100]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hybriddeid.classifiers.focus import runs_in_regions
from hybriddeid.core.document import Document
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

# the shared corpora sit beside the checkout; this script is in benchmarks/experiments/
MEDDOCAN_DEV = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
SETTINGS = ((0.999, 8), (0.999, 4), (0.999, 2), (0.99, 2))


def note_shape(pipeline: Pipeline, docs: list[Document]) -> tuple[float, int, float]:
    """Mean and median tokens per non-empty line, and the share of tokens inside gold spans."""
    lengths, tokens, inside = [], 0, 0
    for doc in docs:
        note = pipeline.analyse(doc)
        lengths.extend(len(line.tokens) for line in note.lines if line.tokens)
        spans = sorted((span.start, span.end) for span in doc.spans)
        for tok in note.tokens:
            tokens += 1
            inside += any(start <= tok.start < end for start, end in spans)
    lengths.sort()
    return sum(lengths) / len(lengths), lengths[len(lengths) // 2], inside / tokens


def read_share(pipeline: Pipeline, docs: list[Document], below: float, margin: int) -> tuple[float, float]:
    """Share of token characters the focused character CRF reads, and share of lines it touches."""
    token_crf = pipeline.components["token"]
    total = read = lines = touched = 0
    for doc in docs:
        note = pipeline.analyse(doc)
        _, regions = token_crf.predict_with_focus(note, below, margin, None)
        starts = [start for start, _ in regions]
        for line in note.lines:
            if not line.tokens:
                continue
            lines += 1
            total += sum(tok.end - tok.start for tok in line.tokens)
            runs = runs_in_regions(line.tokens, regions, starts)
            touched += bool(runs)
            read += sum(line.tokens[i].end - line.tokens[i].start for first, end in runs for i in range(first, end))
    return read / total, touched / lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100)
    args = parser.parse_args()
    sets = {"en (test mix, seed 2)": ("en", list(generate_corpus(args.notes, 2, "test")))}
    if MEDDOCAN_DEV.is_dir():
        sets["es (MEDDOCAN dev)"] = ("es", read_corpus(MEDDOCAN_DEV)[: args.notes])
    for name, (model, docs) in sets.items():
        pipeline = Pipeline.load(model)
        mean, median, phi = note_shape(pipeline, docs)
        print(
            f"{name}: {len(docs)} notes, tokens per line mean {mean:.1f} median {median}, tokens inside PHI {phi:.1%}"
        )
        for below, margin in SETTINGS:
            share, lines = read_share(pipeline, docs, below, margin)
            print(
                f"  focus_below {below} margin {margin}: reads {share:.1%} of token characters, touches {lines:.1%} of lines"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
