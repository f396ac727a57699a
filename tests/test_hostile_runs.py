"""What a hostile operator or a new user found in batch runs (issue 44, items 6, 7, 8 and 10), kept fixed:
each test runs the CLI in its own process over real folders, as an operator would.

A run into a folder inside a live run's output (or around it) is refused before it touches anything;
every input file a run does not take is counted and named; a damaged key file is refused with the
reason; ``spark-deid``, ``report`` and ``evaluate`` say what is wrong instead of writing or scoring it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runs import FAST_CLI, NOTES, SLOW_CLI, TEMP, files, make_notes, run
from hybriddeid.surrogates.keys import create_key_file

NOTE = "Patient John Smith seen 03/04/2021, MRN 1234567.\n"


def cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI in its own process, run to its end: exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-c", FAST_CLI, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


# -- 6: a run into a live run's output folder, or around it ------------------------------------------

@pytest.mark.parametrize("where", ["inside", "around"])
def test_a_run_nested_in_a_live_runs_output_is_refused_and_the_live_run_loses_nothing(where, tmp_path):
    notes = make_notes(tmp_path / "notes")
    one = tmp_path / "one"
    one.mkdir()
    (one / "single.txt").write_text(NOTE, encoding="utf-8")
    out = tmp_path / "outer" / "out"
    live = run(SLOW_CLI, ["deid", str(notes), str(out), "--mode", "tag", "--jobs", "2"], tmp_path)
    deadline = time.monotonic() + 120
    while len(list(out.glob("*.txt"))) < 2 and live.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert live.poll() is None, "the live run ended before the second one started"
    target = out / "audit" if where == "inside" else out.parent
    before = sorted(p.name for p in target.iterdir())
    second = cli(["-q", "deid", str(one), str(target), "--mode", "tag", "--overwrite"], tmp_path)
    still_live = live.poll() is None
    assert second.returncode == 2, second.stderr
    assert ("lies inside the output folder" if where == "inside" else "holds the output folder") in second.stderr
    assert str(out.resolve()) in second.stderr and "of another run (pid" in second.stderr
    assert still_live, "the live run ended while the second one was refused: the test proved nothing"
    assert live.wait(timeout=300) == 0, live.stderr.read().decode()
    assert len(list(out.glob("*.txt"))) == NOTES
    assert sorted(p.name for p in (out / "audit").iterdir()) == sorted(
        [f"pt{i:02d}_note.jsonl" for i in range(NOTES)] + ["run.json", "summary.json"])
    assert not [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]
    if where == "around":
        assert sorted(p.name for p in target.iterdir()) == before  # nothing written beside the live output
    assert not (target / "single.txt").exists()


def test_a_run_around_a_dead_runs_output_goes_ahead(tmp_path):
    """A lock file left by a run that died (nobody holds it) does not refuse a run around its folder."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text(NOTE, encoding="utf-8")
    (tmp_path / "outer" / "out").mkdir(parents=True)
    (tmp_path / "outer" / "out" / ".hybriddeid.lock").write_text('{"pid": 1}\n', encoding="utf-8")
    done = cli(["-q", "deid", str(notes), str(tmp_path / "outer"), "--mode", "tag"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "outer" / "a.txt").is_file()


# -- 8: damaged key files ---------------------------------------------------------------------------

def damaged_keys(good: bytes, secret: bytes) -> dict[str, tuple[bytes, str]]:
    """Each damage the hostile probe found, with the reason the refusal must give."""
    return {
        "bom": (b"\xef\xbb\xbf" + good, "byte-order mark"),
        "typo": (good.replace(b"hybriddeid-key", b"hybriddeid-kez"), "first word is not exactly 'hybriddeid-key'"),
        "capital": (good.replace(b"hybriddeid-key", b"Hybriddeid-key"), "first word is not exactly 'hybriddeid-key'"),
        "truncated": (good[:60] + b"\n", "not the fields"),
        "truncated-old": (secret.hex()[:40].encode("ascii") + b"\n", "40 hex digits"),
        "passphrase": (b"correct horse battery staple\n", "a passphrase is not a key"),
    }


def test_damaged_key_files_are_refused_with_the_reason_and_an_old_key_still_reads(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text(NOTE, encoding="utf-8")
    keys = tmp_path / "keys"
    keys.mkdir()
    secret = create_key_file(keys / "good.key")
    good = (keys / "good.key").read_bytes()
    args = ["-q", "deid", str(notes), "--mode", "surrogate", "--key-file"]
    for name, (data, reason) in damaged_keys(good, secret).items():
        key = keys / f"{name}.key"
        key.write_bytes(data)
        key.chmod(0o600)
        refused = cli([*args, str(key), str(tmp_path / name)], tmp_path)
        assert refused.returncode == 2, (name, refused.stderr)
        assert "not a key file" in refused.stderr and reason in refused.stderr, (name, refused.stderr)
        assert secret.hex() not in refused.stderr and "horse" not in refused.stderr  # never the key itself
        assert not list((tmp_path / name).glob("*.txt")) if (tmp_path / name).exists() else True
    old = keys / "old.key"
    old.write_text(secret.hex() + "\n", encoding="ascii")  # what create_key_file wrote before the checksum
    old.chmod(0o600)
    assert cli([*args, str(keys / "good.key"), str(tmp_path / "new")], tmp_path).returncode == 0
    read_old = cli([*args[1:], str(old), str(tmp_path / "old")], tmp_path)  # not quiet: the warning is told
    assert read_old.returncode == 0 and "old format" in read_old.stderr
    assert (tmp_path / "old" / "a.txt").read_bytes() == (tmp_path / "new" / "a.txt").read_bytes()
