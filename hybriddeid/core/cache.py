"""Where hybriddeid keeps what it builds once and reuses: between runs (word clusters built for a
recipe, compiled rule prefilters, the locks of database runs), and within a process (a resource a
model saved more than once, read once)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

CACHE_ENV = "HYBRIDDEID_CACHE_DIR"
T = TypeVar("T")
# Objects read from files and still in use, by their type and the files' digest.
_IN_USE: weakref.WeakValueDictionary[tuple[type, bytes], Any] = weakref.WeakValueDictionary()


def cache_dir() -> Path:
    """Where built resources are kept between runs: ``$HYBRIDDEID_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/hybriddeid``, else ``~/.cache/hybriddeid``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hybriddeid"


def read_once(kind: type[T], digest: bytes, read: Callable[[], T]) -> T:
    """The ``kind`` object already read from files of this ``digest``, while something still holds it, else
    ``read()``'s: a model's components often save one resource several times (the token CRF, character CRF
    and span typer their lexicon; both CRFs their word clusters). For objects whose answers never change once
    made (a memo inside one only saves work); ``digest`` may name an object in use rather than files, as long
    as the object read holds what it names (``ClusterFeatures.of``: the clusters object, so its id stays
    taken)."""
    found = _IN_USE.get((kind, digest))
    if found is None:
        found = _IN_USE[(kind, digest)] = read()
    return found
