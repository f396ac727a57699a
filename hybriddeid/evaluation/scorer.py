"""``evaluate`` gold against predicted documents into an ``EvaluationReport``; ``evaluate_directories``."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hybriddeid.document import Document, Span
from hybriddeid.evaluation.matching import CRITERIA, DocumentMatcher
from hybriddeid.evaluation.report import LEVELS, CountTable, EvaluationReport
from hybriddeid.taxonomy import Taxonomy, guess_taxonomy


def _by_name(docs: Sequence[Document], side: str) -> dict[str, Document]:
    index: dict[str, Document] = {}
    for doc in docs:
        if doc.name in index:
            raise ValueError(f"{side} documents: name {doc.name!r} occurs twice")
        index[doc.name] = doc
    return index


def evaluate(
    gold: Sequence[Document], pred: Sequence[Document], taxonomy: Taxonomy | None = None
) -> EvaluationReport:
    """Score ``pred`` against ``gold`` under every criterion, level and subset (see ``matching``).

    Documents are paired by name. A gold document without prediction counts every gold mention as
    missed (the i2b2 script would skip it; here a lost file must cost recall). Predicted documents
    without gold are listed in ``report.unmatched`` and ignored. Offsets refer to the gold text; only
    ``Span.start``, ``end`` and ``label`` are compared. ``taxonomy`` defaults to the bundled one that
    knows most gold labels.
    """
    gold_index, pred_index = _by_name(gold, "gold"), _by_name(pred, "predicted")
    if taxonomy is None:
        taxonomy = guess_taxonomy({s.label for doc in gold for s in doc.spans})
    label_of = {"subtype": lambda s: s.label, "category": lambda s: taxonomy.category(s.label)}

    counts: CountTable = {(c, lv, h): [] for c in CRITERIA for lv in LEVELS for h in (False, True)}
    n_pred = 0
    for name, gold_doc in gold_index.items():
        pred_doc = pred_index.get(name)
        pred_spans: tuple[Span, ...] = pred_doc.spans if pred_doc is not None else ()
        n_pred += len(pred_spans)
        matcher = DocumentMatcher(gold_doc.text)
        for hipaa in (False, True):
            g = [s for s in gold_doc.spans if taxonomy.is_hipaa(s.label)] if hipaa else gold_doc.spans
            p = [s for s in pred_spans if taxonomy.is_hipaa(s.label)] if hipaa else pred_spans
            for criterion in CRITERIA:
                for level in LEVELS:
                    if criterion == "binary_token" and level != LEVELS[0]:
                        result = counts[(criterion, LEVELS[0], hipaa)][-1]  # labels play no part
                    else:
                        result = matcher.counts(g, p, criterion, label_of[level])
                    counts[(criterion, level, hipaa)].append(result)

    return EvaluationReport(
        taxonomy=taxonomy,
        documents=tuple(gold_index),
        counts=counts,
        unmatched=tuple(sorted(set(pred_index) - set(gold_index))),
        n_gold_spans=sum(len(doc.spans) for doc in gold),
        n_pred_spans=n_pred,
    )


def evaluate_directories(
    gold_dir: Path, pred_dir: Path, fmt: str = "auto", taxonomy: Taxonomy | None = None
) -> EvaluationReport:
    """Read both folders with ``hybriddeid.io.read_corpus`` and ``evaluate`` them."""
    from hybriddeid.io import read_corpus  # lazy: io is optional for in-memory evaluation

    return evaluate(read_corpus(Path(gold_dir), fmt), read_corpus(Path(pred_dir), fmt), taxonomy)
