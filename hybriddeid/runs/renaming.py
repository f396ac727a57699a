"""File names that may hold PHI: ``deid --rename``, and the warning when names are copied.

Exports are often named after their patient (``Ambrose_Vellacott_SSN123-45-6789.txt``). Without
renaming, ``deid`` copies each input's name to its output, its audit and every message about it.
With ``--rename hash`` (or ``hash-only``) a note is written, audited and told under
``Renamer.hashed(name)``: 20 hex digits of HMAC-SHA256 under the run's key, so the same name gets the
same hash in every run with that key (a resumed run finds its outputs) and nobody without the key can
test a guessed name against it. ``hash`` also records hashed name -> original name and file in an
owner-only file beside the key file (``names_file``), merged by every run; ``hash-only`` records
nothing, so the link back is gone for good.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from hybriddeid.core.document import Document
from hybriddeid.io import InputError, atomic_write_text
from hybriddeid.io._common import record_name
from hybriddeid.surrogates.keys import Keyed

RENAME_MODES = ("none", "hash", "hash-only")
HASH_CHARS = 20  # 80 bits: no two names of any real corpus meet
NAMES_SUFFIX = ".names.json"
NAMES_FORMAT = "hybriddeid-names"
NAMES_VERSION = 1
_PURPOSE = "hybriddeid file name"  # keeps these draws apart from the surrogates' under the same key
# Separators joining the words of a file name: spaces to the rules (hyphens and dots stay, dates,
# phone numbers and e-mail addresses hold them).
_NAME_SEPARATORS = re.compile(r"[_\s]+")


def names_file(key_file: Path) -> Path:
    """Where ``--rename hash`` keeps hashed name -> original name: beside the key, as secret as it."""
    key_file = Path(key_file)
    return key_file.with_name(key_file.name + NAMES_SUFFIX)


@dataclass(frozen=True)
class Renamer:
    """Names notes and files by a keyed hash of their names (``deid --rename``). ``key_file``: the
    key's file, beside which the names are recorded, or None to record nothing (``hash-only``)."""

    key: bytes = field(repr=False)
    key_file: Path | None = None

    @property
    def mode(self) -> str:
        return "hash" if self.key_file is not None else "hash-only"

    def hashed(self, name: str) -> str:
        """``name`` (a note's name or a file's stem) as the run writes and tells it."""
        return Keyed(self.key).digest(_PURPOSE, name).hex()[:HASH_CHARS]

    def renamed(self, doc: Document) -> Document:
        """``doc`` under its hashed name, and its file's (``meta["file"]``, a file of several notes)."""
        meta = dict(doc.meta)
        if meta.get("file"):
            meta["file"] = self.hashed(str(meta["file"]))
        return replace(doc, name=self.hashed(doc.name), meta=meta)

    def record(self, folder: Path, files: Iterable[Path], notes: Mapping[str, Path]) -> None:
        """Merge into ``names_file`` every input file of ``folder`` (by its hashed stem) and every note
        (by its hashed name), each with its original name and its file's path relative to ``folder``;
        nothing with ``hash-only``. Written atomically and owner-only (0600) under a lock on the key
        file, so runs sharing the key add to it without losing each other's names."""
        if self.key_file is None:
            return
        target = names_file(self.key_file)
        entries: dict[str, tuple[str, str]] = {}
        for path in files:
            entries[self.hashed(path.stem)] = (path.stem, _relative(path, folder))
        for name, path in notes.items():
            entries[self.hashed(name)] = (name, _relative(path, folder))
        with _locked(self.key_file):
            _remove_stale_copies(target)
            names = self._read(target)
            for hashed, (name, where) in entries.items():
                entry = names.setdefault(hashed, {"name": record_name(name), "files": []})
                if record_name(where) not in entry["files"]:
                    entry["files"] = sorted([*entry["files"], record_name(where)])
            document = {
                "format": NAMES_FORMAT,
                "version": NAMES_VERSION,
                "key_fingerprint": Keyed(self.key).fingerprint(),
                "names": dict(sorted(names.items())),
            }
            try:
                atomic_write_text(target, json.dumps(document, indent=2, ensure_ascii=False) + "\n", mode=0o600)
            except OSError as exc:
                raise InputError(
                    target, f"cannot write the renamed files' names ({exc.strerror or type(exc).__name__})"
                ) from None

    def _read(self, target: Path) -> dict[str, dict]:
        """The names recorded so far (none if the file is new); an ``InputError`` if it is not such a
        file or was made with another key (its hashes would not be this run's)."""
        try:
            document = json.loads(target.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise InputError(
                target, "cannot be read as the renamed files' names; move it away to start a new one"
            ) from None
        if not (
            isinstance(document, dict)
            and document.get("format") == NAMES_FORMAT
            and isinstance(document.get("names"), dict)
        ):
            raise InputError(target, "is not a names file of hybriddeid; move it away to start a new one")
        if document.get("key_fingerprint") != Keyed(self.key).fingerprint():
            raise InputError(
                target, "records names hashed with another key; move it away, or use the key it was made with"
            )
        return document["names"]


def _remove_stale_copies(target: Path) -> None:
    """Delete the temporary copies of ``target`` that a run killed while writing it left (they hold
    original names); only ``atomic_write_text``'s names for this one file are touched."""
    stale = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{12}}\.tmp")
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        if stale.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)


def _relative(path: Path, folder: Path) -> str:
    return os.path.relpath(Path(path).absolute(), Path(folder).absolute())


@contextlib.contextmanager
def _locked(key_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on the key file (never written here, so its inode stays) for the block."""
    fd = os.open(key_file, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class _HashedPaths(logging.Filter):
    """Shows an input file given to a log call as a path argument by its hashed name: what the
    readers' warnings (overlapping gold spans, unreadable annotations) would otherwise print."""

    def __init__(self, renamer: Renamer, folder: Path) -> None:
        super().__init__()
        self.renamer = renamer
        self.folder = Path(folder).absolute()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, os.PathLike) for arg in record.args):
            record.args = tuple(self._shown(arg) for arg in record.args)
        return True

    def _shown(self, arg: object) -> object:
        if isinstance(arg, os.PathLike) and Path(arg).absolute().parent == self.folder:
            path = Path(arg)
            return self.renamer.hashed(path.stem) + path.suffix
        return arg


@contextlib.contextmanager
def hashed_in_logs(renamer: Renamer | None, folder: Path) -> Iterator[None]:
    """While the block runs (and in workers forked meanwhile), the readers' log lines name the input
    files of ``folder`` by their hashed names; nothing changes without a ``renamer``."""
    if renamer is None:
        yield
        return
    readers = logging.getLogger("hybriddeid.io")
    shown = _HashedPaths(renamer, folder)
    readers.addFilter(shown)
    try:
        yield
    finally:
        readers.removeFilter(shown)


def phi_like_names(stems: Iterable[str], language: str) -> int:
    """How many of ``stems`` (file names without extension) the language pack's PHI rules find
    something in, read with underscores as spaces: names that outputs, audits and messages copy
    unless ``deid --rename hash``."""
    from hybriddeid.classifiers.rules import RuleClassifier

    rules = RuleClassifier(language)
    return sum(bool(rules.predict(Document("file name", _NAME_SEPARATORS.sub(" ", stem)))) for stem in stems)
