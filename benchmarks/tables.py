"""``hybriddeid deid`` over tables and databases against the folder path, on the same generated notes in
one run: notes/s of each source (folder of .txt files, CSV, Parquet, SQLite, PostgreSQL), its ratio to
the folder's, the peak resident memory of the run's processes together (sampled every 0.2 s) and that
memory at each quarter of the run (flat when the table is read in parts), and whether every source
wrote the folder's bytes for every note.

    python benchmarks/tables.py --notes 2000 --jobs 2

Each run is a fresh CLI process (``--mode surrogate``, three notes per patient, ``--part-rows``: the
unit of work of a table run, so a table of fewer parts than ``--jobs`` runs on fewer workers).
PostgreSQL runs against a private server started with the installed binaries (``tests/pg_server.py``;
``apt-get install postgresql``) and is left out, saying so, where none can be started. Needs the
``[tables]`` and ``[sql]`` extras.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybriddeid.io.tables import read_table  # noqa: E402
from hybriddeid.synth import generate_corpus  # noqa: E402
from procinfo import family, resident_mb  # noqa: E402

WARM_ROWS = 2000  # the warm-up run's notes: enough to load the model and create the key


def make_notes(n: int) -> list[dict]:
    return [
        {"note_id": f"n{i:07d}", "patient": f"p{i // 3:07d}", "text": doc.text}
        for i, doc in enumerate(generate_corpus(n, seed=7, mix="test"))
    ]


def group_rss(pid: int) -> int:
    """Resident kB of ``pid`` and its descendants."""
    return round(1024 * sum(resident_mb(member) or 0.0 for member in family(pid)))


def timed(args: list[str], env: dict) -> tuple[float, int, list[int]]:
    """(wall s, peak kB, kB at each quarter of the run) of one CLI run."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "hybriddeid.cli", "-q", *args], env=env, stderr=subprocess.PIPE, text=True
    )
    samples: list[tuple[float, int]] = []
    while process.poll() is None:
        samples.append((time.perf_counter() - started, group_rss(process.pid)))
        time.sleep(0.2)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"deid failed ({process.returncode}): {process.stderr.read()[-2000:]}")
    quarters = [max((kb for t, kb in samples if t <= wall * q / 4), default=0) for q in range(1, 5)]
    return wall, max((kb for _, kb in samples), default=0), quarters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--part-rows",
        type=int,
        default=1000,
        help="rows per part (default 1000); a table of fewer parts than --jobs runs on fewer workers",
    )
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    rows = make_notes(args.notes)
    work = Path(tempfile.mkdtemp(prefix="hybriddeid-tables-bench-"))
    key = work / "deid.key"
    common = ["--model", "en", "--mode", "surrogate", "--key-file", str(key), "--jobs", str(args.jobs)]
    table_opts = ["--patient-col", "patient", "--part-rows", str(args.part_rows)]
    env = dict(os.environ)

    folder = work / "folder"
    folder.mkdir()
    for row in rows:
        (folder / f"{row['note_id']}.txt").write_text(row["text"], encoding="utf-8", newline="")
    (work / "patients.csv").write_text("note,patient\n" + "".join(f"{r['note_id']},{r['patient']}\n" for r in rows))
    with open(work / "notes.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["note_id", "patient", "text"])
        writer.writeheader()
        writer.writerows(rows)
    with open(work / "warm.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["note_id", "patient", "text"])
        writer.writeheader()
        writer.writerows(rows[:WARM_ROWS])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), work / "notes.parquet", row_group_size=5000)
    with sqlite3.connect(work / "notes.db") as conn:
        conn.execute("CREATE TABLE notes (note_id TEXT PRIMARY KEY, patient TEXT, text TEXT)")
        conn.executemany("INSERT INTO notes VALUES (:note_id, :patient, :text)", rows)

    runs = {
        "folder": ["deid", str(folder), str(work / "out_folder"), *common, "--patient-map", str(work / "patients.csv")],
        "csv": ["deid", str(work / "notes.csv"), str(work / "out_csv"), *common, *table_opts],
        "parquet": ["deid", str(work / "notes.parquet"), str(work / "out_parquet"), *common, *table_opts],
        "sqlite": [
            "deid",
            f"sqlite:///{work / 'notes.db'}",
            f"sqlite:///{work / 'notes.db'}",
            "--table",
            "notes",
            "--output-table",
            "notes_deid",
            *common,
            *table_opts,
        ],
    }
    server = None
    if not args.no_postgres:
        from pg_server import NoServer, private_server

        try:
            server = private_server()
            url, password = server.__enter__()
            import psycopg

            with psycopg.connect(url, password=password) as conn:
                conn.execute("CREATE TABLE notes (note_id TEXT PRIMARY KEY, patient TEXT, text TEXT)")
                with conn.cursor() as cur:
                    cur.executemany("INSERT INTO notes VALUES (%(note_id)s, %(patient)s, %(text)s)", rows)
            env["HYBRIDDEID_DB_PASSWORD"] = password
            env["XDG_CACHE_HOME"] = str(work / "cache")
            runs["postgresql"] = [
                "deid",
                url,
                url,
                "--table",
                "notes",
                "--output-table",
                "notes_deid",
                *common,
                *table_opts,
            ]
        except NoServer as exc:
            print(f"postgresql left out: {exc}")
            server = None
    try:
        # warm the page cache and the key once (on the first rows), so that no source pays for the first start alone
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hybriddeid.cli",
                "-q",
                "deid",
                str(work / "warm.csv"),
                str(work / "warm"),
                *common,
                *table_opts,
            ],
            env=env,
            check=True,
        )
        results = {name: timed(command, env) for name, command in runs.items()}
        expected = {
            r["note_id"]: (work / "out_folder" / f"{r['note_id']}.txt").read_bytes().decode("utf-8") for r in rows
        }
        same = {"folder": True}
        for name, fmt in (("csv", "csv"), ("parquet", "parquet")):
            got = {
                row["note_id"]: row["text"]
                for part in sorted((work / f"out_{name}").glob(f"part-*.{fmt}"))
                for row in read_table(part, fmt)
            }
            same[name] = got == expected
        with sqlite3.connect(work / "notes.db") as conn:
            same["sqlite"] = dict(conn.execute("SELECT note_id, text FROM notes_deid")) == expected
        if "postgresql" in runs:
            import psycopg

            with psycopg.connect(url, password=password) as conn:
                same["postgresql"] = dict(conn.execute("SELECT note_id, text FROM notes_deid").fetchall()) == expected
    finally:
        if server is not None:
            server.__exit__(None, None, None)
        shutil.rmtree(work, ignore_errors=True)
    base = args.notes / results["folder"][0]
    print(
        f"{args.notes} generated notes (English test mix), surrogate mode, --jobs {args.jobs}, --part-rows "
        f"{args.part_rows}, one CLI process each"
    )
    print(
        f"{'source':<11} {'wall s':>7} {'notes/s':>8} {'vs folder':>9} {'peak MB':>8}  {'MB at 1/4, 1/2, 3/4, end':<26} same bytes"
    )
    for name, (wall, peak, quarters) in results.items():
        rate = args.notes / wall
        print(
            f"{name:<11} {wall:7.1f} {rate:8.1f} {rate / base:9.2f} {peak / 1024:8.0f}  "
            f"{', '.join(f'{q / 1024:.0f}' for q in quarters):<26} {same[name]}"
        )


if __name__ == "__main__":
    main()
