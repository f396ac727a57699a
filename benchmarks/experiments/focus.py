"""What the pipeline's ``focus`` setting changes on MEDDOCAN dev, measured in one process.

For a pipeline trained on train (``benchmarks/meddocan.py --save-model DIR``) with the settings of
``benchmarks/meddocan.toml``: strict micro F1 without focus and with focus at several margins, the
share of dev tokens the character CRF reads, and three end-to-end passes of ``Pipeline.predict``
in this fresh process (the first with cold caches). Also shows one note where a short margin goes
wrong with the bundled Spanish model.

    python benchmarks/experiments/focus.py --model DIR [--margins 2,4,8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hybriddeid.classifiers.focus import runs_in_regions
from hybriddeid.core.document import Document
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline, load_config

BENCHMARKS = Path(__file__).resolve().parents[1]  # this script is in benchmarks/experiments/
SHARED = BENCHMARKS.parents[1] / "shared" / "corpora" / "meddocan"
# Made-up note (no real PHI); "Fecha de ingreso" is a field name, not a name.
EXAMPLE = "Nombre: Zebulon Quagmire. NHC: 4417920. Fecha de ingreso: 14/03/2019."


def read_share(pipeline: Pipeline, dev: list[Document]) -> float:
    """Share of dev tokens inside the runs the focused character CRF tags."""
    settings = pipeline.config["pipeline"]
    order = pipeline.precedence
    claim = float(settings["min_score"].get("token", 0.0)) if order.index("token") < order.index("char") else None
    total = read = 0
    for doc in dev:
        note = pipeline.analyse(doc)
        _, regions = pipeline.components["token"].predict_with_focus(
            note, float(settings["focus_below"]), int(settings["focus_margin"]), claim
        )
        starts = [start for start, _ in regions]
        for line in note.lines:
            tokens = line.tokens
            total += len(tokens)
            read += sum(end - first for first, end in runs_in_regions(tokens, regions, starts))
    return read / total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a pipeline trained on MEDDOCAN train")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--margins", default="2,4,8")
    args = parser.parse_args()

    dev = read_corpus(args.dev)
    pipeline = Pipeline.load(args.model)
    pipeline.config["pipeline"].update(load_config(BENCHMARKS / "meddocan.toml")["pipeline"])
    settings = pipeline.config["pipeline"]
    configured = dict(settings)

    passes = []  # first: cold caches, as a user's run over new notes starts
    for _ in range(3):
        started = time.perf_counter()
        for doc in dev:
            doc.with_spans(pipeline.predict(doc))
        passes.append(len(dev) / (time.perf_counter() - started))
    print(
        f"{len(dev)} dev notes; Pipeline.predict as configured (margin {configured['focus_margin']}), "
        f"three passes: " + ", ".join(f"{rate:.1f}" for rate in passes) + " notes/s"
    )

    print(f"\n{'setting':24s} {'F1':>8s} {'P':>7s} {'R':>7s} {'char CRF reads':>15s}")
    settings["focus"] = {}
    prf = evaluate(dev, [doc.with_spans(pipeline.predict(doc)) for doc in dev]).score("strict")
    print(f"{'no focus':24s} {prf.f1:8.5f} {prf.precision:7.4f} {prf.recall:7.4f} {'100%':>15s}")
    settings["focus"] = configured["focus"]
    for margin in [int(m) for m in args.margins.split(",")]:
        settings["focus_margin"] = margin
        prf = evaluate(dev, [doc.with_spans(pipeline.predict(doc)) for doc in dev]).score("strict")
        print(
            f"{f'focus, margin {margin}':24s} {prf.f1:8.5f} {prf.precision:7.4f} {prf.recall:7.4f} "
            f"{read_share(pipeline, dev):14.1%}"
        )
    settings.update(configured)

    spanish = Pipeline.load("es")
    print(f"\nbundled es model on {EXAMPLE!r}:")
    for margin in (2, int(configured["focus_margin"])):
        spanish.config["pipeline"]["focus_margin"] = margin
        found = [EXAMPLE[s.start : s.end] for s in spanish.predict(EXAMPLE)]
        print(f"  margin {margin}: {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
