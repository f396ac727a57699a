"""Token CRF training settings on MEDDOCAN: L1/L2 weights and L-BFGS iterations, side by side.

Each setting trains the token CRF of ``benchmarks/meddocan.toml`` (its features and clusters) on
train and prints strict micro P/R/F1 on dev for the token CRF alone and for rules + token CRF
merged with the config's score floor and propagation (on MEDDOCAN the character CRF adds nothing
to that merge; docs/explanation/meddocan.md), plus training seconds. Settings run two at a time, one process
each, so their training times are comparable within a run.

    python benchmarks/experiments/crf_settings.py [--settings c1=0.05,c2=0.01,max_iterations=100 ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.build import ensure_clusters
from hybriddeid.pipeline.core import Pipeline, load_config

ROOT = Path(__file__).resolve().parents[2]  # the checkout; this script is in benchmarks/experiments/
SHARED = ROOT.parent / "shared" / "corpora" / "meddocan"
DEFAULT_SETTINGS = [
    "c1=0.05,c2=0.01,max_iterations=100",  # the configured setting
    "c1=0.05,c2=0.01,max_iterations=200",
    "c1=0.05,c2=0.01,max_iterations=400",
    "c1=0.1,c2=0.01,max_iterations=200",
    "c1=0.02,c2=0.01,max_iterations=200",
    "c1=0.05,c2=0.001,max_iterations=200",
    "c1=0.05,c2=0.1,max_iterations=200",
    "c1=0.2,c2=0.01,max_iterations=200",
]


def parse_setting(text: str) -> dict[str, Any]:
    """``"c1=0.05,max_iterations=200"`` -> ``{"c1": 0.05, "max_iterations": 200}``."""
    setting: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        setting[key.strip()] = int(value) if key.strip() == "max_iterations" else float(value)
    return setting


def run_setting(config: dict, setting: dict[str, Any], train_dir: Path, dev_dir: Path) -> dict[str, Any]:
    """Train rules + token CRF with ``setting`` and score them on dev (runs in a worker process)."""
    config = copy.deepcopy(config)
    config["pipeline"].update(components=["rule", "token"], precedence=["rule", "token"], focus={})
    config["token"].update(setting)
    train, dev = read_corpus(train_dir), read_corpus(dev_dir)
    started = time.perf_counter()
    pipeline = Pipeline(config).fit(train, n_jobs=1)
    train_seconds = time.perf_counter() - started
    predictions = {name: [pipeline.components[name].predict(doc) for doc in dev] for name in ("rule", "token")}
    scores: dict[str, Any] = {"setting": setting, "train_seconds": round(train_seconds, 1)}
    for name, sources in (("token", ["token"]), ("rule + token", ["rule", "token"])):
        merged = [pipeline.combine(doc, {n: predictions[n][i] for n in sources}, sources) for i, doc in enumerate(dev)]
        prf = evaluate(dev, [doc.with_spans(spans) for doc, spans in zip(dev, merged)]).score(
            "strict", "subtype", "micro"
        )
        scores[name] = {"precision": prf.precision, "recall": prf.recall, "f1": prf.f1}
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--config", type=Path, default=ROOT / "benchmarks" / "meddocan.toml")
    parser.add_argument("--settings", nargs="+", default=DEFAULT_SETTINGS, help="token CRF settings, key=value,...")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    config = load_config(args.config)
    for folder in ensure_clusters(config, [args.train, args.dev], config["pipeline"]["language"]):
        print(f"built word clusters from the train + dev text: {folder}", flush=True)
    settings = [parse_setting(text) for text in args.settings]
    print(f"{'setting':42s} {'token F1':>9s} {'rule+token P':>13s} {'R':>7s} {'F1':>7s} {'train s':>8s}", flush=True)
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(run_setting, config, s, args.train, args.dev) for s in settings]
        for text, future in zip(args.settings, futures):
            r = future.result()
            results.append(r)
            merged = r["rule + token"]
            print(
                f"{text:42s} {r['token']['f1']:9.4f} {merged['precision']:13.4f} {merged['recall']:7.4f} "
                f"{merged['f1']:7.4f} {r['train_seconds']:8.1f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
