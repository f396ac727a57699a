"""What is done to each note, the same wherever it runs: its PHI spans, then, if asked, their replacement.

``hybriddeid annotate`` and ``deid`` (``hybriddeid.batch``, ``hybriddeid.deid_batch``) and Spark
(``hybriddeid.integrations.spark``) all call ``process_notes``, so one note gets the same spans and the
same de-identified text from each of them. Reading notes, loading the model (once per process) and
writing results stay with the callers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from hybriddeid.document import Document
from hybriddeid.profiles import check_phi_set, filter_document
from hybriddeid.surrogates import DeidOptions, DeidResult, deidentify_patient

if TYPE_CHECKING:
    from pathlib import Path

    from hybriddeid.pipeline import Pipeline


@dataclass(frozen=True)
class NoteSettings:
    """Which spans are PHI and what becomes of them.

    ``phi_set`` (``hybriddeid.profiles``) keeps only that set's spans (default: the model's setting, or
    every given span); ``threshold`` is the model's P(O) threshold as ``Pipeline.predict`` takes it
    (None: the model's config; 0: none); ``deid`` replaces the spans (None: the spans only).
    """

    phi_set: str | None = None
    threshold: float | None = None
    deid: DeidOptions | None = None

    def __post_init__(self) -> None:
        if self.phi_set is not None:
            check_phi_set(self.phi_set)


@dataclass(frozen=True)
class ProcessedNote:
    """One note's results: ``document`` is the note with its PHI spans (input offsets); ``deid`` its
    de-identified text, spans at output offsets and replacements, when ``NoteSettings.deid`` was set."""

    document: Document
    deid: DeidResult | None = None


def process_notes(pipeline: "Pipeline | Any | None", docs: Sequence[Document], settings: NoteSettings = NoteSettings(),
                  patient: str | None = None) -> list[ProcessedNote]:
    """Each note's PHI spans and, with ``settings.deid``, the notes de-identified together as the notes
    of ``patient`` (default: the first note's name, a note alone being its own patient). A name word a
    model finds is also marked where it stands alone elsewhere in the patient's notes
    (``Pipeline.link_names``); in notes given without ``deid`` or ``patient``, which need not be one
    patient's, only elsewhere in its own note.

    ``pipeline`` is a loaded model (anything with ``predict(doc, phi_set=..., threshold=...)``; the
    keywords are passed only when set) whose predictions replace the notes' spans, or None to keep the
    notes' own spans (gold, or found earlier), within ``settings.phi_set``. Errors propagate; their
    messages may quote note text, so callers report only their type.
    """
    found = [_find_phi(pipeline, doc, settings) for doc in docs]
    if pipeline is not None and hasattr(pipeline, "link_names"):  # a name found once is looked for again
        one_patient = settings.deid is not None or patient is not None
        found = pipeline.link_names(found) if one_patient else [pipeline.link_names([doc])[0] for doc in found]
    if settings.deid is None:
        return [ProcessedNote(doc) for doc in found]
    if patient is None and found:
        patient = found[0].name
    return [ProcessedNote(doc, result) for doc, result in zip(found, deidentify_patient(found, settings.deid, patient))]


def _find_phi(pipeline: Any, doc: Document, settings: NoteSettings) -> Document:
    if pipeline is None:
        return doc if settings.phi_set is None else filter_document(doc, settings.phi_set)
    chosen = {name: value for name, value in (("phi_set", settings.phi_set), ("threshold", settings.threshold))
              if value is not None}
    return doc.with_spans(pipeline.predict(doc, **chosen))


def load_model(model: "str | Path", engine: str | None = None) -> "Pipeline":
    """The saved or bundled model ``model`` (``Pipeline.load``): the one place runs load a model.
    ``engine`` ("fast" or "crfsuite") overrides how its CRFs tag (None: the model's config)."""
    from hybriddeid.pipeline import Pipeline

    return Pipeline.load(model, engine=engine)
