"""``hybriddeid deid`` over folders: patients, key, audit, resume, on top of ``batch.run_batch``.

Layout of OUT_DIR: one de-identified output per input, with the input's name and format (BRAT and
i2b2 outputs carry the replaced spans at output offsets), and ``audit/`` holding one audit file per
note, ``run.json`` (the settings, with a fingerprint of the key, never the key) and ``summary.json``.

Consistency does not depend on workers: every surrogate is drawn from the key and the value, and all
files of one patient go to one unit (one worker), so initials link to names across a patient's notes.
A note counts as done when its output equals its input with its audit's replacements applied, so an
interrupted run (outputs are written only after their audit) or a changed input is redone.
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from hybriddeid.batch import BatchResult, check_folders, run_batch
from hybriddeid.document import Document
from hybriddeid.io import InputError, atomic_write_text, detect_format, output_path, read_document, write_documents
from hybriddeid.io._common import is_safe_name
from hybriddeid.profiles import check_phi_set, filter_document
from hybriddeid.surrogates.audit import read_audit, render_audit, render_mapping, summarize
from hybriddeid.surrogates.deid import DeidOptions, apply_replacements, deidentify_patient
from hybriddeid.surrogates.keys import Keyed

AUDIT_DIR = "audit"
MANIFEST_FILE = "run.json"
SUMMARY_FILE = "summary.json"


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
    def from_file(cls, path: Path) -> "PatientMap":
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


def audit_path(out_dir: Path, name: str, audit_format: str) -> Path:
    return Path(out_dir) / AUDIT_DIR / f"{name}.{audit_format}"


@dataclass
class DeidProcessor:
    """De-identifies the notes of a folder; a ``BatchProcessor`` for ``run_batch``.

    ``model`` is a model folder or name whose predictions are replaced; None replaces the inputs'
    own annotations (gold or earlier predictions) instead. ``phi_set`` (``hybriddeid.profiles``)
    keeps only that set's spans: the model's predictions (default: the model's setting), or the
    inputs' annotations, read through the taxonomy that knows each note's labels (default: all).
    ``threshold`` is the model's P(O) threshold as ``Pipeline.predict`` takes it (None: the model's
    own config; 0: none).
    """

    options: DeidOptions
    patients: PatientMap = field(default_factory=PatientMap)
    model: str | None = "default"
    audit_format: str = "jsonl"
    mapping_dir: Path | None = None
    phi_set: str | None = None
    threshold: float | None = None
    _pipeline: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.phi_set is not None:
            check_phi_set(self.phi_set)

    def setup(self) -> None:
        if self.model is not None and self._pipeline is None:
            from hybriddeid.pipeline import Pipeline

            self._pipeline = Pipeline.load(self.model)

    def unit_key(self, path: Path, doc: Document) -> str:
        return self.patients.patient(path, doc)

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        """Done when the output equals the input with its audit applied (and the mapping exists if asked)."""
        audit, output = audit_path(out_dir, doc.name, self.audit_format), output_path(doc, out_dir, fmt)
        if not (audit.is_file() and output.is_file()):
            return False
        if self.mapping_dir is not None and not (Path(self.mapping_dir) / f"{doc.name}.jsonl").is_file():
            return False
        try:
            rows = read_audit(audit)
            outputs = [d for d in read_document(output, fmt) if d.name == doc.name]
            expected = apply_replacements(doc.text, rows)
        except (InputError, ValueError, OSError, KeyError, TypeError):
            return False
        return len(outputs) == 1 and outputs[0].text == expected

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        out_dir = Path(out_dir)
        by_patient: dict[str, list[Document]] = {}
        for doc in docs:
            if not is_safe_name(doc.name):
                raise InputError(Path(doc.meta.get("path", doc.name)), "note name cannot be used as a file name")
            if self._pipeline is not None:
                doc = self._pipeline.annotate(doc, phi_set=self.phi_set, threshold=self.threshold)
            elif self.phi_set is not None:
                doc = filter_document(doc, self.phi_set)
            by_patient.setdefault(self.unit_key(Path(doc.meta.get("path", "")), doc), []).append(doc)
        results = {}
        for patient, patient_docs in by_patient.items():
            for doc, result in zip(patient_docs, deidentify_patient(patient_docs, self.options, patient)):
                results[doc.name] = (doc, result)
        (out_dir / AUDIT_DIR).mkdir(parents=True, exist_ok=True)
        for doc, result in results.values():  # the audit (and mapping) first: an output without one is redone
            if self.mapping_dir is not None:
                atomic_write_text(Path(self.mapping_dir) / f"{doc.name}.jsonl", render_mapping(doc, result.replacements), mode=0o600)
            atomic_write_text(audit_path(out_dir, doc.name, self.audit_format),
                              render_audit(doc.name, result.replacements, self.audit_format))
        write_documents([results[doc.name][1].document for doc in docs], out_dir, fmt)

    def settings(self) -> dict[str, Any]:
        """What makes the output what it is (recorded in run.json; the key only as a fingerprint)."""
        options = self.options
        return {
            "mode": options.mode, "language": options.language, "scope": options.scope,
            "key_fingerprint": Keyed(options.key).fingerprint() if options.key else None,
            "date_shift_days": options.date_shift_days, "keep_years": options.keep_years,
            "cap_ages": options.cap_ages, "truncate_zips": options.truncate_zips,
            "tag_level": options.tag_level, "mask_char": options.mask_char,
            "spans": f"model {self.model}" if self.model is not None else "input annotations",
            "phi_set": self.phi_set,
            "phi_threshold": self.threshold,
            "patients": "map" if self.patients.mapping is not None else ("pattern" if self.patients.pattern else "note"),
            "audit_format": self.audit_format,
            "mapping_file": self.mapping_dir is not None,
        }


def check_out_dir(out_dir: Path, settings: Mapping[str, Any], overwrite: bool) -> None:
    """Refuse to mix outputs made with other settings (another key, mode...) in one folder."""
    manifest = Path(out_dir) / AUDIT_DIR / MANIFEST_FILE
    if manifest.is_file() and not overwrite:
        try:
            previous = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            previous = {}
        changed = sorted(name for name in settings if previous.get(name) != settings[name])
        if changed:
            raise InputError(out_dir, f"holds output made with other settings ({', '.join(changed)}); "
                                      "use another output folder or --overwrite")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(manifest, json.dumps(dict(settings), indent=2) + "\n")


def run_deid(in_dir: Path, out_dir: Path, processor: DeidProcessor, in_format: str = "auto",
             overwrite: bool = False, progress: bool = True, jobs: int = 1) -> tuple[BatchResult, dict[str, Any]]:
    """De-identify a folder; returns the batch result and the summary (also written to audit/summary.json)."""
    check_folders(in_dir, out_dir)
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if processor.model is None and (detect_format(in_dir) if in_format == "auto" else in_format) == "text":
        raise InputError(in_dir, "plain .txt notes have no annotations to replace; leave out --use-annotations "
                                 "to find PHI with a model")
    if processor.mapping_dir is not None:
        mapping_dir = Path(processor.mapping_dir)
        if mapping_dir.resolve().is_relative_to(out_dir.resolve()):
            raise InputError(mapping_dir, "holds original PHI values; it must not lie inside the output folder")
        mapping_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_out_dir(out_dir, processor.settings(), overwrite)
    result = run_batch(in_dir, out_dir, processor, in_format=in_format, overwrite=overwrite, progress=progress, jobs=jobs)
    audits = sorted((out_dir / AUDIT_DIR).glob(f"*.{processor.audit_format}"))
    summary = {"files": {"written": len(result.written), "skipped": len(result.skipped), "failed": len(result.failed)},
               **summarize(read_audit(path) for path in audits)}
    atomic_write_text(out_dir / AUDIT_DIR / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return result, summary
