"""De-identified output: tags, masks, or consistent surrogates with per-patient date shifting.

``deidentify_document`` / ``deidentify_patient`` work on any spans (gold or predicted);
``Pipeline.deidentify`` finds the spans first; ``hybriddeid deid`` runs it over folders with an audit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hybriddeid.surrogates.deid import (
        MODES,
        SCOPES,
        DeidOptions,
        DeidResult,
        Replacement,
        apply_replacements,
        date_offset,
        deidentify_document,
        deidentify_patient,
    )
    from hybriddeid.surrogates.keys import Keyed, create_key_file, new_key, read_key

__all__ = [
    "MODES",
    "SCOPES",
    "DeidOptions",
    "DeidResult",
    "Keyed",
    "Replacement",
    "apply_replacements",
    "create_key_file",
    "date_offset",
    "deidentify_document",
    "deidentify_patient",
    "new_key",
    "read_key",
]

# Where each public name lives: the package imports a module on first use, so that the classifiers,
# which read ``surrogates.language``, do not load de-identification and its readers with every model.
_HOMES = {name: "deid" for name in __all__} | {
    name: "keys" for name in ("Keyed", "create_key_file", "new_key", "read_key")
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
