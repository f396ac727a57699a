"""Per-document matching of gold and predicted spans under the i2b2 2014 criteria.

Semantics follow the official i2b2 2014 evaluation scripts (github.com/kotfic/i2b2_evaluation_scripts,
``classes.py``: ``EvaluatePHI``, ``EvaluateTokenizedPHI``, ``TokenSequence.tokenizer``; ``tags.py``:
``PHITag.key``, ``fuzzy_end_equality``):

* ``strict``: a mention is a set element ``(label, start, end)``; TP = gold & pred, FP = pred - gold,
  FN = gold - pred (the script compares sets of tags keyed by tag, start, end and TYPE).
* ``relaxed``: as strict, but ``end`` may differ by up to ``RELAXED_END_TOLERANCE`` (2) characters;
  ``start`` and label must be equal (the script's ``fuzzy_end_equality(2)``). The script leaves the
  pairing to Python's set operations; here pairs are one-to-one and the number of pairs is maximal,
  which gives the same counts whenever no two mentions on one side share label and start.
* ``token``: every span is cut into runs of alphanumerics *inside the span* (offsets into the note),
  each run becomes a set element ``(label, start, end)`` and is compared as in strict. The script uses
  ``[a-zA-Z0-9]+``; ``TOKEN_PATTERN`` is its Unicode generalisation (identical on ASCII text) so that
  Spanish names such as MEDDOCAN's are not split at accented letters.
* ``binary_token``: tokens as above with labels ignored (PHI versus not PHI); not an i2b2 criterion.

The label of an element is the span's subtype or its taxonomy category (``level``); the HIPAA subset
is taken by the caller, on gold and predictions alike, before matching (as the script's filters do).

*Don't-care regions* (not in the i2b2 scripts): gold spans outside the PHI set being scored
(``hybriddeid.core.profiles``). A predicted element (token, or span for strict and relaxed) that overlaps
one of them, and no gold span that is scored, is left out: it counts neither as a true nor as a false
positive, since the gold there says "PHI, but not of this set".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from hybriddeid.core.document import Span

CRITERIA = ("token", "strict", "relaxed", "binary_token")
RELAXED_END_TOLERANCE = 2
TOKEN_PATTERN = re.compile(r"[^\W_]+")
BINARY_LABEL = "PHI"

# label -> [tp, fp, fn] for one document
Counts = dict[str, list[int]]
Element = tuple[str, int, int]


def span_tokens(text: str, span: Span) -> list[tuple[int, int]]:
    """(start, end) of the alphanumeric runs of ``text[span.start:span.end]``, as note offsets."""
    return [(m.start(), m.end()) for m in TOKEN_PATTERN.finditer(text, span.start, span.end)]


def _set_counts(gold: set[Element], pred: set[Element]) -> Counts:
    """Exact set comparison, tallied per label."""
    counts: Counts = defaultdict(lambda: [0, 0, 0])
    for element in gold & pred:
        counts[element[0]][0] += 1
    for element in pred - gold:
        counts[element[0]][1] += 1
    for element in gold - pred:
        counts[element[0]][2] += 1
    return counts


def _relaxed_counts(gold: set[Element], pred: set[Element]) -> Counts:
    """Same label and start, ends within the tolerance; a maximal one-to-one pairing.

    Within one (label, start) group, gold and predicted ends are sorted and each gold end takes the
    smallest unused predicted end it can reach: with equal-width windows this greedy pairing is maximal.
    """
    counts: Counts = defaultdict(lambda: [0, 0, 0])
    pred_ends: dict[tuple[str, int], list[int]] = defaultdict(list)
    for label, start, end in pred:
        pred_ends[(label, start)].append(end)
    gold_ends: dict[tuple[str, int], list[int]] = defaultdict(list)
    for label, start, end in gold:
        gold_ends[(label, start)].append(end)
    for key, ends in gold_ends.items():
        label = key[0]
        candidates = sorted(pred_ends.pop(key, ()))
        j = 0
        for end in sorted(ends):
            while j < len(candidates) and candidates[j] < end - RELAXED_END_TOLERANCE:
                counts[label][1] += 1  # a predicted end too short for this and every later gold end
                j += 1
            if j < len(candidates) and candidates[j] <= end + RELAXED_END_TOLERANCE:
                counts[label][0] += 1
                j += 1
            else:
                counts[label][2] += 1
        counts[label][1] += len(candidates) - j
    for (label, _), ends in pred_ends.items():
        counts[label][1] += len(ends)
    return counts


def _overlaps_any(start: int, end: int, regions: Sequence[tuple[int, int]]) -> bool:
    return any(a < end and start < b for a, b in regions)


def _outside_dont_care(elements: set[Element], dont_care: Sequence[Span], gold: Sequence[Span]) -> set[Element]:
    """``elements`` less those overlapping a don't-care region and no scored gold span."""
    ignored = [(s.start, s.end) for s in dont_care]
    scored = [(s.start, s.end) for s in gold]
    return {e for e in elements if not _overlaps_any(e[1], e[2], ignored) or _overlaps_any(e[1], e[2], scored)}


class DocumentMatcher:
    """Matches one document's gold and predicted spans; caches span tokens across criteria."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._tokens: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def _tokens_of(self, span: Span) -> list[tuple[int, int]]:
        key = (span.start, span.end)
        if key not in self._tokens:
            self._tokens[key] = span_tokens(self.text, span)
        return self._tokens[key]

    def _elements(self, spans: Iterable[Span], criterion: str, label_of: Callable[[Span], str]) -> set[Element]:
        if criterion in ("strict", "relaxed"):
            return {(label_of(s), s.start, s.end) for s in spans}
        if criterion == "token":
            return {(label_of(s), a, b) for s in spans for a, b in self._tokens_of(s)}
        return {(BINARY_LABEL, a, b) for s in spans for a, b in self._tokens_of(s)}

    def counts(
        self,
        gold: Sequence[Span],
        pred: Sequence[Span],
        criterion: str,
        label_of: Callable[[Span], str],
        dont_care: Sequence[Span] = (),
    ) -> Counts:
        """label -> [tp, fp, fn] of this document under ``criterion``; predicted elements over
        ``dont_care`` gold spans (and no scored gold span) are left out."""
        gold_elements = self._elements(gold, criterion, label_of)
        pred_elements = self._elements(pred, criterion, label_of)
        if dont_care:
            pred_elements = _outside_dont_care(pred_elements, dont_care, gold)
        match = _relaxed_counts if criterion == "relaxed" else _set_counts
        return dict(match(gold_elements, pred_elements))  # a plain dict: reading never inserts
