"""One part of a note's work, this checkout's way against another, in one process, alternating: speed
that a whole process on a noisy machine cannot resolve (a few percent), with the outputs checked equal.

Parts:

- ``token``: the token CRF's ``TokenIds.emissions`` (the fast engine's features and scores) of this
  checkout against ``--baseline-tree``'s ``hybriddeid/features/token_ids.py`` (loaded beside it, the rest of
  the code this checkout's), over each note's lines as the bundled model reads them: both must give the
  same scores bit for bit; then warm (caches full, best of ``--rounds``) and cold (a fresh featurizer
  each round, every word form new) milliseconds per note.
- ``rules``: each bundled rule that says ``one_line``, searched over each note's layout text as it is and
  as a search of the whole text (``one_line`` off): both must find the same hits; then microseconds
  per note per rule, best of ``--rounds``.

Sets: ``en`` (200 generated test-mix notes, seed 2, as ``same_spans.py``) and ``es`` (MEDDOCAN dev).

    python benchmarks/component_ab.py --part token --baseline-tree WT [--set en --set es] [--rounds 7]
    python benchmarks/component_ab.py --part rules [--set en --set es] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

from hybriddeid.classifiers.rules import bundled_rules_text, parse_rule_file
from hybriddeid.core.document import Document
from hybriddeid.features import token_ids
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from same_spans import ENGLISH_NOTES, ENGLISH_SEED, MEDDOCAN_DEV  # noqa: E402


def notes_of(name: str) -> list[Document]:
    if name == "en":
        return list(generate_corpus(ENGLISH_NOTES, ENGLISH_SEED, "test"))
    return read_corpus(MEDDOCAN_DEV)


def best_of(rounds: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each run's best seconds over ``rounds`` rounds, the runs alternating within a round."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def baseline_module(tree: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "baseline_token_ids", tree / "hybriddeid" / "features" / "token_ids.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def token_part(name: str, tree: Path, rounds: int) -> None:
    pipeline = Pipeline.load(name)
    token = pipeline.components["token"]
    shipped = token._token_ids()
    old = baseline_module(tree)

    def featurizer(module: ModuleType) -> token_ids.TokenIds:
        dictionaries = [module.Dictionary(d.name, d.gazetteer, d.case_marked) for d in shipped.dictionaries]
        return module.TokenIds(
            shipped.weights,
            shipped.features,
            shipped.window,
            shipped.safe_words,
            shipped.clusters,
            dictionaries,
            None,
            vocabulary=shipped.vocabulary,
            proper_nouns=shipped.proper_nouns,
            surnames=shipped.surnames,
        )

    batches = []
    for doc in notes_of(name):
        note = pipeline.analyse(doc)
        segments = note.segments(token.segment_chars, token.segment_overlap)
        batches.append([token_ids.LineInput(segment.line) for segment in segments if segment.line.tokens])
    warm = {"baseline": featurizer(old), "this": featurizer(token_ids)}
    for batch in batches:
        assert np.array_equal(warm["baseline"].emissions(batch), warm["this"].emissions(batch)), "scores differ"

    def each(make: Callable[[], token_ids.TokenIds]) -> Callable[[], object]:
        def run() -> None:  # a cold round's featurizer is made inside it, its tables included
            scorer = make()
            for batch in batches:
                scorer.emissions(batch)

        return run

    hot = best_of(rounds, {key: each(lambda key=key: warm[key]) for key in warm})
    cold = best_of(rounds, {"baseline": each(lambda: featurizer(old)), "this": each(lambda: featurizer(token_ids))})
    for label, best in (("warm", hot), ("cold", cold)):
        per_note = {key: 1000 * seconds / len(batches) for key, seconds in best.items()}
        print(
            f"| {name} | token emissions, {label} | {per_note['baseline']:.3f} | {per_note['this']:.3f} "
            f"| {best['baseline'] / best['this']:.2f} |"
        )


def rules_part(name: str, rounds: int) -> None:
    pipeline = Pipeline.load(name)
    texts = [pipeline.analyse(doc).layout_text for doc in notes_of(name)]
    rules = [rule for rule in parse_rule_file(bundled_rules_text(name), "bundled").rules if rule.one_line]
    totals = {"whole": 0.0, "one_line": 0.0}
    for rule in rules:
        whole = dataclasses.replace(rule, one_line=False)
        assert [rule.spans(text) for text in texts] == [whole.spans(text) for text in texts], rule.name
        searches = {"whole": whole, "one_line": rule}
        best = best_of(rounds, {key: lambda r=r: [r.spans(text) for text in texts] for key, r in searches.items()})
        for key in totals:
            totals[key] += best[key]
        print(
            f"| {name} | {rule.name} | {1e6 * best['whole'] / len(texts):.1f} | {1e6 * best['one_line'] / len(texts):.1f} "
            f"| {best['whole'] / best['one_line']:.2f} |"
        )
    print(
        f"| {name} | all {len(rules)} | {1e6 * totals['whole'] / len(texts):.1f} | "
        f"{1e6 * totals['one_line'] / len(texts):.1f} | {totals['whole'] / totals['one_line']:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["token", "rules"], required=True)
    parser.add_argument("--set", dest="sets", action="append", choices=["en", "es"])
    parser.add_argument("--baseline-tree", type=Path, help="with --part token: the other checkout")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sets = args.sets or ["en", "es"]
    if args.part == "token":
        if args.baseline_tree is None:
            parser.error("--part token needs --baseline-tree")
        print("| set | part | baseline ms/note | this ms/note | baseline / this |\n| --- | --- | ---: | ---: | ---: |")
        for name in sets:
            token_part(name, args.baseline_tree, args.rounds)
    else:
        print(
            "| set | rule | whole text us/note | one_line us/note | whole / one_line |\n| --- | --- | ---: | ---: | ---: |"
        )
        for name in sets:
            rules_part(name, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
