"""The protocols every classifier follows (scikit-learn style): everything the pipeline calls.

Constructors only store parameters (a component's config section, plus ``language``); ``fit``
learns state into attributes ending in ``_``; ``predict`` returns character-offset spans tagged
with the classifier's ``source`` name. ``to_disk`` writes only what was learned, in plain files
(crfsuite models, TOML, JSON, numpy arrays), never pickles; ``from_disk(path, params)`` rebuilds
the classifier from those files and its parameters, which a saved pipeline keeps in its one
``config.toml``. A component's ``ComponentSpec`` (``hybriddeid.core.registry``) says which of the
optional capabilities below it has.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hybriddeid.core.document import Document, Span

if TYPE_CHECKING:
    from hybriddeid.classifiers.sequences import TaggedSequence
    from hybriddeid.features.analysis import AnalysedNote


@runtime_checkable
class Classifier(Protocol):
    """What every component provides."""

    source: str  # the name its spans carry (the merger ranks sources)
    unit: str  # what it tags: "token", "character" or "span"

    def fit(self, docs: Iterable[Document]) -> Classifier: ...

    def predict(self, note: AnalysedNote | Document, regions: Sequence[tuple[int, int]] | None = None) -> list[Span]:
        """Spans of the note; a component whose spec says ``accepts_regions`` reads only the
        sorted character stretches ``regions`` when given (others are never given any)."""
        ...

    @property
    def labels(self) -> tuple[str, ...]: ...

    def to_disk(self, path: Path) -> None: ...

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any]) -> Classifier: ...


@runtime_checkable
class SequenceTagger(Classifier, Protocol):
    """A classifier with per-unit marginals (spec ``reads_marginals``): it can focus another
    component and serve P(O) thresholds (``hybriddeid.pipeline.operating_point``)."""

    labels_: tuple[str, ...]  # the labels its tags carry (before a ``finish`` step retypes spans)

    def predict_with_focus(
        self, note: AnalysedNote, below: float, margin: int, claim_from: float | None = None
    ) -> tuple[list[Span], list[tuple[int, int]]]: ...

    def read(
        self,
        note: AnalysedNote,
        keep_below: float,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> tuple[list[Span], list[TaggedSequence]]: ...

    def finish(self, note: AnalysedNote, spans: list[Span]) -> list[Span]: ...


class ComponentError(RuntimeError):
    """A component's failure told in words that never quote note text (settings, devices, files,
    the library's own words), so batch runs show its message, not only its type."""


class NotFittedError(RuntimeError):
    """Raised when ``predict`` or ``to_disk`` is called before ``fit``/``from_disk``."""
