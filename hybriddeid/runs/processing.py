"""What is done to each note, the same wherever it runs: its PHI spans, then, if asked, their replacement.

``hybriddeid annotate`` and ``deid`` (``hybriddeid.runs.batch``, ``hybriddeid.runs.deid``) and Spark
(``hybriddeid.integrations.spark``) all call ``process_notes``, so one note gets the same spans and the
same de-identified text from each of them. Reading notes, loading the model (once per process) and
writing results stay with the callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hybriddeid.core.document import Document, reading_copy
from hybriddeid.core.profiles import check_phi_set, filter_document
from hybriddeid.evaluation.risk import TokenChance
from hybriddeid.surrogates import DeidOptions, DeidResult, deidentify_patient

# The least P(O) threshold a reading takes: with no threshold set, reading for this one reads no
# more than predict does (focus levels stop at the configured one) and applies no threshold.
MIN_READ_THRESHOLD = 1e-12

if TYPE_CHECKING:
    from pathlib import Path

    from hybriddeid.pipeline.core import Pipeline


@dataclass(frozen=True)
class NoteSettings:
    """Which spans are PHI and what becomes of them.

    ``phi_set`` (``hybriddeid.core.profiles``) keeps only that set's spans (default: the model's setting, or
    every given span); ``threshold`` is the model's P(O) threshold as ``Pipeline.predict`` takes it
    (None: the model's config; 0: none); ``deid`` replaces the spans (None: the spans only);
    ``chances`` also keeps every token's P(PHI) from the model's token CRF (``hybriddeid.evaluation.risk``), the
    spans unchanged.
    """

    phi_set: str | None = None
    threshold: float | None = None
    deid: DeidOptions | None = None
    chances: bool = False

    def __post_init__(self) -> None:
        if self.phi_set is not None:
            check_phi_set(self.phi_set)


@dataclass(frozen=True)
class ProcessedNote:
    """One note's results: ``document`` is the note with its PHI spans (input offsets); ``deid`` its
    de-identified text, spans at output offsets and replacements, when ``NoteSettings.deid`` was set;
    ``chances`` each token's P(PHI) by the token CRF, sorted, when ``NoteSettings.chances`` was set."""

    document: Document
    deid: DeidResult | None = None
    chances: tuple[TokenChance, ...] | None = None


def process_notes(
    pipeline: Pipeline | Any | None,
    docs: Sequence[Document],
    settings: NoteSettings = NoteSettings(),
    patient: str | None = None,
) -> list[ProcessedNote]:
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
    chances: list[tuple[TokenChance, ...] | None]
    if settings.chances:
        found, chances = [], []
        for doc in docs:
            spans, chance = token_chances(pipeline, doc, settings)
            found.append(doc.with_spans(spans))
            chances.append(chance)
    else:
        found, chances = [_find_phi(pipeline, doc, settings) for doc in docs], [None] * len(docs)
    if pipeline is not None and hasattr(pipeline, "link_names"):  # a name found once is looked for again
        one_patient = settings.deid is not None or patient is not None
        found = pipeline.link_names(found) if one_patient else [pipeline.link_names([doc])[0] for doc in found]
    if settings.deid is None or not found:
        return [ProcessedNote(doc, None, chance) for doc, chance in zip(found, chances)]
    results = deidentify_patient(found, settings.deid, found[0].name if patient is None else patient)
    return [ProcessedNote(doc, result, chance) for doc, result, chance in zip(found, results, chances)]


def token_chances(
    pipeline: Pipeline | None, doc: Document, settings: NoteSettings
) -> tuple[list, tuple[TokenChance, ...]]:
    """The spans ``pipeline.predict`` gives ``doc`` under ``settings`` (the same tagging, read once)
    and the P(PHI) of every token its token-unit CRF (highest in precedence) read."""
    from hybriddeid.pipeline.core import ConfigError  # the model's problem, not the note's: callers stop on it

    if pipeline is None or not hasattr(pipeline, "read"):
        raise ConfigError("token chances need a loaded model (hybriddeid.pipeline.Pipeline)")
    typed = reading_copy(doc)  # read as typed text, as ``Pipeline.predict`` reads it
    if typed is not None:
        spans, chances = token_chances(pipeline, typed.doc, settings)
        moved = []
        for chance in chances:
            start, end = typed.bounds_back(chance.start, chance.end)
            moved.append(replace(chance, start=start, end=end))
        return typed.spans_back(spans), tuple(moved)
    threshold = pipeline.threshold_for(settings.threshold)
    reading = pipeline.read(doc, threshold if threshold is not None else MIN_READ_THRESHOLD, keep_below=1.0)
    spans = pipeline.within_phi_set(reading.doc, reading.spans(threshold), settings.phi_set)
    source = next((source for source in reading.candidates if source.words is None), None)
    if source is None:
        raise ConfigError("this model has no token CRF whose marginals could be read")
    kept: dict[tuple[int, int], TokenChance] = {}
    for _, sequences in source.reads:
        for units in sequences:
            for _, unit in units:
                chance = TokenChance(unit.start, unit.end, 1.0 - unit.p_outside, dict(unit.label_probs))
                if (unit.start, unit.end) not in kept or chance.p_phi > kept[(unit.start, unit.end)].p_phi:
                    kept[(unit.start, unit.end)] = chance
    return spans, tuple(sorted(kept.values(), key=lambda chance: chance.start))


def _find_phi(pipeline: Any, doc: Document, settings: NoteSettings) -> Document:
    if pipeline is None:
        return doc if settings.phi_set is None else filter_document(doc, settings.phi_set)
    chosen = {
        name: value
        for name, value in (("phi_set", settings.phi_set), ("threshold", settings.threshold))
        if value is not None
    }
    return doc.with_spans(pipeline.predict(doc, **chosen))


def load_model(model: str | Path, engine: str | None = None, device: str | None = None) -> Pipeline:
    """The saved or bundled model ``model`` (``Pipeline.load``): the one place runs load a model.
    ``engine`` ("fast" or "crfsuite") overrides how its CRFs tag, ``device`` ("auto", "cpu",
    "cuda[:N]") where its neural components run (None: the model's config). The word lists name
    linking reads, and the rules' one-scan prefilter, are built here too, once, so that the workers a
    batch forks share them: a prefilter not yet in the cache takes seconds to compile, which each
    worker's first note would pay, against ``--timeout-per-note``, and again in each worker started
    after a kill. The rules' own patterns still compile on their first search."""
    from hybriddeid.pipeline.core import Pipeline

    pipeline = Pipeline.load(model, engine=engine, device=device)
    pipeline.link_names([])
    pipeline.prepare(patterns=False)
    return pipeline
