"""``kill -9`` in the middle of ``annotate`` and ``deid --jobs 2``, then the same command again: the outputs
(and audits) are byte-identical to an uninterrupted run's, and no temporary file is left."""

from __future__ import annotations

import json

import pytest

from cli_runs import FAST_CLI, NOTES, SLOW_CLI, TEMP, files, kill_9_after, make_notes, run


@pytest.mark.parametrize("command", ["annotate", "deid"])
def test_kill_9_then_resume_gives_the_uninterrupted_outputs(command, tmp_path):
    notes = make_notes(tmp_path / "in")
    key = tmp_path / "deid.key"
    options = (
        ["annotate", "--model", "en", "--jobs", "2"]
        if command == "annotate"
        else ["deid", "--model", "en", "--mode", "surrogate", "--key-file", str(key), "--jobs", "2"]
    )
    reference = run(FAST_CLI, [*options, str(notes), str(tmp_path / "reference")], tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    assert key.exists() == (command == "deid")  # the interrupted run reuses the key the reference created

    out = tmp_path / "out"

    def written():
        return list(out.glob("*.txt" if command == "deid" else "*.ann"))

    kill_9_after(SLOW_CLI, [*options, str(notes), str(out)], tmp_path, lambda: len(written()), 5)
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
