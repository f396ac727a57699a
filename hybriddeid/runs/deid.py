"""``hybriddeid deid`` over folders: patients, key, audit, resume, on top of ``batch.run_batch``; each note
is processed by ``processing.process_notes``, as in every other run.

Layout of OUT_DIR: one de-identified output per input, with the input's name and format (BRAT and
i2b2 outputs carry the replaced spans at output offsets), and ``audit/`` holding one audit file per
note, ``run.json`` (the settings, with a fingerprint of the key, never the key) and ``summary.json``.

Consistency does not depend on workers: every surrogate is drawn from the key and the value, and all
files of one patient go to one unit (one worker), so initials link to names across a patient's notes.
A note counts as done when its output equals its input with its audit's replacements applied, so an
interrupted run (outputs are written only after their audit) or a changed input is redone.

With a ``Renamer`` (``--rename hash``), every name above (outputs, audits and their ``note`` field,
mapping files) and every message is the note's or file's keyed hash (``hybriddeid.runs.renaming``); the
originals serve only to group a patient's notes. Without one, a run whose file names look like PHI
says so once.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from hybriddeid.core.document import Document
from hybriddeid.core.profiles import check_phi_set
from hybriddeid.io import (
    InputError,
    Inputs,
    atomic_write_text,
    output_path,
    read_document,
    remove_temp_files,
    scan_inputs,
    write_documents,
)
from hybriddeid.io._common import changed_settings, fit_file_name, name_problem, settings_digest
from hybriddeid.runs.batch import (
    BatchResult,
    Interrupted,
    Limits,
    check_folders,
    check_writable,
    output_lock,
    run_batch,
    run_tree,
    shown_entry,
    stop_on_signals,
)
from hybriddeid.runs.processing import NoteSettings, ProcessedNote, load_model, process_notes
from hybriddeid.runs.renaming import Renamer, hashed_in_logs, phi_like_names
from hybriddeid.surrogates.audit import audit_counts, audit_lines, audit_rows, read_audit_run, render_mapping, summarize
from hybriddeid.surrogates.deid import DATE_OFFSET_RULE, DeidOptions, DeidResult, matches_replacements
from hybriddeid.surrogates.keys import Keyed
from hybriddeid.surrogates.patients import PatientMap

log = logging.getLogger(__name__)

AUDIT_DIR = "audit"
MANIFEST_FILE = "run.json"
SUMMARY_FILE = "summary.json"


def audit_path(out_dir: Path, name: str, audit_format: str) -> Path:
    """Where the audit of note ``name`` goes (a name too long for the file system is shortened with a hash)."""
    return Path(out_dir) / AUDIT_DIR / fit_file_name(name, f".{audit_format}")


def mapping_path(mapping_dir: Path, name: str) -> Path:
    """Where the original -> replacement file of note ``name`` goes."""
    return Path(mapping_dir) / fit_file_name(name, ".jsonl")


@dataclass
class DeidProcessor:
    """De-identifies the notes of a folder; a ``BatchProcessor`` for ``run_batch``.

    ``model`` is a model folder or name whose predictions are replaced; None replaces the inputs'
    own annotations (gold or earlier predictions) instead. ``phi_set`` (``hybriddeid.core.profiles``)
    keeps only that set's spans: the model's predictions (default: the model's setting), or the
    inputs' annotations, read through the taxonomy that knows each note's labels (default: all).
    ``threshold`` is the model's P(O) threshold as ``Pipeline.predict`` takes it (None: the model's
    own config; 0: none). ``pipeline``: a model loaded already (else ``setup`` loads ``model``, once
    per process). ``renamer``: write and tell every note under its hashed name (``--rename``).
    """

    options: DeidOptions
    patients: PatientMap = field(default_factory=PatientMap)
    model: str | None = "default"
    audit_format: str = "jsonl"
    mapping_dir: Path | None = None
    phi_set: str | None = None
    threshold: float | None = None
    pipeline: Any = field(default=None, repr=False)
    engine: str | None = None  # how the model's CRFs tag ("fast", "crfsuite"); None: its config
    device: str | None = None  # where its neural components run ("auto", "cpu", "cuda[:N]"); None: its config
    renamer: Renamer | None = None
    # a --recursive run's folder below its input ("" at the top): by default a note's patient is its
    # name there, so that notes of one name in two folders are not taken for one patient
    folder_scope: str = ""
    # the note texts of the output file last read by ``output_text``, with its (mtime, size)
    _outputs: dict[Path, tuple[tuple[int, int], dict[str, str | None]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # every file ``process`` writes is atomic_write_text's (mapping, audit, then outputs, put in place in
    # that order): a worker flushes them in a thread while it de-identifies the next patient (batch.py)
    defers_writes = True

    def __post_init__(self) -> None:
        if self.phi_set is not None:
            check_phi_set(self.phi_set)

    @property
    def note_settings(self) -> NoteSettings:
        """What ``process_notes`` does to each note."""
        return NoteSettings(self.phi_set, self.threshold, self.options)

    @property
    def needs_spans(self) -> bool:
        """The inputs' annotations are what is replaced only without a model."""
        return self.model is None

    def setup(self) -> None:
        if self.model is not None and self.pipeline is None:
            self.pipeline = load_model(self.model, self.engine, self.device)

    def unit_key(self, path: Path, doc: Document) -> str:
        """The note's patient, found from its original name (patterns and maps are written for those)."""
        try:
            patient = self.patients.patient(path, doc)
            default = self.patients.mapping is None and self.patients.pattern is None
            return f"{self.folder_scope}/{patient}" if default and self.folder_scope else patient
        except InputError as exc:
            if self.renamer is None:
                raise
            # the patient map's messages quote the note's name (repr): told by its hash instead
            problem = exc.problem.replace(repr(doc.name), repr(self.renamer.hashed(doc.name)))
            raise InputError(exc.path, problem if doc.name not in problem else "note has no patient") from None

    def shown_name(self, name: str) -> str:
        """A note's or file's name as messages tell it: its hash when renaming."""
        return name if self.renamer is None else self.renamer.hashed(name)

    def planned(self, inputs: Inputs, notes: Mapping[str, Path]) -> None:
        """Record the hashed names of every input file and note (``--rename hash``) before any output
        is written under them, so that each output's original can always be looked up."""
        if self.renamer is not None:
            self.renamer.record(inputs.folder, inputs.paths, notes)

    def written(self, doc: Document) -> Document:
        """``doc`` under the name its output, audit and messages take."""
        return doc if self.renamer is None else self.renamer.renamed(doc)

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        """Done when the output equals the input with its audit applied (and the mapping exists if asked)."""
        written = self.written(doc)
        name = written.name
        audit, output = audit_path(out_dir, name, self.audit_format), output_path(written, out_dir, fmt)
        if not (audit.is_file() and output.is_file()):
            return False
        if self.mapping_dir is not None and not mapping_path(self.mapping_dir, name).is_file():
            return False
        try:
            if read_audit_run(audit) != self.run_record:  # made with another key or other settings
                return False
            written_text = self.output_text(output, fmt, name)
            return written_text is not None and self.output_matches(doc, written_text, audit)
        except (InputError, ValueError, OSError, KeyError, TypeError):
            return False

    def output_matches(self, doc: Document, written_text: str, audit: Path) -> bool:
        """Whether ``written_text`` is ``doc``'s text with ``audit``'s replacements applied (the audit read
        row by row and checked as it comes: a 20 MB note's is 200 MB of rows)."""
        return matches_replacements(doc.text, written_text, audit_rows(audit))

    def output_text(self, output: Path, fmt: str, name: str) -> str | None:
        """The text of note ``name`` in the output file ``output``; None unless it holds that note once.
        Each file is read once while it stays unchanged: a resume asks for every note of a file that
        holds many (JSON Lines, FHIR), which would otherwise read it once per note."""
        info = output.stat()
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._outputs.get(output)
        if cached is None or cached[0] != stamp:
            texts: dict[str, str | None] = {}
            for written in read_document(output, fmt):
                texts[written.name] = None if written.name in texts else written.text  # twice: not done
            cached = stamp, texts
            self._outputs = {output: cached}  # one file at a time: planning goes file by file
        return cached[1].get(name)

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        out_dir = Path(out_dir)
        written = [self.written(doc) for doc in docs]
        for doc, out in zip(docs, written):
            problem = name_problem(out.name)
            if problem is not None:
                raise InputError(Path(doc.meta.get("path", doc.name)), problem)
        results = self.deidentified(docs, written)
        (out_dir / AUDIT_DIR).mkdir(parents=True, exist_ok=True)
        for doc, result in results.values():  # the audit (and mapping) first: an output without one is redone
            if self.mapping_dir is not None:
                atomic_write_text(
                    mapping_path(self.mapping_dir, doc.name), render_mapping(doc, result.replacements), mode=0o600
                )
            atomic_write_text(
                audit_path(out_dir, doc.name, self.audit_format),
                audit_lines(
                    doc.name, result.replacements, self.audit_format, self.run_record, result.unread_characters
                ),
            )
        write_documents([results[out.name][1].document for out in written], out_dir, fmt)

    def deidentified(
        self,
        docs: Sequence[Document],
        written: Sequence[Document] | None = None,
        patient_of: Callable[[Document], str] | None = None,
    ) -> dict[str, tuple[Document, DeidResult]]:
        """Each note's spans and de-identified result, by its written name (``written``: the notes as they
        are written, default ``docs``): the notes grouped by patient (``patient_of`` each of ``docs``, the
        originals; default ``unit_key``), each patient's through ``process_patient`` together."""
        if patient_of is None:
            patient_of = lambda doc: self.unit_key(Path(doc.meta.get("path", "")), doc)  # noqa: E731
        by_patient: dict[str, list[Document]] = {}
        for doc, out in zip(docs, written or docs):  # patients by the original names; notes go on by their written ones
            by_patient.setdefault(patient_of(doc), []).append(out)
        results = {}
        settings, pipeline = self.note_settings, self.pipeline if self.model is not None else None
        for patient, patient_docs in by_patient.items():
            for note in self.process_patient(pipeline, patient_docs, settings, patient):
                assert note.deid is not None  # settings.deid is always set here
                results[note.document.name] = (note.document, note.deid)
        return results

    def process_patient(
        self, pipeline: Any, docs: Sequence[Document], settings: NoteSettings, patient: str
    ) -> list[ProcessedNote]:
        """One patient's notes found and de-identified together (``processing.process_notes``); a subclass
        may add to it (``runs.fhir``: a resource's own elements beside its notes)."""
        return process_notes(pipeline, docs, settings, patient)

    @cached_property
    def run_record(self) -> dict[str, str]:
        """What each audit records of the run that wrote it: the key's fingerprint and a digest of all
        settings, so that a resumed run redoes any output made with another key or other settings, even
        when ``run.json`` was lost (computed once; ``is_done`` asks for every note)."""
        settings = self.settings()
        return {"key_fingerprint": settings["key_fingerprint"] or "none", "settings": settings_digest(settings)}

    def settings(self) -> dict[str, Any]:
        """What makes the output what it is (recorded in run.json; the key only as a fingerprint)."""
        options = self.options
        key = options.key or (self.renamer.key if self.renamer is not None else None)
        renaming = {"rename": self.renamer.mode} if self.renamer is not None else {}  # absent: as before renaming
        return {
            "mode": options.mode,
            "language": options.language,
            "scope": options.scope,
            "key_fingerprint": Keyed(key).fingerprint() if key else None,
            "date_shift_days": options.date_shift_days,
            "keep_years": options.keep_years,
            **({"date_offsets": DATE_OFFSET_RULE} if options.mode == "surrogate" else {}),  # absent: the rule before
            "cap_ages": options.cap_ages,
            "truncate_zips": options.truncate_zips,
            "tag_level": options.tag_level,
            "mask_char": options.mask_char,
            **({"unsupported_script": options.unsupported_script} if options.unsupported_script != "keep" else {}),
            "spans": f"model {self.model}" if self.model is not None else "input annotations",
            "phi_set": self.phi_set,
            "phi_threshold": self.threshold,
            "patients": "map"
            if self.patients.mapping is not None
            else ("pattern" if self.patients.pattern else "note"),
            "audit_format": self.audit_format,
            "mapping_file": self.mapping_dir is not None,
            **renaming,
        }


def check_out_dir(out_dir: Path, settings: Mapping[str, Any], overwrite: bool, manifest: Path | None = None) -> None:
    """Refuse to mix outputs made with other settings (another key, mode...) in one folder, then record
    the settings in ``manifest`` (default ``audit/run.json``; an ``InputError`` naming the file when it
    cannot be written)."""
    manifest = manifest or Path(out_dir) / AUDIT_DIR / MANIFEST_FILE
    if manifest.is_file() and not overwrite:
        try:
            previous = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            previous = {}
        changed = changed_settings(previous, settings)
        if changed:
            raise InputError(
                out_dir,
                f"holds output made with other settings ({', '.join(changed)}); "
                "use another output folder or --overwrite",
            )
    try:
        manifest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(manifest, json.dumps(dict(settings), indent=2) + "\n")
    except OSError as exc:
        raise InputError(manifest, f"cannot write the run's settings ({exc.strerror or type(exc).__name__})") from None


def run_deid(
    in_dir: Path,
    out_dir: Path,
    processor: DeidProcessor,
    in_format: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    jobs: int = 1,
    limits: Limits = Limits(),
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
    recursive: bool = False,
) -> tuple[BatchResult, dict[str, Any]]:
    """De-identify a folder; returns the batch result and the summary (also written to audit/summary.json).

    ``jobs``, ``limits``, ``encoding`` and ``follow_symlinks`` are ``run_batch``'s. The folders are
    checked (and temporary files a killed run left removed) before any work, under the output folder's
    lock (and the mapping folder's), held for the whole run. A run stopped by a signal raises
    ``Interrupted`` after writing the summary of what it did; a summary that cannot be written is a
    problem of the result (exit 1 or 2), told with its cause. With ``processor.renamer`` the readers'
    messages name the inputs by their hashes too (``renaming.hashed_in_logs``); without it, file names
    that look like PHI are counted in a warning (``warn_of_phi_names``).

    With ``recursive``, every folder below ``in_dir`` is de-identified the same way into the same
    folder below ``out_dir`` (``batch.run_tree``), with its own ``audit/`` (and mapping folder below
    ``processor.mapping_dir``); a patient's notes are linked within a folder, and by default each
    note is its own patient under its folder and name. ``out_dir/audit/summary.json`` covers the tree."""
    if recursive:
        return _run_deid_tree(
            Path(in_dir),
            Path(out_dir),
            processor,
            in_format,
            overwrite,
            progress,
            jobs,
            limits,
            encoding,
            follow_symlinks,
        )
    return _run_deid_folder(
        in_dir, out_dir, processor, in_format, overwrite, progress, jobs, limits, encoding, follow_symlinks
    )


def _run_deid_tree(
    in_dir: Path,
    out_dir: Path,
    processor: DeidProcessor,
    in_format: str,
    overwrite: bool,
    progress: bool,
    jobs: int,
    limits: Limits,
    encoding: str,
    follow_symlinks: bool,
) -> tuple[BatchResult, dict[str, Any]]:
    """``run_deid`` with ``recursive``: each folder through ``_run_deid_folder``, its mapping folder and
    patients' scope set for it, and one summary of the tree."""
    if processor.renamer is not None:
        raise InputError(
            in_dir,
            "--recursive copies sub-folder names into the output, which --rename would "
            "hide: rename the folders, or run each folder on its own with --rename",
        )
    mapping_dir, scope = processor.mapping_dir, processor.folder_scope

    def run_folder(inputs: Inputs, out: Path) -> BatchResult:
        rel = inputs.folder.relative_to(in_dir)
        processor.mapping_dir = None if mapping_dir is None else Path(mapping_dir) / rel
        processor.folder_scope = "" if rel == Path(".") else rel.as_posix()
        return _run_deid_folder(
            inputs.folder,
            out,
            processor,
            in_format,
            overwrite,
            progress,
            jobs,
            limits,
            encoding,
            follow_symlinks,
            inputs,
        )[0]

    with output_lock(out_dir):
        try:
            result = run_tree(
                in_dir,
                out_dir,
                run_folder,
                in_format,
                encoding,
                follow_symlinks,
                processor.needs_spans,
                reserved=AUDIT_DIR,
            )
        except Interrupted as stop:
            if stop.result is not None:
                _write_summary(out_dir, processor, stop.result, in_dir, tree=True)
            raise
        finally:
            processor.mapping_dir, processor.folder_scope = mapping_dir, scope
        return result, _write_summary(out_dir, processor, result, in_dir, tree=True)


def _run_deid_folder(
    in_dir: Path,
    out_dir: Path,
    processor: DeidProcessor,
    in_format: str,
    overwrite: bool,
    progress: bool,
    jobs: int,
    limits: Limits,
    encoding: str,
    follow_symlinks: bool,
    scanned: Inputs | None = None,
) -> tuple[BatchResult, dict[str, Any]]:
    """``run_deid`` of one folder (``scanned``: its inputs, as a recursive run found them)."""
    check_folders(in_dir, out_dir)
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    with contextlib.ExitStack() as held:
        held.enter_context(output_lock(out_dir))
        held.enter_context(stop_on_signals())
        held.enter_context(hashed_in_logs(processor.renamer, in_dir))
        for folder in (out_dir, out_dir / AUDIT_DIR):
            check_writable(folder)
        # each file is read once, by run_batch
        inputs = scanned or scan_inputs(
            in_dir, in_format, encoding=encoding, follow_symlinks=follow_symlinks, spans=processor.needs_spans
        )
        if processor.model is None and inputs.format == "text":
            raise InputError(
                in_dir,
                "plain .txt notes have no annotations to replace; leave out --use-annotations to find PHI with a model",
            )
        if processor.renamer is None:
            warn_of_phi_names(inputs, processor.options.language)
        if processor.mapping_dir is not None:
            mapping_dir = Path(processor.mapping_dir)
            if mapping_dir.resolve().is_relative_to(out_dir.resolve()):
                raise InputError(mapping_dir, "holds original PHI values; it must not lie inside the output folder")
            if not mapping_dir.exists():
                mapping_dir.mkdir(mode=0o700, parents=True)
            held.enter_context(output_lock(mapping_dir))
            check_writable(mapping_dir)
            remove_temp_files(mapping_dir)
        remove_temp_files(out_dir / AUDIT_DIR)
        check_out_dir(out_dir, processor.settings(), overwrite)
        try:
            result = run_batch(
                inputs, out_dir, processor, overwrite=overwrite, progress=progress, jobs=jobs, limits=limits
            )
        except Interrupted as stop:
            for left in (out_dir / AUDIT_DIR, processor.mapping_dir):
                if left is not None:
                    remove_temp_files(Path(left))
            if stop.result is not None:
                _write_summary(out_dir, processor, stop.result, in_dir)
            raise
        return result, _write_summary(out_dir, processor, result, in_dir)


def warn_of_phi_names(inputs: Inputs, language: str) -> int:
    """Warn once, by count and never by name, when input file names look like PHI to ``language``'s rules
    (``renaming.phi_like_names``): without ``--rename`` they reach outputs, audits and messages. Returns
    the count."""
    found = phi_like_names((path.stem for path in inputs.paths), language)
    if found:
        log.warning(
            "%d of %d input file names look like they hold PHI (the %s PHI rules find some in them); "
            "outputs, audits and messages copy file names as they are: --rename hash writes and tells "
            "them under a keyed hash instead",
            found,
            len(inputs.paths),
            language,
        )
    return found


def _write_summary(
    out_dir: Path, processor: DeidProcessor, result: BatchResult, in_dir: Path, tree: bool = False
) -> dict[str, Any]:
    """The run's summary (files done, replacements by label and kind, the entries of ``in_dir`` not
    taken), written to audit/summary.json; with ``tree``, of every ``audit/`` below ``out_dir`` too."""
    pattern = f"*.{processor.audit_format}"
    audits = sorted(out_dir.glob(f"**/{AUDIT_DIR}/{pattern}") if tree else (out_dir / AUDIT_DIR).glob(pattern))
    counts, unread = [], []
    for path in audits:
        try:
            note_counts, note_unread = audit_counts(path)  # rows read one at a time, counted, let go
        except (OSError, ValueError):  # an audit left from an old run, unreadable: counted by its output
            continue
        counts.append(note_counts)
        unread.append(note_unread)
    files = {
        "written": len(result.written),
        "skipped": len(result.skipped),
        "failed": len(result.failed),
        "not_taken": len(result.left_out),
    }
    # each input entry the run did not take, by name (hashed with --rename) and why; never a note's text
    left_out = [{"file": shown_entry(processor, path, in_dir), "why": why} for path, why in result.left_out]
    summary = {
        "files": files,
        "not_taken": left_out,
        **summarize(counts),
        "unread_characters": sum(unread),
        "notes_with_unread_text": sum(map(bool, unread)),
    }
    if summary["unread_characters"]:
        kept = processor.options.unsupported_script == "keep"
        log.warning(
            "%d notes hold %d characters in scripts the %s models do not read (other alphabets, emoji): %s",
            summary["notes_with_unread_text"],
            summary["unread_characters"],
            processor.options.language,
            "kept as they are, PHI or not (--unsupported-script mask masks them)" if kept else "masked",
        )
    target = out_dir / AUDIT_DIR / SUMMARY_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # a tree whose top folder holds no note has none yet
        atomic_write_text(target, json.dumps(summary, indent=2) + "\n")
    except OSError as exc:
        result.problem(target, f"cannot write the summary ({exc.strerror or type(exc).__name__})")
    return summary
