"""Scores of one evaluation: ``PRF`` and ``EvaluationReport`` (micro/macro, HIPAA, per label, JSON, table)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hybriddeid.core.profiles import DEFAULT_PHI_SET
from hybriddeid.core.taxonomy import Taxonomy
from hybriddeid.evaluation.matching import CRITERIA, Counts

LEVELS = ("subtype", "category")
AVERAGES = ("micro", "macro")
TABLE_CRITERIA = ("token", "strict", "relaxed")

# (criterion, level, hipaa) -> one Counts per evaluated document, in report.documents order
CountTable = dict[tuple[str, str, bool], list[Counts]]


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _f1(precision: float, recall: float) -> float:
    return _ratio(2 * precision * recall, precision + recall)


def _totals(rows: Iterable[Sequence[int]]) -> tuple[int, int, int]:
    """Column sums of (tp, fp, fn) rows."""
    tp = fp = fn = 0
    for row_tp, row_fp, row_fn in rows:
        tp, fp, fn = tp + row_tp, fp + row_fp, fn + row_fn
    return tp, fp, fn


@dataclass(frozen=True)
class PRF:
    """Counts and precision/recall/F1; a ratio with a zero denominator is 0.0 (as the i2b2 script)."""

    tp: int
    fp: int
    fn: int
    precision: float
    recall: float
    f1: float

    @classmethod
    def from_counts(cls, tp: int, fp: int, fn: int) -> PRF:
        precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
        return cls(tp, fp, fn, precision, recall, _f1(precision, recall))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


class EvaluationReport:
    """Counts of every criterion x level x (all | HIPAA) per document, scored on demand.

    ``micro`` pools the counts of all documents. ``macro`` averages per-document precision and recall
    over documents and takes F1 of those two means, as the i2b2 2014 script does (``macro_precision``,
    ``macro_recall``, ``F_beta(Mp, Mr)``); a per-document ratio with a zero denominator counts as 0.0
    there, as here. One deliberate difference: a document with nothing to score under a criterion (no
    gold and no predicted mention, e.g. no HIPAA PHI at all) is left out of that macro average instead
    of counting as P = R = 0, so a perfect system scores 1.0.

    ``documents`` are the gold names evaluated; ``unmatched`` the predicted names without gold;
    ``n_pred_spans`` counts predictions on evaluated documents only. ``taxonomy`` reads the gold
    labels, ``pred_taxonomy`` the predicted ones (the same unless the label sets differ). Under a PHI
    set other than i2b2-2014, ``n_gold_dont_care`` gold spans fell outside it (don't-care regions)
    and ``n_pred_dropped`` predicted spans were dropped.
    """

    def __init__(
        self,
        taxonomy: Taxonomy,
        documents: tuple[str, ...],
        counts: CountTable,
        unmatched: tuple[str, ...] = (),
        n_gold_spans: int = 0,
        n_pred_spans: int = 0,
        pred_taxonomy: Taxonomy | None = None,
        phi_set: str = DEFAULT_PHI_SET,
        n_gold_dont_care: int = 0,
        n_pred_dropped: int = 0,
    ) -> None:
        self.taxonomy = taxonomy
        self.pred_taxonomy = pred_taxonomy or taxonomy
        self.phi_set = phi_set
        self.n_gold_dont_care = n_gold_dont_care
        self.n_pred_dropped = n_pred_dropped
        self.documents = documents
        self.unmatched = unmatched
        self.n_gold_spans = n_gold_spans
        self.n_pred_spans = n_pred_spans
        self._counts = counts

    def _table(self, criterion: str, level: str, hipaa: bool) -> list[Counts]:
        if criterion not in CRITERIA:
            raise ValueError(f"unknown criterion {criterion!r}; expected one of {', '.join(CRITERIA)}")
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
        return self._counts[(criterion, level, bool(hipaa))]

    def score(
        self, criterion: str = "strict", level: str = "subtype", average: str = "micro", hipaa: bool = False
    ) -> PRF:
        """Overall P/R/F1 (for macro, tp/fp/fn are still the pooled counts); ``binary_token`` has a
        single label, so ``level`` does not change it."""
        if average not in AVERAGES:
            raise ValueError(f"unknown average {average!r}; expected micro or macro")
        docs = [_totals(counts.values()) for counts in self._table(criterion, level, hipaa)]
        tp, fp, fn = _totals(docs)
        if average == "micro":
            return PRF.from_counts(tp, fp, fn)
        scored = [PRF.from_counts(*doc) for doc in docs if any(doc)]
        precision = _ratio(sum(d.precision for d in scored), len(scored))
        recall = _ratio(sum(d.recall for d in scored), len(scored))
        return PRF(tp, fp, fn, precision, recall, _f1(precision, recall))

    def per_label(self, criterion: str = "strict", level: str = "subtype", hipaa: bool = False) -> dict[str, PRF]:
        """Micro P/R/F1 of every label (subtype or category) seen in gold or predictions."""
        rows: dict[str, list[Sequence[int]]] = defaultdict(list)
        for counts in self._table(criterion, level, hipaa):
            for label, row in counts.items():
                rows[label].append(row)
        return {label: PRF.from_counts(*_totals(rows[label])) for label in sorted(rows)}

    def to_dict(self) -> dict[str, Any]:
        """All results as JSON types: ``scores[criterion][level][all|hipaa][micro|macro]`` -> PRF dict,
        ``per_label[criterion][level][all|hipaa][label]`` -> PRF dict, plus counts and unmatched names."""
        subsets = (("all", False), ("hipaa", True))
        return {
            "taxonomy": self.taxonomy.name,
            "pred_taxonomy": self.pred_taxonomy.name,
            "phi_set": {
                "name": self.phi_set,
                "gold_spans_dont_care": self.n_gold_dont_care,
                "pred_spans_dropped": self.n_pred_dropped,
            },
            "counts": {
                "documents": len(self.documents),
                "gold_spans": self.n_gold_spans,
                "pred_spans": self.n_pred_spans,
            },
            "unmatched": list(self.unmatched),
            "scores": {
                c: {
                    lv: {name: {a: self.score(c, lv, a, h).to_dict() for a in AVERAGES} for name, h in subsets}
                    for lv in LEVELS
                }
                for c in CRITERIA
            },
            "per_label": {
                c: {
                    lv: {
                        name: {label: prf.to_dict() for label, prf in self.per_label(c, lv, h).items()}
                        for name, h in subsets
                    }
                    for lv in LEVELS
                }
                for c in CRITERIA
            },
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def category(self, label: str) -> str:
        """A subtype's category: the gold taxonomy's if it knows the label, else the predictions'."""
        taxonomy = self.taxonomy if self.taxonomy.knows(label) else self.pred_taxonomy
        return taxonomy.category(label)

    @property
    def same_labels(self) -> bool:
        """Whether gold and predictions share one label set (else only categories compare)."""
        return self.pred_taxonomy.name == self.taxonomy.name

    def _ordered_rows(self) -> list[tuple[str, str]]:
        """(level, label) rows: each category seen, then its subtypes seen, in taxonomy order (gold's
        labels first, then the predictions'); categories only when the label sets differ."""
        seen = self.per_label("strict", "subtype")  # every span's label has a strict element
        labels = dict.fromkeys((*self.taxonomy.labels, *self.pred_taxonomy.labels))
        order = {label: i for i, label in enumerate(labels)}
        subtypes = sorted(seen, key=lambda s: (order.get(s, len(order)), s))
        categories = list(dict.fromkeys(self.category(s) for s in subtypes))
        rows: list[tuple[str, str]] = []
        for category in categories:
            rows.append(("category", category))
            # a label outside the taxonomy is its own category: no second row for it
            if self.same_labels:
                rows.extend(("subtype", s) for s in subtypes if self.category(s) == category != s)
        return rows

    def _heading(self) -> list[str]:
        """What was scored: taxonomies, PHI set, documents (and what the PHI set left out)."""
        taxonomy = self.taxonomy.name
        if not self.same_labels:
            taxonomy += f" (predictions: {self.pred_taxonomy.name}; label sets differ: scored by category)"
        lines = [f"taxonomy {taxonomy}, PHI set {self.phi_set}, {len(self.documents)} documents"]
        if self.phi_set != DEFAULT_PHI_SET:
            lines.append(
                f"outside the PHI set: {self.n_gold_dont_care} gold spans (don't care), "
                f"{self.n_pred_dropped} predicted spans (dropped)"
            )
        return lines

    def format_table(self) -> str:
        """A fixed-width table: P/R/F1 per category and subtype for token/strict/relaxed, then totals
        (subtype level; category level when gold and predictions use different label sets)."""
        rows = self._ordered_rows()
        width = max([len(label) + 2 for _, label in rows] + [16])
        header1 = " " * width + f"{'gold':>6}" + "".join(f"  {c:^20}" for c in TABLE_CRITERIA)
        header2 = f"{'label':<{width}}{'':>6}" + f"  {'P':>6}{'R':>7}{'F1':>7}" * len(TABLE_CRITERIA)

        def line(name: str, prfs: list[PRF]) -> str:
            strict = prfs[TABLE_CRITERIA.index("strict")]
            gold = strict.tp + strict.fn  # gold mentions
            cells = "".join(f"  {p.precision:6.4f} {p.recall:6.4f} {p.f1:6.4f}" for p in prfs)
            return f"{name:<{width}}{gold:>6}{cells}"

        per_label = {(c, lv): self.per_label(c, lv) for c in TABLE_CRITERIA for lv in LEVELS}
        empty = PRF.from_counts(0, 0, 0)
        total_level = "subtype" if self.same_labels else "category"
        lines = [*self._heading(), header1, header2]
        for level, label in rows:
            name = label if level == "category" else "  " + label
            lines.append(line(name, [per_label[(c, level)].get(label, empty) for c in TABLE_CRITERIA]))
        lines.append("-" * len(header2))
        for hipaa in (False, True):
            for average in AVERAGES:
                name = f"{'HIPAA ' if hipaa else ''}{average}"
                scores = [self.score(c, total_level, average, hipaa) for c in TABLE_CRITERIA]
                lines.append(line(name, scores))
        if self.unmatched:
            lines.append(f"ignored: {len(self.unmatched)} predicted document(s) without gold")
        return "\n".join(lines)
