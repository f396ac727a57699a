"""Character-CRF design choices on MEDDOCAN, side by side in one run.

Trains each variant on train and scores it on dev (strict micro F1 with fine types, and
boundaries alone), with its training time and tagging speed (notes/second, one process).
Speeds are comparable only within one run of this script.

    python benchmarks/experiments/char_crf_choices.py [--train DIR] [--dev DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hybriddeid.classifiers.char_crf import CharCRF
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus

# the shared corpora sit beside the checkout; this script is in benchmarks/experiments/
SHARED = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "meddocan"
BASE = {"language": "es", "max_iterations": 100, "label_level": "phi"}
VARIANTS = {
    "full features, window [-5,5]": {"thin_interior": False, "radius": 5, "bigram_radius": 3, "trigram_radius": 2},
    "thin inside tokens, [-5,5]": {"thin_interior": True, "radius": 5, "bigram_radius": 3, "trigram_radius": 2},
    "thin, [-4,4] (default)": {"thin_interior": True},
    "thin, [-4,4], learned lexicon": {"thin_interior": True, "lexicon": True},
    "thin, [-2,2], learned lexicon": {
        "thin_interior": True,
        "lexicon": True,
        "radius": 2,
        "bigram_radius": 1,
        "trigram_radius": 1,
    },
    "thin, [-4,4], lexicon, safe vocabulary": {"thin_interior": True, "lexicon": True, "safe_min_count": 3},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    args = parser.parse_args()
    train, dev = read_corpus(args.train), read_corpus(args.dev)
    print(f"{'variant':42s} {'F1':>7s} {'bound F1':>9s} {'train s':>8s} {'notes/s':>8s}", flush=True)
    for name, params in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        model = CharCRF(**BASE, **params)
        started = time.perf_counter()
        model.fit(train)
        fit_seconds = time.perf_counter() - started
        started = time.perf_counter()
        predicted = []
        for doc in dev:
            predicted.append(doc.with_spans(model.predict(doc)))
        rate = len(dev) / (time.perf_counter() - started)
        typed = evaluate(dev, predicted).score("strict").f1
        untyped = (
            evaluate(
                [d.with_spans(s.with_label("PHI") for s in d.spans) for d in dev],
                [d.with_spans(s.with_label("PHI") for s in d.spans) for d in predicted],
            )
            .score("strict")
            .f1
        )
        print(f"{name:42s} {typed:7.4f} {untyped:9.4f} {fit_seconds:8.1f} {rate:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
