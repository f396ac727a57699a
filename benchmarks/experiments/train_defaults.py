"""What a new user gets from ``hybriddeid train`` on MEDDOCAN, with and without the shipped recipe.

Trains with the command line exactly as a user would, on ``../shared/corpora/meddocan/train/brat``
(or --train), annotates dev with the saved model and scores it with ``hybriddeid evaluate`` (strict
micro P/R/F1 over the fine types), then prints the runs side by side:

  a  defaults: ``train --train T --dev D --out M`` (no --config, no --recipe: language detected, rules
     mapped onto the corpus's labels)
  b  ``train --recipe meddocan`` (word clusters built from the training text only)
  c  ``train --recipe meddocan --cluster-text D``: clusters from the train + dev text, as
     ``benchmarks/meddocan.py`` built them for the Benchmark figure of docs/explanation/meddocan.md (dev labels unused)

    python benchmarks/experiments/train_defaults.py [--runs a,b,c] [--jobs 1] [--work DIR] [--reuse]

Each run is a fresh process; the clusters cache is ``$HYBRIDDEID_CACHE_DIR`` (default: under --work).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout; this script is in benchmarks/experiments/
SHARED = ROOT.parent / "shared" / "corpora" / "meddocan"
README_DEV_F1 = 0.9702  # docs/explanation/meddocan.md, Benchmark (once the README's): meddocan.toml trained on train, "merged as configured" on dev
CLI = [sys.executable, "-c", "import sys; from hybriddeid.cli import main; sys.exit(main())"]


def runs(train: Path, dev: Path) -> dict[str, tuple[str, list[str]]]:
    return {
        "a": ("defaults (language detected, rules mapped)", []),
        "b": ("--recipe meddocan (clusters from train text)", ["--recipe", "meddocan"]),
        "c": ("--recipe meddocan --cluster-text dev", ["--recipe", "meddocan", "--cluster-text", str(dev)]),
    }


def cli(args: list[str], env: dict[str, str], log: Path | None = None) -> str:
    result = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True)
    if log is not None:
        log.write_text(result.stderr, encoding="utf-8")
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): hybriddeid {' '.join(args)}\n{result.stderr[-2000:]}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--work", type=Path, default=Path("/tmp/hybriddeid-train-defaults"))
    parser.add_argument("--runs", default="a,b,c", help="which runs, comma-separated (default a,b,c)")
    parser.add_argument("--jobs", type=int, default=1, help="train's --jobs (default 1: one core)")
    parser.add_argument("--reuse", action="store_true", help="score models already under --work instead of training")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("HYBRIDDEID_CACHE_DIR", str(args.work / "cache"))
    args.work.mkdir(parents=True, exist_ok=True)
    table = []
    for key in args.runs.split(","):
        label, extra = runs(args.train, args.dev)[key]
        model, out = args.work / f"model_{key}", args.work / f"dev_{key}"
        train_args = ["train", "--train", str(args.train), "--out", str(model), "--jobs", str(args.jobs), *extra]
        seconds = float("nan")
        if not (args.reuse and (model / "config.toml").is_file()):
            print(f"[{key}] hybriddeid {' '.join(train_args)}", flush=True)
            started = time.perf_counter()
            cli(train_args, env, args.work / f"train_{key}.log")
            seconds = time.perf_counter() - started
        cli(["-q", "annotate", "--model", str(model), str(args.dev), str(out), "--format", "brat"], env)
        report = json.loads(cli(["evaluate", str(args.dev), str(out), "--json"], env))
        micro = report["scores"]["strict"]["subtype"]["all"]["micro"]
        table.append((key, label, micro["precision"], micro["recall"], micro["f1"], seconds))
        print(f"[{key}] strict micro F1 {micro['f1']:.4f}", flush=True)
    print(f"\n{'run':4s} {'training':48s} {'P':>7s} {'R':>7s} {'F1':>7s} {'train s':>8s}")
    for key, label, p, r, f1, seconds in table:
        print(f"{key:4s} {label:48s} {p:7.4f} {r:7.4f} {f1:7.4f} {seconds:8.1f}")
    f1s = {key: f1 for key, _, _, _, f1, _ in table}
    if "a" in f1s and "b" in f1s:
        print(f"\na - b: {f1s['a'] - f1s['b']:+.4f} (target: within 0.005)")
    if "c" in f1s:
        print(
            f"c vs the documented Benchmark figure (docs/explanation/meddocan.md) for the same recipe and data: {f1s['c']:.4f} vs {README_DEV_F1}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
