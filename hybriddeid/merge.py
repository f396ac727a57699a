"""The precedence merger (paper section 3.4) as a small pure function.

Spans that overlap no other span are all kept. Where spans overlap, the one from the source
earliest in ``precedence`` wins and the spans it overlaps are dropped. Ablations are simply other
precedence lists (or fewer sources).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from hybriddeid.document import Span

DEFAULT_PRECEDENCE = ("rule", "char", "token")


def merge(spans_by_source: Mapping[str, Sequence[Span]], precedence: Sequence[str] = DEFAULT_PRECEDENCE) -> list[Span]:
    """Merge each source's spans; higher-precedence sources win overlaps. Output is sorted.

    Sources missing from ``precedence`` rank after those listed, in the mapping's order; a
    span's rank comes from the mapping key it is filed under. Within
    one source, overlapping spans are resolved longest first. Every output span keeps its source.
    """
    order = list(precedence) + [source for source in spans_by_source if source not in precedence]
    rank = {source: i for i, source in enumerate(order)}
    candidates = sorted(
        ((rank[source], span) for source, spans in spans_by_source.items() for span in spans),
        key=lambda item: (item[0], -(item[1].end - item[1].start), item[1].start),
    )
    kept: list[Span] = []
    for _, span in candidates:
        if not any(span.overlaps(other) for other in kept):
            kept.append(span)
    return sorted(kept)
