"""Spark (local[2]) against the single-machine batch CLI (``hybriddeid deid --jobs 2``) on generated notes.

    python benchmarks/spark_deid.py [--notes 20000] [--model es] [--work DIR]

Generates ``--notes`` notes from MEDDOCAN dev (``../shared/corpora/meddocan/dev/brat``): each patient
keeps one dev note's identity block (name, NHC, address: the lines before "Datos asistenciales") and
each of its 1-7 notes takes the rest (dates, doctor, clinical text) of another dev note, so a patient's
notes share names and every note is a realistic length. Both runs de-identify the same folder of
``.txt`` notes in surrogate mode with one key and ``--patient-pattern``; the script times them, checks
that every Spark output equals the batch output byte for byte, and prints notes/second (wall), CPU
seconds (the batch CLI and its workers; Spark's JVM and Python workers), Spark's overhead in both,
and the core-hours a 100M-note job would take at Spark's measured notes per CPU-second.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEDDOCAN_DEV = ROOT.parent / "shared" / "corpora" / "meddocan" / "dev" / "brat"
PATIENT_PATTERN = r"^(p\d+)_"
CORES = 2


def split_note(text: str) -> tuple[str, str]:
    """(identity block, rest): MEDDOCAN notes list the patient's identity before "Datos asistenciales"."""
    at = text.find("Datos asistenciales")
    return (text[:at], text[at:]) if at > 0 else ("", text)


def generate(out_dir: Path, count: int, seed: int) -> tuple[int, int]:
    """Write ``count`` notes as ``p<patient>_<visit>.txt``; returns (notes, patients)."""
    sources = [split_note(path.read_bytes().decode("utf-8")) for path in sorted(MEDDOCAN_DEV.glob("*.txt"))]
    with_identity = [identity for identity, _ in sources if identity]
    rng = random.Random(seed)
    out_dir.mkdir(parents=True)
    written = patients = 0
    while written < count:
        identity = rng.choice(with_identity)
        for visit in range(min(rng.randint(1, 7), count - written)):
            body = rng.choice(sources)[1]
            (out_dir / f"p{patients:06d}_{visit}.txt").write_bytes((identity + body).encode("utf-8"))
            written += 1
        patients += 1
    return written, patients


def deid_options(model: str, key_file: Path) -> list[str]:
    return ["--model", model, "--mode", "surrogate", "--key-file", str(key_file), "--patient-pattern", PATIENT_PATTERN]


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of a live process and its descendants (their own and their reaped children's)."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents.setdefault(int(fields[1]), []).append(int(entry))
            cpu[int(entry)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0)
        todo += parents.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def run_batch(notes: Path, out: Path, model: str, key_file: Path) -> dict[str, float]:
    """Wall and CPU seconds of ``hybriddeid deid --jobs 2`` (model loading and its planning pass included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "-q",
            "deid",
            str(notes),
            str(out),
            *deid_options(model, key_file),
            "--jobs",
            str(CORES),
        ],
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI and its workers, all waited for
    return {"wall_s": wall, "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}


def run_spark(notes: Path, out: Path, model: str, key_file: Path, cores: int = CORES) -> dict[str, float]:
    """Seconds to start Spark in local[cores] and to run the job (read, de-identify, write Parquet), and the
    CPU seconds of the JVM and its Python workers during the job."""
    from hybriddeid.integrations.spark import local_session, run_job
    from hybriddeid.pipeline.core import Pipeline
    from hybriddeid.surrogates import DeidOptions, read_key

    options = DeidOptions(mode="surrogate", language=Pipeline.load(model).language, key=read_key(key_file))
    started = time.perf_counter()
    spark = local_session(f"local[{cores}]", "hybriddeid spark_deid benchmark")
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - started
    jvm = spark.sparkContext._gateway.proc.pid  # the JVM this process started; the workers are its children
    cpu_before = tree_cpu_seconds(jvm)
    started = time.perf_counter()
    counts = run_job(spark, str(notes), str(out), options, model, input_format="text", patient_pattern=PATIENT_PATTERN)
    job_s = time.perf_counter() - started
    cpu_s = tree_cpu_seconds(jvm) - cpu_before  # the Python workers are still alive (reused), so all counted
    spark.stop()
    return {
        "session_s": session_s,
        "job_s": job_s,
        "cpu_s": cpu_s,
        "startup_cpu_s": cpu_before,
        "failed": counts["failed"],
        "notes": counts["notes"],
    }


def compare(spark_out: Path, batch_out: Path) -> tuple[int, int]:
    """(notes whose Spark text equals the batch output byte for byte, notes compared)."""
    import pyarrow.parquet as pq

    table = pq.read_table(spark_out, columns=["note_id", "deid_text"]).to_pydict()
    same = sum(
        (batch_out / f"{note}.txt").read_bytes() == text.encode("utf-8")
        for note, text in zip(table["note_id"], table["deid_text"])
        if text is not None
    )
    return same, len(table["note_id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=20_000)
    parser.add_argument(
        "--model", default="es", help="model folder or bundled name (default es: the notes are Spanish)"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/hybriddeid-spark-bench"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    key_file = args.work / "deid.key"
    notes, patients = generate(args.work / "notes", args.notes, args.seed)
    chars = sum(path.stat().st_size for path in (args.work / "notes").glob("*.txt"))
    print(f"{notes} notes of {patients} patients, {chars / notes:.0f} bytes/note on average; load {os.getloadavg()}")

    batch = run_batch(args.work / "notes", args.work / "batch", args.model, key_file)
    print(f"batch CLI done in {batch['wall_s']:.1f} s; load {os.getloadavg()}", flush=True)
    spark = run_spark(args.work / "notes", args.work / "spark", args.model, key_file)
    print(f"Spark done in {spark['session_s']:.1f} + {spark['job_s']:.1f} s; load {os.getloadavg()}", flush=True)
    same, compared = compare(args.work / "spark", args.work / "batch")

    spark_s = spark["session_s"] + spark["job_s"]
    per_core = notes / spark["cpu_s"]  # notes per CPU-second: what scale-out multiplies
    results = {
        "notes": notes,
        "patients": patients,
        "bytes_per_note": round(chars / notes),
        "batch_wall_s": round(batch["wall_s"], 1),
        "batch_notes_per_s": round(notes / batch["wall_s"], 2),
        "batch_cpu_s": round(batch["cpu_s"], 1),
        "spark_session_s": round(spark["session_s"], 1),
        "spark_startup_cpu_s": round(spark["startup_cpu_s"], 1),
        "spark_job_s": round(spark["job_s"], 1),
        "spark_cpu_s": round(spark["cpu_s"], 1),
        "spark_notes_per_s": round(notes / spark_s, 2),
        "spark_job_notes_per_s": round(notes / spark["job_s"], 2),
        "spark_wall_overhead_pct": round(100 * (spark_s / batch["wall_s"] - 1), 1),
        "spark_cpu_overhead_pct": round(100 * (spark["cpu_s"] / batch["cpu_s"] - 1), 1),
        "spark_failed": spark["failed"],
        "byte_identical": f"{same}/{compared}",
        "spark_notes_per_cpu_s": round(per_core, 2),
        "core_hours_100M": round(100e6 / per_core / 3600),
    }
    print(json.dumps(results, indent=2))
    print(
        f"\n| run | wall s | notes/s | CPU s | notes per CPU-s |\n| --- | --- | --- | --- | --- |\n"
        f"| hybriddeid deid --jobs 2 | {batch['wall_s']:.1f} | {notes / batch['wall_s']:.2f} | {batch['cpu_s']:.0f} "
        f"| {notes / batch['cpu_s']:.2f} |\n"
        f"| spark-deid local[2], start-up | {spark['session_s']:.1f} | | {spark['startup_cpu_s']:.0f} | |\n"
        f"| spark-deid local[2], job | {spark['job_s']:.1f} | {notes / spark['job_s']:.2f} | {spark['cpu_s']:.0f} "
        f"| {per_core:.2f} |"
    )


if __name__ == "__main__":
    main()
