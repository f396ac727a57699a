"""The safe vocabulary: training words whose label is settled, so taggers give them thin features."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from hybriddeid.core.document import Document
from hybriddeid.text.tokenize import tokenize


def safe_vocabulary(docs: Iterable[Document], min_count: int) -> frozenset[str]:
    """Lower-cased words seen at least ``min_count`` times in training notes and never inside
    or touching a gold span ("paciente", "presenta"): the taggers give them thin features, as
    their label is settled, which halves the feature strings a note needs."""
    counts: Counter[str] = Counter()
    unsafe: set[str] = set()
    for doc in docs:
        covered = bytearray(len(doc.text) + 1)
        for span in doc.spans:
            covered[span.start : span.end] = b"\x01" * (span.end - span.start)
        for tok in tokenize(doc.text):
            word = tok.text.lower()
            if not word.isalpha():
                continue
            counts[word] += 1
            if any(covered[tok.start : tok.end]):
                unsafe.add(word)
    return frozenset(word for word, n in counts.items() if n >= min_count and word not in unsafe)
