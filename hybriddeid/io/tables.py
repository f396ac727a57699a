"""Tables of notes: one row per note, an id and a text column (and optionally a patient column), read
in parts of a fixed number of rows so that a table of any size is read in bounded memory, and written
back part by part in the same format.

Formats (``TABLE_FILE_FORMATS``): ``csv`` and ``tsv`` (RFC 4180: quoted fields may hold delimiters,
doubled quotes and line breaks, which are kept exactly, ``\\r\\n`` included), ``parquet`` (pyarrow,
the ``[tables]`` extra) and ``jsonl-table`` (one JSON object a line; unlike the ``jsonl`` note format,
its keys are columns named by the caller). SQL databases are read the same way by
``hybriddeid.io.sql``.

A *source* is scanned once, part by part (``scan``: each part's locator and its rows), and a part is read
again from its locator alone (``read``), so a run need not keep the text of a whole table. A row is
``(number, values)``: the line number its record starts on (CSV, JSON Lines) or its 1-based row number
(Parquet, SQL), and its values by column name, or a string saying what is wrong with it (a row of the
wrong width, a line that is not JSON), so that the run reports it and goes on. Problems name the table
and the row number, never a value.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from hybriddeid.io._common import InputError, configured_max_bytes

TABLE_FILE_FORMATS = ("csv", "tsv", "parquet", "jsonl-table")
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".jsonl": "jsonl-table",
    ".ndjson": "jsonl-table",
}
OUTPUT_SUFFIXES = {"csv": ".csv", "tsv": ".tsv", "parquet": ".parquet", "jsonl-table": ".jsonl"}
SPANS_COLUMN = "phi_spans"  # the PHI spans (input offsets), as JSON: deid --spans, always by annotate
AUDIT_COLUMN = "audit"  # added on request: the replacements (no original values), as JSON
DEFAULT_PART_ROWS = 1000

Row = tuple[int, "dict[str, Any] | str"]  # (row number, values by column, or what is wrong with the row)


@dataclass(frozen=True)
class Columns:
    """The columns a run reads: the note id, its text, its patient (optional) and any others kept as
    they are in the output (``keep``: they may hold PHI, so only those named are copied)."""

    id: str = "note_id"
    text: str = "text"
    patient: str | None = None
    keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        named = [self.id, self.text, *([self.patient] if self.patient else [])]
        if len(set(named)) < len(named):
            raise ValueError("--id-col, --text-col and --patient-col must name different columns")
        reserved = {SPANS_COLUMN, AUDIT_COLUMN}.intersection([*named, *self.keep])
        if reserved:
            raise ValueError(f"column {sorted(reserved)[0]!r} is written by the run itself; rename it in the input")

    @property
    def read(self) -> list[str]:
        """Every column the run reads, each once, in output order."""
        return list(dict.fromkeys([self.id, *([self.patient] if self.patient else []), self.text, *self.keep]))

    def output(self, spans: bool = False, audit: bool = False, text: bool = True) -> list[str]:
        """The output table's columns: those read (the text column holding the de-identified text; left out
        unless ``text`` or named in ``keep``: ``annotate`` writes spans, not text), then the spans and audit
        columns when asked for."""
        read = [name for name in self.read if text or name != self.text or name in self.keep]
        return [*read, *([SPANS_COLUMN] if spans else []), *([AUDIT_COLUMN] if audit else [])]

    def check(self, where: str | Path, available: Sequence[str], shown: bool = True) -> None:
        """An ``InputError`` naming ``where`` when a needed column is not among ``available``, which it
        lists when ``shown`` (a schema's names); a file's header row is counted, never quoted: in a file
        without one, the first note's cells stand there."""
        missing = [name for name in self.read if name not in available]
        if missing:
            has = (
                f"it has {', '.join(map(repr, available)) or 'none'}"
                if shown
                else f"its first row has {len(available)} fields, not shown: in a file without a header row they are "
                "a note's values"
            )
            raise InputError(
                where,
                f"has no column {', '.join(map(repr, missing))} ({has}); name them with --id-col, "
                "--text-col, --patient-col, --keep-cols",
            )


class TableSource(Protocol):
    """A table read in parts: ``scan`` once through, then any part again by its locator."""

    @property
    def name(self) -> str:
        """How messages name the table: a file path, or a database URL without its password."""

    format: str

    def scan(self) -> Iterator[tuple[Any, list[Row] | InputError]]:
        """Each part's locator and rows, in order; an ``InputError`` for a part that cannot be read (the
        scan then ends: the rows after it cannot be told apart)."""

    def read(self, locator: Any) -> list[Row]:
        """The rows of the part at ``locator`` (from ``scan``)."""


def detect_table_file_format(path: Path) -> str:
    """The table format of a file from its extension; a ValueError naming it when there is none."""
    fmt = _SUFFIXES.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(
            f"{path}: cannot tell the table format from its extension; give --input-format "
            f"{', '.join(TABLE_FILE_FORMATS)}"
        )
    return fmt


def open_table(
    path: Path,
    fmt: str,
    columns: Columns,
    part_rows: int = DEFAULT_PART_ROWS,
    encoding: str = "utf-8",
    delimiter: str | None = None,
) -> TableSource:
    """The table file ``path`` in ``fmt`` (one of ``TABLE_FILE_FORMATS``) as a source of ``part_rows`` rows
    a part; its header (or schema) is read now and checked for ``columns`` (an ``InputError`` if not)."""
    if part_rows < 1:
        raise ValueError("the part size must be at least 1 row")
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "is not a file")
    if fmt in ("csv", "tsv"):
        return DelimitedTable(path, columns, part_rows, encoding, delimiter or ("\t" if fmt == "tsv" else ","), fmt)
    if delimiter is not None:
        raise ValueError("--delimiter is for csv and tsv tables")
    if fmt == "jsonl-table":
        return JsonLinesTable(path, columns, part_rows, encoding)
    if fmt == "parquet":
        return ParquetTable(path, columns, part_rows)
    raise ValueError(f"unknown table format {fmt!r}; choose one of {', '.join(TABLE_FILE_FORMATS)}")


# -- files read line by line from a byte offset -----------------------------------------------------
class _Lines:
    """The decoded lines of a binary file from a byte offset, each ending as it does in the file
    (``\\n``, ``\\r\\n``); ``offset`` and ``number`` are those of the next line to be read."""

    def __init__(self, handle: BinaryIO, path: Path, encoding: str, offset: int, number: int) -> None:
        handle.seek(offset)
        self.handle, self.path, self.encoding = handle, path, encoding
        self.offset, self.number = offset, number

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = self.handle.readline()
        if not raw:
            raise StopIteration
        try:
            line = raw.decode(self.encoding)
        except UnicodeDecodeError as exc:
            raise InputError(
                self.path,
                f"line {self.number}: not valid {self.encoding} (byte offset "
                f"{self.offset + exc.start}); name the encoding with --encoding",
            ) from None
        if self.offset == 0:
            line = line.removeprefix("\ufeff")  # a byte-order mark before the header is not data
        self.offset += len(raw)
        self.number += 1
        return line


@dataclass
class _LineTable:
    """What the line-based tables share: parts located by (byte offset, line number, rows before)."""

    path: Path
    columns: Columns
    part_rows: int
    encoding: str

    @property
    def name(self) -> str:
        return str(self.path)

    def _parts(self, rows: Iterator[Row], lines: _Lines) -> Iterator[tuple[Any, list[Row] | InputError]]:
        part: list[Row] = []
        start = (lines.offset, lines.number)
        try:
            for row in rows:
                part.append(row)
                if len(part) == self.part_rows:
                    yield start, part
                    part, start = [], (lines.offset, lines.number)
        except InputError as exc:  # the rows after a malformed record cannot be told apart
            yield start, InputError(exc.path, f"{exc.problem}; the table is not read past it")
            return
        if part:
            yield start, part

    def scan(self) -> Iterator[tuple[Any, list[Row] | InputError]]:
        with open(self.path, "rb") as handle:
            lines = _Lines(handle, self.path, self.encoding, *self._first())
            yield from self._parts(self._rows(lines), lines)

    def read(self, locator: Any) -> list[Row]:
        with open(self.path, "rb") as handle:
            lines = _Lines(handle, self.path, self.encoding, *locator)
            rows = self._rows(lines)
            return [row for _, row in zip(range(self.part_rows), rows)]

    def _first(self) -> tuple[int, int]:
        """Where the first data row starts (byte offset, line number)."""
        return 0, 1

    def _rows(self, lines: _Lines) -> Iterator[Row]:
        raise NotImplementedError


class DelimitedTable(_LineTable):
    """A CSV or TSV file with a header row (RFC 4180 quoting, any one-character delimiter)."""

    def __init__(
        self, path: Path, columns: Columns, part_rows: int, encoding: str, delimiter: str, fmt: str = "csv"
    ) -> None:
        super().__init__(path, columns, part_rows, encoding)
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise ValueError("--delimiter must be one character other than a quote or a line break")
        self.delimiter, self.format = delimiter, fmt
        csv.field_size_limit(max(configured_max_bytes(), csv.field_size_limit()))  # a note may be long
        with open(path, "rb") as handle:
            lines = _Lines(handle, path, encoding, 0, 1)
            try:
                header = next(self._reader(lines), None)
            except csv.Error as exc:
                raise InputError(path, f"header: malformed {fmt.upper()} ({exc})") from None
            if not header:
                raise InputError(path, "is empty: a header row naming the columns comes first")
            self.data_start = (lines.offset, lines.number)
        if len(set(header)) < len(header):
            raise InputError(path, "header names a column twice")
        columns.check(path, header, shown=False)  # a headerless file's first row is a note's
        self.header = header

    def _reader(self, lines: _Lines) -> Iterator[list[str]]:
        return csv.reader(lines, delimiter=self.delimiter, quotechar='"', doublequote=True, strict=True)

    def _first(self) -> tuple[int, int]:
        return self.data_start

    def _rows(self, lines: _Lines) -> Iterator[Row]:
        reader = self._reader(lines)
        wanted = [(name, self.header.index(name)) for name in self.columns.read]
        while True:
            number = lines.number
            try:
                record = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:  # csv's messages name what it expected, never the field
                raise InputError(self.path, f"line {number}: malformed {self.format.upper()} ({exc})") from None
            if not record:
                continue  # a blank line
            if len(record) != len(self.header):
                yield number, f"has {len(record)} fields, the header {len(self.header)}"
                continue
            yield number, {name: record[index] for name, index in wanted}


class JsonLinesTable(_LineTable):
    """A JSON Lines file whose objects' keys are columns (``jsonl-table``)."""

    format = "jsonl-table"

    def _rows(self, lines: _Lines) -> Iterator[Row]:
        for line in lines:
            number = lines.number - 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                yield number, f"invalid JSON at column {exc.colno} ({exc.msg})"
                continue
            if not isinstance(record, dict):
                yield number, "not a JSON object"
                continue
            missing = [name for name in self.columns.read if name not in record]
            if missing:
                yield number, f"has no {', '.join(map(repr, missing))}"
                continue
            yield number, {name: record[name] for name in self.columns.read}


class ParquetTable:
    """A Parquet file (pyarrow), read a part at a time, only the columns the run reads. Each scan or read
    opens the file afresh (worker processes never share a reader); parts are located by row number."""

    format = "parquet"

    def __init__(self, path: Path, columns: Columns, part_rows: int) -> None:
        self.path, self.columns, self.part_rows = path, columns, part_rows
        meta = self._open().metadata
        self.schema = meta.schema.to_arrow_schema()
        columns.check(path, self.schema.names)
        self.group_starts, first = [], 0
        for group in range(meta.num_row_groups):
            self.group_starts.append(first)
            first += meta.row_group(group).num_rows

    @property
    def name(self) -> str:
        return str(self.path)

    def _open(self) -> Any:
        try:
            return _parquet().ParquetFile(self.path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError; its words name no data
            raise InputError(self.path, f"cannot read as Parquet ({type(exc).__name__})") from None

    def _rows(self, start: int) -> Iterator[Row]:
        """Rows from row number ``start`` + 1 on, reading from the row group that holds it."""
        group = max((i for i, first in enumerate(self.group_starts) if first <= start), default=None)
        if group is None:
            return
        number = self.group_starts[group]
        try:
            for batch in self._open().iter_batches(
                batch_size=min(self.part_rows, 65_536),
                columns=self.columns.read,
                row_groups=range(group, len(self.group_starts)),
            ):
                if number + batch.num_rows <= start:
                    number += batch.num_rows
                    continue
                for values in batch.to_pylist():
                    number += 1
                    if number > start:
                        yield number, values
        except (OSError, ValueError) as exc:
            raise InputError(self.path, f"rows after {number}: cannot read ({type(exc).__name__})") from None

    def scan(self) -> Iterator[tuple[Any, list[Row] | InputError]]:
        part: list[Row] = []
        start = 0
        try:
            for row in self._rows(0):
                part.append(row)
                if len(part) == self.part_rows:
                    yield start, part
                    start, part = row[0], []
        except InputError as exc:
            yield start, exc
            return
        if part:
            yield start, part

    def read(self, locator: Any) -> list[Row]:
        return [row for _, row in zip(range(self.part_rows), self._rows(locator))]


def _parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("Parquet tables need pyarrow: pip install 'hybriddeid[tables]'") from None
    return pq


# -- writing a part -----------------------------------------------------------------------------------
def render_table(
    fmt: str,
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    schema: Any = None,
    delimiter: str | None = None,
) -> bytes:
    """The bytes of one output part in ``fmt`` holding ``rows`` (dicts by column) in ``columns`` order.
    CSV and TSV: a header row, RFC 4180 quoting, ``\\r\\n`` between records (line breaks inside a field are
    kept as they are), UTF-8; JSON Lines: one object a line; Parquet: ``schema`` (a pyarrow schema with
    the input's column types, or None to infer them; columns that are null throughout become strings)."""
    if fmt in ("csv", "tsv"):
        buffer = io.StringIO()
        writer = csv.writer(
            buffer,
            delimiter=delimiter or ("\t" if fmt == "tsv" else ","),
            lineterminator="\r\n",
            quoting=csv.QUOTE_MINIMAL,
        )
        writer.writerow(columns)
        writer.writerows([["" if row.get(name) is None else _cell(row[name]) for name in columns] for row in rows])
        return buffer.getvalue().encode("utf-8")
    if fmt == "jsonl-table":
        return "".join(
            json.dumps({name: row.get(name) for name in columns}, ensure_ascii=False, default=str) + "\n"
            for row in rows
        ).encode("utf-8")
    if fmt == "parquet":
        import pyarrow as pa

        pq = _parquet()
        arrays = []
        for name in columns:
            values = [row.get(name) for row in rows]
            kind = schema.field(name).type if schema is not None and name in schema.names else None
            array = pa.array(values, type=kind) if kind is not None else pa.array(values)
            arrays.append(array.cast(pa.string()) if pa.types.is_null(array.type) else array)
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_arrays(arrays, names=list(columns)), sink)
        return sink.getvalue()
    raise ValueError(f"unknown table format {fmt!r}")


def _cell(value: Any) -> str:
    return (
        value
        if isinstance(value, str)
        else json.dumps(value, ensure_ascii=False, default=str)
        if isinstance(value, (list, dict))
        else str(value)
    )


def read_table(path: Path, fmt: str | None = None) -> list[dict[str, Any]]:
    """Every row of a (small) table file as a dict, for tests and checks: all columns, in file order."""
    path = Path(path)
    fmt = fmt or detect_table_file_format(path)
    if fmt == "parquet":
        return _parquet().read_table(path).to_pylist()
    if fmt == "jsonl-table":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t" if fmt == "tsv" else ","))
