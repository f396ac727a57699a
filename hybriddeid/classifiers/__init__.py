"""The classifiers a pipeline combines; each follows ``base.Classifier``.

Exported lazily: importing the rule classifier alone must not pull in crfsuite.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "CharCRF": "hybriddeid.classifiers.char_crf",
    "RuleClassifier": "hybriddeid.classifiers.rules",
    "TokenCRF": "hybriddeid.classifiers.token_crf",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
