"""``kill -9`` in the middle of ``annotate`` and ``deid --jobs 2``, then the same command again: the outputs
(and audits) are byte-identical to an uninterrupted run's, and no temporary file is left."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

NOTES = 30
TEMP = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")
# The CLI with every note slowed down, so that a kill lands while notes remain (outputs do not change).
SLOW_CLI = """
import sys, time
from hybriddeid.pipeline import Pipeline
predict = Pipeline.predict
def slow(self, *args, **kwargs):
    time.sleep(0.25)
    return predict(self, *args, **kwargs)
Pipeline.predict = slow
from hybriddeid.cli import main
sys.exit(main())
"""
FAST_CLI = "import sys; from hybriddeid.cli import main; sys.exit(main())"


def make_notes(folder: Path) -> Path:
    folder.mkdir()
    first = ["Quorvendale", "Ambrith", "Teodric", "Marisol", "Kestrel", "Oswin"]
    last = ["Zibbinshaw", "Pellworth", "Andravi", "Okonkwo", "Lindqvist"]
    for i in range(NOTES):
        name = f"{first[i % 6]} {last[i % 5]}"
        (folder / f"pt{i:02d}_note.txt").write_text(
            f"Patient {name} was seen on {1 + i % 12:02d}/{1 + i % 28:02d}/2023 by Dr. {last[(i + 2) % 5]}.\n"
            f"MRN {4417920 + 37 * i}. Phone (617) 555-{1000 + i:04d}.\nLives in Boston, MA.\n", encoding="utf-8")
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run(script: str, args: list[str], cwd: Path) -> subprocess.Popen:
    """The CLI in a new session (so the whole group can be killed), run from ``cwd`` outside the
    source tree so that the installed package is the one imported."""
    return subprocess.Popen([sys.executable, "-c", script, "-q", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, cwd=cwd)


@pytest.mark.parametrize("command", ["annotate", "deid"])
def test_kill_9_then_resume_gives_the_uninterrupted_outputs(command, tmp_path):
    notes = make_notes(tmp_path / "in")
    key = tmp_path / "deid.key"
    options = (["annotate", "--model", "en", "--jobs", "2"] if command == "annotate" else
               ["deid", "--model", "en", "--mode", "surrogate", "--key-file", str(key), "--jobs", "2"])
    reference = run(FAST_CLI, [*options, str(notes), str(tmp_path / "reference")], tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    assert key.exists() == (command == "deid")  # the interrupted run reuses the key the reference created

    out = tmp_path / "out"
    victim = run(SLOW_CLI, [*options, str(notes), str(out)], tmp_path)
    written = (lambda: list(out.glob("*.txt")) if command == "deid" else list(out.glob("*.ann")))
    deadline = time.monotonic() + 120
    while len(written()) < 5 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    still_running = victim.poll() is None
    os.killpg(victim.pid, signal.SIGKILL)  # the CLI and its workers
    victim.wait(timeout=60)
    assert still_running, "the run ended before it could be killed"
    assert 5 <= len(written()) < NOTES

    resumed = run(FAST_CLI, [*options, str(notes), str(out)], tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    got, want = files(out), files(tmp_path / "reference")
    if command == "deid":  # the summary counts what each run did (written, already done); the rest must match
        for outputs in (got, want):
            summary = json.loads(outputs.pop("audit/summary.json"))
            assert summary.pop("files")["failed"] == 0
            outputs["audit/summary.json"] = json.dumps(summary, sort_keys=True).encode()
        assert len([name for name in got if name.startswith("audit/pt")]) == NOTES
    assert sorted(got) == sorted(want)
    assert got == want
    assert not [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]
