"""What a sequence tagger reads and what it keeps of a reading: the unit sequences a CRF tags
and the tagged sequences that P(O) thresholds and focus stretches are computed from later."""
from __future__ import annotations

from dataclasses import dataclass

from hybriddeid.document import Span


@dataclass(slots=True)
class UnitSequence:
    """One CRF sequence: unit offsets (start, end) into the note and each unit's features."""

    units: list[tuple[int, int]]
    features: list[list[str]]


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

    @property
    def bounds(self) -> tuple[int, int]:
        """Character offsets the sequence covers (how a focused re-read recognises it)."""
        return self.units[0][0], self.units[-1][1]
