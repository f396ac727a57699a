"""``hybriddeid deid`` and ``annotate`` over a table of notes (CSV, TSV, Parquet, JSON Lines) or a database
table or query, on top of ``batch.run_batch``: the same lock, stop signals, worker processes, limits and
resume as a folder run, and each note through ``processing.process_notes`` (``DeidProcessor.deidentified``
for ``deid``, as ``AnnotateProcessor`` calls it for ``annotate``), so a note's de-identified text, or its
spans, are byte-identical to what a folder run writes for it.

The table is read in *parts* of ``part_rows`` rows (``hybriddeid.io.tables``, ``hybriddeid.io.sql``);
each part is one input of the batch run (a pseudo-file named ``part-00000``...). Planning reads the
table once; parts whose text does not fit the batch runner's budget are read again when they run, so
the run holds a bounded amount of note text (ids are kept, a few dozen bytes a note). A patient's
notes are de-identified together: parts sharing a patient run as one unit.

Outputs, in the input's format (or ``--format``); ``deid`` writes the rows read with their text
de-identified (``TableDeidProcessor``), ``annotate`` the rows read less their text, with each note's
spans in ``phi_spans`` (``TableAnnotateProcessor``):

* a folder: ``part-00000.csv``... (the same part numbers as the input's; each written atomically), and
  ``_hybriddeid/`` with ``run.json`` (the settings), ``parts/part-00000.json`` (the ids each finished part
  holds, its size and the run record: a rerun skips those parts) and ``summary.json``. Readers of
  Parquet datasets (pyarrow, Spark) ignore ``_``-prefixed folders.
* a database table: each unit's rows inserted in one transaction that first deletes their ids; a rerun
  skips ids already there. The run's lock is a folder under the user's cache (``core.cache.cache_dir()``:
  ``$HYBRIDDEID_CACHE_DIR``, else ``$XDG_CACHE_HOME/hybriddeid``), ``runs/`` and a digest of the output table.

Bad rows (no id, an id used twice, no text, no patient, a row of the wrong width) are reported by row
number, never by value, and the others go on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from hybriddeid.core.cache import cache_dir
from hybriddeid.core.document import Document, Span
from hybriddeid.io import InputError, atomic_write_text, remove_temp_files
from hybriddeid.io._common import atomic_write_bytes, settings_digest
from hybriddeid.io.sql import SqlSink
from hybriddeid.io.tables import AUDIT_COLUMN, OUTPUT_SUFFIXES, SPANS_COLUMN, Columns, TableSource, render_table
from hybriddeid.runs.batch import (
    AnnotateProcessor,
    BatchResult,
    Interrupted,
    Limits,
    check_writable,
    output_lock,
    run_batch,
    stop_on_signals,
)
from hybriddeid.runs.deid import DeidProcessor, check_out_dir

log = logging.getLogger(__name__)

STATE_DIR = "_hybriddeid"  # inside an output folder: settings, finished parts, summary
PARTS_DIR = "parts"


def part_name(index: int) -> str:
    return f"part-{index:05d}"


class TableInputs:
    """A table's parts as ``run_batch``'s inputs (a ``batch.NoteSource``): each row a ``Document`` named by
    its id (``meta``: its part, row number, patient and the values read), each bad row an ``InputError``
    of its own (a pseudo-path ``line N`` or ``row N``), reported once."""

    def __init__(self, source: TableSource, columns: Columns) -> None:
        self.source, self.columns, self.format = source, columns, source.format
        self.row_word = "line" if source.format in ("csv", "tsv", "jsonl-table") else "row"
        self.locators: dict[Path, Any] = {}
        self.rows: dict[Path, int] = {}  # notes per part, for the tally
        self.first_row: dict[str, int] = {}  # id -> the row that holds it (a later row with that id is refused)

    def check_output(self, out_dir: Path) -> None:
        path = getattr(self.source, "path", None)
        if path is not None and Path(path).resolve().is_relative_to(Path(out_dir).resolve()):
            raise InputError(out_dir, "holds the input table; choose another output folder")

    def __iter__(self) -> Iterator[tuple[Path, list[Document] | InputError]]:
        for index, (locator, rows) in enumerate(self.source.scan()):
            path = Path(part_name(index))
            self.locators[path] = locator
            if isinstance(rows, InputError):
                yield path, rows
                continue
            docs = []
            for number, values in rows:
                doc = self._document(path, number, values)
                if isinstance(doc, InputError):
                    yield doc.path, doc
                elif doc.name in self.first_row:
                    row = Path(f"{self.row_word} {number}")
                    yield row, InputError(row, f"its id is already used by {self.row_word} {self.first_row[doc.name]}")
                else:
                    self.first_row[doc.name] = number
                    docs.append(doc)
            self.rows[path] = len(docs)
            if docs:
                yield path, docs

    def read(self, path: Path) -> list[Document]:
        """A part's documents again, less the rows refused when it was first read."""
        docs = (self._document(path, number, values) for number, values in self.source.read(self.locators[path]))
        return [doc for doc in docs if isinstance(doc, Document) and self.first_row.get(doc.name) == doc.meta["row"]]

    def _document(self, path: Path, number: int, values: Mapping[str, Any] | str) -> Document | InputError:
        row = Path(f"{self.row_word} {number}")
        if isinstance(values, str):
            return InputError(row, values)
        note_id, text = values.get(self.columns.id), values.get(self.columns.text)
        if note_id is None or note_id == "":
            return InputError(row, f"no id (column {self.columns.id!r} is empty)")
        if not _is_key(note_id):
            return InputError(row, f"its id (column {self.columns.id!r}) is {_kind(note_id)}, not text or a number")
        if not isinstance(text, str) or not text:  # an empty CSV field is no note, as an empty file is none
            return InputError(row, f"no text (column {self.columns.text!r} is {'not text' if text else 'empty'})")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return InputError(row, f"the text holds a lone surrogate at offset {exc.start}")
        meta: dict[str, Any] = {"part": path.name, "row": number, "values": dict(values)}
        if self.columns.patient is not None:
            patient = values.get(self.columns.patient)
            if patient is None or patient == "":
                return InputError(row, f"no patient (column {self.columns.patient!r} is empty)")
            if not _is_key(patient):
                return InputError(
                    row, f"its patient (column {self.columns.patient!r}) is {_kind(patient)}, not text or a number"
                )
            meta["patient"] = str(patient)
        return Document(str(note_id), text, (), meta)


def _is_key(value: Any) -> bool:
    """Whether a note's id or patient can name it: text or a number (a list, an object or a boolean cannot)."""
    return not isinstance(value, (bool, list, tuple, dict, bytes, bytearray))


def _kind(value: Any) -> str:
    """What a value is, told without the value: "a list", "an object", "true or false", "bytes"."""
    return (
        "true or false"
        if isinstance(value, bool)
        else "an object"
        if isinstance(value, dict)
        else "bytes"
        if isinstance(value, (bytes, bytearray))
        else "a list"
    )


@dataclass
class FolderSink:
    """Output parts written into a folder in ``format``, each with its manifest of finished ids."""

    out_dir: Path
    format: str
    columns: Sequence[str]
    schema: Any = None  # Parquet: the input's column types
    delimiter: str | None = None

    @property
    def name(self) -> str:
        return str(self.out_dir)

    def part_file(self, part: str) -> Path:
        return self.out_dir / f"{part}{OUTPUT_SUFFIXES[self.format]}"

    def manifest(self, part: str) -> Path:
        return self.out_dir / STATE_DIR / PARTS_DIR / f"{part}.json"

    def done(self, record: Mapping[str, str]) -> set[str]:
        """The ids of the parts finished under ``record`` whose file is still there, as written."""
        ids: set[str] = set()
        for manifest in sorted((self.out_dir / STATE_DIR / PARTS_DIR).glob("part-*.json")):
            try:
                entry = json.loads(manifest.read_text(encoding="utf-8"))
                part = self.part_file(manifest.stem)
                if entry.get("run") == dict(record) and part.is_file() and part.stat().st_size == entry.get("bytes"):
                    ids.update(entry["ids"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: its part is done again
        return ids

    def write(self, part: str, rows: Sequence[Mapping[str, Any]], record: Mapping[str, str]) -> None:
        """The part's file, then its manifest (a part without a manifest is done again)."""
        data = render_table(self.format, self.columns, rows, self.schema, self.delimiter)
        atomic_write_bytes(self.part_file(part), data)
        entry = {
            "ids": [str(row[self.columns[0]]) for row in rows],
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "run": dict(record),
        }
        atomic_write_text(self.manifest(part), json.dumps(entry) + "\n")


def spans_json(spans: Sequence[Span]) -> str:
    """A note's spans as the ``phi_spans`` column holds them: offsets in the input text, label, source and
    score, never the text they cover."""
    return json.dumps([span.record() for span in spans], ensure_ascii=False)


class TableProcessor:
    """What table runs share, as a ``BatchProcessor``: finished ids from the sink, each unit's rows written
    to it (a folder's parts with their manifests, or one database transaction). A subclass says what a
    unit's rows are (``rows``), what makes them what they are (``settings``, ``run_record``) and how units
    are formed (``unit_key``); it has the fields ``columns`` and ``sink``."""

    columns: Columns
    sink: FolderSink | SqlSink
    _done: set[str] | None = None

    def setup(self) -> None:
        """Prepare once per process before any unit runs (e.g. load a model)."""
        raise NotImplementedError

    def unit_key(self, path: Path, doc: Document) -> str:
        """Rows sharing a key are processed in one unit."""
        raise NotImplementedError

    @property
    def run_record(self) -> dict[str, str]:
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """What makes the output what it is (recorded in ``run.json`` or the database's runs table)."""
        raise NotImplementedError

    def rows(self, docs: Sequence[Document]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        if self._done is None:  # read once, when planning
            self._done = self.sink.done(self.run_record) if isinstance(self.sink, FolderSink) else self.sink.done()
        return doc.name in self._done

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        rows = self.rows(docs)
        if isinstance(self.sink, SqlSink):
            self.sink.write(rows)  # the unit in one transaction
            return
        parts: dict[str, list[dict[str, Any]]] = {}
        for doc, row in zip(docs, rows):
            parts.setdefault(str(doc.meta["part"]), []).append(row)
        for part, part_rows in sorted(parts.items()):
            self.sink.write(part, part_rows, self.run_record)


@dataclass
class TableDeidProcessor(TableProcessor):
    """De-identifies a table's notes (a ``BatchProcessor``): ``deid`` says how (model, options, patients
    by pattern or map when the table has no patient column), ``sink`` takes each unit's rows."""

    deid: DeidProcessor
    columns: Columns
    sink: FolderSink | SqlSink
    spans: bool = False
    audit: bool = False
    _done: set[str] | None = field(default=None, repr=False)

    def setup(self) -> None:
        self.deid.setup()

    @property
    def run_record(self) -> dict[str, str]:
        return self.deid.run_record

    def settings(self) -> dict[str, Any]:
        return self.deid.settings()

    def patient(self, doc: Document) -> str:
        if "patient" in doc.meta:
            return str(doc.meta["patient"])
        return self.deid.unit_key(Path(str(doc.meta.get("part", ""))), doc)

    def unit_key(self, path: Path, doc: Document) -> str:
        return self.patient(doc)

    def rows(self, docs: Sequence[Document]) -> list[dict[str, Any]]:
        """The output rows of ``docs``: the values read, the text de-identified, spans and audit as JSON."""
        results = self.deid.deidentified(docs, patient_of=self.patient)
        rows = []
        for doc in docs:
            found, result = results[doc.name]
            row = dict(doc.meta["values"])
            row[self.columns.text] = result.text
            if self.spans:
                row[SPANS_COLUMN] = spans_json(found.spans)
            if self.audit:
                row[AUDIT_COLUMN] = json.dumps([r.to_dict() for r in result.replacements], ensure_ascii=False)
            rows.append(row)
        return rows


@dataclass
class TableAnnotateProcessor(TableProcessor):
    """Finds the PHI spans of a table's notes (a ``BatchProcessor``): ``annotate`` says how (model, PHI set,
    threshold), as for a folder; each output row holds the values read but the text, and ``phi_spans``.
    A part is a unit: notes are annotated each on its own, as ``annotate`` does a folder's, so a note's
    spans do not depend on the part, the patient or the other notes."""

    annotate: AnnotateProcessor
    columns: Columns
    sink: FolderSink | SqlSink
    _done: set[str] | None = field(default=None, repr=False)

    def setup(self) -> None:
        self.annotate.setup()

    def unit_key(self, path: Path, doc: Document) -> str:
        return str(path)

    def settings(self) -> dict[str, Any]:
        model = self.annotate.model
        return {
            "run": "annotate",
            "spans": f"model {model}",
            "phi_set": self.annotate.settings.phi_set,
            "phi_threshold": self.annotate.settings.threshold,
        }

    @cached_property
    def run_record(self) -> dict[str, str]:
        """A digest of the settings, kept in each finished part's manifest: a part made otherwise is redone."""
        return {"settings": settings_digest(self.settings())}

    def rows(self, docs: Sequence[Document]) -> list[dict[str, Any]]:
        """The output rows of ``docs``: the values read (the sink writes the columns it has) and the spans."""
        found = self.annotate.annotated(docs)
        return [{**doc.meta["values"], SPANS_COLUMN: spans_json(note.spans)} for doc, note in zip(docs, found)]


def state_folder(sink: SqlSink) -> Path:
    """Where a run into a database table keeps its batch state: a folder of the user's cache named by the
    table (the lock that keeps two runs out of one table is the database's own, ``SqlSink.lock``)."""
    return cache_dir() / "runs" / hashlib.sha256(sink.name.encode("utf-8")).hexdigest()[:16]


@dataclass
class TableResult:
    """What a table run did, in notes (``batch`` is the run by parts, bad rows among its failures)."""

    batch: BatchResult
    written: int
    skipped: int
    failed: int

    @property
    def exit_code(self) -> int:
        return self.batch.exit_code

    def summary(self) -> str:
        return f"{self.written} notes written, {self.skipped} already done, {self.failed} failed"


def run_table(
    inputs: TableInputs,
    processor: TableProcessor,
    overwrite: bool = False,
    progress: bool = True,
    jobs: int = 1,
    limits: Limits = Limits(),
) -> TableResult:
    """De-identify or annotate a table (``processor``) into ``processor.sink`` through ``run_batch``; returns
    the tally in notes.

    The output's lock is held for the whole run (a database table's in the database: ``SqlSink.lock``);
    settings are recorded (``_hybriddeid/run.json``, or the database's ``hybriddeid_runs`` table) and a run
    with other settings is refused unless ``overwrite`` (which redoes every note; a database table is emptied
    first). Stopped by a signal, it raises ``Interrupted`` as ``run_batch`` does."""
    sink = processor.sink
    out_dir = sink.out_dir if isinstance(sink, FolderSink) else state_folder(sink)
    inputs.check_output(out_dir)
    with contextlib.ExitStack() as held:
        if isinstance(sink, SqlSink):  # the database's own lock first: it holds however the URL is spelled
            held.enter_context(sink.lock())
        held.enter_context(output_lock(out_dir))
        held.enter_context(stop_on_signals())
        settings = {
            **processor.settings(),
            "table_columns": list(sink.columns),
            "part_rows": getattr(inputs.source, "part_rows", None),
        }
        if isinstance(sink, FolderSink):
            state = out_dir / STATE_DIR
            for folder in (out_dir, state, state / PARTS_DIR):
                check_writable(folder)
                remove_temp_files(folder)
            check_out_dir(out_dir, settings, overwrite, manifest=state / "run.json")
        else:
            sink.prepare(_sample_row(inputs, processor), settings, overwrite)
        try:
            result = run_batch(
                inputs, out_dir, processor, overwrite=overwrite, progress=progress, jobs=jobs, limits=limits
            )
        except Interrupted as stop:
            if isinstance(sink, FolderSink):
                remove_temp_files(out_dir / STATE_DIR / PARTS_DIR)
            if stop.result is not None:
                _tally(inputs, stop.result, sink)
            raise
        return _tally(inputs, result, sink)


def _sample_row(inputs: TableInputs, processor: TableProcessor) -> dict[str, Any]:
    """An output row's worth of values to type a new database table by: the first readable row's."""
    for _, rows in inputs.source.scan():
        for _, values in rows if not isinstance(rows, InputError) else ():
            if not isinstance(values, str):
                return {**values, processor.columns.text: "", SPANS_COLUMN: "", AUDIT_COLUMN: ""}
        break
    return {}


def _tally(inputs: TableInputs, result: BatchResult, sink: FolderSink | SqlSink) -> TableResult:
    """The run's tally in notes (a failed part counts its rows; a bad row counts one), written to
    ``_hybriddeid/summary.json`` for a folder."""
    count = lambda paths: sum(inputs.rows.get(path, 0) for path in paths)  # noqa: E731
    failed = sum(inputs.rows.get(path, 1) for path, _ in result.failed)
    tally = TableResult(result, count(result.written), count(result.skipped), failed)
    if isinstance(sink, FolderSink):
        summary = {
            "notes": {"written": tally.written, "skipped": tally.skipped, "failed": tally.failed},
            "parts": {"written": len(result.written), "skipped": len(result.skipped)},
        }
        target = sink.out_dir / STATE_DIR / "summary.json"
        try:
            atomic_write_text(target, json.dumps(summary, indent=2) + "\n")
        except OSError as exc:
            result.problem(target, f"cannot write the summary ({exc.strerror or type(exc).__name__})")
    return tally
