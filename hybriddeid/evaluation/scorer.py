"""``evaluate`` gold against predicted documents into an ``EvaluationReport``; ``evaluate_directories``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hybriddeid.core.document import Document, Span
from hybriddeid.core.profiles import DEFAULT_PHI_SET, check_phi_set, filter_spans, split_spans
from hybriddeid.core.taxonomy import Taxonomy, guess_taxonomy
from hybriddeid.evaluation.matching import CRITERIA, DocumentMatcher
from hybriddeid.evaluation.report import LEVELS, CountTable, EvaluationReport

log = logging.getLogger(__name__)


def _by_name(docs: Sequence[Document], side: str) -> dict[str, Document]:
    index: dict[str, Document] = {}
    for doc in docs:
        if doc.name in index:
            raise ValueError(f"{side} documents: name {doc.name!r} occurs twice")
        index[doc.name] = doc
    return index


def _label(span: Span) -> str:
    return span.label


def evaluate(
    gold: Sequence[Document],
    pred: Sequence[Document],
    taxonomy: Taxonomy | None = None,
    phi_set: str | None = None,
    pred_taxonomy: Taxonomy | None = None,
) -> EvaluationReport:
    """Score ``pred`` against ``gold`` under every criterion, level and subset (see ``matching``).

    Documents are paired by name. A gold document without prediction counts every gold mention as
    missed (the i2b2 script would skip it; here a lost file must cost recall), and is named in a
    warning, since a name spelt otherwise would cost recall without a word. Predicted documents
    without gold are listed in ``report.unmatched`` and ignored. Offsets refer to the gold text; only
    ``Span.start``, ``end`` and ``label`` are compared.

    Each side is read through its own taxonomy (categories, HIPAA subset, PHI set): ``taxonomy``
    for gold, by default the bundled one that knows most gold labels; ``pred_taxonomy`` for
    predictions, by default the gold's whenever no other knows more predicted labels, else the one
    that knows most (e.g. ASQ-PHI gold against i2b2 2014 predictions). Category-level scores thus
    compare across label sets; subtype-level ones only within one.

    ``phi_set`` (``hybriddeid.core.profiles``; None = i2b2-2014, every span): predicted spans outside it
    are dropped; gold spans outside it become don't-care regions, where predictions count neither as
    true nor as false positives (``matching``: predicted tokens, or for strict and relaxed predicted
    spans, that overlap one and no scored gold span are left out).
    """
    gold_index, pred_index = _by_name(gold, "gold"), _by_name(pred, "predicted")
    phi_set = check_phi_set(DEFAULT_PHI_SET if phi_set is None else phi_set)
    if taxonomy is None:
        taxonomy = guess_taxonomy({s.label for doc in gold for s in doc.spans})
    if pred_taxonomy is None:
        pred_taxonomy = guess_taxonomy({s.label for doc in pred for s in doc.spans}, prefer=taxonomy)

    missing = sorted(set(gold_index) - set(pred_index))
    if missing:
        log.warning(
            "%d gold note(s) have no prediction, so every gold span in them is scored as missed: %s",
            len(missing),
            ", ".join(missing),
        )
    counts: CountTable = {(c, lv, h): [] for c in CRITERIA for lv in LEVELS for h in (False, True)}
    n_pred = n_gold_dont_care = n_pred_dropped = 0
    for name, gold_doc in gold_index.items():
        pred_doc = pred_index.get(name)
        pred_spans: tuple[Span, ...] = pred_doc.spans if pred_doc is not None else ()
        n_pred += len(pred_spans)
        gold_kept, dont_care = split_spans(gold_doc.spans, gold_doc.text, taxonomy, phi_set)
        pred_kept = filter_spans(pred_spans, gold_doc.text, pred_taxonomy, phi_set)
        n_gold_dont_care += len(dont_care)
        n_pred_dropped += len(pred_spans) - len(pred_kept)
        matcher = DocumentMatcher(gold_doc.text)
        for hipaa in (False, True):
            g = [s for s in gold_kept if taxonomy.is_hipaa(s.label)] if hipaa else gold_kept
            p = [s for s in pred_kept if pred_taxonomy.is_hipaa(s.label)] if hipaa else pred_kept
            by_level = {
                "subtype": (g, p),
                "category": ([taxonomy.to_category(s) for s in g], [pred_taxonomy.to_category(s) for s in p]),
            }
            for criterion in CRITERIA:
                for level in LEVELS:
                    if criterion == "binary_token" and level != LEVELS[0]:
                        result = counts[(criterion, LEVELS[0], hipaa)][-1]  # labels play no part
                    else:
                        result = matcher.counts(*by_level[level], criterion, _label, dont_care)
                    counts[(criterion, level, hipaa)].append(result)

    return EvaluationReport(
        taxonomy=taxonomy,
        documents=tuple(gold_index),
        counts=counts,
        unmatched=tuple(sorted(set(pred_index) - set(gold_index))),
        n_gold_spans=sum(len(doc.spans) for doc in gold),
        n_pred_spans=n_pred,
        pred_taxonomy=pred_taxonomy,
        phi_set=phi_set,
        n_gold_dont_care=n_gold_dont_care,
        n_pred_dropped=n_pred_dropped,
    )


def evaluate_directories(
    gold_dir: Path,
    pred_dir: Path,
    fmt: str = "auto",
    taxonomy: Taxonomy | None = None,
    phi_set: str | None = None,
    encoding: str = "utf-8",
) -> EvaluationReport:
    """Read both folders (in ``encoding``) with ``hybriddeid.io.read_corpus`` and ``evaluate`` them (under ``phi_set``)."""
    from hybriddeid.io import read_corpus  # lazy: io is optional for in-memory evaluation

    return evaluate(
        read_corpus(Path(gold_dir), fmt, encoding=encoding),
        read_corpus(Path(pred_dir), fmt, encoding=encoding),
        taxonomy,
        phi_set,
    )
