"""Tag schemes: BIO and BIOES tags of unit sequences from character spans, and back.

Every sequence tagger (the CRFs and the neural backend) encodes gold spans and decodes its
output through these two functions, so one note gives the same spans whichever tagger read it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from hybriddeid.core.document import Span

OUTSIDE = "O"
SCHEMES = ("BIO", "BIOES")


def encode_tags(units: Sequence[tuple[int, int]], spans: Iterable[Span], scheme: str) -> list[str]:
    """BIO/BIOES tags for ``units`` from character spans; a unit touching a span belongs to it."""
    tags = [OUTSIDE] * len(units)
    starts = [start for start, _ in units]
    for span in spans:
        first = bisect.bisect_right(starts, span.start) - 1
        if first < 0 or units[first][1] <= span.start:
            first += 1
        inside = []
        for i in range(max(first, 0), len(units)):
            if units[i][0] >= span.end:
                break
            inside.append(i)
        if not inside:
            continue
        if any(tags[i] != OUTSIDE for i in inside):
            continue  # overlapping gold spans cannot both be encoded; keep the first
        for n, i in enumerate(inside):
            prefix = "B" if n == 0 else "I"
            if scheme == "BIOES":
                if len(inside) == 1:
                    prefix = "S"
                elif n == len(inside) - 1:
                    prefix = "E"
            tags[i] = f"{prefix}-{span.label}"
    return tags


def decode_tags(
    units: Sequence[tuple[int, int]], tags: Sequence[str], source: str, scores: Sequence[float] | None = None
) -> list[Span]:
    """Spans from BIO or BIOES tags; tolerant of ill-formed sequences (an I after O starts a span).

    With per-unit ``scores`` (marginal probabilities), a span's score is its least confident unit's.
    """
    spans: list[Span] = []
    open_label: str | None = None
    open_start = 0
    open_end = 0
    open_score = 1.0

    def close() -> None:
        if open_label is not None:
            spans.append(Span(open_start, open_end, open_label, source, open_score))

    for i, ((start, end), tag) in enumerate(zip(units, tags)):
        if tag == OUTSIDE:  # most units: no call when nothing is open (a long note has millions)
            if open_label is not None:
                close()
                open_label = None
            continue
        prefix, label = tag[0], tag[2:]
        if prefix in "BS" or label != open_label:
            close()
            open_label, open_start, open_score = label, start, 1.0
        open_end = end
        if scores is not None:
            open_score = min(open_score, scores[i])
        if prefix in "ES":
            close()
            open_label = None
    close()
    return spans
