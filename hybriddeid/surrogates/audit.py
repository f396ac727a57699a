"""The audit trail of de-identified output: one JSONL or CSV file per note, a summary per run, and
(only when asked for) a secured mapping file that also holds the original values.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from itertools import chain, islice
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

from hybriddeid.core.document import Document
from hybriddeid.io._common import record_name
from hybriddeid.surrogates.deid import Replacement
from hybriddeid.surrogates.generator import DATE_FALLBACK, SHAPE

AUDIT_FORMATS = ("jsonl", "csv")
AUDIT_FIELDS = ("note", *(f.name for f in fields(Replacement)))
_INTEGER_FIELDS = ("start", "end", "out_start", "out_end")


_CSV_RUN_PREFIX = "# run: "
_CSV_UNREAD_PREFIX = "# unread_characters: "


def render_audit(
    note: str,
    replacements: Sequence[Replacement],
    fmt: str = "jsonl",
    run: Mapping[str, str] | None = None,
    unread_characters: int = 0,
) -> str:
    """One row per replaced span (offsets in input and output, label, kind, method, source, score,
    replacement); the original value is never written. ``run`` (the key's fingerprint and a digest of
    the run's settings) goes first, so that a resumed run can tell each output's key and settings:
    a JSONL line ``{"note", "run"}``, a CSV comment line ``# run: {...}``; with it, when the note holds
    text no model of its language reads, their count (``"unread_characters"``; a CSV comment line)."""
    return "".join(audit_lines(note, replacements, fmt, run, unread_characters))


def audit_lines(
    note: str,
    replacements: Sequence[Replacement],
    fmt: str = "jsonl",
    run: Mapping[str, str] | None = None,
    unread_characters: int = 0,
) -> Iterator[str]:
    """``render_audit``'s text line by line, made as they are written (``io.atomic_write_text`` takes
    them): a long note's hundreds of thousands of rows are never all held at once."""
    if fmt not in AUDIT_FORMATS:
        raise ValueError(f"audit format must be one of {', '.join(AUDIT_FORMATS)}")
    name = record_name(note)
    unread = {"unread_characters": unread_characters} if unread_characters else {}
    if fmt == "jsonl":
        if run is not None:
            yield json.dumps({"note": name, "run": dict(run), **unread}, ensure_ascii=False) + "\n"
        row = _json_row(name)
        for rep in replacements:
            yield row(rep)
        return
    if run is not None:
        yield _CSV_RUN_PREFIX + json.dumps(dict(run), sort_keys=True) + "\n"
        if unread:
            yield f"{_CSV_UNREAD_PREFIX}{unread_characters}\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=AUDIT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for rep in replacements:
        writer.writerow({"note": name, **rep.to_dict()})
        if buffer.tell() > 65536:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _json_row(note: str) -> Callable[[Replacement], str]:
    """A function writing a replacement's JSONL row exactly as ``json.dumps({"note": note, **rep.to_dict()},
    ensure_ascii=False)`` and a newline would: every value is a scalar, written as ``json`` writes it,
    with no dictionary or encoder made per row (a 20 MB note has about a million rows)."""
    fields_ = AUDIT_FIELDS[1:]  # Replacement's, in to_dict's order
    values_of = attrgetter(*fields_)
    head = "{" + json.dumps("note") + ": " + json.dumps(note, ensure_ascii=False)
    names = [json.dumps(name) for name in fields_]
    text = _encode_string

    def row(rep: Replacement) -> str:
        values = values_of(rep)
        start, end, out_start, out_end, label, category, kind, method, source, score, replacement = values
        if (
            (type(start), type(end), type(out_start), type(out_end), type(score)) == _USUAL_TYPES
            and -_INFINITY < score < _INFINITY
            and fields_ == _USUAL_FIELDS
        ):
            try:  # json writes these ints and finite floats as repr does; text() refuses anything but a str
                return (
                    f'{head}, "start": {start!r}, "end": {end!r}, "out_start": {out_start!r}, "out_end": {out_end!r}, '
                    f'"label": {text(label)}, "category": {text(category)}, "kind": {text(kind)}, '
                    f'"method": {text(method)}, "source": {text(source)}, "score": {score!r}, '
                    f'"replacement": {text(replacement)}}}\n'
                )
            except TypeError:
                pass
        return head + "".join(f", {name}: {_json_scalar(value)}" for name, value in zip(names, values)) + "}\n"

    return row


_USUAL_FIELDS = (
    "start",
    "end",
    "out_start",
    "out_end",
    "label",
    "category",
    "kind",
    "method",
    "source",
    "score",
    "replacement",
)
_USUAL_TYPES = (int, int, int, int, float)


_encode_string = json.encoder.encode_basestring  # what json.dumps(..., ensure_ascii=False) writes a str with
_scalar_encoder = json.JSONEncoder(ensure_ascii=False)


def _json_scalar(value: object) -> str:
    """``value`` as ``json.dumps(value, ensure_ascii=False)`` writes it, quickly for the common types."""
    kind = type(value)
    if kind is str:
        return _encode_string(cast(str, value))
    if kind is int:
        return int.__repr__(value)
    if kind is float and value == value and value not in (_INFINITY, -_INFINITY):
        return float.__repr__(value)
    return _scalar_encoder.encode(value)  # NaN, infinities, None, booleans, subclasses: json's own


_INFINITY = float("inf")


def read_audit(path: Path) -> list[dict[str, object]]:
    """The replacement rows of an audit file written by ``render_audit`` (format from the extension)."""
    return list(audit_rows(path))


def audit_rows(path: Path) -> Iterator[dict[str, Any]]:
    """``read_audit``'s rows one at a time (a long note's audit is never held whole)."""
    return islice(_audit_items(path), 1, None)


def read_audit_run(path: Path) -> dict[str, object] | None:
    """The run record of an audit file (key fingerprint, settings digest); None if it has none (written
    before 0.3, or by hand). Only its head is read."""
    return _audit_head(path)[0]


def read_audit_unread(path: Path) -> int:
    """How many characters of the audited note no model of its language reads (0 when not recorded)."""
    return _audit_head(path)[1]


def audit_counts(path: Path) -> tuple[Counter[tuple[str, str, str]], int]:
    """(the note's replacements counted by label, category and method; its unread characters), its
    rows read one at a time: a long note's hundreds of thousands are never all held."""
    items = _audit_items(path)
    _, unread = next(items)
    return Counter((str(row["label"]), str(row["category"]), str(row["method"])) for row in items), unread


def _audit_head(path: Path) -> tuple[dict[str, object] | None, int]:
    items = _audit_items(path)
    try:
        return next(items)
    finally:
        items.close()


def _audit_items(path: Path) -> Generator[Any, None, None]:
    """An audit file read lazily: first (run record or None, unread characters), then each row."""
    with Path(path).open(encoding="utf-8") as handle:
        if Path(path).suffix == ".csv":
            run, unread, line = None, 0, handle.readline()
            if line.startswith(_CSV_RUN_PREFIX):
                run, line = json.loads(line[len(_CSV_RUN_PREFIX) :]), handle.readline()
            if line.startswith(_CSV_UNREAD_PREFIX):
                unread, line = int(line[len(_CSV_UNREAD_PREFIX) :]), handle.readline()
            yield run, unread
            for row in csv.DictReader(chain([line], handle)):
                for name in _INTEGER_FIELDS:
                    row[name] = int(row[name])
                row["score"] = float(row["score"])
                yield row
            return
        lines = (line for line in handle if line.strip())
        first = next(lines, None)
        head = json.loads(first) if first is not None else None
        if head is not None and "run" in head and "start" not in head:
            yield head["run"], int(head.get("unread_characters", 0))
        else:
            yield None, 0
            if head is not None:
                yield head
        for line in lines:
            yield json.loads(line)


def render_mapping(doc: Document, replacements: Sequence[Replacement]) -> str:
    """JSONL of original value -> replacement for one note: PHI, for the secured mapping file only."""
    return "".join(
        json.dumps(
            {
                "note": record_name(doc.name),
                "start": rep.start,
                "end": rep.end,
                "label": rep.label,
                "original": doc.text[rep.start : rep.end],
                "replacement": rep.replacement,
            },
            ensure_ascii=False,
        )
        + "\n"
        for rep in replacements
    )


def summarize(counts_by_note: Iterable[Counter[tuple[str, str, str]]]) -> dict[str, Any]:
    """Counts over a run's audits: notes, spans, per label, per category, per method, from each note's
    replacements counted by (label, category, method) (``audit_counts``)."""
    notes = spans = 0
    by_label: Counter[str] = Counter()
    by_category: Counter[str] = Counter()
    by_method: Counter[str] = Counter()
    for counts in counts_by_note:
        notes += 1
        for (label, category, method), count in counts.items():
            spans += count
            by_label[label] += count
            by_category[category] += count
            by_method[method] += count
    return {
        "notes": notes,
        "spans": spans,
        "dates_unparsed": by_method[DATE_FALLBACK],
        "shape_fallbacks": by_method[SHAPE],
        "by_category": dict(sorted(by_category.items())),
        "by_label": dict(sorted(by_label.items())),
        "by_method": dict(sorted(by_method.items())),
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """One line for the terminal: counts only."""
    categories = ", ".join(f"{name} {count}" for name, count in summary["by_category"].items())
    return (
        f"{summary['spans']} spans replaced in {summary['notes']} notes ({categories or 'none'}); "
        f"{summary['dates_unparsed']} dates not understood (other dates in the same layout)"
    )
