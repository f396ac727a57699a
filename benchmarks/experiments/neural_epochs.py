"""The neural backend's training epochs and tagging, this checkout against another commit, side by side.

Trains each architecture (a table of ``benchmarks/neural_meddocan.toml``, fixed epochs, nothing held
out) on the first N MEDDOCAN training notes with the code of ``--baseline-ref`` (default ``main``,
exported with ``git archive``) and with this checkout's, alternately, each in its own process on
the same threads; then tags M dev notes with the model this checkout trained, loaded by each
code, and compares their spans. Prints seconds per epoch, notes per second and their ratios.

    python benchmarks/experiments/neural_epochs.py [--architectures bigru,cedi] [--train-notes 60]
        [--dev-notes 60] [--epochs 2] [--threads 1] [--baseline-ref main] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]  # this script is in benchmarks/experiments/
ROOT = BENCHMARKS.parent
SHARED = ROOT.parent / "shared" / "corpora" / "meddocan"


def notes(folder: Path, count: int) -> list:
    from hybriddeid.io import read_corpus

    return sorted(read_corpus(folder), key=lambda doc: doc.name)[:count]


def work(args: argparse.Namespace) -> None:
    """In a child process, with the code under test first on its path: train, or tag."""
    import torch

    from hybriddeid.backends.neural.settings import NeuralSettings
    from hybriddeid.backends.neural.tagger import NeuralTagger

    torch.set_num_threads(args.threads)
    job = json.loads(args.work)
    known = set(NeuralSettings.__dataclass_fields__)
    if job["do"] == "train":
        settings = {key: value for key, value in job["settings"].items() if key in known}
        tagger = NeuralTagger(language="es", **settings).fit(notes(Path(job["train"]), job["count"]))
        cumulative = [record["seconds"] for record in tagger.history_]
        epochs = [b - a for a, b in zip([0.0, *cumulative], cumulative)]
        if job.get("save"):
            tagger.to_disk(Path(job["save"]))
        print(json.dumps({"epoch_seconds": epochs, "loss": [record["loss"] for record in tagger.history_]}))
        return
    params = {key: value for key, value in job["settings"].items() if key in known}
    tagger = NeuralTagger.from_disk(Path(job["model"]), params)
    docs = notes(Path(job["dev"]), job["count"])
    tagger.predict_many(docs[:4])  # warm-up: first calls allocate
    started = time.perf_counter()
    spans = tagger.predict_many(docs)
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "seconds": seconds,
                "notes": len(docs),
                "spans": [[[s.start, s.end, s.label, round(s.score, 4)] for s in found] for found in spans],
            }
        )
    )


def run(code: Path, args: argparse.Namespace, job: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, __file__, "--threads", str(args.threads), "--work", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode:
        sys.exit(f"a child run failed ({code}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--neural-config", type=Path, default=BENCHMARKS / "neural_meddocan.toml")
    parser.add_argument("--architectures", default="bigru,cedi")
    parser.add_argument("--train-notes", type=int, default=60)
    parser.add_argument("--dev-notes", type=int, default=60)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clusters", action="store_true", help="embed the tables' word clusters (built first if missing)"
    )
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        work(args)
        return 0

    tables = tomllib.loads(args.neural_config.read_text(encoding="utf-8"))
    results = []
    with tempfile.TemporaryDirectory(prefix="neural-epochs-") as temp:
        baseline = Path(temp) / "baseline"
        baseline.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline_ref, "hybriddeid"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive, check=True)
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline_ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(
            f"baseline {args.baseline_ref} ({commit}) against this checkout; {args.train_notes} train notes, "
            f"{args.epochs} epochs, {args.dev_notes} dev notes, {args.threads} thread(s), CPU",
            flush=True,
        )
        for architecture in [name for name in args.architectures.split(",") if name]:
            settings = {
                **tables[architecture],
                "epochs": args.epochs,
                "patience": args.epochs,
                "dev_fraction": 0.0,
                "max_train_minutes": 0,
                "num_threads": args.threads,
                "device": "cpu",
                "verbose": False,
            }
            if settings.get("clusters") and args.clusters:
                from hybriddeid.knowledge.build import ensure_clusters
                from hybriddeid.pipeline.core import load_config

                ensure_clusters(load_config(BENCHMARKS / "meddocan.toml"), [args.train, args.dev], "es")
                settings["clusters"] = str(args.neural_config.parent / settings["clusters"])
            else:
                settings.pop("clusters", None)
            model = Path(temp) / architecture
            train = {"do": "train", "settings": settings, "train": str(args.train), "count": args.train_notes}
            before = run(baseline, args, train)
            after = run(ROOT, args, {**train, "save": str(model)})
            tag = {
                "do": "tag",
                "settings": settings,
                "model": str(model),
                "dev": str(args.dev),
                "count": args.dev_notes,
            }
            tag_before, tag_after = run(baseline, args, tag), run(ROOT, args, tag)
            same = sum(
                1 for a, b in zip(tag_before["spans"], tag_after["spans"]) if [s[:3] for s in a] == [s[:3] for s in b]
            )
            spans = sum(len(found) for found in tag_after["spans"])
            row = {
                "architecture": architecture,
                "epoch_s_before": round(sum(before["epoch_seconds"]) / len(before["epoch_seconds"]), 2),
                "epoch_s_after": round(sum(after["epoch_seconds"]) / len(after["epoch_seconds"]), 2),
                "loss_before": before["loss"],
                "loss_after": after["loss"],
                "notes_per_s_before": round(tag_before["notes"] / tag_before["seconds"], 1),
                "notes_per_s_after": round(tag_after["notes"] / tag_after["seconds"], 1),
                "notes_with_same_spans": same,
                "notes": len(tag_after["spans"]),
                "spans": spans,
            }
            row["epoch_speedup"] = round(row["epoch_s_before"] / row["epoch_s_after"], 2)
            row["tagging_speedup"] = round(row["notes_per_s_after"] / row["notes_per_s_before"], 2)
            results.append(row)
            print(
                f"{architecture}: s/epoch {row['epoch_s_before']} -> {row['epoch_s_after']} "
                f"(x{row['epoch_speedup']}); loss per epoch {before['loss']} -> {after['loss']}; tagging notes/s "
                f"{row['notes_per_s_before']} -> {row['notes_per_s_after']} (x{row['tagging_speedup']}); same spans "
                f"in {same}/{row['notes']} notes ({spans} spans, same weights)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"baseline": commit, "rows": results}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
