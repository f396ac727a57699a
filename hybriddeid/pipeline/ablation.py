"""Ablations in the manner of the paper's Tables 4-6: each classifier alone and merged, each
feature family of each CRF removed in turn, and per-category scores.

The full pipeline is trained once; an ablation retrains only the CRF it changes and is merged
with the other components' full predictions, so a study costs one CRF training per row. Rows are
plain dicts, ready for a table or a plot (``examples/ablation.ipynb``).
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.pipeline.core import Pipeline, build_component, build_config


@dataclass(frozen=True)
class Ablation:
    """One row of an ablation: ``component``'s config with ``family`` removed."""

    component: str
    family: str
    change: dict[str, Any]  # the component's config keys that remove the family


def _without(features: Sequence[str], *names: str) -> list[str]:
    return [name for name in features if name not in names]


def ablations(config: dict[str, Any]) -> list[Ablation]:
    """The feature families each configured CRF uses, as ablation rows (families a config does
    not use, e.g. clusters without a clusters folder, are left out)."""
    rows: list[Ablation] = []
    components = config["pipeline"]["components"]
    if "token" in components:
        token = config["token"]
        families = {
            "words & n-grams": ("words", "ngrams"),
            "context words": ("context",),
            "affixes": ("affixes",),
            "orthography": ("orthography",),
            "word shapes": ("shapes",),
            "sentence & section": ("line",),
        }
        for family, names in families.items():
            if set(names) & set(token["features"]):
                rows.append(Ablation("token", family, {"features": _without(token["features"], *names)}))
        if token["tag_source"]:
            rows.append(Ablation("token", "POS & NER", {"tag_source": ""}))
    for name in ("char", "token"):
        if name not in components:
            continue
        section = config[name]
        if name == "char":
            labels = {"ngrams": "character n-grams", "projection": "token projection", "line": "sentence & section"}
            for family in section["features"]:
                rows.append(Ablation("char", labels[family], {"features": _without(section["features"], family)}))
        if section["clusters"]:
            rows.append(Ablation(name, "word clusters", {"clusters": ""}))
        if section["gazetteers"] or section["extra_gazetteers"]:
            rows.append(Ablation(name, "dictionaries", {"gazetteers": [], "extra_gazetteers": []}))
        if section["lexicon"]:
            rows.append(Ablation(name, "learned lexicon", {"lexicon": False}))
    return rows


def _fit_predict(
    name: str, config: dict[str, Any], train: list[Document], dev: list[Document]
) -> tuple[list[list[Span]], float]:
    """Train one component and tag ``dev`` (runs in a worker process)."""
    started = time.perf_counter()
    component = build_component(name, config).fit(train)
    fit_seconds = time.perf_counter() - started
    return [component.predict(doc) for doc in dev], fit_seconds


def _scores(dev: list[Document], spans: list[list[Span]]) -> dict[str, float]:
    report = evaluate(dev, [doc.with_spans(s) for doc, s in zip(dev, spans)])
    prf = report.score("strict", "subtype", "micro")
    return {"precision": prf.precision, "recall": prf.recall, "f1": prf.f1}


def run_ablation(
    train: list[Document],
    dev: list[Document],
    config: dict[str, Any] | None = None,
    n_jobs: int = 2,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train the full pipeline and every ablation on ``train``, score them on ``dev``.

    Returns ``{"systems": [...], "ablations": [...], "categories": [...]}``: strict micro P/R/F1
    of each classifier alone, each pair and the merged system; of every ablation alone and merged
    (with the F1 change against the full system); and per-category strict P/R/F1 of the token CRF,
    the character CRF and the merged system.
    """
    config = build_config(config)
    say = progress or (lambda message: None)
    started = time.perf_counter()
    pipeline = Pipeline(config).fit(train, n_jobs=n_jobs)
    say(f"full pipeline trained in {time.perf_counter() - started:.0f} s")
    full = {name: [component.predict(doc) for doc in dev] for name, component in pipeline.components.items()}
    order = [name for name in pipeline.precedence if name in full]

    def merged(by_source: dict[str, list[list[Span]]], names: Sequence[str]) -> list[list[Span]]:
        return [pipeline.combine(doc, {n: by_source[n][i] for n in names}, list(names)) for i, doc in enumerate(dev)]

    systems: list[dict[str, Any]] = []
    for size in range(1, len(order) + 1):
        for names in itertools.combinations(order, size):
            label = " + ".join(names) if size < len(order) else "merged " + " > ".join(names)
            systems.append({"system": label, **_scores(dev, merged(full, names))})
    merged_full = merged(full, order)
    full_f1 = {name: _scores(dev, merged(full, [name]))["f1"] for name in order}
    full_f1["merged"] = systems[-1]["f1"]

    rows = ablations(config)
    results = []
    with ProcessPoolExecutor(max_workers=max(1, n_jobs)) as pool:
        futures = []
        for row in rows:
            changed = copy.deepcopy(config)
            changed[row.component].update(row.change)
            futures.append(pool.submit(_fit_predict, row.component, changed, train, dev))
        for row, future in zip(rows, futures):
            spans, fit_seconds = future.result()
            alone = _scores(dev, merged({row.component: spans}, [row.component]))
            with_others = _scores(dev, merged({**full, row.component: spans}, order))
            results.append(
                {
                    "component": row.component,
                    "family": row.family,
                    "fit_seconds": round(fit_seconds, 1),
                    "f1_alone": alone["f1"],
                    "delta_alone": alone["f1"] - full_f1[row.component],
                    "f1_merged": with_others["f1"],
                    "delta_merged": with_others["f1"] - full_f1["merged"],
                }
            )
            say(f"{row.component} without {row.family}: F1 {alone['f1']:.4f} alone, {with_others['f1']:.4f} merged")

    categories = []
    for system, found in (
        ("token", merged(full, ["token"]) if "token" in full else None),
        ("char", merged(full, ["char"]) if "char" in full else None),
        ("merged", merged_full),
    ):
        if found is None:
            continue
        report = evaluate(dev, [doc.with_spans(s) for doc, s in zip(dev, found)])
        for category, prf in report.per_label("strict", "category").items():
            categories.append(
                {
                    "system": system,
                    "category": category,
                    "precision": prf.precision,
                    "recall": prf.recall,
                    "f1": prf.f1,
                    "gold": prf.tp + prf.fn,
                }
            )
    return {
        "systems": systems,
        "ablations": results,
        "categories": categories,
        "config": config,
        "train_notes": len(train),
        "dev_notes": len(dev),
    }


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table of ``rows`` (floats with 4 decimals, signed for deltas)."""

    def cell(column: str, value: Any) -> str:
        if isinstance(value, float):
            return f"{value:+.4f}" if column.startswith("delta") else f"{value:.4f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(c, row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
