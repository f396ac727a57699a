"""Soak run: many generated notes through `hybriddeid deid --jobs 2`, watching each worker's memory.

Writes ``--notes`` generated notes (the English test mix) as ``.txt`` files, runs ``hybriddeid deid``
on them in surrogate mode in a subprocess, and samples the resident memory (RSS, from /proc) of
every process of the run once a second. Prints throughput, each process's RSS at the start and end
of its life and its peak, the growth between the first and last tenth of its samples, and whether
every note came out with its audit (lost notes must be 0). Linux only (reads /proc).

    python benchmarks/soak.py [--notes 100000] [--jobs 2] [--model en] [--work DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybriddeid.io import write_document  # noqa: E402
from hybriddeid.synth import generate_corpus  # noqa: E402
from procinfo import family, resident_mb  # noqa: E402


def write_notes(folder: Path, count: int, seed: int) -> int:
    """``count`` generated notes as .txt files; their total size in characters."""
    folder.mkdir(parents=True, exist_ok=True)
    chars = 0
    for doc in generate_corpus(count, seed, "test"):
        write_document(doc.with_spans(()), folder, "text")
        chars += len(doc.text)
    return chars


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--model", default="en")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--work", type=Path, help="folder for notes and outputs (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="also write every figure and the RSS samples here")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="hybriddeid-soak-"))
    notes, out = work / "notes", work / "out"
    started = time.perf_counter()
    chars = write_notes(notes, args.notes, args.seed)
    print(
        f"{args.notes} notes ({chars / 1e6:.1f} M characters) written in {time.perf_counter() - started:.0f} s",
        flush=True,
    )

    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "hybriddeid.cli",
        "-q",
        "deid",
        "--model",
        args.model,
        str(notes),
        str(out),
        "--mode",
        "surrogate",
        "--key-file",
        str(work / "soak.key"),
        "--jobs",
        str(args.jobs),
    ]
    started = time.perf_counter()
    run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples: dict[int, list[tuple[float, float]]] = {}
    while run.poll() is None:
        now = time.perf_counter() - started
        for pid in family(run.pid):
            mb = resident_mb(pid)
            if mb is not None:
                samples.setdefault(pid, []).append((now, mb))
        time.sleep(1.0)
    seconds = time.perf_counter() - started
    stderr = run.stderr.read() if run.stderr else ""

    written = {path.stem for path in out.glob("*.txt")}
    audits = {path.name.split(".")[0] for path in (out / "audit").glob("*")} if (out / "audit").is_dir() else set()
    expected = {path.stem for path in notes.glob("*.txt")}
    lost = len(expected - written)
    without_audit = len(written - audits)
    print(
        f"deid --jobs {args.jobs}: exit {run.returncode}, {seconds:.0f} s, {args.notes / seconds:.1f} notes/s, "
        f"{chars / seconds / 1e3:.0f} k characters/s; {len(written)} outputs, lost notes {lost}, "
        f"outputs without an audit {without_audit}"
    )
    rows = []
    print(
        f"{'process':>8s} {'lived s':>8s} {'samples':>8s} {'start MB':>9s} {'end MB':>7s} {'peak MB':>8s} "
        f"{'first 10% MB':>13s} {'last 10% MB':>12s} {'growth':>7s}"
    )
    for pid, series in sorted(samples.items(), key=lambda item: item[1][0][0]):
        values = [mb for _, mb in series]
        tenth = max(1, len(values) // 10)
        first, last = sum(values[:tenth]) / tenth, sum(values[-tenth:]) / tenth
        row = {
            "pid": pid,
            "lived_s": series[-1][0] - series[0][0],
            "samples": len(values),
            "start_mb": values[0],
            "end_mb": values[-1],
            "peak_mb": max(values),
            "first_tenth_mb": first,
            "last_tenth_mb": last,
            "growth": last / first if first else 0.0,
        }
        rows.append(row)
        print(
            f"{pid:8d} {row['lived_s']:8.0f} {row['samples']:8d} {row['start_mb']:9.0f} {row['end_mb']:7.0f} "
            f"{row['peak_mb']:8.0f} {first:13.0f} {last:12.0f} {row['growth']:7.3f}"
        )
    if stderr.strip():
        print("stderr (last lines):\n" + "\n".join(stderr.strip().splitlines()[-5:]))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "notes": args.notes,
                    "characters": chars,
                    "jobs": args.jobs,
                    "seconds": seconds,
                    "exit": run.returncode,
                    "lost": lost,
                    "without_audit": without_audit,
                    "processes": rows,
                    "samples": {str(pid): s for pid, s in samples.items()},
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if run.returncode == 0 and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
