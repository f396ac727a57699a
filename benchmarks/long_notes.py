"""Seconds and peak memory of ``hybriddeid deid`` (tag mode) on long notes, each in a fresh process.

Notes generated here: single-line notes of ordinary English sentences (``words``) and notes holding
one run of digits without spaces (``digits``, a pasted lab dump) of the given sizes. Each note is
written to its own folder and de-identified by the CLI in a subprocess under an address-space cap
(``--cap-gb``, default 4) and a time limit; peak RSS is the child's (``resource.getrusage``), and so
is the CPU time (user + system, its worker included: on a shared machine the wall seconds also count
the time other jobs held the cores). ``rules skipped`` counts the rule searches the run's log says
timed out and were skipped. The "Long notes" tables of docs/explanation/long-notes.md come from:

    python benchmarks/long_notes.py --models en es
    python benchmarks/long_notes.py --models en es --kinds words --sizes 20000000
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = (
    "the patient was seen in clinic today by doctor Smith and reported mild pain in the left knee since "
    "March after a fall at home she denies fever or chills and takes ibuprofen twice daily"
).split()
# 20 MB: the largest note the readers accept by default (--max-file-mb 20).
SIZES = {"words": (2_000, 20_000, 200_000, 2_000_000, 20_000_000), "digits": (10_000, 100_000, 1_000_000)}

# Runs in the child: the cap applies to it alone, never to this process or its neighbours.
CHILD = """
import resource, signal, sys
cap, limit = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
signal.alarm(limit)  # past the time limit the child dies of SIGALRM
from hybriddeid.cli import main
sys.exit(main(sys.argv[3:]))
"""


def make_note(kind: str, size: int, seed: int = 0) -> str:
    """A note of ``size`` characters on one line (``words``), or a short note around a run of
    ``size`` digits (``digits``)."""
    rng = random.Random(seed)
    if kind == "digits":
        run = "".join(rng.choice("0123456789") for _ in range(size))
        return f"Seen by Dr. Smith on 03/12/2020.\nLab export: {run}\nCall 555-123-4567 with questions.\n"
    sentences, length = [], 0
    while length < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "."
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)[:size] + "\n"


def measure(kind: str, size: int, model: str, cap_bytes: int, limit_s: int) -> tuple[float, float, float, int, int]:
    """(seconds, CPU seconds, peak RSS in MB, rule searches skipped, exit code: negative for a signal,
    -14 past the time limit) of ``hybriddeid deid`` on one generated note."""
    with tempfile.TemporaryDirectory() as tmp:
        in_dir = Path(tmp) / "in"
        in_dir.mkdir()
        (in_dir / "note.txt").write_text(make_note(kind, size), encoding="utf-8")
        args = [
            "deid",
            str(in_dir),
            str(Path(tmp) / "out"),
            "--model",
            model,
            "--mode",
            "tag",
            "--max-file-mb",
            "100",
            "--progress",
            "never",
            "--timeout-per-note",
            str(limit_s),
        ]
        log = Path(tmp) / "log.txt"
        started = time.perf_counter()
        with log.open("w", encoding="utf-8") as errors:  # warnings kept: a skipped rule says so
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(cap_bytes), str(limit_s), *args],
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS (KiB on Linux)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        skipped = log.read_text(encoding="utf-8", errors="replace").count("timed out")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, skipped, child.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["en"], help="bundled models or model folders (default en)")
    parser.add_argument("--kinds", nargs="+", choices=sorted(SIZES), default=sorted(SIZES, reverse=True))
    parser.add_argument("--max-size", type=int, help="skip notes larger than this many characters")
    parser.add_argument("--sizes", type=int, nargs="+", help="only notes of these sizes (characters)")
    parser.add_argument("--cap-gb", type=float, default=4.0, help="address-space cap of each run (default 4)")
    parser.add_argument("--limit-s", type=int, default=600, help="time limit of each run (default 600)")
    args = parser.parse_args()
    print("| model | kind | characters | seconds | CPU seconds | peak RSS MB | rules skipped | exit |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in args.models:
        for kind in args.kinds:
            for size in SIZES[kind]:
                if args.max_size and size > args.max_size or args.sizes and size not in args.sizes:
                    continue
                seconds, cpu, peak_mb, skipped, code = measure(
                    kind, size, model, int(args.cap_gb * 2**30), args.limit_s
                )
                print(
                    f"| {model} | {kind} | {size:,} | {seconds:.1f} | {cpu:.1f} | {peak_mb:.0f} | {skipped} | {code} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
