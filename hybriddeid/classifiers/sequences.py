"""What a sequence tagger reads and what it keeps of a reading: the unit sequences a CRF tags
and the tagged sequences that P(O) thresholds and focus stretches are computed from later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hybriddeid.core.document import Span


@dataclass(slots=True)
class UnitSequence:
    """One CRF sequence: unit offsets (start, end) into the note and each unit's features.

    A sequence read from a segment of a long line (``AnalysedNote.segments``) has the segment's
    ``core``: only units starting there are kept, and the tagger stitches it to the next sequence
    when both reach across the cut between their cores (``CRFTagger._tag``). ``key`` names what
    was read (a focused run's bounds before cutting to the core), so a later focused read can skip it.
    For the fast engine, ``emissions`` holds each unit's score per label (units x the model's
    labels) and ``features`` may be empty."""

    units: list[tuple[int, int]]
    features: Sequence[Sequence[str]]
    core: tuple[int, int] | None = None
    key: tuple[int, int] | None = None
    emissions: np.ndarray | None = None


@dataclass(slots=True)
class TaggedSequence:
    """One sequence as a tagger read it, kept so that P(O) thresholds and focus stretches can be
    applied later without tagging again: the Viterbi ``tags``, each unit's probability of O, the
    spans found in it (with scores, before a subclass finishes them) and, for the units whose P(O)
    is below the reading's ``keep_below``, each label's probability (only for multi-label taggers)."""

    units: list[tuple[int, int]]
    tags: list[str]
    p_outside: list[float]
    spans: list[Span]
    label_probs: dict[int, dict[str, float]]
    parts: tuple[tuple[int, int], ...] = field(default=())  # keys of the segments stitched into it

    @property
    def bounds(self) -> tuple[int, int]:
        """Character offsets the sequence covers."""
        return self.units[0][0], self.units[-1][1]

    @property
    def read_keys(self) -> tuple[tuple[int, int], ...]:
        """What a focused re-read skips as read already: the bounds of the sequence or, for one
        stitched from segments of a long line, of each segment's run."""
        return self.parts or (self.bounds,)
