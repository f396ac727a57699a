"""Batch runs over directories: one bad file never stops the others, outputs are written
atomically, inputs are never overwritten, and a rerun resumes by skipping finished outputs.

Work is done in *units*: the documents of one or more whole input files that must be processed
together (by default one file; de-identification groups a patient's files). The processor is set up
once (e.g. the model loaded) in this process, and units run in ``jobs`` worker processes forked from
it, so that a unit that crashes its worker (a segfault, ``os._exit``), runs out of its memory limit
or past its time limit (``Limits``) fails alone: its worker is replaced and the others go on. Only
file names, counts and error descriptions (which never quote note text) are reported.

Every input file is read once: planning reads it (units and what is done depend on its documents)
and the documents are kept for the units to run, up to ``HELD_CHARACTERS`` of note text; files
planned past that budget are read again when their unit runs, so a run over millions of notes
holds a bounded amount of text, at the price of a second read of those files only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import itertools
import json
import logging
import os
import queue
import resource
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol

from hybriddeid.classifiers.base import ComponentError
from hybriddeid.core.document import Document
from hybriddeid.io import (
    InputError,
    Inputs,
    commit_writes,
    discard_writes,
    flush_files,
    output_path,
    remove_temp_files,
    scan_inputs,
    scan_tree,
    staged_writes,
    write_documents,
)
from hybriddeid.io._common import shown_path
from hybriddeid.runs.processing import NoteSettings, load_model, process_notes

log = logging.getLogger(__name__)

Transform = Callable[[Document], Document]
HELD_CHARACTERS = 50_000_000  # note text kept from planning for the units (about 50-200 MB)
# A note takes well under a second (a 20 MB note about a minute); ten minutes means a runaway.
DEFAULT_TIMEOUT_PER_NOTE = 600.0
# A worker holds the model (about 100 MB for the bundled ones) and one unit's analysis; 4 GB of address
# space beyond what it inherited is ample for a 20 MB note and stops a runaway before it takes a shared
# machine's memory.
DEFAULT_MEMORY_MB = 4096
FLUSH_THREADS = 4  # a worker's threads that flush its staged outputs to disk together (io.flush_files)


@dataclass(frozen=True)
class Limits:
    """What one unit may cost its worker process: ``timeout_per_note`` seconds for each of its notes
    (wall clock, the parent kills the worker past it) and ``memory_mb`` of address space beyond the
    worker's size when it starts (``limit_memory``, set in the worker); None: no limit."""

    timeout_per_note: float | None = DEFAULT_TIMEOUT_PER_NOTE
    memory_mb: int | None = DEFAULT_MEMORY_MB

    def __post_init__(self) -> None:
        if self.timeout_per_note is not None and not self.timeout_per_note > 0:
            raise ValueError("the time limit per note must be a positive number of seconds")
        if self.memory_mb is not None and self.memory_mb < 64:
            raise ValueError("the memory limit must be at least 64 MB")


class SetupError(RuntimeError):
    """The processor could not be set up (e.g. the model failed to load): nothing can be done."""


class Interrupted(Exception):
    """The run was stopped by a signal (SIGINT, SIGTERM, SIGHUP): no new notes were started, the
    workers were ended and their temporary files removed. ``result`` holds what was done by then;
    ``exit_code`` is 128 + the signal's number, as shells report it (130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, signum: int, result: BatchResult | None = None) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum
        self.result = result

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (and SIGINT) into ``Interrupted`` in the main thread while the block runs,
    so that a run stopped by ``kill`` or a closed terminal ends its workers and writes its tally.
    Elsewhere than the main thread, signals are left as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- one run per output folder ---------------------------------------------------------------------
# A run holds an advisory lock (flock) on OUT_DIR/.hybriddeid.lock from before it touches anything in
# the folder until it ends. The kernel releases a flock when its holder dies, however it dies, so a
# lock file found unlocked is a dead run's: its record (pid, host, start) is told and the lock taken
# over. Workers inherit the locked file, so a folder stays locked while any process of the run lives.

LOCK_FILE = ".hybriddeid.lock"
_held_locks: set[Path] = set()  # folders this process holds (run_deid locks, then calls run_batch)


@contextlib.contextmanager
def output_lock(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s run lock for the block (made if missing); ``InputError`` if another live run
    holds it or a folder around or inside it (``_refuse_nested_runs``: told before anything is made),
    or the folder cannot be written. Reentrant within one process."""
    out_dir = Path(out_dir)
    if out_dir.resolve() not in _held_locks:
        _refuse_nested_runs(out_dir.resolve())  # a refused run leaves nothing behind, not even the folder
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(out_dir, f"cannot make this output folder ({exc.strerror or type(exc).__name__})") from None
    folder = out_dir.resolve()
    if folder in _held_locks:
        yield
        return
    lock_path = folder / LOCK_FILE
    fd = _take_lock(lock_path)
    try:  # again, holding its own lock: of two runs starting at once into nested folders, one sees the other
        _refuse_nested_runs(folder)
    except InputError:
        with contextlib.suppress(OSError):
            lock_path.unlink()
        os.close(fd)
        raise
    _held_locks.add(folder)
    try:
        yield
    finally:
        _held_locks.discard(folder)
        with contextlib.suppress(OSError):
            lock_path.unlink()  # while still locked: a waiting run then finds no stale record
        os.close(fd)


def _refuse_nested_runs(folder: Path) -> None:
    """``InputError`` when another live run writes into a folder around ``folder`` or inside it: its
    output (and its sweep of temporary files) would mix with this run's. Checked after this run took
    its own lock, so of two runs starting at once into nested folders at least one sees the other."""
    around = [parent for parent in folder.parents if parent not in _held_locks]
    for other in [*around, *_locked_inside(folder)]:
        holder = _live_holder(other / LOCK_FILE)
        if holder is not None:
            where = "holds" if folder in other.parents else "lies inside"
            raise InputError(
                folder,
                f"{where} the output folder {shown_path(other)} of another run ({holder}); "
                "wait for it to end or stop it, or use a folder outside it",
            )


def _locked_inside(folder: Path) -> Iterator[Path]:
    """The folders under ``folder`` (not following links) that hold a run's lock file, held or stale."""
    pending = [folder]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        path = Path(entry.path)
                        pending.append(path)
                        if path not in _held_locks and (path / LOCK_FILE).is_file():
                            yield path
        except OSError:  # a folder that cannot be listed holds no run of ours: it could not write there
            continue


def _live_holder(lock_path: Path) -> str | None:
    """Who holds ``lock_path``'s lock (``_lock_record``), or None when no live run does (no file, or a
    dead run's): probed with a shared lock, dropped at once (a run holds its own from its start to
    its end, so the probe only ever meets one that is taking its lock at that very instant)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return (_lock_record(fd) or "no record") if exc.errno in (errno.EWOULDBLOCK, errno.EACCES) else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _take_lock(lock_path: Path) -> int:
    """The open, flock-ed lock file with this run's record written in it."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise InputError(
                lock_path.parent, f"cannot write into this output folder ({exc.strerror or type(exc).__name__})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _lock_record(fd) or "no record"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise InputError(
                    lock_path.parent,
                    f"another run is writing into this folder ({holder}); "
                    "wait for it to end or stop it, or use another output folder",
                ) from None
            raise InputError(lock_path.parent, f"cannot lock this output folder ({exc.strerror})") from None
        try:  # the file may have been unlinked by the run that held it: lock the one on disk
            same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        stale = _lock_record(fd)
        if stale is not None:
            log.warning(
                "%s: taking over the lock of a run that ended without releasing it (%s)", lock_path.parent, stale
            )
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        except OSError as exc:  # a full disk: the flock itself holds, the record is only for people
            log.warning("%s: cannot write the run's lock record (%s)", lock_path.parent, exc.strerror)
        return fd


def _lock_record(fd: int) -> str | None:
    """Who holds (or held) a lock, in words, from the lock file's record; None when it holds none."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "null")
    except (OSError, ValueError):
        return "unreadable record"
    if not isinstance(record, dict):
        return None
    return f"pid {record.get('pid')} on host {record.get('host')}, started {record.get('started')}"


# -- workers never outlive their run ----------------------------------------------------------------

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """End this (worker) process when ``parent_pid`` dies, however it dies: Linux's parent-death signal
    (SIGKILL), and elsewhere, or should that fail, a thread that watches the parent's pid."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was set
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class NoteSource(Protocol):
    """What ``run_batch`` reads besides a folder's ``Inputs``: a table or a database (``runs.tables``).
    Iterating gives ``(path, documents)`` per input *part* (or ``(path, InputError)``), each path a name
    for one part; ``read(path)`` gives a part's documents again; ``check_output(out_dir)`` raises an
    ``InputError`` when ``out_dir`` cannot take this source's outputs (``check_folders`` for folders)."""

    format: str

    def __iter__(self) -> Iterator[tuple[Path, list[Document] | InputError]]: ...

    def read(self, path: Path) -> list[Document]: ...

    def check_output(self, out_dir: Path) -> None: ...


class BatchProcessor(Protocol):
    """What ``run_batch`` does with the documents of a folder. A processor may set ``needs_spans =
    False`` when it replaces the inputs' spans: then a file whose annotations cannot be read is
    processed from its text, with a warning. Two methods are optional: ``shown_name(name) -> str``,
    how messages show a note's or file's name (``deid --rename``: its hash; default: as it is), and
    ``planned(inputs, notes)``, told once every input has been read and before any unit runs, with
    the name of each readable note and its file (``deid --rename`` records the hashed names then). A
    third, ``rejected() -> [(path, problem)]``, tells the parts of readable inputs that were left out
    (a FHIR resource that cannot be de-identified, while the rest of its file goes on): asked once
    every input has been read, each is counted and told as a failure. A processor whose every output is
    written by ``atomic_write_text`` (``write_documents``) may set ``defers_writes = True``: a worker then
    stages a unit's outputs (``io.staged_writes``) and puts them in place, each flushed to disk first, in
    a thread while it runs the next unit, so waiting on the disk overlaps the work."""

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
    defers_writes = True  # its outputs are all write_documents': a worker commits them while it runs the next unit

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
    engine: str | None = None  # how the CRFs tag ("fast", "crfsuite"); None: the model's config
    device: str | None = None  # where neural components run ("auto", "cpu", "cuda[:N]"); None: the model's config
    needs_spans = False  # the model's spans replace the inputs' own
    defers_writes = True  # its outputs are all write_documents': a worker commits them while it tags the next unit

    def setup(self) -> None:
        if self.pipeline is None:
            self.pipeline = load_model(self.model, self.engine, self.device)

    def unit_key(self, path: Path, doc: Document) -> str:
        return str(path)

    def is_done(self, doc: Document, out_dir: Path, fmt: str) -> bool:
        return output_path(doc, out_dir, self.out_format).exists()

    def annotated(self, docs: Sequence[Document]) -> list[Document]:
        """``docs`` with the model's spans, each note read on its own (``process_notes`` without a patient):
        what every ``annotate`` run writes, of a folder or a table (``runs.tables``)."""
        return [note.document for note in process_notes(self.pipeline, docs, self.settings)]

    def process(self, docs: Sequence[Document], out_dir: Path, fmt: str) -> None:
        write_documents(self.annotated(docs), out_dir, self.out_format)


@dataclass
class BatchResult:
    """What a batch run did, by input file."""

    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    problems: list[tuple[Path, str]] = field(default_factory=list)  # the run's own files (a summary not written)
    left_out: list[tuple[Path, str]] = field(default_factory=list)  # the input folder's entries not taken, with why

    @property
    def exit_code(self) -> int:
        """0: all done; 1: some inputs failed, or a file of the run's own could not be written; 2: nothing
        could be done."""
        if not (self.written or self.skipped):
            return 2
        return 1 if self.failed or self.problems else 0

    def summary(self) -> str:
        left = f", {len(self.left_out)} not taken (not notes of this run)" if self.left_out else ""
        return f"{len(self.written)} written, {len(self.skipped)} already done, {len(self.failed)} failed{left}"

    def add(self, other: BatchResult) -> None:
        """Count ``other`` (the run of another folder of one ``--recursive`` run) in this result."""
        self.written.extend(other.written)
        self.skipped.extend(other.skipped)
        for mine, theirs in (
            (self.failed, other.failed),
            (self.problems, other.problems),
            (self.left_out, other.left_out),
        ):
            mine.extend(theirs)

    def problem(self, path: Path, problem: str) -> None:
        """Record (and log) a problem with a file of the run itself, not with an input."""
        self.problems.append((path, problem))
        log.error("%s: %s", path, problem)


def describe_error(exc: BaseException) -> str:
    """A one-line description of a failure that never quotes note text.

    Messages of our own ``InputError`` and ``ComponentError`` are written to be safe; any other exception may carry PHI in
    its message (a ``KeyError`` of a name, a ``ValueError`` quoting a date), so only its type is told.
    """
    if isinstance(exc, InputError):
        return exc.problem
    if isinstance(exc, ComponentError):  # written to be shown (e.g. the neural tagger's device)
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError):
        return "out of memory (raise --memory-limit-mb if the note is legitimately large)"
    if isinstance(exc, OSError) and exc.strerror:  # file names and the system's words only
        return f"{type(exc).__name__}: {exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return type(exc).__name__


def check_folders(in_dir: Path, out_dir: Path) -> None:
    """Raise ``InputError`` unless ``in_dir`` is a folder and ``out_dir`` lies neither in it nor around it
    (outputs never go into the inputs, nor inputs among outputs): told once, before any work, and
    before anything is written (``output_lock`` then makes and locks ``out_dir``)."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    if not in_dir.exists():
        raise InputError(in_dir, "does not exist" + (" (or is a link to nothing)" if in_dir.is_symlink() else ""))
    if not in_dir.is_dir():
        raise InputError(
            in_dir,
            "is not a folder (a table file is read by its extension: .csv, .tsv, .parquet, "
            ".jsonl; a note file goes in a folder)",
        )
    inside, outside = in_dir.resolve(), out_dir.resolve()
    if outside == inside:
        raise InputError(out_dir, "output directory must differ from the input directory")
    if outside.is_relative_to(inside):
        raise InputError(
            out_dir,
            f"output directory lies inside the input directory {in_dir}; "
            "outputs are never written into the input folder",
        )
    if inside.is_relative_to(outside):
        raise InputError(out_dir, f"output directory holds the input directory {in_dir}; choose another one")


def check_writable(folder: Path) -> None:
    """Make ``folder`` if missing and prove a file can be created in it; else an ``InputError`` naming it."""
    probe = folder / f".write-check.{uuid.uuid4().hex[:12]}.tmp"  # named as remove_temp_files clears
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        raise InputError(
            folder, f"cannot write into this output folder ({exc.strerror or type(exc).__name__})"
        ) from None


def run_tree(
    in_dir: Path,
    out_dir: Path,
    run_folder: Callable[[Inputs, Path], BatchResult],
    in_format: str = "auto",
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
    spans: bool = True,
    reserved: str | None = None,
) -> BatchResult:
    """A ``--recursive`` run: ``run_folder(inputs, out)`` for ``in_dir`` and each folder below it
    (``scan_tree``: one format for the whole tree), ``out`` the same folder below ``out_dir``, all under
    ``out_dir``'s lock; one result for the tree. A folder named ``reserved`` (``deid``'s ``audit``)
    is not read, and is told as not taken: its output would be the run's own folder. A folder with no
    input is not run (no output folder is made for it); its other entries are counted all the same.
    Stopped by a signal, it raises ``Interrupted`` with what the whole tree had done."""
    check_folders(in_dir, out_dir)
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    total = BatchResult()
    with output_lock(out_dir), stop_on_signals():
        for inputs in scan_tree(in_dir, in_format, encoding=encoding, follow_symlinks=follow_symlinks, spans=spans):
            rel = inputs.folder.relative_to(in_dir)
            if reserved is not None and reserved in rel.parts:
                if rel.name == reserved:  # told once, for the folder itself
                    total.left_out.append(
                        (
                            inputs.folder,
                            f"a folder named {reserved!r}, whose output would be the "
                            "run's own folder of that name; rename it to have it read",
                        )
                    )
                    log.warning("%s: not taken: a folder named %r (the run's own folder of that name)", rel, reserved)
                continue
            if not inputs.paths:
                total.left_out.extend(inputs.left_out)
                for path, why in inputs.left_out:
                    log.warning("%s: not taken: %s", path.relative_to(in_dir), why)
                continue
            try:
                total.add(run_folder(inputs, out_dir / rel))
            except Interrupted as stop:
                if stop.result is not None:
                    total.add(stop.result)
                stop.result = total
                _sort(total)
                raise
    _sort(total)
    return total


def run_batch(
    in_dir: Path | Inputs | NoteSource,
    out_dir: Path,
    transform: Transform | BatchProcessor,
    out_format: str | None = None,
    in_format: str = "auto",
    overwrite: bool = False,
    progress: bool = True,
    jobs: int = 1,
    limits: Limits = Limits(),
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
    recursive: bool = False,
) -> BatchResult:
    """Process every document under ``in_dir`` and write the results to ``out_dir``.

    ``in_dir`` is a folder, or its ``Inputs`` (``hybriddeid.io.scan_inputs``; then ``in_format`` is
    theirs), or another ``NoteSource`` (a table's parts: ``hybriddeid.runs.tables``). ``transform`` is a document -> document function (written in ``out_format``) or a
    ``BatchProcessor``. Units whose outputs are all done are skipped unless ``overwrite``; errors
    are collected per input file and the run goes on. Units run in ``jobs`` worker processes under
    ``limits``; results do not depend on ``jobs``. ``encoding`` and ``follow_symlinks`` are how the
    folder is read (``scan_inputs``). Temporary files a killed run left in ``out_dir`` are removed
    first. A processor that cannot be set up raises ``SetupError``.

    The run holds ``out_dir``'s lock (``output_lock``: a second run into the folder is refused and
    changes nothing) and stops on SIGINT, SIGTERM and SIGHUP by raising ``Interrupted`` (no new unit
    started, workers ended, their temporary files removed, what was done in its ``result``).
    With ``recursive`` (``in_dir`` a folder), each folder below ``in_dir`` is run the same way into the
    same folder below ``out_dir`` (``run_tree``).
    """
    if recursive and isinstance(in_dir, (str, Path)):
        return run_tree(
            Path(in_dir),
            Path(out_dir),
            lambda inputs, out: run_batch(
                inputs, out, transform, out_format, overwrite=overwrite, progress=progress, jobs=jobs, limits=limits
            ),
            in_format,
            encoding,
            follow_symlinks,
            getattr(transform, "needs_spans", True),
        )
    if isinstance(in_dir, (str, Path, Inputs)):
        check_folders(in_dir.folder if isinstance(in_dir, Inputs) else in_dir, out_dir)
    else:
        in_dir.check_output(Path(out_dir))
    out_dir = Path(out_dir)
    if callable(transform):
        if out_format is None:
            raise ValueError("run_batch needs out_format with a transform function")
        processor: BatchProcessor = TransformProcessor(transform, out_format)
    else:
        processor = transform
    with output_lock(out_dir), stop_on_signals():
        check_writable(out_dir)
        inputs = (
            in_dir
            if not isinstance(in_dir, (str, Path))
            else scan_inputs(
                in_dir,
                in_format,
                encoding=encoding,
                follow_symlinks=follow_symlinks,
                spans=getattr(processor, "needs_spans", True),
            )
        )
        remove_temp_files(out_dir)
        result = BatchResult(left_out=list(getattr(inputs, "left_out", ())))
        root = getattr(inputs, "root", None)
        for path, why in result.left_out:  # never silently: each is named, and counted in the tally
            log.warning("%s: not taken: %s", shown_entry(processor, path, root), why)
        try:
            _run_all(inputs, out_dir, processor, overwrite, progress, jobs, limits, result)
        except Interrupted as stop:
            remove_temp_files(out_dir)  # what the killed workers were writing
            stop.result = result
            _sort(result)
            raise
    _sort(result)
    return result


def _sort(result: BatchResult) -> None:
    result.written.sort()
    result.skipped.sort()
    result.failed.sort()


def _run_all(
    inputs: Inputs | NoteSource,
    out_dir: Path,
    processor: BatchProcessor,
    overwrite: bool,
    progress: bool,
    jobs: int,
    limits: Limits,
    result: BatchResult,
) -> None:
    """Plan the units, skip the done ones, run the others; ``result`` gets each file as it ends."""
    fmt = inputs.format
    notes: dict[Path, int] = {}
    units, done, docs, names = _plan(inputs, out_dir, processor, overwrite, result, notes)
    for path, problem in getattr(processor, "rejected", list)():
        _fail(result, path, problem, processor)
    planned = getattr(processor, "planned", None)
    if planned is not None:
        planned(inputs, names)
    todo = []
    for unit in units:
        if all(done[path] for path in unit):
            result.skipped.extend(unit)
            for path in unit:
                docs.pop(path, None)
        else:
            todo.append(unit)
    if todo:
        try:
            processor.setup()
        except Exception as exc:  # noqa: BLE001 - told once, as a run that cannot start
            raise SetupError(f"cannot set up the run: {_setup_problem(exc)}") from None
    with _progress_bar(sum(len(unit) for unit in todo), progress) as bar:
        for unit, problem in _run_units(todo, processor, out_dir, fmt, docs, jobs, limits, notes, inputs):
            if problem is None:
                result.written.extend(unit)
            else:
                for path in unit:
                    _fail(result, path, problem, processor)
            bar.update(len(unit))


class _NoBar:
    def update(self, n: int) -> None:
        pass


@contextlib.contextmanager
def _progress_bar(total: int, shown: bool) -> Iterator[Any]:
    """A bar of ``total`` files when ``shown``, log records (errors) written above it, never onto its line;
    else one that shows nothing. tqdm is imported only for a bar (~25 ms of a run's start-up)."""
    if not shown:
        yield _NoBar()
        return
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(), tqdm(total=total, desc="files", unit="file", leave=False) as bar:
        yield bar


def _plan(
    inputs: Inputs | NoteSource,
    out_dir: Path,
    processor: BatchProcessor,
    overwrite: bool,
    result: BatchResult,
    notes: dict[Path, int],
) -> tuple[list[list[Path]], dict[Path, bool], dict[Path, list[Document] | Inputs | NoteSource], dict[str, Path]]:
    """Read every input once: the units to run (files joined by shared keys), which files are done,
    the documents of each file that can be processed (those read while the text kept stays within
    ``HELD_CHARACTERS``; the others are read again by their unit) and each note's file by its name.
    ``notes`` gets the number of notes in each file (for the time limits)."""
    keys: dict[Path, set[str]] = {}
    done: dict[Path, bool] = {}
    docs: dict[Path, list[Document] | Inputs | NoteSource] = {}
    held = 0
    names: dict[str, Path] = {}  # outputs and audits are named by note: one name, one note
    for path, items in inputs:
        if isinstance(items, InputError):
            _fail(
                result,
                items.path if items.path.parent == path.parent else path,
                items.problem,  # the file at fault
                processor,
            )
            continue
        taken = next((doc.name for doc in items if names.get(doc.name, path) != path), None)
        if taken is not None:
            _fail(
                result,
                path,
                f"note name {_shown_name(processor, taken)!r} is already used by {shown_file(processor, names[taken])}",
                processor,
            )
            continue
        names.update((doc.name, path) for doc in items)
        try:
            notes[path] = len(items)
            keys[path] = {processor.unit_key(path, doc) for doc in items}
            done[path] = not overwrite and all(processor.is_done(doc, out_dir, inputs.format) for doc in items)
            size = sum(len(doc.text) for doc in items)
            if held + size <= HELD_CHARACTERS:
                docs[path], held = items, held + size
            else:
                docs[path] = inputs  # read again when its unit runs
        except (InputError, ValueError, OSError) as exc:
            _fail(result, path, describe_error(exc), processor)
            keys.pop(path, None)
    return _join(keys), done, docs, names


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
# Units run in worker processes forked from this one (they inherit the set-up processor and the
# documents, nothing is pickled but the unit's paths and the answers). The parent sends a worker one
# unit at a time, (number, paths), and it answers over a pipe: ("log", logger, level, message) for its
# log records (shown above the progress bar by this process), ("done", number, problem or None,
# restart) when the unit is finished and, for a processor that ``defers_writes``, first ("staged",
# number, temporary files) once its outputs are written but not yet in place: the parent then sends the
# next unit while the worker's commit thread flushes those files to disk and swaps them in
# (``io.commit_writes``), and the unit counts as done only at its "done". A worker that dies, or runs
# past a unit's deadline (then it is killed), fails the unit it was running alone and is replaced by a
# fresh fork; the parent puts in place what the units it had staged left (``_put_in_place``), and a unit
# that left nothing (whether it went in place cannot be told) runs again, alone on its worker until it
# is in place (``_free_for``). A unit's rerun after a death another unit caused (the one running then,
# which fails) is not counted against it: only a death with no unit to blame (while the worker only
# committed) counts, and a unit runs again after one such only. So a healthy unit is never failed for
# another's death, and a unit that kills its worker runs at most three times.


@dataclass
class _Worker:
    process: Any
    conn: Connection
    unit: list[Path] | None = None
    number: int = -1  # the unit's number in the run
    deadline: float = float("inf")
    limit: float | None = None
    # staged units being put in place: number -> (unit, its (temporary file, output) pairs, deadline)
    committing: dict[int, tuple[list[Path], list[tuple[str, str]], float]] = field(default_factory=dict)
    culprit: bool = False  # it is replaced at the request of a unit it ran (out of memory), which fails

    def stop(self, kill: bool = False) -> None:
        if kill and self.process.is_alive():
            self.process.kill()
        elif self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)  # finish and exit
        self.process.join(None if kill else 5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class _PipeHandler(logging.Handler):
    """Sends a worker's log records to the parent, which shows them above its progress bar."""

    def __init__(self, send: Callable[[tuple], None]) -> None:
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log line must never fail a unit
            self.send(("log", record.name, record.levelno, record.getMessage()))


class _Committer:
    """A worker's thread that puts each staged unit's outputs in place (``commit_writes``: flushed to disk,
    then swapped in), in order, and tells the parent ("done"), while the worker runs the next unit."""

    def __init__(self, send: Callable[[tuple], None]) -> None:
        self._send = send
        self._pool: ThreadPoolExecutor | None = None  # flushes several files at once, made when first needed
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="output-commit", daemon=True)
        self._thread.start()

    def put(self, number: int, staged: list[tuple[Path, Path]]) -> None:
        self._queue.put((number, staged))

    def close(self) -> None:
        """Put every unit staged so far in place, then end the thread."""
        self._queue.put(None)
        self._thread.join()
        if self._pool is not None:
            self._pool.shutdown()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            group = [item]  # every unit staged meanwhile: their files are flushed together
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # ends the loop after this group
                    break
                group.append(item)
            files = [tmp for _, staged in group for tmp, _ in staged]
            if len(files) > 1 and self._pool is None:
                self._pool = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="flush")
            try:
                flushed = flush_files(files, self._pool)
            except RuntimeError:  # no thread could start (a tight address-space cap): one after another
                flushed = flush_files(files)
            problems = iter(flushed)
            for number, staged in group:
                errors = [next(problems) for _ in staged]
                problem = next((describe_error(exc) for exc in errors if exc is not None), None)
                try:
                    if problem is None:
                        commit_writes(staged, flushed=True)
                    else:
                        discard_writes(staged)
                except Exception as exc:  # noqa: BLE001 - told as the unit's failure
                    problem = describe_error(exc)
                with contextlib.suppress(OSError, ValueError):  # the parent is gone: nothing to tell
                    self._send(("done", number, problem, False))


def _worker_main(
    conn: Connection,
    processor: BatchProcessor,
    out_dir: Path,
    fmt: str,
    docs: dict[Path, list[Document] | Inputs | NoteSource],
    source: Inputs | NoteSource | None,
    memory_mb: int | None,
    parent_pid: int,
) -> None:
    """A worker: unit after unit from ``conn`` until None or the pipe closes; it ends with its parent.
    ``source`` reads a unit's files again when ``docs`` does not hold them (a unit run again)."""
    for sig in STOP_SIGNALS:  # stopping is the parent's to handle; it ends the workers
        signal.signal(sig, signal.SIG_IGN if sig != signal.SIGTERM else signal.SIG_DFL)
    die_with_parent(parent_pid)
    sending = threading.Lock()  # the commit thread answers too

    def send(message: tuple) -> None:
        with sending:
            conn.send(message)

    root = logging.getLogger()
    root.handlers = [_PipeHandler(send)]
    limit_memory(memory_mb)
    committer = _Committer(send) if getattr(processor, "defers_writes", False) else None
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            number, unit = message
            problem, restart, staged = _work(processor, out_dir, fmt, docs, source, unit, committer is not None)
            if staged is not None and committer is not None:
                send(("staged", number, [(str(tmp), str(path)) for tmp, path in staged]))
                committer.put(number, staged)
                continue
            if problem is not None and memory_mb is not None and restart:
                problem = f"worker exceeded the memory limit of {memory_mb} MB (--memory-limit-mb)"
            send(("done", number, problem, restart))
            if restart:
                break
    finally:
        if committer is not None:
            committer.close()
    conn.close()


def limit_memory(memory_mb: int | None) -> None:
    """Let this (worker) process's address space grow by at most ``memory_mb`` beyond its size now
    (``RLIMIT_AS``, never above the hard limit; None: no cap), so that a runaway note fails its own work
    instead of taking the machine's memory. Counted from the current size, the cap leaves out what the
    worker inherited: a CUDA build of torch reserves about 3.7 GB of address space at import (measured on
    an H200 machine), so an absolute 4 GB cap left a neural model's worker too little to start its threads."""
    if memory_mb is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = address_space() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))


def address_space() -> int:
    """This process's address-space size in bytes (``/proc/self/statm``); 0 where there is no /proc."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def _work(
    processor: BatchProcessor,
    out_dir: Path,
    fmt: str,
    docs: dict[Path, list[Document] | Inputs | NoteSource],
    source: Inputs | NoteSource | None,
    unit: list[Path],
    stage: bool,
) -> tuple[str | None, bool, list[tuple[Path, Path]] | None]:
    """Process one unit: (the problem as one safe line or None when it worked, whether the worker must
    be replaced: after a MemoryError its state cannot be trusted, and with ``stage`` the outputs staged
    for ``commit_writes`` when it worked)."""
    try:
        unit_docs: list[Document] = []
        for path in unit:
            held = docs.pop(path, None)
            if held is None:
                held = source
            assert held is not None, "a unit's notes come with it or from the run's source"
            unit_docs.extend(held if isinstance(held, list) else held.read(path))
        if not stage:
            processor.process(unit_docs, out_dir, fmt)
            return None, False, None
        with staged_writes() as staged:
            processor.process(unit_docs, out_dir, fmt)
    except MemoryError as exc:
        return describe_error(exc), True, None
    except Exception as exc:  # noqa: BLE001 - a bad unit must not stop the batch, nor leak text
        return describe_error(exc), False, None
    return None, False, staged


def describe_death(exitcode: int | None, memory_mb: int | None) -> str:
    """Why a worker ended without answering, from its exit status (``memory_mb``: its memory limit, for the hint)."""
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        hint = (
            "; the system may have run out of memory"
            if number == signal.SIGKILL
            else (
                f"; it may have hit the memory limit of {memory_mb} MB"
                if memory_mb is not None and number in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
                else ""
            )
        )
        return f"worker crashed ({name}, signal {number}){hint}"
    return f"worker exited (status {exitcode}) before finishing"


def _setup_problem(exc: BaseException) -> str:
    """A setup failure in words: model loading errors name files and settings, never note text."""
    if isinstance(exc, MemoryError):
        return "out of memory"
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _run_units(
    units: list[list[Path]],
    processor: BatchProcessor,
    out_dir: Path,
    fmt: str,
    docs: dict[Path, list[Document] | Inputs | NoteSource],
    jobs: int,
    limits: Limits,
    notes: dict[Path, int],
    source: Inputs | NoteSource | None = None,
) -> Iterator[tuple[list[Path], str | None]]:
    """(unit, problem or None) for every unit, in completion order, each run in a worker process.
    ``source`` reads a unit's files again for a unit run again (staged by a worker that then died)."""
    if not units:
        return
    context = get_context("fork")
    pending = list(reversed(units))
    workers: list[_Worker] = []
    size = max(1, min(jobs, len(units)))
    numbers = itertools.count()
    again: set[tuple[Path, ...]] = set()  # units run again once after a death no other unit caused
    alone: set[tuple[Path, ...]] = set()  # units run again: each with nothing beside it on its worker (_free_for)

    def start() -> _Worker:
        parent_end, child_end = context.Pipe()
        process = context.Process(
            target=_worker_main, args=(child_end, processor, out_dir, fmt, docs, source, limits.memory_mb, os.getpid())
        )
        process.start()
        child_end.close()
        return _Worker(process, parent_end)

    try:
        while pending or workers:
            while pending and len(workers) < size:
                workers.append(start())
            for worker in workers:
                if worker.unit is None and pending and _free_for(worker, pending[-1], alone):
                    unit = pending.pop()
                    worker.unit, worker.number = unit, next(numbers)
                    if limits.timeout_per_note is not None:
                        worker.limit = limits.timeout_per_note * sum(notes.get(path, 1) for path in unit)
                        worker.deadline = time.monotonic() + worker.limit
                    worker.conn.send((worker.number, unit))
                    for path in unit:  # the worker has them; later forks need not
                        docs.pop(path, None)
            busy = [worker for worker in workers if worker.unit is not None or worker.committing]
            if not busy:
                for worker in workers:
                    worker.stop()
                workers.clear()
                continue
            deadlines = [worker.deadline for worker in busy] + [
                deadline for worker in busy for _, _, deadline in worker.committing.values()
            ]
            timeout = max(0.0, min(deadlines) - time.monotonic())
            wait(
                [w.conn for w in busy] + [w.process.sentinel for w in busy],
                None if timeout == float("inf") else timeout,
            )
            for worker in busy:
                finished, why = _collect(worker, limits)
                yield from finished
                if why is None:
                    continue
                worker.stop(kill=True)  # gone before its files are touched here
                workers.remove(worker)
                # a unit it was running (or that asked for its end) caused it: that unit fails alone, and the
                # staged ones it held are innocent. Each such death fails a unit for good, so their reruns
                # are bounded without being counted; a death with no unit to blame counts once against each.
                blamed = worker.unit is not None or worker.culprit
                if worker.unit is not None:  # the unit it was running fails alone
                    yield worker.unit, why
                for unit, pairs, _ in worker.committing.values():  # staged: finished here
                    staged = [(Path(tmp), Path(path)) for tmp, path in pairs]
                    if why.startswith(_HUNG):  # the disk did not answer the worker: nor would it answer here
                        discard_writes(staged)
                        yield unit, why
                        continue
                    try:
                        placed = _put_in_place(staged)
                    except OSError as exc:
                        yield unit, describe_error(exc)
                        continue
                    if placed:
                        yield unit, None
                    elif source is None or (not blamed and tuple(unit) in again):
                        yield unit, why
                    else:  # nothing left to tell whether it was put in place: run it again
                        if not blamed:
                            again.add(tuple(unit))
                        alone.add(tuple(unit))
                        pending.append(unit)
                worker.unit, worker.deadline = None, float("inf")
                worker.committing.clear()
    finally:
        for worker in workers:
            worker.stop(kill=True)


_HUNG = "worker killed: its outputs were not in place"


def _free_for(worker: _Worker, unit: list[Path], alone: set[tuple[Path, ...]]) -> bool:
    """Whether the idle ``worker`` may take ``unit`` now: a unit run again (in ``alone``) goes to a worker with
    nothing in flight, and a worker putting one in place takes nothing more until it is: a death then has
    that unit alone to blame, so it cannot cost another unit, nor another unit's death cost it."""
    if any(tuple(staged) in alone for staged, _, _ in worker.committing.values()):
        return False
    return not worker.committing or tuple(unit) not in alone


def _put_in_place(staged: list[tuple[Path, Path]]) -> bool:
    """Finish putting a dead worker's staged unit in place: True when done (the temporary files it left
    flushed and swapped in here; those it swapped in itself were flushed first), False when it left none,
    so whether it put them in place or removed them cannot be told (the unit runs again). The worker wrote
    and closed every file before it told the unit staged: its death loses none of their bytes."""
    left = [(tmp, path) for tmp, path in staged if tmp.exists()]
    if not left:
        return False
    commit_writes(left)
    return True


def _collect(worker: _Worker, limits: Limits) -> tuple[list[tuple[list[Path], str | None]], str | None]:
    """The units the busy ``worker`` finished, (unit, problem), from its answers so far, and why it must be
    replaced (None while it works within its deadlines). Its log records are passed on meanwhile; a unit
    it staged moves to ``worker.committing``, freeing it for the next unit."""
    finished: list[tuple[list[Path], str | None]] = []
    dead = False
    # asked before its answers are read: a worker found dead then has said all it ever will, so an answer it
    # sent just before it died (a staged unit's "done") is read here, not lost to a check made after reading
    alive = worker.process.is_alive()
    try:
        while worker.conn.poll():
            message = worker.conn.recv()
            if message[0] == "log":
                logging.getLogger(message[1]).log(message[2], "%s", message[3])
            elif message[0] == "staged" and message[1] == worker.number and worker.unit is not None:
                deadline = float("inf") if worker.limit is None else time.monotonic() + worker.limit
                worker.committing[message[1]] = (worker.unit, message[2], deadline)
                worker.unit, worker.deadline = None, float("inf")
            elif message[0] == "done":
                _, number, problem, restart = message
                if number == worker.number and worker.unit is not None:
                    finished.append((worker.unit, problem))
                    worker.unit, worker.deadline = None, float("inf")
                elif number in worker.committing:
                    finished.append((worker.committing.pop(number)[0], problem))
                if restart:
                    worker.culprit = True
                    return finished, problem
    except (EOFError, OSError):
        dead = True  # the pipe closed with no answer: told below
    if dead or not alive:
        worker.process.join()
        return finished, describe_death(worker.process.exitcode, limits.memory_mb)
    now = time.monotonic()
    if worker.unit is not None and now >= worker.deadline:
        return finished, f"worker killed: timed out after {worker.limit:g} s (--timeout-per-note)"
    if any(now >= deadline for _, _, deadline in worker.committing.values()):
        return finished, f"{_HUNG} within {worker.limit:g} s (--timeout-per-note)"
    return finished, None


def _shown_name(processor: BatchProcessor, name: str) -> str:
    """A note's or file's name as the processor lets messages show it (``shown_name``; default: itself)."""
    shown = getattr(processor, "shown_name", None)
    return name if shown is None else shown(name)


def shown_file(processor: BatchProcessor, path: Path) -> str:
    """An input file's name for a message: its stem as the processor shows it, its extension kept."""
    return shown_path(_shown_name(processor, path.stem) + path.suffix)


def shown_entry(processor: BatchProcessor, path: Path, root: Path | None = None) -> str:
    """``shown_file``, after the folders that lead to it from ``root`` (a ``--recursive`` run's input)."""
    folder = path.parent.relative_to(root) if root is not None else Path(".")
    return shown_path((folder / _shown_name(processor, path.stem)).as_posix() + path.suffix)


def _fail(result: BatchResult, path: Path, problem: str, processor: BatchProcessor) -> None:
    result.failed.append((path, problem))
    log.error("%s: %s", shown_file(processor, path), problem)
