"""BRAT standoff: ``name.txt`` holds the note, ``name.ann`` one ``T`` line per entity.

Only text-bound annotations (``T``) are read; notes (``#``), attributes (``A``, ``M``), relations
(``R``, ``*``), events (``E``) and normalisations (``N``) are skipped. A discontinuous entity
(``T1\\tLABEL 0 5;6 10\\t...``) becomes one span per fragment, all with the entity's label: for
de-identification each fragment is PHI on its own, and ``Span`` has no notion of gaps. Its recorded
text must equal the fragments joined by single spaces, as BRAT writes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hybriddeid.core.document import Document, Span
from hybriddeid.io._common import (
    InputError,
    check_text,
    make_document,
    make_span,
    parse_offset,
    read_text,
)

_SKIPPED_PREFIXES = ("#", "A", "M", "R", "*", "E", "N")
_FRAGMENT = re.compile(r"(\d+) (\d+)")


def read_brat(txt_path: Path, ann_path: Path, max_bytes: int, encoding: str = "utf-8", spans: bool = True) -> Document:
    """The note in ``txt_path`` with the entities of ``ann_path`` as gold spans (``spans=False``: the
    note alone, ``ann_path`` unread)."""
    text = read_text(txt_path, max_bytes, encoding=encoding)
    meta = {"path": str(txt_path), "format": "brat", "file": txt_path.stem}
    if not spans:
        return Document(txt_path.stem, text, (), meta)
    ann = read_text(ann_path, max_bytes, allow_empty=True, encoding=encoding).removeprefix(
        "\ufeff"
    )  # offsets point into .txt
    found: list[tuple[str, Span]] = []
    seen: set[str] = set()
    for lineno, line in enumerate(ann.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip() or line.startswith(_SKIPPED_PREFIXES):
            continue
        fields = line.split("\t", 2)
        head = fields[1].split(" ", 1) if len(fields) >= 2 else []
        if not line.startswith("T") or len(head) != 2 or not fields[0][1:].isdigit():
            raise InputError(
                ann_path, f"line {lineno}: malformed annotation (expected 'T<n><TAB><label> <start> <end><TAB><text>')"
            )
        sid, (label, offsets) = fields[0], head
        if sid in seen:
            raise InputError(ann_path, f"line {lineno}: duplicate annotation id {sid}")
        seen.add(sid)
        fragments = []
        for part in offsets.split(";"):
            if not _FRAGMENT.fullmatch(part):
                raise InputError(ann_path, f"line {lineno}: malformed offsets for {sid}")
            start, end = (parse_offset(ann_path, sid, raw) for raw in part.split(" "))
            fragments.append(make_span(ann_path, sid, start, end, label, len(text)))
        if len(fields) == 3:
            joined = " ".join(text[f.start : f.end] for f in fragments)
            check_text(ann_path, sid, fragments[0].start, fragments[-1].end, fields[2], joined)
        found.extend((sid, fragment) for fragment in fragments)
    return make_document(ann_path, txt_path.stem, text, found, meta)


def render_brat(docs: Sequence[Document]) -> dict[str, str]:
    """``.txt`` and ``.ann`` contents for one document; ids are T1..Tn in offset order."""
    (doc,) = docs
    lines = []
    for number, span in enumerate(doc.spans, 1):
        if not span.label.isprintable() or " " in span.label:
            raise ValueError(f"{doc.name}: label {span.label!r} cannot be written to BRAT")
        flat = re.sub(r"[\r\n\t]", " ", doc.span_text(span))
        lines.append(f"T{number}\t{span.label} {span.start} {span.end}\t{flat}\n")
    return {".txt": doc.text, ".ann": "".join(lines)}
