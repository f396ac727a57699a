"""Notes in SQL databases, through SQLAlchemy (the ``[sql]`` extra): read a table or a query in parts by
keyset pagination over the note id, and write results into a table in batched transactions.

SQLite needs no server (``sqlite:///notes.db``); PostgreSQL URLs (``postgresql://user@host/db``) use
psycopg 3. Credentials never appear on the command line: a URL that holds a password is refused, and
the password comes from ``--password-file`` or the ``HYBRIDDEID_DB_PASSWORD`` environment variable
(or, for PostgreSQL, libpq's own ``PGPASSWORD`` and ``~/.pgpass``). URLs are shown without passwords,
statements' parameters are never put in errors (``hide_parameters``), and problems name the database
and table, never a value.

Each process opens its own connections (``NullPool``: none is held across the fork of a worker).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hybriddeid.io._common import InputError, changed_settings
from hybriddeid.io.tables import Columns, Row

PASSWORD_ENV = "HYBRIDDEID_DB_PASSWORD"
RUNS_TABLE = "hybriddeid_runs"  # the settings each output table was written with
LOCKS_TABLE = "hybriddeid_locks"  # which live run writes each output table (databases without advisory locks)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_DELETE_CHUNK = 500  # ids per DELETE ... IN (...): under every database's limit on parameters


def is_database_url(text: str) -> bool:
    """Whether ``text`` names a database (``dialect[+driver]://...``) rather than a file or folder."""
    return bool(_URL.match(str(text))) and not str(text).startswith("file://")


class Database:
    """A database URL with its password taken from a file or the environment; ``engine`` is this
    process's own (made again after a fork). ``shown`` is the URL as messages show it."""

    def __init__(self, url: str, password_file: Path | None = None) -> None:
        try:
            from sqlalchemy.engine import make_url
            from sqlalchemy.exc import ArgumentError
        except ImportError:
            raise ValueError("SQL databases need SQLAlchemy: pip install 'hybriddeid[sql]'") from None
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError):
            raise ValueError(
                "the database URL cannot be read (expected dialect://user@host/database, or sqlite:///file.db)"
            ) from None
        self.shown = parsed.render_as_string(hide_password=True)
        if parsed.password is not None:
            raise ValueError(
                f"{self.shown}: the URL holds a password; give it with --password-file or the "
                f"{PASSWORD_ENV} environment variable instead, so it never shows in process lists "
                "or shell history"
            )
        password = _password(password_file) if parsed.get_backend_name() != "sqlite" else None  # a file has none
        if password is not None:
            parsed = parsed.set(password=password)
        if parsed.drivername == "postgresql" and _has_module("psycopg") and not _has_module("psycopg2"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        self._url = parsed
        self._engine: Any = None
        self._pid = -1

    @property
    def dialect(self) -> str:
        return self._url.get_backend_name()

    @property
    def engine(self) -> Any:
        if self._engine is None or self._pid != os.getpid():
            from sqlalchemy import create_engine
            from sqlalchemy.pool import NullPool

            args = {"timeout": 60} if self.dialect == "sqlite" else {}  # workers wait for each other's writes
            try:
                self._engine = create_engine(self._url, poolclass=NullPool, hide_parameters=True, connect_args=args)
            except Exception as exc:  # noqa: BLE001 - a missing driver, told by its name
                raise InputError(
                    self.shown,
                    f"cannot use this database ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                ) from None
            self._pid = os.getpid()
        return self._engine

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None, "_pid": -1}

    def problem(self, exc: BaseException, doing: str) -> InputError:
        """An ``InputError`` naming this database for a failure while ``doing``: a connection's or the
        schema's own words (they name hosts, users, tables and columns), else the error's type alone
        (data errors may quote a value)."""
        from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

        original = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        kind = type(original).__name__
        if isinstance(exc, (OperationalError, ProgrammingError)) and str(original).strip():
            lines = [line.strip() for line in str(original).strip().splitlines()]
            return InputError(self.shown, f"{doing}: {kind}: {lines[0]}")
        return InputError(self.shown, f"{doing}: {kind}")


def _password(password_file: Path | None) -> str | None:
    if password_file is not None:
        try:
            lines = Path(password_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{password_file}: cannot read the password file ({type(exc).__name__})") from None
        if not lines or not lines[0]:
            raise ValueError(f"{password_file}: the password file is empty")
        return lines[0]
    return os.environ.get(PASSWORD_ENV) or None


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _table_ref(name: str, columns: Sequence[str]) -> Any:
    """A lightweight table construct for ``name`` (``schema.table`` allowed)."""
    from sqlalchemy import column, table

    schema, _, bare = name.rpartition(".")
    return table(bare, *[column(c) for c in columns], schema=schema or None)


class SqlTable:
    """The notes of a table (``table``) or a query (``query``) in a database, as a ``TableSource``:
    parts of ``part_rows`` rows in id order, each located by the last id before it (keyset pagination:
    ``WHERE id > :after ORDER BY id LIMIT n``), so no part is found by counting rows past others. The id
    column must be unique and never null (checked once)."""

    format = "sql"

    def __init__(
        self, database: Database, columns: Columns, part_rows: int, query: str | None = None, table: str | None = None
    ) -> None:
        from sqlalchemy import distinct, func, select, text

        if (query is None) == (table is None):
            raise ValueError("a database input needs --query or --table (one of them)")
        self.database, self.columns, self.part_rows = database, columns, part_rows
        self.name = f"{database.shown} ({'query' if query else 'table ' + str(table)})"
        query = query.strip().rstrip(";") if query is not None else None
        source = text(query).columns().subquery("hybriddeid_probe") if query is not None else _table_ref(str(table), [])
        try:
            with database.engine.connect() as conn:
                names = list(conn.execute(select(text("*")).select_from(source).limit(0)).keys())
                columns.check(self.name, names)
                self.notes = (
                    text(query).columns(*[_column(name) for name in names]).subquery("hybriddeid_notes")
                    if query is not None
                    else _table_ref(str(table), names)
                )
                rows, ids = conn.execute(
                    select(func.count(), func.count(distinct(self.notes.c[columns.id]))).select_from(self.notes)
                ).one()
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy's and the driver's, told safely
            raise database.problem(exc, "cannot read the notes") from None
        if rows != ids:
            raise InputError(
                self.name,
                f"the id column {columns.id!r} is not unique or holds nulls ({rows} rows, "
                f"{ids} distinct ids): parts are read in id order and need unique ids",
            )
        self.rows = rows

    def _page(self, after: Any) -> list[tuple]:
        from sqlalchemy import select

        key = self.notes.c[self.columns.id]
        query = select(*[self.notes.c[name] for name in self.columns.read]).order_by(key).limit(self.part_rows)
        if after is not None:
            query = query.where(key > after)
        try:
            with self.database.engine.connect() as conn:
                return [tuple(row) for row in conn.execute(query)]
        except Exception as exc:  # noqa: BLE001
            raise self.database.problem(exc, "cannot read the notes") from None

    def _rows(self, page: list[tuple], first: int) -> list[Row]:
        return [(first + i, dict(zip(self.columns.read, values))) for i, values in enumerate(page)]

    def scan(self) -> Iterator[tuple[Any, list[Row] | InputError]]:
        after, first = None, 1
        while True:
            try:
                page = self._page(after)
            except InputError as exc:
                yield (after, first), exc
                return
            if not page:
                return
            yield (after, first), self._rows(page, first)
            after, first = page[-1][self.columns.read.index(self.columns.id)], first + len(page)

    def read(self, locator: Any) -> list[Row]:
        after, first = locator
        return self._rows(self._page(after), first)


def _column(name: str) -> Any:
    from sqlalchemy import column

    return column(name)


class SqlSink:
    """An output table: created when missing (the id its primary key), written a batch at a time in one
    transaction that first deletes the batch's ids, so a batch is all there or not at all and a batch
    done again replaces itself. ``done`` lists the ids already there (a rerun skips them)."""

    def __init__(self, database: Database, table: str, columns: Sequence[str], id_column: str) -> None:
        self.database, self.table_name, self.columns, self.id_column = database, table, list(columns), id_column
        self.name = f"{database.shown} (table {table})"
        self._table: Any = None

    def _define(self, sample: Mapping[str, Any]) -> Any:
        from sqlalchemy import Column, MetaData, Table

        schema, _, bare = self.table_name.rpartition(".")
        return Table(
            bare,
            MetaData(),
            *[Column(name, _sql_type(sample.get(name)), primary_key=name == self.id_column) for name in self.columns],
            schema=schema or None,
        )

    def prepare(self, sample: Mapping[str, Any], settings: Mapping[str, Any], overwrite: bool) -> None:
        """Create the output table (typed after ``sample``, one output row) unless it exists with these
        columns, and record ``settings``: an ``InputError`` when the table was written with others (unless
        ``overwrite``, which empties it) or lacks a column."""
        from sqlalchemy import inspect

        schema, _, bare = self.table_name.rpartition(".")
        try:
            engine = self.database.engine
            runs = self._runs_table()
            with engine.begin() as conn:
                runs.create(conn, checkfirst=True)
                if inspect(conn).has_table(bare, schema=schema or None):
                    present = {column["name"] for column in inspect(conn).get_columns(bare, schema=schema or None)}
                    missing = [name for name in self.columns if name not in present]
                    if missing:
                        raise InputError(
                            self.name,
                            f"exists without the column {', '.join(map(repr, missing))}; choose another --output-table",
                        )
                self._table = self._define(sample)
                self._table.create(conn, checkfirst=True)
                previous = conn.execute(runs.select().where(runs.c.output_table == self.table_name)).first()
                if previous is not None and not overwrite:
                    changed = changed_settings(json.loads(previous.settings), settings)
                    if changed:
                        raise InputError(
                            self.name,
                            f"holds output made with other settings ({', '.join(changed)}); "
                            "use another --output-table or --overwrite",
                        )
                if overwrite:  # every note is done again: none of the old rows may count as done
                    conn.execute(self._table.delete())
                if previous is not None:
                    conn.execute(runs.delete().where(runs.c.output_table == self.table_name))
                conn.execute(
                    runs.insert().values(
                        output_table=self.table_name, settings=json.dumps(dict(settings), sort_keys=True)
                    )
                )
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.database.problem(exc, f"cannot prepare the output table {self.table_name}") from None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold this output table's run lock for the block, in the database itself, so that it holds however
        the URL is spelled and whoever runs: PostgreSQL's session advisory lock on a hash of the table's
        schema-qualified name (released by the server when the run's connection ends, even on kill -9);
        elsewhere (SQLite) a row of ``hybriddeid_locks`` inserted in a transaction (the table name its
        primary key), which a later run takes over only when it names a process of this host that is gone.
        ``InputError`` when another live run holds it."""
        with self._advisory_lock() if self.database.dialect == "postgresql" else self._row_lock():
            yield

    def _busy(self, holder: str) -> InputError:
        return InputError(
            self.name,
            f"another run is writing into this table ({holder}); wait for it to end or "
            "stop it, or use another --output-table",
        )

    @contextlib.contextmanager
    def _advisory_lock(self) -> Iterator[None]:
        from sqlalchemy import text

        try:
            conn = self.database.engine.connect()
        except Exception as exc:  # noqa: BLE001
            raise self.database.problem(exc, f"cannot lock the output table {self.table_name}") from None
        try:
            try:
                schema, _, bare = self.table_name.rpartition(".")
                schema = schema or conn.execute(text("SELECT current_schema()")).scalar() or "public"
                digest = hashlib.sha256(f"hybriddeid output table {schema}.{bare}".encode()).digest()
                key = int.from_bytes(digest[:8], "big", signed=True)
                taken = conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar()
                holder = (
                    None
                    if taken
                    else conn.execute(
                        text(
                            "SELECT a.pid, a.client_addr, a.backend_start FROM pg_locks l JOIN pg_stat_activity a "
                            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :high "
                            "AND l.objid = :low AND l.objsubid = 1"
                        ),
                        {"high": (key >> 32) & 0xFFFFFFFF, "low": key & 0xFFFFFFFF},
                    ).first()
                )
                conn.commit()  # the session lock outlives the transaction; nothing is left open
            except Exception as exc:  # noqa: BLE001
                raise self.database.problem(exc, f"cannot lock the output table {self.table_name}") from None
            if not taken:
                raise self._busy(
                    f"server process {holder[0]} for {holder[1] or 'a local socket'}, connected "
                    f"{holder[2]:%Y-%m-%d %H:%M:%S}"
                    if holder
                    else "an advisory lock of this table"
                )
            try:
                yield
            finally:
                with contextlib.suppress(Exception):
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                    conn.commit()
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _locks_table(self) -> Any:
        from sqlalchemy import BigInteger, Column, MetaData, String, Table

        return Table(
            LOCKS_TABLE,
            MetaData(),
            Column("output_table", String(255), primary_key=True),
            Column("host", String(255)),
            Column("pid", BigInteger),
            Column("process_started", String(64)),
            Column("started", String(32)),
        )

    @contextlib.contextmanager
    def _row_lock(self) -> Iterator[None]:
        from sqlalchemy.exc import IntegrityError

        locks = self._locks_table()
        schema, _, bare = self.table_name.rpartition(".")
        key = (f"{schema}." if schema and schema.lower() != "main" else "") + bare
        key = key.lower() if self.database.dialect == "sqlite" else key  # SQLite's names ignore case, quoted or not
        mine = {
            "output_table": key,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "process_started": _process_started(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        held = None
        try:
            with self.database.engine.begin() as conn:
                locks.create(conn, checkfirst=True)
            for _ in range(2):  # again once when a racing run inserted first (it then holds the row)
                try:
                    with self.database.engine.begin() as conn:
                        held = conn.execute(locks.select().where(locks.c.output_table == key)).first()
                        if held is not None and _gone(held):  # a run killed before it could remove its row
                            conn.execute(
                                locks.delete().where(
                                    (locks.c.output_table == key)
                                    & (locks.c.host == held.host)
                                    & (locks.c.pid == held.pid)
                                    & (locks.c.started == held.started)
                                )
                            )
                            held = None
                        if held is None:
                            conn.execute(locks.insert().values(**mine))  # the primary key: one racing run fails
                    break
                except IntegrityError:
                    continue
            else:
                raise self._busy("another run took the lock at the same moment")
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self.database.problem(exc, f"cannot lock the output table {self.table_name}") from None
        if held is not None:
            raise self._busy(
                f"process {held.pid} on {held.host}, since {held.started}; if that run is gone, "
                f"delete its row of {LOCKS_TABLE}"
            )
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                with self.database.engine.begin() as conn:
                    conn.execute(
                        locks.delete().where(
                            (locks.c.output_table == key)
                            & (locks.c.pid == mine["pid"])
                            & (locks.c.host == mine["host"])
                            & (locks.c.started == mine["started"])
                        )
                    )

    def _runs_table(self) -> Any:
        from sqlalchemy import Column, MetaData, String, Table, Text

        schema = self.table_name.rpartition(".")[0] or None
        return Table(
            RUNS_TABLE,
            MetaData(),
            Column("output_table", String(255), primary_key=True),
            Column("settings", Text),
            schema=schema,
        )

    def done(self) -> set[str]:
        """The ids (as strings) already in the output table."""
        from sqlalchemy import select

        table = _table_ref(self.table_name, [self.id_column])
        try:
            with self.database.engine.connect() as conn:
                return {str(value) for (value,) in conn.execute(select(table.c[self.id_column]))}
        except Exception as exc:  # noqa: BLE001
            raise self.database.problem(exc, f"cannot read the output table {self.table_name}") from None

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert ``rows`` in one transaction, after deleting any row with one of their ids."""
        if not rows:
            return
        table = self._table if self._table is not None else self._define(rows[0])
        ids = [row[self.id_column] for row in rows]
        with self.database.engine.begin() as conn:
            for start in range(0, len(ids), _DELETE_CHUNK):
                conn.execute(table.delete().where(table.c[self.id_column].in_(ids[start : start + _DELETE_CHUNK])))
            conn.execute(table.insert(), [{name: _sql_value(row.get(name)) for name in self.columns} for row in rows])


def _process_started(pid: int) -> str | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc``): with the pid, it names one process
    even after the pid is reused. None where there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _gone(row: Any) -> bool:
    """Whether the run that holds a lock row has ended: a process of this host that no longer exists (or is
    another process with its pid). A run on another host is never taken for gone."""
    if row.host != socket.gethostname():
        return False
    try:
        os.kill(int(row.pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    started = _process_started(int(row.pid))
    return row.process_started is not None and started is not None and started != row.process_started


def _sql_type(value: Any) -> Any:
    """The column type for an output column whose first value is ``value`` (text when unknown)."""
    import datetime

    from sqlalchemy import BigInteger, Boolean, Date, DateTime, Float, LargeBinary, Text

    for kind, sql in (
        (bool, Boolean),
        (int, BigInteger),
        (float, Float),
        (datetime.datetime, DateTime),
        (datetime.date, Date),
        (bytes, LargeBinary),
    ):
        if isinstance(value, kind):
            return sql()
    return Text()


def _sql_value(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else value
