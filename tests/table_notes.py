"""What the table tests of ``deid`` and ``annotate`` share (issue 26): 30 notes of 10 patients as rows, written
as CSV/TSV or into SQLite and PostgreSQL, the output parts read back, and a PostgreSQL server to run against.

PostgreSQL: ``HYBRIDDEID_TEST_POSTGRES_URL`` (password in ``HYBRIDDEID_DB_PASSWORD``) names a server to
use; otherwise the ``postgres`` fixture starts a private one with the installed server binaries
(``.ci/run`` installs Debian's ``postgresql``) and skips, saying why, only where none can be started.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_runs import FAST_CLI, TEMP, files, kill_9_after, run, slow_cli
from hybriddeid.io.tables import read_table
from pg_server import NoServer, private_server

NOTES = 30
FIRST = ["Quorvendale", "Ambrith", "Teodric", "Marisol", "Kestrel", "Oswin"]
LAST = ["Zibbinshaw", "Pellworth", "Andravi", "Okonkwo", "Lindqvist"]
PHI_STRINGS = ["Quorvendale", "Zibbinshaw", "Pellworth", "4417920"]


def note_rows() -> list[dict]:
    """30 notes of 10 patients: three contiguous notes each, but patient pt00's third note is the last row
    (so its parts run as one unit). Texts hold quoted commas, doubled quotes, tabs, \\r\\n and \\n line
    breaks, a blank line and accents: what a careless export would mangle."""
    rows = []
    for i in range(NOTES):
        patient = "pt00" if i == NOTES - 1 else f"pt{min(i, NOTES - 2) // 3:02d}"
        name = f"{FIRST[i % 6]} {LAST[i % 5]}"
        text = (
            f"Patient {name} was seen on {1 + i % 12:02d}/{1 + i % 28:02d}/2023 by Dr. {LAST[(i + 2) % 5]}.\r\n"
            f"MRN {4417920 + 37 * i}, phone (617) 555-{1000 + i:04d}.\n\n"
            f'She said "I feel fine",\tthen left; lives in Boston, MA. Café visit.\n'
        )
        rows.append(
            {
                "note_id": f"n{i:03d}",
                "patient": patient,
                "text": text,
                "author": f"Dr. {LAST[i % 5]}",
                "ward": f"W{i % 4}",
                "visit": i,
            }
        )
    return rows


def write_folder(folder: Path, rows: list[dict]) -> Path:
    """Each row's text as ``<note_id>.txt``, byte for byte (the folder run a table run is compared with)."""
    folder.mkdir()
    for row in rows:
        (folder / f"{row['note_id']}.txt").write_bytes(row["text"].encode("utf-8"))
    return folder


def write_csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(
            handle, ["note_id", "patient", "text", "author", "ward"], delimiter=delimiter, extrasaction="ignore"
        )
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_sqlite(path: Path, rows: list[dict], table: str = "notes") -> str:
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"CREATE TABLE {table} (note_id TEXT PRIMARY KEY, patient TEXT, text TEXT, author TEXT, ward TEXT)"
        )
        conn.executemany(f"INSERT INTO {table} VALUES (:note_id, :patient, :text, :author, :ward)", rows)
    return f"sqlite:///{path}"


def table_rows(out: Path, fmt: str) -> list[dict]:
    """Every row of an output folder's parts, in part order."""
    return [
        row
        for part in sorted(out.glob(f"part-*{'.jsonl' if fmt == 'jsonl-table' else '.' + fmt}"))
        for row in read_table(part, fmt)
    ]


def kill_9_then_resume(options: list[str], tmp_path: Path) -> Path:
    """Run the CLI with ``options`` (a command reading a CSV table in parts of 3 rows, ending with its input)
    into ``reference``, then into ``out`` killed with ``kill -9`` after three parts and run again: ``out``
    must end as ``reference`` is, some parts skipped, no temporary file left. Returns ``out``."""
    reference = run(FAST_CLI, [*options, str(tmp_path / "reference")], tmp_path)
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    out = tmp_path / "out"
    kill_9_after(slow_cli(0.3), [*options, str(out)], tmp_path, lambda: len(list(out.glob("part-*.csv"))), 3)
    assert 3 <= len(list(out.glob("part-*.csv"))) < 10
    resumed = run(FAST_CLI, [*options, str(out)], tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    got, want = files(out), files(tmp_path / "reference")
    summary = json.loads(got.pop("_hybriddeid/summary.json"))
    want.pop("_hybriddeid/summary.json")
    assert 0 < summary["notes"]["skipped"] < NOTES and summary["notes"]["failed"] == 0
    assert got == want
    assert not [p for p in out.rglob("*") if TEMP.fullmatch(p.name)]
    return out


@pytest.fixture(scope="module")
def postgres() -> Iterator[tuple[str, str]]:
    """(URL without password, password) of a PostgreSQL server: the one ``HYBRIDDEID_TEST_POSTGRES_URL``
    names, else a private one started here (``pg_server``)."""
    pytest.importorskip("psycopg", reason="PostgreSQL tests need psycopg: pip install 'hybriddeid[sql]'")
    given = os.environ.get("HYBRIDDEID_TEST_POSTGRES_URL")
    if given:
        yield given, os.environ.get("HYBRIDDEID_DB_PASSWORD", "")
        return
    try:
        with private_server() as server:
            yield server
    except NoServer as exc:
        pytest.skip(f"{exc} (or set HYBRIDDEID_TEST_POSTGRES_URL)")


def pg_rows(url: str, password: str, query: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, password=password) as conn:
        return [tuple(row) for row in conn.execute(query)]


def pg_load(url: str, password: str, table: str, rows: list[dict]) -> None:
    import psycopg

    with psycopg.connect(url, password=password) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (note_id TEXT PRIMARY KEY, patient TEXT, text TEXT, author TEXT)")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES (%(note_id)s, %(patient)s, %(text)s, %(author)s)", rows)


def password_file_only(password: str, folder: Path, monkeypatch) -> Path:
    """A file holding ``password``, and no password in the environment: a run must read that file."""
    monkeypatch.delenv("HYBRIDDEID_DB_PASSWORD", raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    secret = folder / "pg.pw"
    secret.write_text(password + "\n")
    return secret


def pg_count(url: str, password: str, table: str) -> int:
    """The rows of ``table`` (0 while it does not exist yet): how far a run being killed has got."""
    try:
        return pg_rows(url, password, f"SELECT count(*) FROM {table}")[0][0]
    except Exception:  # noqa: BLE001 - the table is not created yet
        return 0
