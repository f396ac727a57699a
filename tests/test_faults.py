"""Faults around a batch run, not in its notes: a second run into the same folder, the parent killed or
stopped, a full disk at each write step, odd file names, key files that are exposed, mistyped or
changed between runs. Each leaves the folder as a lone, uninterrupted run would, or says why not."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runs import FAST_CLI, TEMP, files, make_notes, run, slow_cli
from hybriddeid.cli import main
from hybriddeid.io import read_corpus, write_document
from hybriddeid.surrogates.audit import read_audit_run
from hybriddeid.surrogates.keys import Keyed, create_key_file, read_key, render_key

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and uses Linux signals")


def surrogate_run(key: Path) -> list[str]:
    return ["deid", "--model", "en", "--mode", "surrogate", "--key-file", str(key), "--jobs", "2"]


def wait_for_outputs(folder: Path, count: int, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while len(list(folder.glob("*.txt"))) < count and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the fault could be made"


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path, Path]:
    """30 notes, a key, and a lone uninterrupted ``deid --jobs 2 --mode surrogate`` run of them."""
    root = tmp_path_factory.mktemp("reference")
    notes, key = make_notes(root / "in"), root / "deid.key"
    lone = run(FAST_CLI, [*surrogate_run(key), str(notes), str(root / "out")], root)
    assert lone.wait(timeout=300) == 0, lone.stderr.read()
    return notes, key, root / "out"


def test_a_second_run_into_a_live_runs_folder_is_refused_and_changes_nothing(reference, tmp_path):
    notes, key, lone = reference
    out = tmp_path / "out"
    live = run(slow_cli(0.7), [*surrogate_run(key), str(notes), str(out)], tmp_path)
    wait_for_outputs(out, 3, live)
    for _ in range(3):
        second = subprocess.run(
            [sys.executable, "-c", FAST_CLI, "-q", *surrogate_run(key), str(notes), str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert second.returncode == 2
        assert "another run is writing into this folder (pid" in second.stderr
    assert live.poll() is None, "the refusals must land while the live run works"
    assert live.wait(timeout=300) == 0, live.stderr.read()
    assert files(out) == files(lone)  # byte-identical, the lock released (no lock file left)


def test_a_lock_left_by_a_dead_run_is_taken_over_with_a_message(tmp_path, caplog):
    notes = tmp_path / "in"
    assert main(["-q", "synth", "--n", "3", "--out", str(notes), "--format", "brat"]) == 0
    out = tmp_path / "out"
    out.mkdir()
    (out / ".hybriddeid.lock").write_text(json.dumps({"pid": 4_000_000, "host": "gone", "started": "then"}))
    assert main(["deid", "--use-annotations", "--language", "en", "--mode", "tag", str(notes), str(out)]) == 0
    assert "taking over the lock of a run that ended without releasing it (pid 4000000 on host gone" in caplog.text
    assert len(list(out.glob("*.txt"))) == 3 and not (out / ".hybriddeid.lock").exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_end_with_their_parent_and_the_run_resumes(sig, reference, tmp_path):
    notes, key, lone = reference
    out = tmp_path / "out"
    victim = run(slow_cli(0.7), [*surrogate_run(key), str(notes), str(out)], tmp_path)
    wait_for_outputs(out, 2, victim)
    workers = children(victim.pid)
    assert len(workers) == 2
    os.kill(victim.pid, sig)
    code = victim.wait(timeout=60)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "a worker outlived its parent by 5 s"
    if sig == signal.SIGTERM:  # stopped gracefully: exit 143, tally told and written, no temporary file
        assert code == 143
        assert re.search(
            r"stopped by SIGTERM \(\d+ written, 0 already done, 0 failed\); the same command resumes",
            victim.stderr.read().decode(),
        )
        # >= 1, not 2: the second output may be renamed into place a moment before the tally counts it, and
        # the signal can land in between (seen under xdist); the resumed run below must then redo nothing wrong
        assert json.loads((out / "audit" / "summary.json").read_text())["files"]["written"] >= 1
        assert not [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]
        assert not (out / ".hybriddeid.lock").exists()
    resumed = run(FAST_CLI, [*surrogate_run(key), str(notes), str(out)], tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    got, want = files(out), files(lone)
    got.pop("audit/summary.json"), want.pop("audit/summary.json")  # counts what each run did
    assert got == want


# -- a full disk at each write step ----------------------------------------------------------------

WRITE_STEPS = {  # the file being written when the disk fills (atomic writes fsync their temporary file)
    "output": (r"/out/\.[^/]+\.txt\.[0-9a-f]{12}\.tmp$", 2),
    "audit": (r"/out/audit/\.[^/]+\.jsonl\.[0-9a-f]{12}\.tmp$", 2),
    "mapping": (r"/mapping/\.[^/]+\.jsonl\.[0-9a-f]{12}\.tmp$", 2),
    "run.json": (r"/audit/\.run\.json\.", 2),
    "summary.json": (r"/audit/\.summary\.json\.", 1),
    "key": (r"/new\.key$", 2),
}


def full_disk_at(monkeypatch, pattern: str, after: int = 0) -> None:
    """``os.fsync`` fails with ENOSPC for files whose path matches ``pattern``, after ``after`` of them
    worked (in forked workers too: they inherit the patch)."""
    fsync, seen = os.fsync, []

    def failing(fd: int) -> None:
        if re.search(pattern, os.readlink(f"/proc/self/fd/{fd}")):
            seen.append(fd)
            if len(seen) > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("annotated") / "in"
    assert main(["-q", "synth", "--n", "6", "--out", str(folder), "--format", "brat"]) == 0
    return folder


@pytest.mark.parametrize("step", list(WRITE_STEPS))
def test_a_full_disk_at_any_write_step_is_told_not_raised(step, annotated, tmp_path, monkeypatch, caplog):
    pattern, exit_code = WRITE_STEPS[step]
    key = tmp_path / ("new.key" if step == "key" else "deid.key")
    if step != "key":
        create_key_file(key)
    full_disk_at(monkeypatch, pattern)
    out = tmp_path / "out"
    args = [
        "--progress",
        "never",
        "deid",
        "--use-annotations",
        "--language",
        "en",
        "--mode",
        "surrogate",
        "--key-file",
        str(key),
        "--mapping-dir",
        str(tmp_path / "mapping"),
        str(annotated),
        str(out),
    ]
    assert main(args) == exit_code
    assert "No space left on device" in caplog.text
    assert "Traceback" not in caplog.text
    leftovers = [p for p in tmp_path.rglob("*") if TEMP.fullmatch(p.name) or p.name.endswith(".tmp")]
    assert not leftovers
    if step in ("output", "audit", "mapping"):  # each note told, by name; none half-written
        assert caplog.text.count("No space left on device") == 6
        assert not list(out.glob("*.txt"))
    if step == "summary.json":  # the notes are done; the tally is still told
        assert len(list(out.glob("*.txt"))) == 6
        assert "summary.json: cannot write the summary (No space left on device)" in caplog.text
        assert "6 written, 0 already done, 0 failed" in caplog.text
    if step == "run.json":
        assert "run.json: cannot write the run's settings (No space left on device)" in caplog.text
    if step == "key":
        assert "new.key: cannot create the key file (No space left on device)" in caplog.text
        assert not key.exists()


def test_a_disk_that_fills_during_a_run_fails_the_rest_and_a_rerun_finishes(annotated, tmp_path, monkeypatch):
    key = tmp_path / "deid.key"
    create_key_file(key)
    args = [
        "-q",
        "deid",
        "--use-annotations",
        "--language",
        "en",
        "--mode",
        "surrogate",
        "--key-file",
        str(key),
        str(annotated),
    ]
    with monkeypatch.context() as patch:
        full_disk_at(patch, WRITE_STEPS["output"][0], after=2)
        assert main([*args, str(tmp_path / "out")]) == 1  # some notes done
    assert len(list((tmp_path / "out").glob("*.txt"))) == 2
    assert main([*args, str(tmp_path / "out")]) == 0
    assert main([*args, str(tmp_path / "lone")]) == 0
    got, want = files(tmp_path / "out"), files(tmp_path / "lone")
    got.pop("audit/summary.json"), want.pop("audit/summary.json")
    assert got == want


# -- file names ------------------------------------------------------------------------------------


def test_any_file_name_is_taken_or_refused_with_the_character_shown(annotated, tmp_path, caplog):
    folder = tmp_path / "in"
    folder.mkdir()
    docs = read_corpus(annotated)
    names = {b"line\nbreak": False, b"a\ttab": False, b"caf\xe9": True, b"L" * 251: True, b"plain": True}
    for number, (raw, doc) in enumerate(zip(names, docs)):
        write_document(doc.__class__(f"n{number}", doc.text, doc.spans), folder, "brat")
        for suffix in (b".txt", b".ann"):  # names no writer of ours would make
            os.rename(os.fsencode(folder / f"n{number}") + suffix, os.fsencode(folder) + b"/" + raw + suffix)
    key = tmp_path / "deid.key"
    args = [
        "--progress",
        "never",
        "deid",
        "--use-annotations",
        "--language",
        "en",
        "--mode",
        "surrogate",
        "--key-file",
        str(key),
        str(folder),
        str(tmp_path / "out"),
    ]
    assert main(args) == 1
    assert "'line\\nbreak.txt': the name holds a line break ('\\n') at position 4" in caplog.text
    assert "'a\\ttab.txt': the name holds a tab ('\\t') at position 1" in caplog.text
    outputs = {os.fsencode(p.name) for p in (tmp_path / "out").iterdir()}
    assert {b"caf\xe9.txt", b"L" * 251 + b".txt", b"plain.txt"} <= outputs
    audits = [p for p in (tmp_path / "out" / "audit").iterdir() if p.suffix == ".jsonl"]
    assert len(audits) == 3 and all(len(os.fsencode(p.name)) <= 255 for p in audits)
    long_audit = next(p for p in audits if p.name.startswith("LLL"))
    assert re.fullmatch(r"L+~[0-9a-f]{16}\.jsonl", long_audit.name)
    assert json.loads(long_audit.read_text().splitlines()[0])["note"] == "L" * 251  # the full name, recorded
    assert "\\xe9" in (tmp_path / "out" / "audit" / "caf\udce9.jsonl").read_text(encoding="utf-8")
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert main(args) == 1  # a rerun finds the three done and refuses the same two
    assert "0 written, 3 already done, 2 failed" in caplog.text


# -- keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o666, 0o602])
def test_a_key_others_may_read_or_write_is_refused(mode, annotated, tmp_path, caplog):
    key = tmp_path / "deid.key"
    create_key_file(key)
    key.chmod(mode)
    out = tmp_path / "out"
    assert (
        main(
            [
                "deid",
                "--use-annotations",
                "--language",
                "en",
                "--mode",
                "surrogate",
                "--key-file",
                str(key),
                str(annotated),
                str(out),
            ]
        )
        == 2
    )
    assert f"may be read or written by others (mode {mode:03o}); make it owner-only with: chmod 600" in caplog.text
    assert not out.exists() or not list(out.glob("*.txt"))


def test_a_mistyped_key_is_an_error_and_an_old_key_still_reads(annotated, tmp_path, caplog):
    key = tmp_path / "deid.key"
    secret = create_key_file(key)
    line = key.read_text()
    assert line == render_key(secret) and line.startswith("hybriddeid-key 1 ")
    digit = line[20]
    key.write_text(line[:20] + ("0" if digit != "0" else "1") + line[21:])  # one typo
    args = [
        "deid",
        "--use-annotations",
        "--language",
        "en",
        "--mode",
        "surrogate",
        "--key-file",
        str(key),
        str(annotated),
    ]
    assert main([*args, str(tmp_path / "typo")]) == 2
    assert "the key does not match its checksum" in caplog.text
    key.write_text(render_key(secret))
    assert main(["-q", *args, str(tmp_path / "new")]) == 0
    old = tmp_path / "old.key"
    old.write_text(secret.hex() + "\n")  # the format before the checksum
    old.chmod(0o600)
    caplog.clear()
    assert main([*args[:-2], str(old), str(annotated), str(tmp_path / "old")]) == 0
    assert "old format, without a checksum" in caplog.text
    assert files(tmp_path / "old") == files(tmp_path / "new")  # same key, same surrogates
    assert main(["key", "upgrade", str(old)]) == 0
    assert old.read_text() == render_key(secret) and old.stat().st_mode & 0o777 == 0o600


def test_a_lost_run_json_and_a_new_key_redo_every_output(annotated, tmp_path):
    """Outputs record their key: a rerun with another key after run.json was lost redoes them all."""
    first, second = tmp_path / "first.key", tmp_path / "second.key"
    create_key_file(first), create_key_file(second)
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in sorted(annotated.iterdir())[:6]:  # three of the six notes (BRAT pairs)
        (partial / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "out"
    args = ["-q", "deid", "--use-annotations", "--language", "en", "--mode", "surrogate", "--key-file"]
    assert main([*args, str(first), str(partial), str(out)]) == 0
    (out / "audit" / "run.json").unlink()
    assert main([*args, str(second), str(annotated), str(out)]) == 0
    assert main([*args, str(second), str(annotated), str(tmp_path / "lone")]) == 0
    got, want = files(out), files(tmp_path / "lone")
    got.pop("audit/summary.json"), want.pop("audit/summary.json")
    assert got == want
    fingerprint = Keyed(read_key(second)).fingerprint()
    assert {read_audit_run(p)["key_fingerprint"] for p in (out / "audit").glob("*.jsonl")} == {fingerprint}


# -- gold labels outside the taxonomy --------------------------------------------------------------


def test_labels_outside_the_taxonomy_stop_evaluate_and_train_unless_mapped_or_allowed(
    annotated, tmp_path, caplog, capsys
):
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for path in annotated.iterdir():
        text = path.read_text(encoding="utf-8")
        (renamed / path.name).write_text(
            re.sub(r"\tDOCTOR ", "\tPERSONNAME ", text) if path.suffix == ".ann" else text, encoding="utf-8"
        )
    count = sum(path.read_text().count("\tPERSONNAME ") for path in renamed.glob("*.ann"))
    assert count > 0
    assert main(["evaluate", str(renamed), str(annotated)]) == 2
    assert f"gold labels outside the i2b2-2014 taxonomy: PERSONNAME ({count} spans)" in caplog.text
    assert main(["train", "--train", str(renamed), "--out", str(tmp_path / "model")]) == 2
    assert f"training labels outside the i2b2-2014 taxonomy: PERSONNAME ({count} spans)" in caplog.text
    assert not (tmp_path / "model").exists()
    label_map = tmp_path / "labels.toml"
    label_map.write_text('PERSONNAME = "DOCTOR"\n')
    capsys.readouterr()
    assert main(["evaluate", "--json", str(renamed), str(annotated), "--label-map", str(label_map)]) == 0
    scores = json.loads(capsys.readouterr().out)["scores"]
    assert scores["strict"]["subtype"]["all"]["micro"]["f1"] == 1.0  # mapped back, gold and predictions agree
    assert main(["evaluate", str(renamed), str(annotated), "--allow-unknown-labels"]) == 0


def test_a_csv_label_map_row_of_another_width_is_refused_naming_the_file(tmp_path):
    from hybriddeid.core.taxonomy import read_label_map

    good = tmp_path / "labels.csv"
    good.write_text("# from,to\nPERSONNAME, DOCTOR\n", encoding="utf-8")
    assert read_label_map(good) == {"PERSONNAME": "DOCTOR"}
    for name, text in (("three.csv", "PERSONNAME,DOCTOR,NAME\n"), ("one.tsv", "PERSONNAME\n")):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        cells = len(text.strip().split("," if name.endswith(".csv") else "\t"))
        with pytest.raises(ValueError, match=rf"{name}: cannot read the label map \(a row has {cells} cells, not two"):
            read_label_map(path)
