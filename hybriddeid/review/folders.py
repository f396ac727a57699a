"""Folders of notes read for review: the model's spans and token chances, the residual-risk
estimate (``hybriddeid.evaluation.risk``), the notes worth reviewing first, and a reviewer's corrections.

``hybriddeid risk`` and ``hybriddeid review`` both start here; every note goes through
``processing.process_notes`` (so the spans shown are those ``annotate`` writes).

Corrections are a BRAT folder (``NAME.txt`` + ``NAME.ann``: the spans the reviewer kept, added or
changed; rejected ones left out) that ``hybriddeid train --train`` reads as it is. Who reviewed what
and when sits beside them in ``.reviews.json``, hidden so that readers skip it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation.risk import AUTO, Reviewed, RiskEstimate, TokenChance, estimate, untagged
from hybriddeid.io import InputError, atomic_write_text, read_document, scan_inputs, write_document
from hybriddeid.pipeline.core import ConfigError
from hybriddeid.runs.batch import describe_error
from hybriddeid.runs.processing import NoteSettings, ProcessedNote, process_notes

if TYPE_CHECKING:
    from hybriddeid.pipeline.core import Pipeline

log = logging.getLogger("hybriddeid")

REVIEWS_FILE = ".reviews.json"
REVIEWS_LOCK = ".reviews.lock"  # held while a save reads, checks and writes the reviews file


class StaleSave(Exception):
    """A save made on an older version of a note's corrections than the one saved since (another tab,
    reviewer or review server saved it in between): refused, so that nobody's corrections are lost."""


@dataclass
class ReadNote:
    """A note as the model read it: its text with the model's spans (input offsets) and every
    token's P(PHI)."""

    doc: Document
    chances: tuple[TokenChance, ...]

    @property
    def name(self) -> str:
        return self.doc.name

    def untagged(self, spans: Sequence[Span] | None = None) -> list[TokenChance]:
        """Tokens no span of ``spans`` (default: the model's) touches."""
        return untagged(self.chances, self.doc.spans if spans is None else spans)

    def uncertainty(self) -> float:
        """Sum of the binary entropy of P(PHI) over the note's tokens: how much a reviewer's
        decisions would tell the model (uncertainty sampling)."""
        total = 0.0
        for chance in self.chances:
            p = min(max(chance.p_phi, 1e-12), 1 - 1e-12)
            total -= p * math.log2(p) + (1 - p) * math.log2(1 - p)
        return total


def read_folder(
    pipeline: Pipeline,
    folder: Path,
    settings: NoteSettings = NoteSettings(),
    encoding: str = "utf-8",
    gold: bool = False,
) -> tuple[list[ReadNote], list[Document], int]:
    """Every note of ``folder`` read by ``pipeline`` (``process_notes`` with token chances), its gold
    or reviewed spans alongside when ``gold`` (else the files' annotations are not read), and the
    number of files that could not be read or processed (each named in a log line with a description
    that never quotes note text, ``batch.describe_error``; the rest carry on). A problem of the model
    itself (``ConfigError``) stops the reading."""
    settings = NoteSettings(settings.phi_set, settings.threshold, None, chances=True)
    read, given, failed = [], [], 0
    for path, docs in scan_inputs(folder, encoding=encoding, spans=gold):
        if isinstance(docs, InputError):
            log.error("%s", docs)
            failed += 1
            continue
        for doc in docs:
            try:
                note: ProcessedNote = process_notes(pipeline, [doc.with_spans(())], settings)[0]
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001 - one note's failure; its message may quote the note
                log.error("%s: %s", path, describe_error(exc))
                failed += 1
                continue
            read.append(ReadNote(note.document, note.chances or ()))
            given.append(doc)
    return read, given, failed


def reviewed_sample(
    pipeline: Pipeline, folder: Path, settings: NoteSettings = NoteSettings(), encoding: str = "utf-8"
) -> tuple[Reviewed, dict[str, str]]:
    """The reviewed notes of ``folder`` (a corrections folder or any annotated one) as calibration
    data: the model's untagged tokens and whether the reviewer's spans hold them; and each reviewed
    note's text by name (a note of the estimated folder with the same name and text was reviewed)."""
    read, reviewed, _ = read_folder(pipeline, folder, settings, encoding, gold=True)
    sample = Reviewed.collect([(note.chances, note.doc.spans, doc.spans) for note, doc in zip(read, reviewed)])
    return sample, {doc.name: doc.text for doc in reviewed}


def folder_risk(
    notes: Sequence[ReadNote], reviewed: Reviewed | None = None, method: str = AUTO, corrected: Collection[str] = ()
) -> RiskEstimate:
    """The residual-risk estimate of ``notes`` (``risk.estimate``), spans as each note holds them. A
    note named in ``corrected`` was reviewed: it is released as its reviewer corrected it, so none
    of its tokens counts as possibly missed (its tokens still count in the per-1,000 rate)."""
    return estimate(
        [(note.name, len(note.chances), [] if note.name in corrected else note.untagged()) for note in notes],
        reviewed,
        method,
    )


def most_informative(notes: Iterable[ReadNote], count: int) -> list[ReadNote]:
    """The ``count`` notes whose review would teach the model most: highest total token
    uncertainty first (ties by name)."""
    return sorted(notes, key=lambda note: (-note.uncertainty(), note.name))[:count]


class Corrections:
    """A reviewer's corrections: BRAT files in ``folder`` (never the notes' own folder) and the side
    file of who reviewed each note and when. Every write is atomic; reopening resumes."""

    def __init__(self, folder: Path, notes_folder: Path | None = None) -> None:
        folder = Path(folder)
        if notes_folder is not None and folder.resolve() == Path(notes_folder).resolve():
            raise InputError(folder, "is the notes' own folder; corrections go to another folder")
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.reviews: dict[str, Any] = self._read_reviews()
        self._read: dict[str, tuple[str, list[Span]]] = {}  # name -> (saved text, spans): read from disk once

    def _read_reviews(self) -> dict[str, Any]:
        path = self.folder / REVIEWS_FILE
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(path, f"cannot be read as JSON ({type(exc).__name__})") from None
        if not isinstance(data, dict) or not isinstance(data.get("notes", {}), dict):
            raise InputError(path, "is not a reviews file (expected an object with 'notes')")
        return data.get("notes", {})

    def spans(self, doc: Document) -> list[Span] | None:
        """The corrected spans of ``doc`` saved before (None: never saved). The saved text must be the
        note's, else its offsets would point elsewhere."""
        txt = self.folder / f"{doc.name}.txt"
        if doc.name not in self._read:  # every save re-estimates the risk from all reviewed notes' spans
            if not txt.exists():
                return None
            saved = read_document(txt, "brat")[0]
            self._read[doc.name] = (saved.text, list(saved.spans))
        text, spans = self._read[doc.name]
        if text != doc.text:
            raise InputError(txt, "holds another text than the note of the same name; move it away to review anew")
        return list(spans)

    def version(self, name: str) -> int:
        """How many times note ``name``'s corrections were saved (0: never): what a save must be made on."""
        return int(self.reviews.get(name, {}).get("version", 0))

    @contextlib.contextmanager
    def _locked(self) -> Any:
        """The folder's reviews lock for the block, with the reviews re-read from disk: another review
        server on the same folder may have saved since."""
        fd = os.open(self.folder / REVIEWS_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            before, self.reviews = self.reviews, self._read_reviews()
            for name in [name for name in self.reviews if self.reviews[name] != before.get(name)]:
                self._read.pop(name, None)  # saved elsewhere: its spans are read again
            yield
        finally:
            os.close(fd)

    def save(
        self,
        doc: Document,
        spans: Sequence[Span],
        reviewer: str,
        done: bool,
        decisions: dict[str, int] | None = None,
        version: int | None = None,
    ) -> dict[str, Any]:
        """Write ``doc``'s corrected ``spans`` as BRAT and record ``reviewer``, the time and whether
        the whole note is reviewed (``done``); returns the note's record, whose ``version`` counts the
        saves. With ``version`` (the one the reviewer's page was opened on), ``StaleSave`` when the note
        was saved since."""
        with self._locked():
            current = self.version(doc.name)
            if version is not None and version != current:
                saved = self.reviews.get(doc.name, {})
                raise StaleSave(
                    f"this note was saved again since you opened it (by {saved.get('reviewer', 'unknown')} "
                    f"at {saved.get('saved_at', '?')}; version {current}, yours {version}): "
                    "reload it to see those corrections, then make yours again"
                )
            kept = Document(doc.name, doc.text, tuple(Span(s.start, s.end, s.label, "review", 1.0) for s in spans))
            write_document(kept, self.folder, "brat")
            self._read.pop(doc.name, None)  # read back as written on the next ``spans``
            record = {
                "reviewer": reviewer,
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "reviewed": bool(done),
                "spans": len(spans),
                "version": current + 1,
            }
            if decisions:
                record["decisions"] = dict(decisions)
            self.reviews[doc.name] = record
            atomic_write_text(self.folder / REVIEWS_FILE, json.dumps({"notes": self.reviews}, indent=1, sort_keys=True))
        return record

    def reviewed(self, name: str) -> bool:
        return bool(self.reviews.get(name, {}).get("reviewed"))
