"""De-identified output: tags, masks, or consistent surrogates with per-patient date shifting.

``deidentify_document`` / ``deidentify_patient`` work on any spans (gold or predicted);
``Pipeline.deidentify`` finds the spans first; ``hybriddeid deid`` runs it over folders with an audit.
"""

from __future__ import annotations

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
