"""One device fed by several processes: forked workers prepare notes, the parent tags them.

Preparing a note (analysis, one token sequence, vocabulary ids) is Python work on one core; a GPU
tags a batch of hundreds of notes in milliseconds, so one process preparing and tagging in turn
keeps the GPU waiting (docs/explanation/neural-results.md). Here ``workers`` forked processes
prepare notes into plain arrays (``encoding.PreparedNote``) and send them back; the process that
owns the device gathers them into a window, tags it in length-bucketed batches and decodes the spans
while the workers prepare the next notes. The workers never touch torch, so the parent may have
started CUDA (fork is safe for processes that do not use it). Linux and other systems with fork only.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable, Sequence

from hybriddeid.backends.neural.encoding import PreparedNote, Vocabularies, prepare_note
from hybriddeid.classifiers.base import ComponentError
from hybriddeid.core.document import Document, Span
from hybriddeid.features.analysis import AnalysedNote

log = logging.getLogger(__name__)

NOTES_PER_TASK = 4  # notes a worker prepares per message (fewer round trips)
_worker: tuple[Vocabularies, str] | None = None  # set in each worker by _start


def _start(vocabularies: Vocabularies, language: str) -> None:
    global _worker
    _worker = (vocabularies, language)


def _prepare(item: tuple[int, AnalysedNote | Document]) -> tuple[int, PreparedNote | str]:
    """One note prepared in a worker, or the name of what went wrong (never the note's text)."""
    index, note = item
    assert _worker is not None
    try:
        return index, prepare_note(*_worker, note)
    except Exception as exc:  # noqa: BLE001 - reported to the parent by kind, without text
        return index, type(exc).__name__


def fed_predictions(
    notes: Sequence[AnalysedNote | Document],
    vocabularies: Vocabularies,
    language: str,
    tag: Callable[[list[PreparedNote]], list[list[Span]]],
    workers: int,
    window_tokens: int,
) -> list[list[Span]]:
    """Spans of each note (order kept): ``workers`` processes prepare them, ``tag`` (run here) tags
    prepared notes a window of about ``window_tokens`` tokens at a time."""
    if "fork" not in multiprocessing.get_all_start_methods():
        raise ComponentError("preparing notes in worker processes needs fork (Linux); tag with workers=0")
    results: list[list[Span]] = [[] for _ in notes]
    # The first note here: the analysis resources are loaded once, before the fork, for every worker.
    first = prepare_note(vocabularies, language, notes[0])
    window: list[tuple[int, PreparedNote]] = [(0, first)]
    tokens = first.length
    started = time.perf_counter()
    tagging = 0.0  # seconds in ``tag``: the rest is starting the workers and waiting for notes

    def flush() -> None:
        nonlocal window, tokens, tagging
        if window:
            since = time.perf_counter()
            for (index, _), spans in zip(window, tag([prepared for _, prepared in window])):
                results[index] = spans
            tagging += time.perf_counter() - since
        window, tokens = [], 0

    context = multiprocessing.get_context("fork")
    with context.Pool(workers, _start, (vocabularies, language)) as pool:
        pool_started = time.perf_counter() - started
        rest = ((index, notes[index]) for index in range(1, len(notes)))
        for index, prepared in pool.imap_unordered(_prepare, rest, NOTES_PER_TASK):
            if isinstance(prepared, str):
                raise ComponentError(f"preparing note {index} for the neural tagger failed ({prepared})")
            window.append((index, prepared))
            tokens += prepared.length
            if tokens >= window_tokens:
                flush()
        flush()
    log.debug(
        "fed tagging: %d notes, %d workers; %.3f s starting them, %.3f s tagging, %.3f s in all",
        len(notes),
        workers,
        pool_started,
        tagging,
        time.perf_counter() - started,
    )
    return results
