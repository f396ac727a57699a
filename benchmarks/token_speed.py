"""The token CRF alone, fast engine against crfsuite, side by side in one run.

``component.predict(doc)`` over the same notes per engine in alternating rounds, after a warm-up
pass (caches warm, as in a long batch); the best round of each is reported. English: the generated
test mix (seed 2); Spanish: MEDDOCAN dev when ``../shared/corpora/meddocan/dev/brat`` exists.
``--analysed`` times notes analysed beforehand (tokens and line facts shared by every component
in a pipeline), i.e. the token CRF's own work only.

    python benchmarks/token_speed.py [--notes 100] [--rounds 3] [--analysed]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hybriddeid import Pipeline
from hybriddeid.features.analysis import analyse
from hybriddeid.io import read_corpus
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
ENGINES = ("crfsuite", "fast")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--analysed", action="store_true", help="analyse the notes before timing")
    args = parser.parse_args()
    sets = {"en-test-mix": ("en", list(generate_corpus(args.notes, 2, "test")))}
    if MEDDOCAN_DEV.is_dir():
        sets["meddocan-dev"] = ("es", read_corpus(MEDDOCAN_DEV)[: args.notes])
    print(
        f"token CRF alone, best of {args.rounds} rounds after a warm-up pass, one process"
        + (", notes analysed beforehand" if args.analysed else "")
    )
    for name, (model, docs) in sets.items():
        component = Pipeline.load(model).components["token"]
        notes = [analyse(doc, component.language) for doc in docs] if args.analysed else docs
        best = dict.fromkeys(ENGINES, float("inf"))
        for round_ in range(args.rounds + 1):  # round 0 warms caches
            for engine in ENGINES:
                component.engine = engine
                started = time.perf_counter()
                for note in notes:
                    component.predict(note)
                if round_:
                    best[engine] = min(best[engine], time.perf_counter() - started)
        tokens = sum(len(analyse(doc, component.language).tokens) for doc in docs)
        parts = "  ".join(
            f"{engine} {best[engine]:.3f} s ({best[engine] / tokens * 1e6:.2f} us/token)" for engine in ENGINES
        )
        ratio = best["crfsuite"] / best["fast"]
        print(f"{name:14s} {len(docs)} notes, {tokens} tokens: {parts}  crfsuite/fast {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
