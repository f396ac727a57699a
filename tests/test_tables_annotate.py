"""``hybriddeid annotate`` over tables and databases (issue 26): CSV, TSV, a JSON Lines table, Parquet,
SQLite and a real PostgreSQL server give each note the spans (offsets, label, source, score) a folder
``annotate`` writes for the same note, in a ``phi_spans`` column beside the id, the patient and the kept
columns, never the text; bad rows are told by row number and the others go on; ``kill -9`` mid-run then
the same command gives the uninterrupted run's output.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from cli_runs import FAST_CLI, files, kill_9_after, run, slow_cli
from hybriddeid.cli import main
from table_notes import (
    NOTES,
    PHI_STRINGS,
    kill_9_then_resume,
    note_rows,
    password_file_only,
    pg_count,
    pg_load,
    pg_rows,
    table_rows,
    write_csv,
    write_folder,
    write_sqlite,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
sqlalchemy = pytest.importorskip("sqlalchemy")

NOT_IN_OUTPUT = [*PHI_STRINGS, "I feel fine", "Boston"]  # PHI and plain words of the texts: no text is written


def annotate(*args: str) -> int:
    return main(["-q", "annotate", "--model", "en", *args])


def folder_spans(root: Path, rows: list[dict], *options: str) -> dict[str, list[dict]]:
    """Each note's spans as a folder ``annotate`` (JSON Lines annotations) writes them."""
    folder = root / "folder"
    if not folder.exists():
        write_folder(folder, rows)
    out = root / f"folder_out{len(list(root.glob('folder_out*')))}"
    assert annotate(str(folder), str(out), "--format", "jsonl", *options) == 0
    spans = {}
    for row in rows:
        (record,) = [json.loads(line) for line in (out / f"{row['note_id']}.jsonl").read_text("utf-8").splitlines()]
        spans[row["note_id"]] = record["spans"]
    return spans


@pytest.fixture(scope="module")
def setting(tmp_path_factory) -> dict:
    """The notes and the spans a folder run finds in them."""
    root = tmp_path_factory.mktemp("annotate_tables")
    rows = note_rows()
    expected = folder_spans(root, rows)
    assert all(len(expected[r["note_id"]]) >= 4 for r in rows)  # names, dates, MRNs and phones in every note
    return {"root": root, "rows": rows, "expected": expected}


def table_spans(out: Path, fmt: str, id_col: str = "note_id") -> dict[str, list[dict]]:
    return {str(row[id_col]): json.loads(row["phi_spans"]) for row in table_rows(out, fmt)}


def offsets_and_labels(spans: dict[str, list[dict]]) -> bytes:
    """The spans' offsets and labels by note, as bytes to compare byte for byte."""
    return json.dumps(
        {note: [[s["start"], s["end"], s["label"]] for s in found] for note, found in sorted(spans.items())}
    ).encode("utf-8")


def no_text_in(out: Path) -> None:
    for name, data in files(out).items():
        text = data.decode("utf-8", errors="replace")
        assert not [word for word in NOT_IN_OUTPUT if word in text], name


def test_csv_gives_the_folder_runs_spans_without_the_text(setting, tmp_path):
    table = write_csv(tmp_path / "notes.csv", setting["rows"])
    out = tmp_path / "out"
    args = [str(table), str(out), "--patient-col", "patient", "--keep-cols", "ward", "--part-rows", "3"]
    assert annotate(*args, "--jobs", "2") == 0
    got = table_spans(out, "csv")
    assert offsets_and_labels(got) == offsets_and_labels(setting["expected"])
    assert got == setting["expected"]  # sources and scores too
    first = table_rows(out, "csv")[0]
    assert list(first) == ["note_id", "patient", "ward", "phi_spans"]  # no text; author not in --keep-cols
    assert (first["note_id"], first["patient"], first["ward"]) == ("n000", "pt00", "W0")
    assert len(list(out.glob("part-*.csv"))) == 10
    no_text_in(out)
    summary = json.loads((out / "_hybriddeid" / "summary.json").read_text())
    assert summary["notes"] == {"written": NOTES, "skipped": 0, "failed": 0}
    # a rerun skips every part and changes nothing
    before = files(out)
    assert annotate(*args) == 0
    after = files(out)
    assert json.loads(after.pop("_hybriddeid/summary.json"))["notes"]["skipped"] == NOTES
    before.pop("_hybriddeid/summary.json")
    assert after == before


def test_tsv_jsonl_and_parquet_tables_give_the_folder_runs_spans(setting, tmp_path):
    rows, expected = setting["rows"], setting["expected"]
    tsv = write_csv(tmp_path / "notes.tsv", rows, delimiter="\t")
    assert annotate(str(tsv), str(tmp_path / "tsv")) == 0
    assert table_spans(tmp_path / "tsv", "tsv") == expected
    semicolons = write_csv(tmp_path / "notes.csv", rows, delimiter=";")
    semicolons.write_bytes(semicolons.read_bytes().decode("utf-8").encode("cp1252"))  # "Café" as one byte
    assert annotate(str(semicolons), str(tmp_path / "cp1252"), "--delimiter", ";", "--encoding", "cp1252") == 0
    with open(tmp_path / "cp1252" / "part-00000.csv", newline="", encoding="utf-8") as handle:  # the delimiter kept
        got = {row["note_id"]: json.loads(row["phi_spans"]) for row in csv.DictReader(handle, delimiter=";")}
    assert got == expected  # offsets count characters, not bytes
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": r["visit"], "body": r["text"], "pid": r["patient"]}) + "\n" for r in rows),
        encoding="utf-8",
    )
    assert (
        annotate(
            str(jsonl),
            str(tmp_path / "jsonl"),
            "--id-col",
            "id",
            "--text-col",
            "body",
            "--patient-col",
            "pid",
            "--part-rows",
            "7",
        )
        == 0
    )
    assert table_spans(tmp_path / "jsonl", "jsonl-table", "id") == {
        str(r["visit"]): expected[r["note_id"]] for r in rows
    }
    first = json.loads((tmp_path / "jsonl" / "part-00000.jsonl").read_text().split("\n")[0])
    assert list(first) == ["id", "pid", "phi_spans"] and first["id"] == 0  # the id keeps its JSON type
    table = pa.table(
        {
            "note_id": [r["note_id"] for r in rows],
            "text": [r["text"] for r in rows],
            "visit": pa.array([r["visit"] for r in rows], pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "notes.parquet", row_group_size=8)  # parts cross row groups
    out = tmp_path / "parquet"
    assert annotate(str(tmp_path / "notes.parquet"), str(out), "--keep-cols", "visit", "--part-rows", "5") == 0
    dataset = pq.read_table(out)  # the folder reads as one dataset: _hybriddeid/ is ignored
    assert dataset.column_names == ["note_id", "visit", "phi_spans"] and dataset.num_rows == NOTES
    assert dataset.schema.field("visit").type == pa.int32()
    assert table_spans(out, "parquet") == expected
    no_text_in(out)


def test_a_notes_spans_do_not_depend_on_the_other_notes_of_its_part_or_patient(tmp_path):
    """``deid`` links a name word found in one of a patient's notes wherever it stands alone in the others;
    ``annotate`` reads each note on its own, for a folder and a table alike."""
    rows = [
        {
            "note_id": "a",
            "patient": "p1",
            "text": "Patient Quorvendale Zibbinshaw was seen on 03/14/2023 by Dr. Pellworth.\n",
        },
        {"note_id": "b", "patient": "p1", "text": "Follow up: Zibbinshaw doing well. Quorvendale ate lunch.\n"},
    ]
    expected = folder_spans(tmp_path, rows)
    assert expected["a"] and expected["b"] == []  # alone, note b's name words are not found
    table = write_csv(tmp_path / "notes.csv", rows)
    assert annotate(str(table), str(tmp_path / "out"), "--patient-col", "patient") == 0
    assert table_spans(tmp_path / "out", "csv") == expected


def test_phi_set_and_threshold_give_the_folder_runs_spans_and_other_settings_are_refused(setting, tmp_path, caplog):
    options = ["--phi-set", "hipaa", "--threshold", "0.9"]
    expected = folder_spans(setting["root"], setting["rows"], *options)
    assert expected != setting["expected"]  # the options change something
    table = write_csv(tmp_path / "notes.csv", setting["rows"])
    out = tmp_path / "out"
    assert annotate(str(table), str(out), *options, "--format", "jsonl-table") == 0
    assert table_spans(out, "jsonl-table") == expected
    with caplog.at_level("ERROR"):
        assert annotate(str(table), str(out), "--format", "jsonl-table") == 2  # other settings: refused
    assert "holds output made with other settings (phi_set, phi_threshold)" in caplog.text
    assert annotate(str(table), str(out), "--format", "jsonl-table", "--overwrite") == 0
    assert table_spans(out, "jsonl-table") == setting["expected"]


def test_sqlite_to_sqlite_gives_the_folder_runs_spans_and_resumes(setting, tmp_path):
    db = tmp_path / "clinic.db"
    url = write_sqlite(db, setting["rows"])
    args = [
        url,
        url,
        "--table",
        "notes",
        "--output-table",
        "notes_spans",
        "--patient-col",
        "patient",
        "--keep-cols",
        "ward",
        "--part-rows",
        "4",
    ]
    assert annotate(*args) == 0

    def spans() -> dict[str, list[dict]]:
        with sqlite3.connect(db) as conn:
            return {
                note: json.loads(found) for note, found in conn.execute("SELECT note_id, phi_spans FROM notes_spans")
            }

    assert spans() == setting["expected"]
    with sqlite3.connect(db) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(notes_spans)")]
        conn.execute("DELETE FROM notes_spans WHERE note_id < 'n008'")  # as if those parts never ran
    assert columns == ["note_id", "patient", "ward", "phi_spans"]
    assert annotate(*args) == 0
    assert spans() == setting["expected"]
    # a query as input, a folder as output
    out = tmp_path / "out"
    assert annotate(url, str(out), "--query", "SELECT note_id, text FROM notes", "--format", "parquet") == 0
    assert table_spans(out, "parquet") == setting["expected"]


def test_bad_rows_are_told_by_row_number_and_the_others_go_on(setting, tmp_path, caplog):
    rows = setting["rows"][:8]
    records = [{"note_id": r["note_id"], "patient": r["patient"], "text": r["text"]} for r in rows]
    records[1]["text"] = None  # an empty text
    records[2]["text"] = 4417920  # a number, not text
    records[3]["note_id"] = ["n003", "Quorvendale"]  # an id that is a list
    records[4]["note_id"] = records[0]["note_id"]  # an id used twice
    del records[5]["patient"]  # no patient column
    records[6]["patient"] = None
    path = tmp_path / "notes.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records) + "{not json\n", encoding="utf-8")
    out = tmp_path / "out"
    with caplog.at_level("INFO"):
        assert main(["annotate", "--model", "en", str(path), str(out), "--patient-col", "patient"]) == 1
    log = caplog.text
    for told in (
        "line 2: no text (column 'text' is empty)",
        "line 3: no text (column 'text' is not text)",
        "line 4: its id (column 'note_id') is a list, not text or a number",
        "line 5: its id is already used by line 1",
        "line 6: has no 'patient'",
        "line 7: no patient (column 'patient' is empty)",
        "line 9: invalid JSON",
    ):
        assert told in log
    assert not [value for value in [*NOT_IN_OUTPUT, "n001", "n002", "n003", "pt02"] if value in log]
    got = table_spans(out, "jsonl-table")
    assert got == {"n000": setting["expected"]["n000"], "n007": setting["expected"]["n007"]}
    summary = json.loads((out / "_hybriddeid" / "summary.json").read_text())
    assert summary["notes"] == {"written": 2, "skipped": 0, "failed": 7}


def test_options_that_do_not_fit_the_input_are_refused(setting, tmp_path, caplog):
    table = write_csv(tmp_path / "notes.csv", setting["rows"][:2])
    folder = setting["root"] / "folder"
    with caplog.at_level("ERROR"):
        assert annotate(str(table), str(tmp_path / "a"), "--format", "brat") == 2
        assert annotate(str(folder), str(tmp_path / "b"), "--format", "csv") == 2
        assert annotate(str(folder), str(tmp_path / "c"), "--part-rows", "3") == 2
        assert annotate(str(table), str(tmp_path / "d"), "--output-table", "spans") == 2
        assert annotate(str(table), str(tmp_path / "e"), "--text-col", "body") == 2
    for told in (
        "--format brat: a table run writes a table",
        "--format csv: a folder run writes annotations",
        "--part-rows: only for a table or database input",
        "--output-table: not for this run",
        "has no column 'body'",
    ):
        assert told in caplog.text
    assert not [p for p in tmp_path.iterdir() if p.name in "abcde"]  # refused before anything was written


def test_kill_9_then_resume_gives_the_uninterrupted_table(setting, tmp_path):
    table = write_csv(tmp_path / "notes.csv", setting["rows"])
    out = kill_9_then_resume(
        ["annotate", "--model", "en", "--patient-col", "patient", "--part-rows", "3", "--jobs", "2", str(table)],
        tmp_path,
    )
    assert table_spans(out, "csv") == setting["expected"]


def test_postgresql_gives_the_folder_runs_spans_and_resumes_after_kill_9(setting, postgres, tmp_path, monkeypatch):
    url, password = postgres
    pg_load(url, password, "notes_n", setting["rows"])
    secret = password_file_only(password, tmp_path, monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def options(table: str) -> list[str]:
        return [
            "annotate",
            "--model",
            "en",
            "--table",
            "notes_n",
            "--output-table",
            table,
            "--patient-col",
            "patient",
            "--keep-cols",
            "author",
            "--part-rows",
            "3",
            "--jobs",
            "2",
            "--password-file",
            str(secret),
            url,
            url,
        ]

    reference = run(FAST_CLI, options("notes_n_reference"), tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    query = "SELECT note_id, patient, author, phi_spans FROM {} ORDER BY note_id"
    want = pg_rows(url, password, query.format("notes_n_reference"))
    assert {note: json.loads(found) for note, _, _, found in want} == setting["expected"]

    kill_9_after(slow_cli(0.3), options("notes_n_out"), tmp_path, lambda: pg_count(url, password, "notes_n_out"), 6)
    kept = pg_rows(url, password, "SELECT count(*) FROM notes_n_out")[0][0]
    assert 6 <= kept < NOTES and kept % 3 == 0  # whole parts only: no half batch
    resumed = run(FAST_CLI, options("notes_n_out"), tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert pg_rows(url, password, query.format("notes_n_out")) == want
