"""``hybriddeid deid`` over tables and databases (issue 26): CSV with quoted line breaks and quotes, TSV,
a 5-column Parquet file, a JSON Lines table, SQLite and a real PostgreSQL server give each note the
byte-identical de-identified text a folder run gives it; bad rows are reported by row number and the
others go on; ``kill -9`` mid-run then the same command gives the uninterrupted run's output.

PostgreSQL: as ``table_notes.postgres`` finds or starts it (skipped, saying why, only where none can be had).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from cli_runs import FAST_CLI, files, kill_9_after, run, slow_cli
from hybriddeid.cli import main
from hybriddeid.io.tables import read_table
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


def deid(*args: str) -> int:
    return main(["-q", "deid", "--model", "en", *args])


@pytest.fixture(scope="module")
def setting(tmp_path_factory) -> dict:
    """The notes, a key, and the folder run they are compared with (patients from a patient map)."""
    root = tmp_path_factory.mktemp("tables")
    rows = note_rows()
    folder = write_folder(root / "folder", rows)
    patient_map = root / "patients.csv"
    patient_map.write_text(
        "note,patient\n" + "".join(f"{r['note_id']},{r['patient']}\n" for r in rows), encoding="utf-8"
    )
    key = root / "deid.key"
    options = ["--mode", "surrogate", "--key-file", str(key)]
    assert deid(str(folder), str(root / "folder_out"), *options, "--patient-map", str(patient_map)) == 0
    expected = {
        row["note_id"]: (root / "folder_out" / f"{row['note_id']}.txt").read_bytes().decode("utf-8") for row in rows
    }
    assert all(expected[r["note_id"]] != r["text"] for r in rows)  # something was replaced in every note
    return {"root": root, "rows": rows, "options": options, "expected": expected, "key": key}


def table_texts(out: Path, fmt: str, id_col: str = "note_id", text_col: str = "text") -> dict[str, str]:
    return {str(row[id_col]): row[text_col] for row in table_rows(out, fmt)}


def test_csv_with_quoted_line_breaks_gives_the_folder_runs_text(setting, tmp_path, caplog):
    table = write_csv(tmp_path / "notes.csv", setting["rows"])
    out = tmp_path / "out"
    assert (
        deid(
            str(table),
            str(out),
            *setting["options"],
            "--patient-col",
            "patient",
            "--keep-cols",
            "ward",
            "--part-rows",
            "3",
            "--jobs",
            "2",
        )
        == 0
    )
    assert table_texts(out, "csv") == setting["expected"]
    first = read_table(out / "part-00000.csv")[0]
    assert list(first) == ["note_id", "patient", "text", "ward"]  # author left out: not named in --keep-cols
    raw = (out / "part-00000.csv").read_bytes()
    assert b'""I feel fine""' in raw and b".\r\nMRN" in raw  # RFC 4180 quoting; the note's \r\n kept inside
    assert len(list(out.glob("part-*.csv"))) == 10
    summary = json.loads((out / "_hybriddeid" / "summary.json").read_text())
    assert summary["notes"] == {"written": NOTES, "skipped": 0, "failed": 0}
    # a rerun skips every part and changes nothing
    before = files(out)
    assert (
        deid(
            str(table),
            str(out),
            *setting["options"],
            "--patient-col",
            "patient",
            "--keep-cols",
            "ward",
            "--part-rows",
            "3",
        )
        == 0
    )
    after = files(out)
    assert json.loads(after.pop("_hybriddeid/summary.json"))["notes"]["skipped"] == NOTES
    before.pop("_hybriddeid/summary.json")
    assert after == before


def test_tsv_and_a_jsonl_table_give_the_folder_runs_text(setting, tmp_path):
    tsv = write_csv(tmp_path / "notes.tsv", setting["rows"], delimiter="\t")
    assert deid(str(tsv), str(tmp_path / "tsv"), *setting["options"], "--patient-col", "patient") == 0
    assert table_texts(tmp_path / "tsv", "tsv") == setting["expected"]
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": r["visit"], "body": r["text"], "pid": r["patient"]}) + "\n" for r in setting["rows"]),
        encoding="utf-8",
    )
    assert (
        deid(
            str(jsonl),
            str(tmp_path / "jsonl"),
            *setting["options"],
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
    got = table_texts(tmp_path / "jsonl", "jsonl-table", "id", "body")
    assert got == {str(r["visit"]): setting["expected"][r["note_id"]] for r in setting["rows"]}
    first = json.loads((tmp_path / "jsonl" / "part-00000.jsonl").read_text().split("\n")[0])
    assert first["id"] == 0 and isinstance(first["id"], int)  # the id keeps its JSON type


def test_a_five_column_parquet_file_keeps_its_types_and_gives_the_folder_runs_text(setting, tmp_path):
    rows = setting["rows"]
    table = pa.table(
        {
            "note_id": [r["note_id"] for r in rows],
            "patient": [r["patient"] for r in rows],
            "text": [r["text"] for r in rows],
            "ward": [r["ward"] for r in rows],
            "visit": pa.array([r["visit"] for r in rows], pa.int32()),
        }
    )
    pq.write_table(table, tmp_path / "notes.parquet", row_group_size=8)  # parts cross row groups
    out = tmp_path / "out"
    assert (
        deid(
            str(tmp_path / "notes.parquet"),
            str(out),
            *setting["options"],
            "--patient-col",
            "patient",
            "--keep-cols",
            "visit",
            "--part-rows",
            "5",
            "--spans",
            "--audit",
        )
        == 0
    )
    assert table_texts(out, "parquet") == setting["expected"]
    dataset = pq.read_table(out)  # the folder reads as one dataset: _hybriddeid/ is ignored
    assert dataset.num_rows == NOTES
    assert dataset.schema.field("visit").type == pa.int32()
    assert dataset.column_names == ["note_id", "patient", "text", "visit", "phi_spans", "audit"]
    audit = json.loads(dataset.to_pylist()[0]["audit"])
    assert audit and all("original" not in entry and "Quorvendale" not in json.dumps(entry) for entry in audit)


def test_sqlite_to_sqlite_gives_the_folder_runs_text_and_resumes(setting, tmp_path):
    url = write_sqlite(tmp_path / "clinic.db", setting["rows"])
    args = [
        url,
        url,
        *setting["options"],
        "--table",
        "notes",
        "--output-table",
        "notes_deid",
        "--patient-col",
        "patient",
        "--part-rows",
        "4",
    ]
    assert deid(*args) == 0
    with sqlite3.connect(tmp_path / "clinic.db") as conn:
        got = dict(conn.execute("SELECT note_id, text FROM notes_deid"))
        conn.execute("DELETE FROM notes_deid WHERE patient = 'pt03'")  # as if its unit never ran
    assert got == setting["expected"]
    assert deid(*args) == 0
    with sqlite3.connect(tmp_path / "clinic.db") as conn:
        assert dict(conn.execute("SELECT note_id, text FROM notes_deid")) == setting["expected"]
    # a query as input, a folder as output
    out = tmp_path / "out"
    assert (
        deid(
            url,
            str(out),
            *setting["options"],
            "--query",
            "SELECT note_id, patient, text FROM notes",
            "--patient-col",
            "patient",
            "--format",
            "jsonl-table",
        )
        == 0
    )
    assert table_texts(out, "jsonl-table") == setting["expected"]


def test_bad_rows_are_told_by_row_number_and_the_others_go_on(setting, tmp_path, caplog):
    rows = [dict(r) for r in setting["rows"][:6]]
    rows[1]["text"] = None  # an empty field
    rows[3]["note_id"] = rows[2]["note_id"]  # an id used twice
    path = tmp_path / "notes.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["note_id", "text"])
        for row in rows:
            writer.writerow([row["note_id"], row["text"] or ""] if row is not rows[4] else [row["note_id"]])
    out = tmp_path / "out"
    with caplog.at_level("INFO"):
        assert main(["deid", "--model", "en", str(path), str(out)]) == 1
    log = caplog.text
    # line numbers count physical lines: a note spans five (its closing quote on the last)
    assert "line 13: its id is already used by line 8" in log and "line 18: has 1 fields, the header 2" in log
    assert "line 7: no text (column 'text' is empty)" in log  # an empty field is no note, as an empty file is none
    assert not any(value in log for value in PHI_STRINGS + ["n002"])
    got = table_texts(out, "csv")
    assert sorted(got) == ["n000", "n002", "n005"]


def test_wrong_columns_and_passwords_in_urls_are_refused_clearly(setting, tmp_path, caplog):
    table = write_csv(tmp_path / "notes.csv", setting["rows"][:2])
    with caplog.at_level("ERROR"):
        assert deid(str(table), str(tmp_path / "out"), "--text-col", "body") == 2
        assert "has no column 'body'" in caplog.text
        assert deid("postgresql://me:s3cret-pw@localhost/db", str(tmp_path / "out2"), "--table", "notes") == 2
    assert "s3cret-pw" not in caplog.text and "holds a password" in caplog.text


def test_a_csv_without_a_header_row_is_refused_without_quoting_its_first_note(tmp_path):
    from hybriddeid.io import InputError
    from hybriddeid.io.tables import Columns, open_table

    path = tmp_path / "headerless.csv"
    path.write_text("n1,Seen by Dr Zibbinshaw at Pellworth,4417920\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        open_table(path, "csv", Columns())
    message = str(caught.value)
    assert "has no column 'note_id', 'text'" in message and "first row has 3 fields" in message
    assert not any(value in message for value in PHI_STRINGS + ["n1"])


def test_kill_9_then_resume_gives_the_uninterrupted_table(setting, tmp_path):
    table = write_csv(tmp_path / "notes.csv", setting["rows"])
    out = kill_9_then_resume(
        [
            "deid",
            "--model",
            "en",
            *setting["options"],
            "--patient-col",
            "patient",
            "--part-rows",
            "3",
            "--jobs",
            "2",
            str(table),
        ],
        tmp_path,
    )
    assert table_texts(out, "csv") == setting["expected"]


# -- PostgreSQL ------------------------------------------------------------------------------------------
def test_postgresql_gives_the_folder_runs_text_with_the_password_from_a_file(setting, postgres, tmp_path, monkeypatch):
    url, password = postgres
    pg_load(url, password, "notes_a", setting["rows"])
    secret = password_file_only(password, tmp_path, monkeypatch)
    args = [
        url,
        url,
        *setting["options"],
        "--table",
        "notes_a",
        "--output-table",
        "notes_a_deid",
        "--patient-col",
        "patient",
        "--part-rows",
        "4",
        "--jobs",
        "2",
        "--audit",
    ]
    assert deid(*args, "--password-file", str(secret)) == 0
    got = dict(pg_rows(url, password, "SELECT note_id, text FROM notes_a_deid"))
    assert got == setting["expected"]
    # the same notes from SQLite give the same rows; from PostgreSQL to a CSV folder too
    out = tmp_path / "csv"
    monkeypatch.setenv("HYBRIDDEID_DB_PASSWORD", password)
    assert (
        deid(
            url,
            str(out),
            *setting["options"],
            "--query",
            "SELECT * FROM notes_a WHERE patient <> ''",
            "--patient-col",
            "patient",
        )
        == 0
    )
    assert table_texts(out, "csv") == setting["expected"]


def test_postgresql_kill_9_then_resume_gives_the_uninterrupted_table(setting, postgres, tmp_path, monkeypatch):
    url, password = postgres
    pg_load(url, password, "notes_k", setting["rows"])
    monkeypatch.setenv("HYBRIDDEID_DB_PASSWORD", password)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def options(table: str) -> list[str]:
        return [
            "deid",
            "--model",
            "en",
            *setting["options"],
            "--table",
            "notes_k",
            "--output-table",
            table,
            "--patient-col",
            "patient",
            "--part-rows",
            "3",
            "--jobs",
            "2",
            url,
            url,
        ]

    reference = run(FAST_CLI, options("notes_k_reference"), tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()

    kill_9_after(slow_cli(0.3), options("notes_k_out"), tmp_path, lambda: pg_count(url, password, "notes_k_out"), 6)
    kept = pg_rows(url, password, "SELECT patient, count(*) FROM notes_k_out GROUP BY patient")
    patients = {}
    for row in setting["rows"]:
        patients[row["patient"]] = patients.get(row["patient"], 0) + 1
    assert 6 <= sum(n for _, n in kept) < NOTES
    assert all(n == patients[p] for p, n in kept)  # whole units only: no half batch
    resumed = run(FAST_CLI, options("notes_k_out"), tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    query = "SELECT note_id, patient, text FROM {} ORDER BY note_id"
    assert pg_rows(url, password, query.format("notes_k_out")) == pg_rows(
        url, password, query.format("notes_k_reference")
    )
    assert dict((r[0], r[2]) for r in pg_rows(url, password, query.format("notes_k_out"))) == setting["expected"]


@pytest.mark.parametrize("fmt", ["csv", "parquet", "sqlite"])
def test_parts_read_again_by_the_workers_give_the_same_text(setting, tmp_path, monkeypatch, fmt):
    """Past the batch runner's text budget, parts are read again from their locators in the workers (a
    byte offset, a row number, the last id before them): with a budget of 0 every part is."""
    monkeypatch.setattr("hybriddeid.runs.batch.HELD_CHARACTERS", 0)
    rows = setting["rows"]
    if fmt == "csv":
        source, extra = str(write_csv(tmp_path / "notes.csv", rows)), []
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "notes.parquet", row_group_size=4)
        source, extra = str(tmp_path / "notes.parquet"), []
    else:
        source, extra = write_sqlite(tmp_path / "clinic.db", rows), ["--table", "notes", "--format", "csv"]
    out = tmp_path / "out"
    assert (
        deid(
            source, str(out), *setting["options"], *extra, "--patient-col", "patient", "--part-rows", "7", "--jobs", "2"
        )
        == 0
    )
    assert table_texts(out, "csv" if fmt != "parquet" else "parquet") == setting["expected"]
