"""The secret key that makes surrogates consistent and reproducible, and unguessable without it.

Every surrogate choice is drawn from HMAC-SHA256(key, scope | purpose | value): the same value in
the same scope (patient, or corpus) always gets the same surrogate, in any process and any order,
and without the key nobody can recompute or invert the mapping.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_BYTES = 32
MIN_KEY_BYTES = 16
_SEPARATOR = b"\x1f"


def new_key() -> bytes:
    """A fresh random key (32 bytes from the OS's secure generator)."""
    return secrets.token_bytes(KEY_BYTES)


def read_key(path: Path) -> bytes:
    """The key stored in ``path`` (hex as written by ``create_key_file``, or any 16+ bytes)."""
    path = Path(path)
    try:
        raw = path.read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read key file ({exc.strerror or type(exc).__name__})") from None
    try:
        key = bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = raw
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{path}: key is too short ({len(key)} bytes, need at least {MIN_KEY_BYTES})")
    return key


def create_key_file(path: Path) -> bytes:
    """Write a new random key to ``path`` (hex, readable by its owner only) and return it.

    Refuses to replace an existing file: losing a key loses the ability to add notes consistently.
    """
    path = Path(path)
    key = new_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key.hex() + "\n")
    return key


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
