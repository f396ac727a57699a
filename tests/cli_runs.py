"""What the tests that run the CLI in its own process share: notes, a slowed-down CLI, folder contents."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

NOTES = 30
TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")


def slow_cli(seconds: float) -> str:
    """The CLI with every note slowed down by ``seconds``, so that a kill lands while notes remain
    (outputs do not change)."""
    return f"""
import sys, time
from hybriddeid.pipeline.core import Pipeline
predict = Pipeline.predict
def slow(self, *args, **kwargs):
    time.sleep({seconds!r})
    return predict(self, *args, **kwargs)
Pipeline.predict = slow
from hybriddeid.cli import main
sys.exit(main())
"""


SLOW_CLI = slow_cli(0.25)
FAST_CLI = "import sys; from hybriddeid.cli import main; sys.exit(main())"


def make_notes(folder: Path) -> Path:
    folder.mkdir()
    first = ["Quorvendale", "Ambrith", "Teodric", "Marisol", "Kestrel", "Oswin"]
    last = ["Zibbinshaw", "Pellworth", "Andravi", "Okonkwo", "Lindqvist"]
    for i in range(NOTES):
        name = f"{first[i % 6]} {last[i % 5]}"
        (folder / f"pt{i:02d}_note.txt").write_text(
            f"Patient {name} was seen on {1 + i % 12:02d}/{1 + i % 28:02d}/2023 by Dr. {last[(i + 2) % 5]}.\n"
            f"MRN {4417920 + 37 * i}. Phone (617) 555-{1000 + i:04d}.\nLives in Boston, MA.\n",
            encoding="utf-8",
        )
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run(script: str, args: list[str], cwd: Path) -> subprocess.Popen:
    """The CLI in a new session (so the whole group can be killed), run from ``cwd`` outside the
    source tree so that the installed package is the one imported."""
    return subprocess.Popen(
        [sys.executable, "-c", script, "-q", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        cwd=cwd,
    )


def kill_9_after(script: str, args: list[str], cwd: Path, progress: Callable[[], int], at_least: int) -> None:
    """Run the CLI (``run``) and ``kill -9`` its whole group (the CLI and its workers) once ``progress()``
    (e.g. outputs written so far) reaches ``at_least``; fails when the run ended before the kill, since
    then nothing was interrupted."""
    victim = run(script, args, cwd)
    deadline = time.monotonic() + 120
    while progress() < at_least and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    still_running = victim.poll() is None
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)
    assert still_running, "the run ended before it could be killed"
