"""API keys of ``hybriddeid serve``: a JSON file of named keys, each stored as a salted hash only.

A key reads ``hdk_<id>_<secret>``: ``id`` (8 hex digits) finds its record, ``secret`` (32 random bytes,
URL-safe base64) is checked against ``HMAC-SHA256(salt, secret)``. Secrets carry 256 random bits, so a
fast hash suffices (a slow password hash guards guessable passwords, and would cost every request).
The key itself is printed once by ``keys add`` and never stored. ``revoke`` keeps the record, marked, so
that a revoked key gets 403 rather than 401. A running server rereads the file when it changes (checked
at most once a second), so adding or revoking a key needs no restart.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from hybriddeid.io import atomic_write_text
from hybriddeid.surrogates.keys import check_key_permissions

PREFIX = "hdk"
FORMAT = "hybriddeid-api-keys"
VERSION = 1
_KEY = re.compile(rf"^{PREFIX}_([0-9a-f]{{8}})_([A-Za-z0-9_-]{{43}})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyRecord:
    """One key as the file stores it: never the secret, only its salt and hash."""

    id: str
    name: str
    salt: str
    hash: str
    created: str
    revoked: str | None = None
    rate_limit: float | None = None  # requests a minute for this key (None: the server's --rate-limit)

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(_digest(bytes.fromhex(self.salt), secret), self.hash)


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode("ascii"), hashlib.sha256).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_name(name: str) -> str:
    """``name`` if usable as a key name (it is logged with each request), else a ValueError."""
    if not _NAME.match(name):
        raise ValueError(
            f"key name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def read_keys(path: Path) -> list[KeyRecord]:
    """The records of a keys file (none if it does not exist); a ValueError naming the file if unreadable,
    or if others may read or write it (``check_key_permissions``, as for the surrogate key file: whoever
    may write it may add a key of their own)."""
    path = Path(path)
    try:
        check_key_permissions(path)  # its ValueError says what is wrong and how to mend it
    except FileNotFoundError:
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{path}: cannot read the API keys file ({getattr(exc, 'strerror', None) or type(exc).__name__})"
        ) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or not isinstance(raw.get("keys"), list):
        raise ValueError(f"{path}: not a hybriddeid API keys file")
    try:
        return [KeyRecord(**record) for record in raw["keys"]]
    except TypeError:
        raise ValueError(f"{path}: a key record has missing or unknown fields") from None


def _write_keys(path: Path, records: list[KeyRecord]) -> None:
    body = {"format": FORMAT, "version": VERSION, "keys": [asdict(record) for record in records]}
    atomic_write_text(path, json.dumps(body, indent=2) + "\n", mode=0o600)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock file so that two ``keys`` commands never lose each other's change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def add_key(path: Path, name: str, rate_limit: float | None = None) -> tuple[KeyRecord, str]:
    """A new key named ``name`` stored (hashed) in ``path``: its record and the key, to be shown once.
    ``rate_limit``: its own requests a minute (None: the server's; 0: none)."""
    path = Path(path)
    check_name(name)
    if rate_limit is not None and rate_limit < 0:
        raise ValueError("--rate-limit must be 0 (none) or more")
    with _locked(path):
        records = read_keys(path)
        if any(record.name == name and record.revoked is None for record in records):
            raise ValueError(f"{path}: a key named {name!r} exists; revoke it first or choose another name")
        ids = {record.id for record in records}
        key_id = secrets.token_hex(4)
        while key_id in ids:
            key_id = secrets.token_hex(4)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        record = KeyRecord(key_id, name, salt.hex(), _digest(salt, secret), _now(), rate_limit=rate_limit)
        _write_keys(path, [*records, record])
    return record, f"{PREFIX}_{key_id}_{secret}"


def revoke_key(path: Path, name_or_id: str) -> list[KeyRecord]:
    """Revoke the live keys named ``name_or_id`` (or with that id); the revoked records, or a ValueError."""
    path = Path(path)
    with _locked(path):
        records = read_keys(path)
        hit = [r for r in records if r.revoked is None and name_or_id in (r.name, r.id)]
        if not hit:
            raise ValueError(f"{path}: no live key named {name_or_id!r}")
        when = _now()
        records = [KeyRecord(**{**asdict(r), "revoked": when}) if r in hit else r for r in records]
        _write_keys(path, records)
    return [KeyRecord(**{**asdict(r), "revoked": when}) for r in hit]


class KeyStore:
    """The keys a server accepts, reread from ``path`` when the file changes (checked at most every
    ``recheck`` seconds). ``check(token)`` -> (status, key record): 200, 401 (unknown) or 403 (revoked).
    A file that cannot be read, or that others may write, is refused at start (ValueError) and, once
    running, not reread: the keys read last stay in use, and the log says why once."""

    def __init__(self, path: Path, recheck: float = 1.0) -> None:
        self.path = Path(path)
        self.recheck = recheck
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._refused: tuple[int, ...] | None = None  # the stamp of a version refused (told once)
        self._checked = 0.0
        self._by_id: dict[str, KeyRecord] = {}
        self._refresh(force=True)

    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked < self.recheck:
            return
        with self._lock:
            self._checked = now
            try:
                st = self.path.stat()
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)  # a chmod too
            except FileNotFoundError:
                stamp = None
            if stamp == self._stamp and not force:
                return
            try:
                self._by_id = {record.id: record for record in read_keys(self.path)}
                self._stamp = stamp
            except ValueError as exc:
                if force:
                    raise
                # a half-edited file, or one others may write: keep the keys read last (reread next time)
                if stamp != self._refused:
                    self._refused = stamp
                    log.error("%s; the keys read before stay in use", exc)

    def check(self, token: str) -> tuple[int, KeyRecord | None]:
        self._refresh()
        match = _KEY.match(token)
        record = self._by_id.get(match.group(1)) if match else None
        if match is None or record is None or not record.matches(match.group(2)):
            return 401, None
        return (403 if record.revoked is not None else 200), record

    def __len__(self) -> int:
        return sum(record.revoked is None for record in self._by_id.values())
