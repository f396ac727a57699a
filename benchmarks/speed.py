"""Annotation speed of saved pipelines, measured side by side in one run.

Each model tags the same notes in alternating rounds (one process, one core, feature extraction
included), so machine noise hits all of them alike; the best round of each is reported, with
every model's speed as a ratio to the first one's.

    python benchmarks/speed.py --model es --model /tmp/new-model [--notes DIR] [--rounds 3] [--limit 100]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hybriddeid.io import read_corpus
from hybriddeid.pipeline import Pipeline

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, help="model folder or bundled name (repeat)")
    parser.add_argument("--notes", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=100, help="notes per round (default 100)")
    args = parser.parse_args()

    docs = read_corpus(args.notes)[: args.limit]
    pipelines = {name: Pipeline.load(name) for name in args.model}
    for pipeline in pipelines.values():  # warm caches and lazy loads before timing
        for doc in docs[:10]:
            pipeline.predict(doc)
    best = dict.fromkeys(pipelines, float("inf"))
    by_component = {name: {} for name in pipelines}
    for _ in range(args.rounds):
        for name, pipeline in pipelines.items():
            started = time.perf_counter()
            for doc in docs:
                pipeline.predict(doc)
            best[name] = min(best[name], time.perf_counter() - started)
    for name, pipeline in pipelines.items():
        for component_name, component in pipeline.components.items():
            started = time.perf_counter()
            for doc in docs:
                component.predict(doc)
            by_component[name][component_name] = (time.perf_counter() - started) / len(docs) * 1000
    first = args.model[0]
    print(f"{len(docs)} notes from {args.notes}, best of {args.rounds} rounds, one process")
    print(f"{'model':40s} {'notes/s':>8s} {'ms/note':>8s} {'speed vs first':>15s}  per component ms/note")
    for name in args.model:
        parts = ", ".join(f"{c} {ms:.1f}" for c, ms in by_component[name].items())
        print(f"{name:40s} {len(docs) / best[name]:8.1f} {best[name] / len(docs) * 1000:8.2f} "
              f"{best[first] / best[name]:15.3f}  {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
