"""The secret key that makes surrogates consistent and reproducible, and unguessable without it.

Every surrogate choice is drawn from HMAC-SHA256(key, scope | purpose | value): the same value in
the same scope (patient, or corpus) always gets the same surrogate, in any process and any order,
and without the key nobody can recompute or invert the mapping.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from pathlib import Path

from hybriddeid.io import atomic_write_text

KEY_BYTES = 32
MIN_KEY_BYTES = 16
_SEPARATOR = b"\x1f"
log = logging.getLogger(__name__)


def new_key() -> bytes:
    """A fresh random key (32 bytes from the OS's secure generator)."""
    return secrets.token_bytes(KEY_BYTES)


KEY_FORMAT = "hybriddeid-key"
KEY_VERSION = 1


def key_checksum(key: bytes) -> str:
    """Eight hex digits that a mistyped or damaged key fails (SHA-256 of a label and the key)."""
    return hashlib.sha256(b"hybriddeid key checksum" + _SEPARATOR + key).hexdigest()[:8]


def render_key(key: bytes) -> str:
    """The key file's line: ``hybriddeid-key 1 <hex key> <checksum>``."""
    return f"{KEY_FORMAT} {KEY_VERSION} {key.hex()} {key_checksum(key)}\n"


def check_key_permissions(path: Path) -> None:
    """Refuse a key file that others may read or write, as ssh refuses such a private key: anyone who
    reads the key can recompute every surrogate, and anyone who writes it can change them all."""
    if os.name != "posix":
        return
    mode = Path(path).stat().st_mode
    if mode & 0o077:
        raise ValueError(
            f"{path}: the key file may be read or written by others (mode {mode & 0o777:03o}); "
            f"make it owner-only with: chmod 600 {path}"
        )


# The whole file, as ``render_key`` writes it (the key: 16+ bytes) and as ``create_key_file`` wrote it
# before the checksum (32 bytes in lower-case hex, then a line break). Nothing else is a key file: a
# byte-order mark, a changed prefix or a cut key would otherwise be read as another key.
_KEY_FILE = re.compile(rb"hybriddeid-key 1 ((?:[0-9a-f]{2}){16,}) ([0-9a-f]{8})\n?")
_OLD_KEY_FILE = re.compile(rb"([0-9a-f]{64})\n?")


def read_key(path: Path) -> bytes:
    """The key stored in ``path``: the versioned line ``create_key_file`` writes, its checksum checked;
    or an old key file in its exact form (64 lower-case hex digits and a line break, read with a warning:
    a typo in it would go unnoticed, ``hybriddeid key upgrade`` adds the checksum). Anything else (a
    byte-order mark, a changed prefix, a cut or mistyped key, a passphrase) is refused with the reason,
    never read as some other key; so is a key file others may read or write (``check_key_permissions``)."""
    path = Path(path)
    try:
        check_key_permissions(path)
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read key file ({exc.strerror or type(exc).__name__})") from None
    found = _KEY_FILE.fullmatch(raw)
    if found is not None:
        key = bytes.fromhex(found.group(1).decode("ascii"))
        if key_checksum(key) != found.group(2).decode("ascii"):
            raise ValueError(
                f"{path}: the key does not match its checksum; the file was changed or mistyped: "
                "restore it from its backup (a different key would change every surrogate)"
            )
        return key
    old = _OLD_KEY_FILE.fullmatch(raw)
    if old is not None:
        log.warning(
            "%s: key file in the old format, without a checksum (a typo in it would silently make a "
            "different key); `hybriddeid key upgrade %s` rewrites it with one",
            path,
            path,
        )
        return bytes.fromhex(old.group(1).decode("ascii"))
    raise ValueError(
        f"{path}: not a key file ({_key_file_problem(raw)}); a key file holds the one line "
        f"'{KEY_FORMAT} {KEY_VERSION} <hex key> <checksum>' (`hybriddeid key new` writes it) or, "
        "from before, 64 lower-case hex digits: restore it from its backup"
    )


def _key_file_problem(raw: bytes) -> str:
    """What is wrong with a file that is no key file, in words that never quote it (it may hold the key)."""
    if not raw.strip():
        return "it is empty"
    if raw.startswith(b"\xef\xbb\xbf"):
        return "it starts with a UTF-8 byte-order mark, which an editor added"
    if b"\r" in raw:
        return "it has Windows line breaks (CR LF)"
    if raw.count(b"\n") > 1 or not raw.endswith(b"\n") and b"\n" in raw:
        return "it holds more than one line"
    line = raw.rstrip(b"\n")
    if line != line.strip():
        return "the line starts or ends with spaces"
    parts = line.split(b" ")
    prefix = KEY_FORMAT.encode("ascii")
    if parts[0] != prefix and parts[0].lower().startswith(b"hybrid"):
        return f"its first word is not exactly '{KEY_FORMAT}' (a typo or a capital)"
    if parts[0] == prefix:
        if len(parts) != 4 or parts[1] != str(KEY_VERSION).encode("ascii"):
            return f"not the fields '{KEY_FORMAT} {KEY_VERSION} <hex key> <checksum>'"
        if not re.fullmatch(rb"[0-9a-f]{8}", parts[3]):
            return "the checksum is not 8 lower-case hex digits"
        if not re.fullmatch(rb"[0-9a-f]+", parts[2]):
            return "the key is not lower-case hexadecimal"
        return f"the key is {len(parts[2])} hex digits, not an even number of at least {2 * MIN_KEY_BYTES}"
    if re.fullmatch(rb"[0-9a-fA-F]+", line):
        return (
            f"{len(line)} hex digits" if len(line) != 64 else "hex digits in capitals"
        ) + ", where an old key file holds 64 lower-case ones: it was cut or changed"
    return "it is neither a versioned key line nor an old key's hex digits (a passphrase is not a key)"


def create_key_file(path: Path) -> bytes:
    """Write a new random key to ``path`` (the versioned line with its checksum, owner-only) and return it.

    Refuses to replace an existing file: losing a key loses the ability to add notes consistently.
    """
    path = Path(path)
    key = new_key()
    _write_new_key(path, key)
    return key


def upgrade_key_file(path: Path) -> bytes:
    """Rewrite an old-format key file in the versioned format (same key, same surrogates), owner-only;
    returns the key."""
    key = read_key(path)
    atomic_write_text(Path(path), render_key(key), mode=0o600)
    return key


def _write_new_key(path: Path, key: bytes) -> None:
    """Create ``path`` (never replacing a file) with the key's line, owner-only, on disk before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(render_key(key))
            handle.flush()
            os.fsync(handle.fileno())  # a key that is not on disk is a key lost
    except BaseException:
        path.unlink(missing_ok=True)
        raise


class Keyed:
    """Deterministic draws from HMAC-SHA256 under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"key is too short ({len(key)} bytes, need at least {MIN_KEY_BYTES})")
        self._key = bytes(key)

    def digest(self, *parts: str) -> bytes:
        # surrogateescape: a scope may be a file name that is not UTF-8 (the same bytes as the name's)
        message = _SEPARATOR.join(part.encode("utf-8", "surrogateescape") for part in parts)
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def integer(self, *parts: str) -> int:
        """A 64-bit integer drawn from ``parts`` (e.g. a Faker seed)."""
        return int.from_bytes(self.digest(*parts)[:8], "big")

    def choice_index(self, n: int, *parts: str) -> int:
        """An index in ``range(n)`` drawn from ``parts``."""
        return self.integer(*parts) % n

    def fingerprint(self) -> str:
        """A short public name for the key (safe to record; does not reveal the key)."""
        return self.digest("hybriddeid key fingerprint").hex()[:16]


def derive_key(key: bytes, purpose: str, *context: str) -> bytes:
    """A key of its own for ``purpose`` in ``context`` (e.g. one client of ``serve``), drawn from ``key`` by
    HMAC-SHA256: what is made with it tells nothing of what is made with ``key`` or with another context's
    key, and no one without ``key`` can compute it."""
    return Keyed(key).digest("hybriddeid derived key", purpose, *context)
