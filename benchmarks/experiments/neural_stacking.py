"""Stacking on MEDDOCAN: does the token CRF gain from a neural tagger's tags as features?

The other way to combine the two families, after precedence merging (``neural_meddocan.py``):
the token CRF reads, for each token, the BIO tag a neural tagger gives it (and its neighbours'),
as it reads dictionary tags. So that the CRF learns how far to trust those tags, its training
notes carry tags from neural models that did not see them (``--folds`` models, each trained on
the other folds: cross-fitting); dev notes carry the tags of ``--neural-model``, trained on all of
train. Prints strict micro P/R/F1 on dev for the token CRF with and without the neural tags, alone,
with the rules and merged with the character CRF, all in one run; every row applies the
config's score floors, same-note propagation and precedence, plus the out-of-fold taggers' F1 on train.

    python benchmarks/experiments/neural_stacking.py --crf-model DIR --neural-model DIR [--folds 2] [--json OUT]

``--crf-model``: a CRF hybrid saved by ``neural_meddocan.py --crf-model`` or ``meddocan.py
--save-model``; ``--neural-model``: a neural tagger trained on all train notes (e.g. the
``bigru_all`` table of ``neural_meddocan.py --save-dir``), whose settings the fold models reuse.
Needs ``pip install ".[neural]"``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.gazetteer import Gazetteer
from hybriddeid.features.token import TokenSequence
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline

# the shared corpora sit beside the checkout; this script is in benchmarks/experiments/
SHARED = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "meddocan"

SpanRows = list[tuple[int, int, str, float]]


class NeuralTagsTokenCRF(TokenCRF):
    """The token CRF with one more per-token tag family, "nn": the neural tagger's BIO tag.

    ``neural_spans`` maps a note's name to the neural spans it carries (set before fit/predict)."""

    neural_spans: dict[str, SpanRows] = {}

    def token_sequences(
        self, note: AnalysedNote | Document, lexicon: Gazetteer | None = None
    ) -> Iterator[TokenSequence]:
        note = analyse(note, self.language)
        spans = sorted(self.neural_spans.get(note.doc.name, []))
        starts = [span[0] for span in spans]
        for seq in super().token_sequences(note, lexicon):
            tags = []
            for token in seq.tokens:
                i = bisect.bisect_right(starts, token.start) - 1
                if i >= 0 and token.start < spans[i][1]:
                    tags.append(("B-" if spans[i][0] == token.start else "I-") + spans[i][2])
                else:
                    tags.append("O")
            seq.extra["nn"] = tags
            yield seq


def rows_of(spans: list[Span]) -> SpanRows:
    return [(span.start, span.end, span.label, span.score) for span in spans]


def out_of_fold(model_dir: Path, train_dir: Path, fold: int, folds: int) -> dict[str, SpanRows]:
    """Train a neural tagger with the settings of the one saved in ``model_dir`` on the notes outside
    ``fold`` and tag those inside (worker process: torch is first used here, after the fork)."""
    from hybriddeid.backends.neural.tagger import NeuralTagger

    params = Pipeline.load(model_dir).components["neural"].get_params()
    notes = read_corpus(train_dir)
    fit_notes = [doc for i, doc in enumerate(notes) if i % folds != fold]
    held_out = [doc for i, doc in enumerate(notes) if i % folds == fold]
    tagger = NeuralTagger(**{**params, "num_threads": 1, "verbose": False}).fit(fit_notes)
    return {doc.name: rows_of(spans) for doc, spans in zip(held_out, tagger.predict_many(held_out))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--crf-model", type=Path, required=True, help="saved CRF hybrid (trained on train)")
    parser.add_argument("--neural-model", type=Path, required=True, help="saved neural tagger (trained on all train)")
    parser.add_argument("--folds", type=int, default=2, help="cross-fitting folds (one process each)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    train, dev = read_corpus(args.train), read_corpus(args.dev)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.folds, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(out_of_fold, args.neural_model, args.train, k, args.folds) for k in range(args.folds)]
        oof = {name: rows for future in futures for name, rows in future.result().items()}
    fold_seconds = time.perf_counter() - started
    oof_prf = evaluate(
        train, [doc.with_spans([Span(*row[:3], "neural", row[3]) for row in oof[doc.name]]) for doc in train]
    ).score("strict", "subtype", "micro")
    print(
        f"{args.folds} out-of-fold neural taggers: {fold_seconds:.0f} s wall, strict F1 on train {oof_prf.f1:.4f}",
        flush=True,
    )

    neural = Pipeline.load(args.neural_model).components["neural"]
    dev_neural = neural.predict_many(dev)
    NeuralTagsTokenCRF.neural_spans = {**oof, **{doc.name: rows_of(spans) for doc, spans in zip(dev, dev_neural)}}

    hybrid = Pipeline.load(args.crf_model)
    # The hybrid's own token CRF settings (its clusters: the saved model's copy), plus the neural tags.
    token_params = {key: value for key, value in hybrid.components["token"].get_params().items() if key != "language"}
    started = time.perf_counter()
    stacked = NeuralTagsTokenCRF(language=hybrid.config["pipeline"]["language"], **token_params).fit(train)
    stacked_seconds = time.perf_counter() - started
    print(f"token CRF with neural tags trained in {stacked_seconds:.0f} s", flush=True)

    sources = {name: [hybrid.components[name].predict(doc) for doc in dev] for name in ("rule", "token", "char")}
    sources["stacked"] = [stacked.predict(doc) for doc in dev]
    sources["neural"] = dev_neural

    def score(names: list[str], rename: dict[str, str]) -> dict[str, float]:
        merged = [
            hybrid.combine(doc, {rename.get(n, n): sources[n][i] for n in names}, [rename.get(n, n) for n in names])
            for i, doc in enumerate(dev)
        ]
        prf = evaluate(dev, [doc.with_spans(s) for doc, s in zip(dev, merged)]).score("strict", "subtype", "micro")
        return {"precision": prf.precision, "recall": prf.recall, "f1": prf.f1}

    as_token = {"stacked": "token"}  # the stacked CRF takes the token CRF's floor and rank
    rows = [
        ("neural tagger alone, same-note propagation", ["neural"], {}),
        ("token CRF", ["token"], {}),
        ("token CRF + neural tags", ["stacked"], as_token),
        ("rule + token CRF", ["rule", "token"], {}),
        ("rule + token CRF with neural tags", ["rule", "stacked"], as_token),
        ("merged rule > token > char", ["rule", "token", "char"], {}),
        ("merged rule > token with neural tags > char", ["rule", "stacked", "char"], as_token),
    ]
    print(f"\n{'system (MEDDOCAN dev, strict micro)':48s} {'P':>7s} {'R':>7s} {'F1':>7s}")
    results = []
    for label, names, rename in rows:
        prf = score(names, rename)
        results.append({"system": label, **prf})
        print(f"{label:48s} {prf['precision']:7.4f} {prf['recall']:7.4f} {prf['f1']:7.4f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "rows": results,
                    "oof_f1": oof_prf.f1,
                    "fold_seconds": fold_seconds,
                    "stacked_train_seconds": stacked_seconds,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
