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

from cli_runs import FAST_CLI, NOTES, SLOW_CLI, TEMP, make_notes, run
from hybriddeid.surrogates.keys import create_key_file

NOTE = "Patient John Smith seen 03/04/2021, MRN 1234567.\n"


def cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI in its own process, run to its end: exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-c", FAST_CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


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
    if where == "inside":  # a folder that does not exist yet is not even made
        deeper = cli(["-q", "deid", str(one), str(out / "audit" / "new"), "--mode", "tag"], tmp_path)
        assert deeper.returncode == 2 and "lies inside the output folder" in deeper.stderr
        assert not (out / "audit" / "new").exists()
        still_live = still_live and live.poll() is None
    assert still_live, "the live run ended while the second one was refused: the test proved nothing"
    assert live.wait(timeout=300) == 0, live.stderr.read().decode()
    assert len(list(out.glob("*.txt"))) == NOTES
    assert sorted(p.name for p in (out / "audit").iterdir()) == sorted(
        [f"pt{i:02d}_note.jsonl" for i in range(NOTES)] + ["run.json", "summary.json"]
    )
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


# -- 7: no input silently skipped -------------------------------------------------------------------

PROBE_FILES = ["note1.txt", "NOTE2.TXT", "note3", "note4.log", ".note5.txt", "sub/note6.txt", "note7.Txt", "note8.txt~"]


def probe_notes(folder: Path) -> Path:
    """The hostile probe's eight files: one per way a file used to be skipped without a word."""
    for name in PROBE_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(NOTE, encoding="utf-8")
    return folder


def test_every_file_a_run_does_not_take_is_counted_and_named_and_suffixes_ignore_case(tmp_path):
    notes = probe_notes(tmp_path / "notes")
    out = tmp_path / "out"
    done = cli(["deid", str(notes), str(out), "--mode", "tag"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.glob("*.txt")) == ["NOTE2.txt", "note1.txt", "note7.txt"]
    assert "3 written, 0 already done, 0 failed, 5 not taken" in done.stderr
    summary = json.loads((out / "audit" / "summary.json").read_text(encoding="utf-8"))
    assert summary["files"] == {"written": 3, "skipped": 0, "failed": 0, "not_taken": 5}
    why = {entry["file"]: entry["why"] for entry in summary["not_taken"]}
    assert sorted(why) == [".note5.txt", "note3", "note4.log", "note8.txt~", "sub"]
    assert why["sub"] == "a sub-folder (--recursive reads sub-folders)" and "backup" in why["note8.txt~"]
    assert "hidden" in why[".note5.txt"] and "no extension" in why["note3"] and "not a .txt file" in why["note4.log"]
    for name in why:
        assert f"{name}: not taken: " in done.stderr
    for text in (done.stderr, json.dumps(summary)):
        assert "John Smith" not in text and "1234567" not in text  # names and counts, never the notes
    resumed = cli(["deid", str(notes), str(out), "--mode", "tag"], tmp_path)  # NOTE2.TXT's output is found again
    assert resumed.returncode == 0 and "0 written, 3 already done, 0 failed, 5 not taken" in resumed.stderr


# -- 10: spark-deid ids, empty CSV texts, report, missing inputs, evaluate ---------------------------


def test_spark_refuses_rows_without_an_id_and_every_row_of_a_shared_id():
    """The check ``spark-deid`` runs on each row (``spans_frame``, given the rows per id that ``deidentify``
    counts with a window), run here on a pandas batch as an executor would: pyspark is not needed."""
    pd = pytest.importorskip("pandas")
    from hybriddeid.integrations import spark

    assert [
        spark.note_id_problem(note_id, uses)
        for note_id, uses in [(None, 1), ("", 1), (float("nan"), 1), ("a", 2), ("a", 1), (7, 1)]
    ] == ["no_id", "no_id", "no_id", "duplicate_id", None, None]
    span = [{"start": 8, "end": 18, "label": "PATIENT", "source": "gold", "score": 1.0}]
    frame = pd.DataFrame(
        {
            "note_id": [None, "", "twice", "twice", "once", "empty"],
            "text": [NOTE] * 5 + [""],
            "phi_spans": [span] * 6,
            spark._ID_USES: [2, 1, 2, 2, 1, 1],
        }
    )
    stage = spark.SpanStage(None, "note_id", "text", "phi_spans", "error", patients="note")
    got = spark.spans_frame(stage, frame)
    assert list(got["error"]) == ["no_id", "no_id", "duplicate_id", "duplicate_id", None, "no_text"]
    assert [spans is None for spans in got["phi_spans"]] == [True, True, True, True, False, True]
    deid = spark.deid_frame(
        spark.DeidStage(
            spark.DeidOptions(mode="tag", language="en"), "note_id", "text", "phi_spans", "error", "deid_text"
        ),
        got,
    )
    assert [text is not None for text in deid["deid_text"]] == [False, False, False, False, True, False]


def test_an_empty_text_in_a_csv_row_is_reported_not_written(tmp_path):
    table = tmp_path / "notes.csv"
    table.write_text(f'note_id,text\na1,"{NOTE.strip()}"\na2,\na3,"{NOTE.strip()}"\n', encoding="utf-8")
    done = cli(["-q", "deid", str(table), str(tmp_path / "out"), "--mode", "tag"], tmp_path)
    assert done.returncode == 1
    assert "line 3: no text (column 'text' is empty)" in done.stderr
    from hybriddeid.io.tables import read_table

    rows = read_table(tmp_path / "out" / "part-00000.csv")
    assert [row["note_id"] for row in rows] == ["a1", "a3"]


def test_report_reads_a_table_runs_output_folder(tmp_path):
    table = tmp_path / "notes.csv"
    table.write_text(f'note_id,text\na1,"{NOTE.strip()}"\na3,"Dr. Mary Jones, phone 617-555-1234."\n', encoding="utf-8")
    out = tmp_path / "out"
    assert cli(["-q", "deid", str(table), str(out), "--mode", "tag", "--audit"], tmp_path).returncode == 0
    from hybriddeid.io.tables import read_table

    audits = [json.loads(row["audit"]) for row in read_table(out / "part-00000.csv")]
    done = cli(["-q", "report", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text(encoding="utf-8")
    spans = sum(len(audit) for audit in audits)
    assert spans > 0 and f"deid table output; <strong>2</strong> notes, <strong>{spans}</strong> spans" in page
    assert "output text not found" not in page  # the context is the de-identified text of each row
    assert "John Smith" not in page and "Mary Jones" not in page
    plain = tmp_path / "plain"
    assert cli(["-q", "deid", str(table), str(plain), "--mode", "tag"], tmp_path).returncode == 0
    refused = cli(["-q", "report", str(plain)], tmp_path)
    assert refused.returncode == 2 and "wrote no spans: rerun it with --spans or --audit" in refused.stderr


@pytest.mark.parametrize(
    "command",
    [["deid", "{in}", "{out}", "--mode", "tag"], ["annotate", "{in}", "{out}"], ["evaluate", "{in}", "{out}"]],
)
@pytest.mark.parametrize("missing", ["notes", "notes.csv"])
def test_a_missing_input_says_it_does_not_exist(command, missing, tmp_path):
    args = [arg.format(**{"in": str(tmp_path / missing), "out": str(tmp_path / "out")}) for arg in command]
    if command[0] == "evaluate" and missing.endswith(".csv"):
        pytest.skip("evaluate reads folders only")
    done = cli(["-q", *args], tmp_path)
    assert done.returncode == 2
    assert f"{tmp_path / missing}: does not exist" in done.stderr and "not a directory" not in done.stderr


def gold_folder(folder: Path, names: list[str]) -> Path:
    """Annotated notes (BRAT) with their gold spans."""
    from hybriddeid.core.document import Document, Span
    from hybriddeid.io import write_document

    start = NOTE.index("John Smith")
    for name in names:
        write_document(Document(name, NOTE, (Span(start, start + len("John Smith"), "PATIENT"),)), folder, "brat")
    return folder


def test_evaluate_against_a_folder_without_annotations_says_there_is_no_gold(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text(NOTE, encoding="utf-8")
    pred = gold_folder(tmp_path / "pred", ["a"])
    done = cli(["-q", "evaluate", str(plain), str(pred)], tmp_path)
    assert done.returncode == 2 and "no gold annotations in its 1 notes" in done.stderr
    assert "John Smith" not in done.stderr


def test_a_gold_note_without_a_prediction_file_is_named_in_a_warning(tmp_path):
    gold = gold_folder(tmp_path / "gold", ["a", "b", "c"])
    pred = gold_folder(tmp_path / "pred", ["a"])
    done = cli(["evaluate", str(gold), str(pred), "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 gold note(s) have no prediction, so every gold span in them is scored as missed: b, c" in done.stderr
    whole = cli(["evaluate", str(gold), str(gold)], tmp_path)
    assert whole.returncode == 0 and "no prediction" not in whole.stderr


def test_spark_deid_writes_no_row_without_an_id_nor_either_row_of_a_shared_id(tmp_path):
    """The same refusal through a real ``spark-deid`` run (skipped where pyspark is not installed)."""
    pytest.importorskip("pyspark")
    table = tmp_path / "notes.jsonl"
    rows = [
        {"note_id": None, "text": NOTE},
        {"note_id": "twice", "text": NOTE},
        {"note_id": "twice", "text": NOTE},
        {"note_id": "once", "text": NOTE},
        {"text": NOTE},
    ]
    table.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = tmp_path / "out"
    done = cli(
        [
            "-q",
            "spark-deid",
            "--input",
            str(table),
            "--output",
            str(out),
            "--format",
            "json",
            "--mode",
            "tag",
            "--master",
            "local[1]",
        ],
        tmp_path,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    written = [json.loads(line) for part in sorted(out.glob("part-*.json")) for line in part.read_text().splitlines()]
    got = sorted((row.get("note_id") or "", row.get("error") or "", "deid_text" in row) for row in written)
    assert got == [
        ("", "no_id", False),
        ("", "no_id", False),
        ("once", "", True),
        ("twice", "duplicate_id", False),
        ("twice", "duplicate_id", False),
    ]
    assert done.returncode == 1 and "John Smith" not in done.stderr


@pytest.mark.parametrize("command", ["deid", "annotate"])
def test_recursive_reads_sub_folders_and_the_output_mirrors_them(command, tmp_path):
    notes = probe_notes(tmp_path / "notes")
    (notes / "sub" / "deeper").mkdir()
    (notes / "sub" / "deeper" / "note9.txt").write_text(NOTE, encoding="utf-8")
    (notes / "sub" / "note1.txt").write_text(NOTE, encoding="utf-8")  # the name of a note above, another note
    (notes / "audit").mkdir()
    (notes / "audit" / "a.txt").write_text(NOTE, encoding="utf-8")
    (notes / "link").symlink_to(notes / "sub")
    out = tmp_path / "out"
    args = ["deid", "--mode", "surrogate", "--key-file", str(tmp_path / "k.key")] if command == "deid" else ["annotate"]
    done = cli([*args, str(notes), str(out), "--recursive"], tmp_path)
    assert done.returncode == 0, done.stderr
    suffix = ".txt" if command == "deid" else ".ann"
    written = sorted(
        str(p.relative_to(out)) for p in out.rglob(f"*{suffix}") if p.parent.name != "audit" or command == "annotate"
    )
    expected = ["NOTE2", "note1", "note7", "sub/deeper/note9", "sub/note1", "sub/note6"]
    expected += (
        ["audit/a"] if command == "annotate" else []
    )  # deid's own folder: an input folder of that name is not read
    assert written == sorted(name + suffix for name in expected)
    left = ["hidden", "no extension", "not a .txt file", "backup", "a link to a folder"]
    left += ["a folder named 'audit'"] if command == "deid" else []
    assert f"{len(expected)} written, 0 already done, 0 failed, {len(left)} not taken" in done.stderr
    for why in left:
        assert why in done.stderr
    assert not list(out.rglob(".hybriddeid.lock"))
    if command == "deid":
        summary = json.loads((out / "audit" / "summary.json").read_text(encoding="utf-8"))
        assert summary["files"] == {"written": 6, "skipped": 0, "failed": 0, "not_taken": 6}
        assert summary["notes"] == 6 and (out / "sub" / "deeper" / "audit" / "note9.jsonl").is_file()
        # by default a note is its own patient under its folder: one name in two folders, two patients
        assert (out / "sub" / "note1.txt").read_text() != (out / "note1.txt").read_text()
        again = cli([*args, str(notes), str(out), "--recursive"], tmp_path)
        assert again.returncode == 0 and "0 written, 6 already done, 0 failed, 6 not taken" in again.stderr
