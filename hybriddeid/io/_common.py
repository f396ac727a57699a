"""Pieces every reader and writer shares: the error type, safe file loading, span checks, atomic writes.

Error messages name the file, line numbers, span ids and offsets, never note or span text: they end up
in logs that are not cleared for PHI.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import logging
import os
import re
import stat
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from hybriddeid.core.document import Document, Span

DEFAULT_MAX_BYTES = 20_000_000
# A process-wide per-file limit in megabytes (10**6 bytes) for readers not told one: the CLI's
# --max-file-mb sets it, and worker processes inherit it.
MAX_FILE_MB_ENV = "HYBRIDDEID_MAX_FILE_MB"
LOG = logging.getLogger("hybriddeid.io")

# Keys the readers set to say where a document came from; they describe one reading, not the document.
# "fhir" and "fhir_output": a FHIR document's resource and what writing it back needs (hybriddeid.io.fhir).
PROVENANCE_KEYS = ("path", "format", "file", "line", "fhir", "fhir_output")

_SAFE_ID = re.compile(r"[\w.:-]{1,40}")
_UNUSABLE_IN_NAMES = re.compile(r"[\x00-\x1f\x7f/\\]")  # separators and control characters
_UNDECODED_BYTE = re.compile("[\udc80-\udcff]")  # a byte of a file name that is not UTF-8 (surrogateescape)
NAME_MAX_BYTES = 255  # a file name's limit on Linux, macOS and Windows file systems
_CONTROL_NAMES = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}
_WHITESPACE = re.compile(r"\s+")
_ENCODING_NAMES = {"utf-8": "UTF-8"}
_TEMP_FILE = re.compile(r"\..+\.[0-9a-f]{12}\.tmp")  # what atomic_write_text names its temporary files


class InputError(ValueError):
    """A file that cannot be read as asked. ``str()`` is ``"{path}: {problem}"`` and holds no PHI."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{shown_path(self.path)}: {problem}")

    def __reduce__(self):  # picklable, so errors can cross process boundaries in batch runs
        return type(self), (self.path, self.problem)


def read_text(
    path: Path, max_bytes: int = DEFAULT_MAX_BYTES, allow_empty: bool = False, encoding: str = "utf-8"
) -> str:
    """The file decoded as strict ``encoding`` (default UTF-8), after the checks every format needs.

    A UTF-8 byte-order mark is kept as ``"\\ufeff"`` at index 0: annotation offsets count it (MEDDOCAN's
    BRAT and XML files both do), so dropping it would shift every span. Formats whose offsets do not
    point into the raw file (XML, JSONL) strip it themselves. Only a regular file is read: a folder, a
    FIFO or a device is refused without blocking on it (``read_regular_file``).
    """
    if max_bytes == DEFAULT_MAX_BYTES:  # no caller chose a limit: the process-wide one, if set
        max_bytes = configured_max_bytes()
    data = read_regular_file(path, max_bytes)
    if not data and not allow_empty:
        raise InputError(path, "file is empty")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(path, "file is UTF-16 (byte-order mark); convert it to UTF-8")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InputError(path, f"binary file (NUL byte at byte offset {nul})")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        hint = "; name its encoding with --encoding (e.g. cp1252)" if encoding == "utf-8" else ""
        raise InputError(
            path, f"not valid {_ENCODING_NAMES.get(encoding, encoding)} (byte offset {exc.start}){hint}"
        ) from None


def read_regular_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes``; else an ``InputError``.

    The file is opened non-blocking and checked through its descriptor, so a FIFO (which would block
    ``open`` until a writer comes) or a device is refused, and a file swapped between listing and
    reading is judged by what is actually opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror or type(exc).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, f"is {_file_kind(info.st_mode)}, not a regular file")
        if info.st_size > max_bytes:
            raise InputError(path, f"file is {info.st_size} bytes, over the limit of {max_bytes}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(path, f"cannot read file ({exc.strerror or type(exc).__name__})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:  # it grew after fstat
        raise InputError(path, f"file is over the limit of {max_bytes} bytes")
    return data


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a file"


def check_encoding(name: str) -> str:
    """``name`` as Python's codec calls it, or a ValueError unless it is a text encoding (``--encoding``).

    Decoders that would not keep offsets meaningful (UTF-16/32: read them as converted UTF-8) are refused."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        raise ValueError(f"unknown encoding {name!r}") from None
    if not getattr(info, "_is_text_encoding", True) or info.name.startswith(("utf-16", "utf-32")):
        raise ValueError(f"encoding {name!r} cannot be used for notes; convert them to UTF-8")
    return info.name


def configured_max_bytes() -> int:
    """The per-file limit readers apply by default: ``HYBRIDDEID_MAX_FILE_MB`` megabytes if set,
    else ``DEFAULT_MAX_BYTES`` (20 MB)."""
    value = os.environ.get(MAX_FILE_MB_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_BYTES
    try:
        megabytes = float(value)
    except ValueError:
        raise ValueError(f"{MAX_FILE_MB_ENV} must be a number of megabytes, not {value!r}") from None
    if not megabytes > 0:
        raise ValueError(f"{MAX_FILE_MB_ENV} must be above 0")
    return int(megabytes * 1_000_000)


def safe_id(raw: object, index: int) -> str:
    """An annotation id fit for an error message: the file's own id when it looks like one, else ``#index``."""
    return raw if isinstance(raw, str) and _SAFE_ID.fullmatch(raw) else f"#{index}"


def shown_path(path: Path | str) -> str:
    """``path`` for a message: as it is, escaped (``ascii``) when it holds a control character, which
    would split or rewrite the log line, and with bytes that are not UTF-8 as ``\\xNN``."""
    text = str(path)
    return ascii(text) if _UNUSABLE_IN_NAMES.search(text.replace("/", "").replace("\\", "")) else record_name(text)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file stem inside an output folder, in words that show the offending
    character escaped (``ascii``); None when it can. Separators and control characters (a line break, a
    tab) cannot: they would split log lines and records. A name that is not UTF-8 can (records hold
    it as ``record_name`` writes it)."""
    if name in ("", ".", ".."):
        return f"{name!r} cannot be a file name"
    bad = _UNUSABLE_IN_NAMES.search(name)
    if bad is not None:
        char = bad.group()
        what = _CONTROL_NAMES.get(char, "a path separator" if char in "/\\" else f"the control character {ascii(char)}")
        return (
            f"the name holds {what} ({ascii(char)}) at position {bad.start()}, which output and audit "
            "file names cannot hold; rename the file"
        )
    return None


def record_name(name: str) -> str:
    """``name`` as a UTF-8 record (audit, mapping, JSONL) can hold it: a byte of a file name that is not
    UTF-8 (Python keeps it as a lone surrogate) is written ``\\xNN``."""
    if _UNDECODED_BYTE.search(name) is None:
        return name
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def is_safe_name(name: str) -> bool:
    """True when ``name`` can be a file stem inside an output folder (``name_problem`` finds nothing)."""
    return name_problem(name) is None


def fit_file_name(stem: str, suffix: str = "") -> str:
    """``stem + suffix``, or, when that passes the file system's 255-byte limit, the stem cut short and
    followed by ``~`` and a hash of the whole stem, so distinct long names stay distinct (the full name
    is recorded where the file's content names its note: the audit's ``note`` field)."""
    name = stem + suffix
    if len(os.fsencode(name)) <= NAME_MAX_BYTES:
        return name
    digest = "~" + hashlib.sha256(os.fsencode(stem)).hexdigest()[:16]
    room = NAME_MAX_BYTES - len(os.fsencode(digest + suffix))
    cut = stem
    while len(os.fsencode(cut)) > room:
        cut = cut[:-1]
    return cut + digest + suffix


def same_text(annotated: str, actual: str) -> bool:
    """Whether a span's recorded text matches the document slice.

    Runs of whitespace compare equal to one space: XML attribute normalisation turns line breaks into
    spaces, and BRAT lines cannot hold line breaks at all.
    """
    return annotated == actual or _WHITESPACE.sub(" ", annotated) == _WHITESPACE.sub(" ", actual)


def make_span(
    path: Path,
    sid: str,
    start: object,
    end: object,
    label: object,
    length: int,
    source: str = "gold",
    score: float = 1.0,
) -> Span:
    """A ``Span`` from raw file values checked against a text of ``length`` characters.

    Any problem is an ``InputError`` naming the span id and offsets.
    """
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
        raise InputError(path, f"span {sid}: offsets are not integers")
    if start >= end:
        raise InputError(path, f"span {sid} [{start}, {end}) is empty or reversed")
    if start < 0 or end > length:
        raise InputError(path, f"span {sid} [{start}, {end}) is out of range for a text of {length} characters")
    if not isinstance(label, str) or not label.strip() or label != label.strip():
        raise InputError(path, f"span {sid} [{start}, {end}): missing or malformed label")
    return Span(start, end, label, source, score)


def parse_offset(path: Path, sid: str, raw: object) -> int:
    """An offset written as decimal digits in a file (XML attribute, BRAT field)."""
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit():
        raise InputError(path, f"span {sid}: offsets are not non-negative integers")
    return int(raw)


def check_text(path: Path, sid: str, start: int, end: int, annotated: object, actual: str) -> None:
    """Raise when a span's recorded text (if the file has one) is not what its offsets select."""
    if annotated is not None and not (isinstance(annotated, str) and same_text(annotated, actual)):
        raise InputError(path, f"span {sid} [{start}, {end}): recorded text differs from the document text")


def resolve_overlaps(path: Path, spans: list[tuple[str, Span]]) -> list[tuple[str, Span]]:
    """Gold spans with overlaps resolved: of two overlapping spans the longer is kept (the earlier on a tie).

    BRAT and some corpora allow overlapping or nested annotations (ASQ-PHI marks "UCSF" inside the MRN
    "UCSF-12345"), but BIO tags, inline XML and token scoring need flat spans. Each dropped span is
    logged as a warning naming the file, the span ids and offsets (never the text), so it is not silent.
    """
    kept: list[tuple[str, Span]] = []  # flat, sorted: only the last one can reach the next span
    for sid, span in sorted(
        (item for item in spans if item[1].source == "gold"),
        key=lambda item: (item[1].start, item[1].start - item[1].end),
    ):
        if not kept or kept[-1][1].end <= span.start:
            kept.append((sid, span))
            continue
        previous = kept[-1]
        if len(span) > len(previous[1]):
            kept[-1] = (sid, span)
        LOG.warning(
            "%s: spans %s [%d, %d) and %s [%d, %d) overlap; kept %s, the longer",
            path,
            previous[0],
            previous[1].start,
            previous[1].end,
            sid,
            span.start,
            span.end,
            kept[-1][0],
        )
    winners = {id(span) for _, span in kept}
    return [(sid, span) for sid, span in spans if span.source != "gold" or id(span) in winners]


def make_document(
    path: Path, name: str, text: str, spans: list[tuple[str, Span]], meta: Mapping[str, object]
) -> Document:
    """The ``Document`` once overlapping gold spans have been resolved (``resolve_overlaps``)."""
    spans = resolve_overlaps(path, spans)
    return Document(name, text, tuple(span for _, span in spans), dict(meta))


def settings_digest(settings: Mapping[str, Any]) -> str:
    """A short digest of a run's settings, recorded beside each output so that a resumed run redoes outputs
    made with other settings even when the run's settings file was lost."""
    return hashlib.sha256(json.dumps(dict(settings), sort_keys=True).encode("utf-8")).hexdigest()[:16]


def changed_settings(previous: Mapping[str, Any], settings: Mapping[str, Any]) -> list[str]:
    """The names of ``settings`` whose values differ from ``previous``'s, sorted: a resumed run refuses
    to mix its outputs with those made under other settings."""
    return sorted(name for name in settings if previous.get(name) != settings[name])


def atomic_write_text(path: Path, text: str | Iterable[str], mode: int = 0o666) -> None:
    """Write ``text`` (a string, or strings written one after another: a long audit is never held
    whole) as UTF-8 to ``path`` so readers see the old file or the new one, never half of one
    (``atomic_write_bytes``). Newlines are written exactly as they are in ``text``."""
    atomic_write_bytes(
        path, text.encode("utf-8") if isinstance(text, str) else (part.encode("utf-8") for part in text), mode
    )


def atomic_write_bytes(path: Path, data: bytes | Iterable[bytes], mode: int = 0o666) -> None:
    """Write ``data`` (bytes, or byte strings written one after another) to ``path`` so readers see the
    old file or the new one, never half of one.

    The bytes go to a temporary file in the same folder (same file system), created owner-only (0600:
    a temporary file left by a killed run may hold PHI), flushed to disk, given ``mode`` (less the umask;
    e.g. 0o600 for files only their owner may read), then ``os.replace`` swaps it in.
    ``remove_temp_files`` clears what a killed run left. Inside ``staged_writes`` the flush to disk and
    the swap wait for ``commit_writes``.
    """
    path = Path(path)
    staged = _STAGED.get()
    tmp = path.with_name(fit_file_name(f".{path.name}", f".{uuid.uuid4().hex[:12]}.tmp"))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                handle.writelines(data)
            handle.flush()
            if mode & 0o777 != 0o600:
                os.fchmod(handle.fileno(), mode & ~_umask() & 0o777)
            if staged is None:
                os.fsync(handle.fileno())
        if staged is not None:
            staged.append((tmp, path))
            return
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# The writes ``atomic_write_bytes`` stages in this context (``staged_writes``), else None.
_STAGED: ContextVar[list[tuple[Path, Path]] | None] = ContextVar("staged_writes", default=None)


@contextlib.contextmanager
def staged_writes() -> Iterator[list[tuple[Path, Path]]]:
    """Within this block ``atomic_write_bytes`` (and so ``atomic_write_text``, ``write_documents``) writes
    each file's temporary copy only, and lists (temporary file, path) in the list this yields; nothing
    is in place until ``commit_writes`` of that list, which may run later, in another thread (batch
    workers commit a unit's outputs while they tag the next one). On an error in the block its
    temporary files are removed."""
    staged: list[tuple[Path, Path]] = []
    token = _STAGED.set(staged)
    try:
        yield staged
    except BaseException:
        discard_writes(staged)
        raise
    finally:
        _STAGED.reset(token)


def commit_writes(staged: Sequence[tuple[Path, Path]], flushed: bool = False) -> None:
    """Put writes staged by ``staged_writes`` in place, as ``atomic_write_bytes`` would have: every
    temporary file is flushed to disk (fsync; already done when ``flushed``, by ``flush_files``) before
    any is swapped in, so a name never points at bytes a power cut could lose. On an error the files not
    yet swapped in are removed."""
    try:
        if not flushed:
            for problem in flush_files([tmp for tmp, _ in staged]):
                if problem is not None:
                    raise problem
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        discard_writes(staged)
        raise


def flush_files(paths: Sequence[Path], pool: Executor | None = None) -> list[OSError | None]:
    """Flush each file to disk (fsync), several at once on ``pool``'s threads if given; each file's error
    or None. A file system commits flushes that wait together in one go: on a busy ext4 disk 100 small
    files took 14 ms on 8 threads, 270-370 ms one after another."""

    def flush(path: Path) -> OSError | None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            return exc
        return None

    if pool is not None and len(paths) > 1:
        return list(pool.map(flush, paths))
    return [flush(path) for path in paths]


def discard_writes(staged: Sequence[tuple[Path, Path]]) -> None:
    """Remove the temporary files of staged writes (those already swapped in are gone: nothing to do)."""
    for tmp, _ in staged:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process umask: read from /proc where it can be (setting it to read it races other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)  # briefly stricter, never looser
    os.umask(mask)
    return mask


def remove_temp_files(folder: Path) -> int:
    """Delete the temporary files ``atomic_write_text`` left in ``folder`` (a run killed mid-write);
    returns how many. Only regular files named as it names them are touched."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        if _TEMP_FILE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
            removed += 1
    return removed


def refuse_own_input(target: Path, doc: Document) -> None:
    """Raise when writing ``target`` would overwrite the file ``doc`` was read from."""
    source = doc.meta.get("path")
    if not source or not target.exists():
        return
    sources = [Path(source)]
    if doc.meta.get("format") == "brat":
        sources.append(Path(source).with_suffix(".ann"))
    for src in sources:
        if src.exists() and os.path.samefile(src, target):
            raise InputError(target, f"is the input of document {doc.name!r}; refusing to overwrite it")
