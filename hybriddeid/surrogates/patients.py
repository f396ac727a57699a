"""Which patient a note belongs to, so that a patient's notes share surrogates and a date offset.

Used by ``hybriddeid deid`` (``hybriddeid.runs.deid``) and Spark (``hybriddeid.integrations.spark``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hybriddeid.core.document import Document
from hybriddeid.io import InputError


@dataclass(frozen=True)
class PatientMap:
    """Which patient a note belongs to: a mapping (note or file name -> patient id), a regex over the
    note's name (group ``patient``, else group 1, else the whole match), or else the note itself."""

    mapping: Mapping[str, str] | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"--patient-pattern is not a valid regular expression ({exc.msg})") from None

    @classmethod
    def from_file(cls, path: Path) -> PatientMap:
        """A CSV (two columns: note or file name, patient id; a header row is allowed) or a JSON object."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(path, f"cannot read patient map ({type(exc).__name__})") from None
        if path.suffix.lower() == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"not valid JSON (line {exc.lineno})") from None
            if not isinstance(data, dict) or not all(isinstance(v, (str, int)) for v in data.values()):
                raise InputError(path, "must be a JSON object mapping note names to patient ids")
            return cls({str(k): str(v) for k, v in data.items()})
        mapping: dict[str, str] = {}
        for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 2:
                raise InputError(path, f"line {number}: expected two columns (note, patient)")
            if number == 1 and "patient" in row[1].lower():
                continue  # header
            mapping[row[0].strip()] = row[1].strip()
        return cls(mapping)

    def patient(self, path: Path, doc: Document) -> str:
        if self.mapping is not None:
            for name in (doc.name, path.name, path.stem, str(doc.meta.get("file", ""))):
                if name in self.mapping:
                    return self.mapping[name]
            raise InputError(path, f"note {doc.name!r} has no patient in the patient map")
        if self.pattern is not None:
            match = re.search(self.pattern, doc.name)
            if match is None:
                raise InputError(path, f"note {doc.name!r} does not match --patient-pattern")
            if "patient" in match.re.groupindex:
                return match.group("patient")
            return match.group(1) if match.re.groups else match.group(0)
        return doc.name
