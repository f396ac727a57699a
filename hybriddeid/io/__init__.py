"""Readers and writers for clinical notes with PHI annotations, keeping offsets exact.

Formats: ``text`` (bare ``.txt``), ``brat`` (``.txt`` + ``.ann``), ``i2b2`` (2014 XML, also MEDDOCAN),
``i2b2-2006`` (inline ``<PHI>`` XML, many records a file) and ``jsonl`` (one document a line).
Offsets are Python string indices into the note exactly as stored: ``"\\r\\n"`` and a leading UTF-8
byte-order mark count as characters (MEDDOCAN's offsets count its BOMs). Every problem with an input is
an ``InputError`` naming the file and what is wrong, never quoting note text.
"""

from __future__ import annotations

from hybriddeid.io._common import (
    InputError,
    atomic_write_text,
    check_encoding,
    commit_writes,
    discard_writes,
    flush_files,
    remove_temp_files,
    staged_writes,
)
from hybriddeid.io.core import (
    ANNOTATION_FORMATS,
    FHIR_FORMAT,
    FORMATS,
    INPUT_FORMATS,
    TABLE_FORMATS,
    Inputs,
    detect_format,
    detect_table_format,
    iter_documents,
    output_path,
    read_corpus,
    read_document,
    scan_inputs,
    scan_tree,
    write_document,
    write_documents,
)

__all__ = [
    "ANNOTATION_FORMATS",
    "FHIR_FORMAT",
    "FORMATS",
    "INPUT_FORMATS",
    "TABLE_FORMATS",
    "InputError",
    "Inputs",
    "atomic_write_text",
    "check_encoding",
    "commit_writes",
    "detect_format",
    "detect_table_format",
    "discard_writes",
    "flush_files",
    "iter_documents",
    "output_path",
    "read_corpus",
    "read_document",
    "remove_temp_files",
    "scan_inputs",
    "scan_tree",
    "staged_writes",
    "write_document",
    "write_documents",
]
