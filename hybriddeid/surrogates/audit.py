"""The audit trail of de-identified output: one JSONL or CSV file per note, a summary per run, and
(only when asked for) a secured mapping file that also holds the original values.
"""
from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from hybriddeid.document import Document
from hybriddeid.io._common import record_name
from hybriddeid.surrogates.deid import Replacement
from hybriddeid.surrogates.generator import DATE_FALLBACK, SHAPE

AUDIT_FORMATS = ("jsonl", "csv")
AUDIT_FIELDS = ("note", *(f.name for f in fields(Replacement)))
_INTEGER_FIELDS = ("start", "end", "out_start", "out_end")


_CSV_RUN_PREFIX = "# run: "
_CSV_UNREAD_PREFIX = "# unread_characters: "


def render_audit(note: str, replacements: Sequence[Replacement], fmt: str = "jsonl",
                 run: Mapping[str, str] | None = None, unread_characters: int = 0) -> str:
    """One row per replaced span (offsets in input and output, label, kind, method, source, score,
    replacement); the original value is never written. ``run`` (the key's fingerprint and a digest of
    the run's settings) goes first, so that a resumed run can tell each output's key and settings:
    a JSONL line ``{"note", "run"}``, a CSV comment line ``# run: {...}``; with it, when the note holds
    text no model of its language reads, their count (``"unread_characters"``; a CSV comment line)."""
    return "".join(audit_lines(note, replacements, fmt, run, unread_characters))


def audit_lines(note: str, replacements: Sequence[Replacement], fmt: str = "jsonl",
                run: Mapping[str, str] | None = None, unread_characters: int = 0) -> Iterator[str]:
    """``render_audit``'s text line by line, made as they are written (``io.atomic_write_text`` takes
    them): a long note's hundreds of thousands of rows are never all held at once."""
    if fmt not in AUDIT_FORMATS:
        raise ValueError(f"audit format must be one of {', '.join(AUDIT_FORMATS)}")
    name = record_name(note)
    unread = {"unread_characters": unread_characters} if unread_characters else {}
    if fmt == "jsonl":
        if run is not None:
            yield json.dumps({"note": name, "run": dict(run), **unread}, ensure_ascii=False) + "\n"
        for rep in replacements:
            yield json.dumps({"note": name, **rep.to_dict()}, ensure_ascii=False) + "\n"
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


def read_audit(path: Path) -> list[dict[str, object]]:
    """The replacement rows of an audit file written by ``render_audit`` (format from the extension)."""
    return _read_audit(path)[1]


def read_audit_run(path: Path) -> dict[str, object] | None:
    """The run record of an audit file (key fingerprint, settings digest); None if it has none (written
    before 0.3, or by hand)."""
    return _read_audit(path)[0]


def read_audit_unread(path: Path) -> int:
    """How many characters of the audited note no model of its language reads (0 when not recorded)."""
    return _read_audit(path)[2]


def _read_audit(path: Path) -> tuple[dict[str, object] | None, list[dict[str, object]], int]:
    text = Path(path).read_text(encoding="utf-8")
    run, unread = None, 0
    if Path(path).suffix == ".csv":
        if text.startswith(_CSV_RUN_PREFIX):
            head, _, text = text.partition("\n")
            run = json.loads(head[len(_CSV_RUN_PREFIX):])
        if text.startswith(_CSV_UNREAD_PREFIX):
            head, _, text = text.partition("\n")
            unread = int(head[len(_CSV_UNREAD_PREFIX):])
        rows: list[dict[str, object]] = list(csv.DictReader(io.StringIO(text)))
        for row in rows:
            for name in _INTEGER_FIELDS:
                row[name] = int(row[name])
            row["score"] = float(row["score"])
        return run, rows, unread
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if rows and "run" in rows[0] and "start" not in rows[0]:
        head = rows.pop(0)
        run, unread = head["run"], int(head.get("unread_characters", 0))
    return run, rows, unread


def render_mapping(doc: Document, replacements: Sequence[Replacement]) -> str:
    """JSONL of original value -> replacement for one note: PHI, for the secured mapping file only."""
    return "".join(
        json.dumps({"note": record_name(doc.name), "start": rep.start, "end": rep.end, "label": rep.label,
                    "original": doc.text[rep.start:rep.end], "replacement": rep.replacement}, ensure_ascii=False) + "\n"
        for rep in replacements
    )


def summarize(rows_by_note: Iterable[Sequence[dict[str, object]]]) -> dict[str, object]:
    """Counts over a run's audit rows: notes, spans, per label, per category, per method."""
    notes = spans = 0
    by_label: Counter[str] = Counter()
    by_category: Counter[str] = Counter()
    by_method: Counter[str] = Counter()
    for rows in rows_by_note:
        notes += 1
        for row in rows:
            spans += 1
            by_label[str(row["label"])] += 1
            by_category[str(row["category"])] += 1
            by_method[str(row["method"])] += 1
    return {
        "notes": notes,
        "spans": spans,
        "dates_unparsed": by_method[DATE_FALLBACK],
        "shape_fallbacks": by_method[SHAPE],
        "by_category": dict(sorted(by_category.items())),
        "by_label": dict(sorted(by_label.items())),
        "by_method": dict(sorted(by_method.items())),
    }


def format_summary(summary: dict[str, object]) -> str:
    """One line for the terminal: counts only."""
    categories = ", ".join(f"{name} {count}" for name, count in summary["by_category"].items())
    return (f"{summary['spans']} spans replaced in {summary['notes']} notes ({categories or 'none'}); "
            f"{summary['dates_unparsed']} dates not understood (other dates in the same layout)")
