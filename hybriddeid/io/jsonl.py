"""JSON Lines: one document per line, ``{"name", "text", "spans": [{"start", "end", "label", "source",
"score"}], "meta"}``; only ``text`` is required.

A line without ``name`` is named ``f"{stem}-{line number}"``. Spans keep the ``source`` and ``score``
they were written with (default ``"gold"`` and 1.0); only gold spans must not overlap, since predictions
of several sources may. Lines are split on ``"\\n"`` alone: ``json.dumps(ensure_ascii=False)`` leaves
U+2028 and friends raw, which ``str.splitlines`` would treat as line ends.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybriddeid.core.document import Document, Span
from hybriddeid.io._common import (
    PROVENANCE_KEYS,
    InputError,
    check_text,
    is_safe_name,
    make_document,
    make_span,
    read_text,
    record_name,
)


def read_jsonl(path: Path, max_bytes: int, encoding: str = "utf-8", spans: bool = True) -> list[Document]:
    """Every non-blank line of ``path`` as a document, in file order (``spans=False``: without spans)."""
    docs: list[Document] = []
    names: set[str] = set()
    for lineno, line in enumerate(read_text(path, max_bytes, encoding=encoding).removeprefix("\ufeff").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"line {lineno}: invalid JSON at column {exc.colno} ({exc.msg})") from None
        doc = _document(path, lineno, record, spans)
        if doc.name in names:
            raise InputError(path, f"line {lineno}: document name {doc.name!r} is used twice")
        names.add(doc.name)
        docs.append(doc)
    if not docs:
        raise InputError(path, "no documents (only blank lines)")
    return docs


def _document(path: Path, lineno: int, record: Any, with_spans: bool = True) -> Document:
    where = f"line {lineno}"
    if not isinstance(record, dict):
        raise InputError(path, f"{where}: not a JSON object")
    text, name = record.get("text"), record.get("name", f"{path.stem}-{lineno}")
    meta, raw_spans = record.get("meta", {}), record.get("spans", [])
    if not isinstance(text, str):
        raise InputError(path, f"{where}: 'text' is missing or not a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # JSON escapes can spell lone surrogates
        raise InputError(path, f"{where}: 'text' holds a lone surrogate at offset {exc.start}") from None
    if not isinstance(name, str) or not is_safe_name(name):
        raise InputError(path, f"{where}: 'name' is not a string usable as a file name")
    if not isinstance(meta, dict):
        raise InputError(path, f"{where}: 'meta' is not an object")
    if not with_spans:
        raw_spans = []
    if not isinstance(raw_spans, list):
        raise InputError(path, f"{where}: 'spans' is not a list")
    spans = [
        (f"#{index} ({where})", _span(path, f"#{index} ({where})", raw, text)) for index, raw in enumerate(raw_spans)
    ]
    meta = {**meta, "path": str(path), "format": "jsonl", "file": path.stem, "line": lineno}
    return make_document(path, name, text, spans, meta)


def _span(path: Path, sid: str, raw: Any, text: str) -> Span:
    if not isinstance(raw, dict):
        raise InputError(path, f"span {sid}: not a JSON object")
    source, score = raw.get("source", "gold"), raw.get("score", 1.0)
    if not isinstance(source, str) or not source:
        raise InputError(path, f"span {sid}: 'source' is not a non-empty string")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise InputError(path, f"span {sid}: 'score' is not a finite number")
    span = make_span(path, sid, raw.get("start"), raw.get("end"), raw.get("label"), len(text), source, float(score))
    check_text(path, sid, span.start, span.end, raw.get("text"), text[span.start : span.end])
    return span


def render_jsonl(docs: Sequence[Document]) -> dict[str, str]:
    """One line per document; reader-set provenance keys are left out of ``meta``."""
    lines = []
    for doc in docs:
        record = {
            "name": record_name(doc.name),
            "text": doc.text,
            "spans": [span.record() for span in doc.spans],
            "meta": {key: value for key, value in doc.meta.items() if key not in PROVENANCE_KEYS},
        }
        try:
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{doc.name}: document cannot be written as JSON ({exc})") from None
    return {".jsonl": "".join(lines)}
