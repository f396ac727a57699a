"""Chaos run: `hybriddeid deid --jobs 2 --mode surrogate` killed at random moments, then resumed.

Writes ``--notes`` generated notes (the English test mix), runs them once uninterrupted (the
reference), then ``--runs`` times: a fresh output folder, the same command, and at a random moment
within the reference's wall time one fault (in turn): ``kill -9`` of the parent, ``kill -9`` of a
worker, or SIGTERM to the parent. Five seconds after the parent ends, any process of the run still
alive is an orphan. Then the same command again (the resume); the final folder must be
byte-identical to the reference's (``audit/summary.json`` aside: it counts what each run did) with
no temporary file and no lock left. Prints a line per run and the totals by fault. Linux only.

    python benchmarks/chaos.py [--notes 500] [--runs 50] [--jobs 2] [--model en] [--seed 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybriddeid.surrogates import create_key_file  # noqa: E402
from procinfo import family  # noqa: E402
from soak import write_notes  # noqa: E402 - the soak run's note writer

FAULTS = ("kill -9 parent", "kill -9 worker", "SIGTERM parent")
TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative name -> bytes), the run's summary left out."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).as_posix() != "audit/summary.json"
    }


def running(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (zombies awaiting their reaper are not)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--model", default="en")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--work", type=Path, help="folder for notes and outputs (default: a temporary one, removed)")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="hybriddeid-chaos-"))
    notes, key = work / "notes", work / "deid.key"
    shutil.rmtree(work / "out", ignore_errors=True)
    if not notes.is_dir():
        write_notes(notes, args.notes, args.seed)
    if not key.exists():
        create_key_file(key)
    cli = [
        sys.executable,
        "-m",
        "hybriddeid.cli",
        "-q",
        "deid",
        "--model",
        args.model,
        "--mode",
        "surrogate",
        "--key-file",
        str(key),
        "--jobs",
        str(args.jobs),
        str(notes),
    ]

    started = time.monotonic()
    reference = start([*cli, str(work / "reference")])
    if reference.wait() != 0:
        print(reference.stderr.read().decode(), file=sys.stderr)
        return 1
    span = time.monotonic() - started
    want = contents(work / "reference")
    print(f"{args.notes} notes, reference run {span:.1f} s, {len(want)} files; {args.runs} faulted runs", flush=True)

    rng = random.Random(args.seed)
    tally: Counter[tuple[str, str]] = Counter()
    for number in range(args.runs):
        fault, delay = FAULTS[number % len(FAULTS)], rng.uniform(0.5, 0.9 * span)
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        victim = start([*cli, str(out)])
        time.sleep(delay)
        members = family(victim.pid)
        landed = victim.poll() is None
        if landed:
            if fault == "kill -9 worker":
                workers = sorted(members - {victim.pid})
                if workers:
                    os.kill(rng.choice(workers), signal.SIGKILL)
                else:
                    landed = False  # between workers, or still loading the model
            else:
                os.kill(victim.pid, signal.SIGKILL if fault == "kill -9 parent" else signal.SIGTERM)
        first_exit = victim.wait()
        time.sleep(5)
        orphans = running(members - {victim.pid})
        for pid in orphans:
            os.kill(pid, signal.SIGKILL)
        resumed = start([*cli, str(out)])
        resume_exit = resumed.wait()
        got = contents(out)
        temps = [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]
        locks = list(out.glob(".hybriddeid.lock"))
        identical = got == want
        print(
            f"run {number + 1:2d}: {fault:15s} at {delay:5.1f} s{'' if landed else ' (missed)'}: exit {first_exit}, "
            f"orphans {len(orphans)}, resume exit {resume_exit}, identical {identical}, temp files {len(temps)}, "
            f"lock left {bool(locks)}",
            flush=True,
        )
        tally[(fault, "runs")] += 1
        tally[(fault, "landed")] += landed
        tally[(fault, "identical")] += identical
        tally[(fault, "orphans")] += len(orphans)
        tally[(fault, "temps")] += len(temps) + len(locks)
        tally[(fault, "resume not 0")] += resume_exit != 0
    print(
        "\n| fault | runs | fault landed | final folder identical | orphans 5 s after | temp/lock files | resume exit != 0 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for fault in FAULTS:
        print(
            f"| {fault} | {tally[(fault, 'runs')]} | {tally[(fault, 'landed')]} | {tally[(fault, 'identical')]} | "
            f"{tally[(fault, 'orphans')]} | {tally[(fault, 'temps')]} | {tally[(fault, 'resume not 0')]} |"
        )
    print(json.dumps({f"{fault}|{what}": n for (fault, what), n in sorted(tally.items())}))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
