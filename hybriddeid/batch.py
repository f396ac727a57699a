"""Batch runs over directories: one bad file never stops the others, outputs are written
atomically, inputs are never overwritten, and a rerun resumes by skipping finished outputs.

Work is done in *units*: the documents of one or more whole input files that must be processed
together (by default one file; de-identification groups a patient's files). Units run in this
process or, with ``jobs > 1``, in worker processes that each set the processor up once (e.g. load
the model). Only file names, counts and error descriptions (which never quote note text) are
reported.

Every input file is read once: planning reads it (units and what is done depend on its documents)
and the documents are kept for the units to run, up to ``HELD_CHARACTERS`` of note text; files
planned past that budget are read again when their unit runs, so a run over millions of notes
holds a bounded amount of text, at the price of a second read of those files only.
"""
from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from tqdm import tqdm

from hybriddeid.document import Document
from hybriddeid.io import InputError, Inputs, output_path, scan_inputs, write_documents
from hybriddeid.processing import NoteSettings, load_model, process_notes

log = logging.getLogger(__name__)

Transform = Callable[[Document], Document]
HELD_CHARACTERS = 50_000_000  # note text kept from planning for the units (about 50-200 MB)


class BatchProcessor(Protocol):
    """What ``run_batch`` does with the documents of a folder."""

    def setup(self) -> None:
        """Prepare once per process before any ``process`` call (e.g. load a model)."""

    def unit_key(self, path: Path, doc: Document) -> str:
        """Documents sharing a key are processed in one unit, with all of their files."""

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        """Whether ``doc``'s output exists and is complete (a rerun skips it)."""

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        """Transform and write one unit; raise ``InputError``/``ValueError``/``OSError`` on failure."""


@dataclass
class TransformProcessor:
    """A document -> document function written in ``out_format``, one input file per unit."""

    transform: Transform
    out_format: str

    def setup(self) -> None:
        pass

    def unit_key(self, path: Path, doc: Document) -> str:
        return str(path)

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        return output_path(doc, out_dir, self.out_format).exists()

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        write_documents([self.transform(doc) for doc in docs], out_dir, self.out_format)


@dataclass
class AnnotateProcessor:
    """Writes each note with the model's PHI spans in ``out_format`` (``hybriddeid annotate``), one
    input file per unit. The model is loaded by ``setup``, once per process, unless ``pipeline`` is
    given (a model loaded already, e.g. to check a sweep file against it)."""

    model: str | Path
    out_format: str
    settings: NoteSettings = NoteSettings()
    pipeline: Any = field(default=None, repr=False)

    def setup(self) -> None:
        if self.pipeline is None:
            self.pipeline = load_model(self.model)

    def unit_key(self, path: Path, doc: Document) -> str:
        return str(path)

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        return output_path(doc, out_dir, self.out_format).exists()

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        write_documents([note.document for note in process_notes(self.pipeline, docs, self.settings)], out_dir,
                        self.out_format)


@dataclass
class BatchResult:
    """What a batch run did, by input file."""

    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: all done; 1: some inputs failed; 2: nothing could be done."""
        if self.failed and not (self.written or self.skipped):
            return 2
        if not (self.written or self.skipped or self.failed):
            return 2
        return 1 if self.failed else 0

    def summary(self) -> str:
        return f"{len(self.written)} written, {len(self.skipped)} already done, {len(self.failed)} failed"


def describe_error(exc: BaseException) -> str:
    """A one-line description of a failure that never quotes note text.

    Messages of our own ``InputError`` are written to be safe; any other exception may carry PHI in
    its message (a ``KeyError`` of a name, a ``ValueError`` quoting a date), so only its type is told.
    """
    if isinstance(exc, InputError):
        return exc.problem
    return type(exc).__name__


def check_folders(in_dir: Path, out_dir: Path) -> None:
    """Raise unless ``in_dir`` is a folder and ``out_dir`` is another one (outputs never go over inputs)."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if not in_dir.is_dir():
        raise InputError(in_dir, "is not a directory")
    if out_dir.resolve() == in_dir.resolve():
        raise InputError(out_dir, "output directory must differ from the input directory")


def run_batch(
    in_dir: Path | Inputs,
    out_dir: Path,
    transform: Transform | BatchProcessor,
    out_format: str | None = None,
    in_format: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    jobs: int = 1,
) -> BatchResult:
    """Process every document under ``in_dir`` and write the results to ``out_dir``.

    ``in_dir`` is a folder, or its ``Inputs`` (``hybriddeid.io.scan_inputs``; then ``in_format`` is
    theirs). ``transform`` is a document -> document function (written in ``out_format``) or a
    ``BatchProcessor``. Units whose outputs are all done are skipped unless ``overwrite``; errors
    are collected per input file and the run goes on. With ``jobs > 1`` units run in that many
    worker processes; results do not depend on ``jobs``.
    """
    check_folders(in_dir.folder if isinstance(in_dir, Inputs) else in_dir, out_dir)
    inputs = in_dir if isinstance(in_dir, Inputs) else scan_inputs(in_dir, in_format)
    out_dir = Path(out_dir)
    if callable(transform):
        if out_format is None:
            raise ValueError("run_batch needs out_format with a transform function")
        processor: BatchProcessor = TransformProcessor(transform, out_format)
    else:
        processor = transform
    fmt = inputs.format
    result = BatchResult()
    units, done, docs = _plan(inputs, out_dir, processor, overwrite, result)
    todo = []
    for unit in units:
        if all(done[path] for path in unit):
            result.skipped.extend(unit)
            for path in unit:
                docs.pop(path, None)
        else:
            todo.append(unit)
    bar = tqdm(total=sum(len(unit) for unit in todo), desc="files", unit="file", disable=not progress, leave=False)
    with bar:
        for unit, problem in _run_units(todo, processor, out_dir, fmt, docs, jobs):
            if problem is None:
                result.written.extend(unit)
            else:
                for path in unit:
                    _fail(result, path, problem)
            bar.update(len(unit))
    result.written.sort()
    result.skipped.sort()
    result.failed.sort()
    return result


def _plan(inputs: Inputs, out_dir: Path, processor: BatchProcessor, overwrite: bool, result: BatchResult,
          ) -> tuple[list[list[Path]], dict[Path, bool], dict[Path, list[Document]]]:
    """Read every input once: the units to run (files joined by shared keys), which files are done,
    and the documents of each file that can be processed (those read while the text kept stays
    within ``HELD_CHARACTERS``; the others are read again by their unit)."""
    keys: dict[Path, set[str]] = {}
    done: dict[Path, bool] = {}
    docs: dict[Path, list[Document] | Inputs] = {}
    held = 0
    for path, items in inputs:
        if isinstance(items, InputError):
            _fail(result, path, items.problem)
            continue
        try:
            keys[path] = {processor.unit_key(path, doc) for doc in items}
            done[path] = not overwrite and all(processor.is_done(doc, out_dir, inputs.format) for doc in items)
            size = sum(len(doc.text) for doc in items)
            if held + size <= HELD_CHARACTERS:
                docs[path], held = items, held + size
            else:
                docs[path] = inputs  # read again when its unit runs
        except (InputError, ValueError, OSError) as exc:
            _fail(result, path, describe_error(exc))
            keys.pop(path, None)
    return _join(keys), done, docs


def _join(keys: dict[Path, set[str]]) -> list[list[Path]]:
    """Files grouped so that files sharing any key are in one group (union-find), in sorted order."""
    parent: dict[Path, Path] = {path: path for path in keys}

    def root(path: Path) -> Path:
        while parent[path] != path:
            parent[path] = parent[parent[path]]
            path = parent[path]
        return path

    first_with: dict[str, Path] = {}
    for path in sorted(keys):
        for key in sorted(keys[path]):
            if key in first_with:
                parent[root(path)] = root(first_with[key])
            else:
                first_with[key] = path
    groups: dict[Path, list[Path]] = {}
    for path in sorted(keys):
        groups.setdefault(root(path), []).append(path)
    return sorted(groups.values())


# -- running units ---------------------------------------------------------------------------------
_worker: tuple[BatchProcessor, Path, str, dict[Path, list[Document] | Inputs]] | None = None


def _init_worker(processor: BatchProcessor, out_dir: Path, fmt: str, docs: dict[Path, list[Document] | Inputs]) -> None:
    global _worker
    processor.setup()
    _worker = (processor, out_dir, fmt, docs)


def _work(unit: list[Path]) -> str | None:
    """Process one unit in this process; the problem as one safe line, or None when it worked."""
    processor, out_dir, fmt, docs = _worker
    try:
        unit_docs = []
        for path in unit:
            held = docs.pop(path)
            unit_docs.extend(held.read(path) if isinstance(held, Inputs) else held)
        processor.process(unit_docs, out_dir, fmt)
    except Exception as exc:  # noqa: BLE001 - a bad unit must not stop the batch, nor leak text
        return describe_error(exc)
    return None


def _run_units(units: list[list[Path]], processor: BatchProcessor, out_dir: Path, fmt: str,
               docs: dict[Path, list[Document] | Inputs], jobs: int) -> Iterator[tuple[list[Path], str | None]]:
    """(unit, problem or None) for every unit, in completion order; ``docs`` holds each file's documents."""
    if not units:
        return
    global _worker
    if jobs <= 1 or len(units) == 1:
        _init_worker(processor, out_dir, fmt, docs)
        try:
            for unit in units:
                yield unit, _work(unit)
        finally:
            _worker = None  # let the processor (and its model) go
        return
    # fork: workers inherit the processor and the documents without pickling; each sets the processor
    # up once (loads the model, unless this process had it loaded already)
    with ProcessPoolExecutor(max_workers=min(jobs, len(units)), mp_context=get_context("fork"),
                             initializer=_init_worker, initargs=(processor, out_dir, fmt, docs)) as pool:
        futures = {pool.submit(_work, unit): unit for unit in units}
        for future in as_completed(futures):
            try:
                problem = future.result()
            except Exception as exc:  # noqa: BLE001 - e.g. a worker killed by the OS
                problem = describe_error(exc)
            yield futures[future], problem


def _fail(result: BatchResult, path: Path, problem: str) -> None:
    result.failed.append((path, problem))
    log.error("%s: %s", path.name, problem)
