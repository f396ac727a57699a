"""What a hostile operator or client found in the review page, database runs and the risk estimate (issue 44,
items 9, 11 and 12), kept fixed; real servers and processes on loopback.

- 9: two runs into one database table at once are refused however the URL or the table is spelled and
  whatever the user's cache folder: the lock is in the database (SQLite: a row; PostgreSQL: an advisory lock);
  a run killed with ``kill -9`` leaves no lock behind that stops the next.
- 11: the review server answers a non-ASCII token, cookie or review header and a bad Content-Length with a
  4xx, never a traceback or a dropped connection; a save made on an older version of a note is refused (409),
  from another tab or from another review server on the same corrections folder.
- 12: with too little review the risk estimate falls back to the raw sum with a wide interval and says why
  (the review page after one reviewed note, ``hybriddeid risk`` after two); a degenerate Platt fit is never
  used without a word; the interval never has zero width.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_runs import FAST_CLI, kill_9_after, run, slow_cli
from hybriddeid.io import read_document, write_documents
from hybriddeid.synth import generate_corpus
from table_notes import NOTES, note_rows, pg_count, pg_load, write_sqlite


# -- 9: database output locks -------------------------------------------------------------------------
def _wait_for(progress, at_least: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while progress() < at_least and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"the first run ended before the second started: {proc.stderr.read()}"


def _sqlite_count(path: Path, table: str) -> int:
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _deid(url: str, table: str, out_table: str, *extra: str) -> list[str]:
    return [
        "deid",
        "--model",
        "en",
        "--mode",
        "tag",
        "--table",
        table,
        "--output-table",
        out_table,
        "--patient-col",
        "patient",
        "--part-rows",
        "3",
        *extra,
        url,
        url,
    ]


def test_two_runs_into_one_sqlite_table_are_refused_however_the_url_is_spelled(tmp_path, monkeypatch):
    pytest.importorskip("sqlalchemy")
    write_sqlite(tmp_path / "clinic.db", note_rows())
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path / "cache-one"))
    first = run(slow_cli(0.3), _deid("sqlite:///clinic.db", "notes", "notes_out"), tmp_path)  # relative to its cwd
    try:
        _wait_for(lambda: _sqlite_count(tmp_path / "clinic.db", "notes_out"), 3, first)
        # another spelling of the same file and table (SQLite ignores a name's case), another cache folder
        monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path / "cache-two"))
        second = run(FAST_CLI, _deid(f"sqlite:///{tmp_path}/./clinic.db", "notes", "Notes_Out"), tmp_path)
        assert second.wait(timeout=300) == 2
        message = second.stderr.read().decode()
        assert "(table Notes_Out): another run is writing into this table (process" in message, message
        assert f"process {first.pid} on " in message
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, 9)
    with sqlite3.connect(tmp_path / "clinic.db") as conn:
        assert conn.execute("SELECT count(*) FROM notes_out").fetchone()[0] == NOTES
        assert conn.execute("SELECT count(*) FROM hybriddeid_locks").fetchone()[0] == 0  # released at the end


def test_a_killed_sqlite_run_leaves_no_lock_that_stops_the_next(tmp_path, monkeypatch):
    pytest.importorskip("sqlalchemy")
    url = write_sqlite(tmp_path / "clinic.db", note_rows())
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path / "cache"))
    kill_9_after(
        slow_cli(0.3),
        _deid(url, "notes", "notes_out"),
        tmp_path,
        lambda: _sqlite_count(tmp_path / "clinic.db", "notes_out"),
        3,
    )
    with sqlite3.connect(tmp_path / "clinic.db") as conn:
        assert conn.execute("SELECT count(*) FROM hybriddeid_locks").fetchone()[0] == 1  # the dead run's row
    resumed = run(FAST_CLI, _deid(url, "notes", "notes_out"), tmp_path)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    with sqlite3.connect(tmp_path / "clinic.db") as conn:
        assert conn.execute("SELECT count(*) FROM notes_out").fetchone()[0] == NOTES
        assert conn.execute("SELECT count(*) FROM hybriddeid_locks").fetchone()[0] == 0


def test_two_runs_into_one_postgresql_table_are_refused_however_it_is_spelled(postgres, tmp_path, monkeypatch):
    url, password = postgres
    pg_load(url, password, "notes_lock", note_rows())
    monkeypatch.setenv("HYBRIDDEID_DB_PASSWORD", password)
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path / "cache-one"))
    first = run(slow_cli(0.3), _deid(url, "notes_lock", "notes_lock_out", "--jobs", "2"), tmp_path)
    try:
        _wait_for(lambda: pg_count(url, password, "notes_lock_out"), 3, first)
        monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path / "cache-two"))
        second = run(FAST_CLI, _deid(url, "notes_lock", "public.notes_lock_out"), tmp_path)
        assert second.wait(timeout=300) == 2
        message = second.stderr.read().decode()
        assert "another run is writing into this table (server process" in message, message
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, 9)
    assert pg_count(url, password, "notes_lock_out") == NOTES
    # the lock went with the run's connection: the same command again runs (every note already done)
    again = run(FAST_CLI, _deid(url, "notes_lock", "notes_lock_out"), tmp_path)
    assert again.wait(timeout=300) == 0, again.stderr.read()


# -- 11: the review server ----------------------------------------------------------------------------
class ReviewProcess:
    """``hybriddeid review NOTES --port 0`` in its own process: its address, token and stderr."""

    def __init__(self, notes: Path, corrections: Path, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FAST_CLI, "review", str(notes), "--port", "0", "--corrections", str(corrections)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        assert found, f"no address printed: {line!r} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.port, self.token = int(found.group(1)), found.group(2)

    def request(self, head: str | bytes, body: bytes = b"", shut: bool = False) -> tuple[int, dict, bytes]:
        """Send raw bytes (``head`` holds the request line and headers, with the cookie and Host added
        here unless given) and read one whole response: (status, headers, body)."""
        if isinstance(head, str):
            head = head.encode("utf-8")
        lines = head.rstrip(b"\r\n").split(b"\r\n")
        if not any(line.lower().startswith(b"host:") for line in lines):
            lines.append(f"Host: 127.0.0.1:{self.port}".encode())
        if not any(line.lower().startswith(b"cookie:") for line in lines):
            lines.append(f"Cookie: hybriddeid_review={self.token}".encode())
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as sock:
            sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
            if shut:
                sock.shutdown(socket.SHUT_WR)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                assert chunk, f"connection dropped without an answer (got {data!r})"
                data += chunk
            header, _, rest = data.partition(b"\r\n\r\n")
            status_line, *fields = header.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
            length = int(headers.get("content-length", 0))
            while len(rest) < length:
                chunk = sock.recv(65536)
                assert chunk, "connection dropped in the middle of the answer"
                rest += chunk
        return int(status_line.split()[1]), headers, rest

    def post(self, name: str, data: dict) -> tuple[int, dict]:
        body = json.dumps(data).encode("utf-8")
        status, _, answer = self.request(
            f"POST /api/note/{name} HTTP/1.1\r\nX-Review-Token: {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}",
            body,
        )
        return status, json.loads(answer)

    def get(self, path: str) -> tuple[int, dict]:
        status, _, answer = self.request(f"GET {path} HTTP/1.1")
        return status, json.loads(answer)

    def stop(self) -> str:
        """Stop the server; its stderr."""
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[1]


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    root = tmp_path_factory.mktemp("review")
    notes, corrections = root / "notes", root / "corrections"
    write_documents(list(generate_corpus(3, 12, "test", "en")), notes, "text")
    servers = [ReviewProcess(notes, corrections, root), ReviewProcess(notes, corrections, root)]
    yield servers, notes, corrections
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


def test_a_save_made_on_an_older_version_is_refused_with_409(review):
    (first, second), notes, corrections = review
    name = sorted(p.stem for p in notes.glob("*.txt"))[1]
    status, note = second.get(f"/api/note/{name}")
    assert status == 200 and note["version"] == 0
    spans = [{"start": s["start"], "end": s["end"], "label": s["label"]} for s in note["spans"]]
    # two tabs on one server opened the note at version 0: the first save wins, the second is refused
    status, saved = second.post(name, {"spans": spans, "reviewer": "ann", "version": 0})
    assert status == 200 and saved["record"]["version"] == 1
    status, refused = second.post(name, {"spans": [], "reviewer": "bob", "version": 0})
    assert status == 409 and "saved again since you opened it" in refused["error"] and "ann" in refused["error"]
    assert len(read_document(corrections / f"{name}.txt", "brat")[0].spans) == len(spans)  # ann's, kept
    # another review server on the same corrections folder saw nothing of it in memory: refused as well
    status, refused = first.post(name, {"spans": [], "reviewer": "cy", "version": 0})
    assert status == 409, refused
    # made on the version saved, a save goes through; with no version at all it is refused
    assert second.post(name, {"spans": [], "reviewer": "bob", "version": 1})[0] == 200
    assert read_document(corrections / f"{name}.txt", "brat")[0].spans == ()
    assert second.post(name, {"spans": [], "reviewer": "bob"})[0] == 400
    assert json.loads((corrections / ".reviews.json").read_text())["notes"][name]["version"] == 2


def test_the_review_pages_estimate_after_one_reviewed_note_is_wide_and_says_why(review):
    """Issue 44, item 12: it said "0.0 (0.0-0.0)" for the whole folder after one reviewed note."""
    (_, second), notes, _ = review
    name = sorted(p.stem for p in notes.glob("*.txt"))[2]
    status, note = second.get(f"/api/note/{name}")
    spans = [{"start": s["start"], "end": s["end"], "label": s["label"]} for s in note["spans"]]
    saved = second.post(name, {"spans": spans, "reviewer": "ann", "reviewed": True, "version": note["version"]})
    assert saved[0] == 200
    status, queue = second.get("/api/queue")
    risk = queue["risk"]
    assert status == 200 and risk["reviewed_notes"] == 1
    assert "1 reviewed notes" in risk["uncalibrated_because"] and "raw marginals" in risk["uncalibrated_because"]
    low, high = risk["interval"]
    assert low <= risk["expected_missed"] <= high and high - low > 1.0 and risk["expected_missed"] > 0
    assert risk["calibration"]["method"] == "none"


def test_the_risk_command_on_two_reviewed_notes_says_it_is_uncalibrated(tmp_path):
    """Issue 44, item 12: with two reviewed notes ``risk --calibration platt`` printed "1.0 (1.0-1.0)" from a
    Platt fit with slope 5.9e10, and no warning."""
    notes, reviewed = tmp_path / "notes", tmp_path / "reviewed"
    write_documents(list(generate_corpus(6, 3, "test", "en")), notes, "brat")
    write_documents(list(generate_corpus(2, 4, "test", "en")), reviewed, "brat")
    for extra in ([], ["--calibration", "platt"]):
        done = subprocess.run(
            [sys.executable, "-c", FAST_CLI, "risk", str(notes), "--reviewed", str(reviewed), *extra],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert "uncalibrated: 2 reviewed notes with" in done.stdout and "calibration needs at least" in done.stdout
        found = re.search(r"expected missed PHI tokens: ([\d.]+) \(([\d.]+)-([\d.]+),", done.stdout)
        estimate, low, high = map(float, found.groups())
        assert low <= estimate <= high and high - low >= 1.0, done.stdout


def test_a_degenerate_platt_fit_is_never_used_without_a_word():
    """Enough reviewed notes and misses, but every miss is among tokens of the one P(PHI) that nearly all tokens
    have (below 1e-6: one logit), and the two tokens above it are no PHI: the logistic curve has nothing to
    pin its slope, which ran to 3.7e10 without converging (as the issue's two-note fit ran to 5.9e10). The
    estimate says so and falls back to the raw sum; isotonic, which needs no slope, is used as it is."""
    from hybriddeid.core.document import Span
    from hybriddeid.evaluation.risk import (
        MIN_REVIEWED_NOTES,
        PLATT_MAX_SLOPE,
        Calibrator,
        Reviewed,
        TokenChance,
        estimate,
    )

    rng = np.random.default_rng(3)
    chances_of = lambda p: [TokenChance(i, i + 1, float(v)) for i, v in enumerate(p)]  # noqa: E731
    notes = [[1e-9] * 100 + [0.2, 0.4] for _ in range(MIN_REVIEWED_NOTES + 5)]
    sample = Reviewed.collect([(chances_of(p), [], [Span(0, 1, "NAME")]) for p in notes])  # a miss per note
    fit = Calibrator("platt").fit(sample.p, sample.y)
    assert fit.degenerate() is not None and abs(fit.to_dict()["a"]) > PLATT_MAX_SLOPE
    target = [("t", 100, chances_of(rng.beta(0.5, 3, 100)))]
    platt = estimate(target, sample, "platt")
    assert "the Platt fit is degenerate" in platt.uncalibrated_because
    assert platt.calibration["method"] == "none" and platt.low < platt.expected_missed < platt.high
    isotonic = estimate(target, sample, "isotonic")
    assert isotonic.uncalibrated_because is None and isotonic.calibration["method"] == "isotonic"
    assert isotonic.low < isotonic.high


def test_non_ascii_tokens_and_bad_content_lengths_get_a_4xx_not_a_traceback(review):
    server = review[0][0]  # stopped at the end: its stderr is read
    token = server.token
    name = sorted(p.stem for p in review[1].glob("*.txt"))[0]
    post = f"POST /api/note/{name} HTTP/1.1\r\nX-Review-Token: {token}\r\nContent-Type: application/json\r\n"
    cases = [
        ("GET /api/queue HTTP/1.1\r\nCookie: hybriddeid_review=t\u00f6k\u00e9n\u2603", b"", 403),  # UTF-8 cookie
        (b"GET /api/queue HTTP/1.1\r\nCookie: hybriddeid_review=\xff\xfe", b"", 403),  # not even UTF-8
        ("GET /?token=%C3%A9%E2%98%83 HTTP/1.1", b"", 403),  # a non-ASCII token in the address
        ("GET /?token=\u00e9\u2603 HTTP/1.1", b"", 403),  # the same, unescaped
        (f"POST /api/note/{name} HTTP/1.1\r\nX-Review-Token: \u00e9\u2603\r\nContent-Length: 2", b"{}", 403),
        (post + "Content-Length: abc", b"{}", 400),
        (post + "Content-Length: -5", b"{}", 400),
        (post + "Content-Length: +2", b"{}", 400),
        (post + "Content-Length: \u0661\u0662", b"{}", 400),  # Arabic-Indic digits: isdigit() says yes
        (post + "Content-Length: 99999999999999999999", b"{}", 413),
        (post.rstrip("\r\n"), b"", 411),  # none at all
        (post + "Content-Length: 100", b'{"spans": []}', 400),  # shorter than announced, then the client is done
    ]
    for head, body, expected in cases:
        status, headers, answer = server.request(head, body, shut=True)
        assert status == expected, (head, status, answer)
        if expected != 403 or head.startswith(b"POST" if isinstance(head, bytes) else "POST"):
            assert headers.get("connection") == "close", head  # its body was left unread
        assert "traceback" not in answer.decode("utf-8", "replace").lower()
    assert server.get("/api/queue")[0] == 200  # still serving
    stderr = server.stop()
    assert "Traceback" not in stderr and "Error" not in stderr.replace("review: ", ""), stderr
