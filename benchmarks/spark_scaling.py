"""Spark's scaling from one core to two: ``spark-deid``'s job in local[1] and local[2] on the same notes,
side by side in one run.

    python benchmarks/spark_scaling.py [--notes 2000] [--rounds 2] [--model es] [--work DIR] [--json OUT]

The notes are generated from MEDDOCAN dev as ``benchmarks/spark_deid.py`` generates them (a patient's
1-7 notes share one identity block). Each round runs local[1] then local[2] (the next round the other
way round, so a load that rises or falls during the run favours neither), each in its own Python
process with a fresh JVM (a JVM that ran a job before runs the next one faster): surrogate mode, one key, ``--patient-pattern``, Parquet out, as ``hybriddeid spark-deid`` runs it.
Printed per run: session start-up, job wall seconds, notes/s and CPU seconds (the JVM and its Python
workers), the machine's load average before and after; then local[2]'s speed-up over local[1] (median
notes/s of the rounds) and its efficiency (speed-up / 2). Every run's output must equal the first's
row for row, or the script fails. Two cores is all the machine this was written on has: more cores
are not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from spark_deid import generate, run_spark  # benchmarks/ is this script's folder

CORES = (1, 2)


def run_once(cores: int, notes: Path, out: Path, model: str, key_file: Path) -> dict[str, float]:
    """One Spark session in local[cores] (``spark_deid.run_spark``): start-up and job seconds, the job's
    CPU seconds, and the load average before and after."""
    load_before = os.getloadavg()[0]
    run = run_spark(notes, out, model, key_file, cores=cores)
    return {
        "cores": cores,
        "session_s": round(run["session_s"], 2),
        "job_s": round(run["job_s"], 2),
        "cpu_s": round(run["cpu_s"], 1),
        "notes_per_s": round(run["notes"] / run["job_s"], 2),
        "failed": run["failed"],
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def run_in_child(cores: int, notes: Path, out: Path, model: str, key_file: Path) -> dict[str, float]:
    """``run_once`` in a new Python process (and so a new JVM); its figures."""
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--one",
            str(cores),
            "--notes-dir",
            str(notes),
            "--out",
            str(out),
            "--model",
            model,
            "--key-file",
            str(key_file),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(parquet: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet, columns=["note_id", "deid_text"]).to_pydict()
    return dict(zip(table["note_id"], table["deid_text"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--model", default="es", help="model folder or bundled name (default es: the notes are Spanish)"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/hybriddeid-spark-scaling"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one run in local[ONE]
    parser.add_argument("--notes-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--key-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_once(args.one, args.notes_dir, args.out, args.model, args.key_file)))
        return
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    from hybriddeid.surrogates.keys import create_key_file

    create_key_file(args.work / "deid.key")
    notes, patients = generate(args.work / "notes", args.notes, args.seed)
    chars = sum(path.stat().st_size for path in (args.work / "notes").glob("*.txt"))
    print(
        f"{notes} notes of {patients} patients, {chars / notes:.0f} bytes/note; {os.cpu_count()} CPUs; "
        f"load {os.getloadavg()}",
        flush=True,
    )

    runs, first = [], None
    for round_ in range(args.rounds):
        for cores in CORES if round_ % 2 == 0 else CORES[::-1]:
            out = args.work / f"out-{round_}-{cores}"
            run = {"round": round_, **run_in_child(cores, args.work / "notes", out, args.model, args.work / "deid.key")}
            got = rows(out)
            first = first if first is not None else got
            if got != first:
                sys.exit(f"local[{cores}] in round {round_} wrote other rows than the first run")
            shutil.rmtree(out)
            runs.append(run)
            print(json.dumps(run), flush=True)

    median = {cores: statistics.median(r["notes_per_s"] for r in runs if r["cores"] == cores) for cores in CORES}
    speedup = median[2] / median[1]
    result = {
        "notes": notes,
        "patients": patients,
        "bytes_per_note": round(chars / notes),
        "model": args.model,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "runs": runs,
        "median_notes_per_s": {f"local[{c}]": median[c] for c in CORES},
        "speedup": round(speedup, 3),
        "efficiency": round(speedup / 2, 3),
    }
    print(
        "\n| run | round | start-up s | job s | notes/s | CPU s | load before, after |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    )
    for r in runs:
        print(
            f"| local[{r['cores']}] | {r['round']} | {r['session_s']:.1f} | {r['job_s']:.1f} | {r['notes_per_s']:.2f} "
            f"| {r['cpu_s']:.0f} | {r['load_before']:.1f}, {r['load_after']:.1f} |"
        )
    print(
        f"\nlocal[2] / local[1], median notes/s of {args.rounds} rounds: {speedup:.2f}x (efficiency {speedup / 2:.0%})"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
