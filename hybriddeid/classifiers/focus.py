"""Focus: where a fast tagger is unsure, so that a slower one reads only there.

A pipeline with ``focus = {char = "token"}`` runs the token CRF over the whole note, takes the
stretches around units it tags as PHI or whose P(O) is below ``focus_below`` (widened by
``focus_margin`` units) and lets the character CRF read only the runs of tokens touching them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

from hybriddeid.classifiers.schemes import OUTSIDE
from hybriddeid.classifiers.sequences import TaggedSequence
from hybriddeid.core.document import Span
from hybriddeid.features.context import LineContext
from hybriddeid.text.tokenize import Token


def unsure_stretches(
    units: Sequence[tuple[int, int]],
    tags: Sequence[str],
    p_outside: Callable[[int], float],
    below: float,
    margin: int,
    claimed: Sequence[Span] = (),
) -> list[tuple[int, int]]:
    """Character stretches of the units that are tagged as PHI or whose marginal probability of O
    (``p_outside(i)``: the tagger's, or kept from a reading) is below ``below``, each widened by
    ``margin`` units; units inside a ``claimed`` span (sorted, non-overlapping) do not count."""
    n = len(units)
    unsure = [i for i in range(n) if tags[i] != OUTSIDE or p_outside(i) < below]
    if claimed and unsure:
        kept, at = [], 0
        for i in unsure:
            start = units[i][0]
            while at < len(claimed) and claimed[at].end <= start:
                at += 1
            if not (at < len(claimed) and claimed[at].start <= start):
                kept.append(i)
        unsure = kept
    stretches: list[tuple[int, int]] = []
    last_end = -1  # unit index just past the previous stretch
    for i in unsure:
        first, end = max(i - margin, 0), min(i + margin + 1, n)
        if stretches and first <= last_end:
            stretches[-1] = (stretches[-1][0], units[end - 1][1])
        else:
            stretches.append((units[first][0], units[end - 1][1]))
        last_end = end
    return stretches


def focus_stretches(
    sequences: Iterable[TaggedSequence], below: float, margin: int, claim_from: float | None = None
) -> list[tuple[int, int]]:
    """``predict_with_focus``'s stretches, from sequences kept by ``CRFTagger.read``: the same
    marginals give the same stretches, at any ``below``, without tagging again."""
    stretches: list[tuple[int, int]] = []
    for seq in sequences:
        claimed = [span for span in seq.spans if span.score >= claim_from] if claim_from is not None else ()
        stretches.extend(unsure_stretches(seq.units, seq.tags, seq.p_outside.__getitem__, below, margin, claimed))
    return stretches


def runs_in_regions(
    tokens: Sequence[Token], regions: Sequence[tuple[int, int]], region_starts: Sequence[int]
) -> list[tuple[int, int]]:
    """Runs ``(first, end)`` of consecutive token indices whose tokens touch one of ``regions``
    (sorted, disjoint character stretches; ``region_starts`` their starts)."""
    runs: list[tuple[int, int]] = []
    if not tokens:
        return runs
    # Stretches are sorted and disjoint: the last one starting before the tokens end is the only
    # candidate to reach them; most lines, when focused, have none and are skipped here.
    at = bisect.bisect_left(region_starts, tokens[-1].end)
    if at == 0 or regions[at - 1][1] <= tokens[0].start:
        return runs
    # Each stretch that may reach the tokens (from the last one starting at or before the first token)
    # touches one range of them, found by bisection: not a bisection per token (a long line has
    # hundreds of thousands). Ranges come in order; touching or adjacent ones make one run.
    starts = [tok.start for tok in tokens]
    ends = [tok.end for tok in tokens]
    for region_start, region_end in regions[max(0, bisect.bisect_right(region_starts, tokens[0].start) - 1) : at]:
        first = bisect.bisect_right(ends, region_start)  # the first token ending after the stretch starts
        end = bisect.bisect_left(starts, region_end)  # past the last token starting before it ends
        if first >= end:
            continue
        if runs and runs[-1][1] >= first:
            runs[-1] = (runs[-1][0], max(runs[-1][1], end))
        else:
            runs.append((first, end))
    return runs


def run_bounds(line: LineContext, tokens: Sequence[Token], run: tuple[int, int]) -> tuple[int, int]:
    """Character offsets of the sequence a run of tokens is read as (a whole run: the whole line)."""
    first, end = run
    if (first, end) == (0, len(tokens)):
        return line.start, line.end
    return tokens[first].start, tokens[end - 1].end
