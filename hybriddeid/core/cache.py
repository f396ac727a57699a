"""Where hybriddeid keeps what it builds once and reuses between runs (word clusters built for a
recipe, compiled rule prefilters, the locks of database runs)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "HYBRIDDEID_CACHE_DIR"


def cache_dir() -> Path:
    """Where built resources are kept between runs: ``$HYBRIDDEID_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/hybriddeid``, else ``~/.cache/hybriddeid``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hybriddeid"
