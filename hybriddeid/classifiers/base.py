"""The protocol every classifier follows (scikit-learn style).

Constructors only store parameters; ``fit`` learns state into attributes ending in ``_``;
``predict`` returns character-offset spans tagged with the classifier's ``source`` name;
``to_disk``/``from_disk`` use plain files (crfsuite models, TOML, JSON, text), never pickles.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol, runtime_checkable

from hybriddeid.document import Document, Span


@runtime_checkable
class Classifier(Protocol):
    source: str

    def fit(self, docs: Iterable[Document]) -> "Classifier": ...

    def predict(self, doc: Document) -> list[Span]: ...

    @property
    def labels(self) -> tuple[str, ...]: ...

    def to_disk(self, path: Path) -> None: ...

    @classmethod
    def from_disk(cls, path: Path) -> "Classifier": ...


class NotFittedError(RuntimeError):
    """Raised when ``predict`` or ``to_disk`` is called before ``fit``/``from_disk``."""
