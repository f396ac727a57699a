"""MEDDOCAN benchmark of the neural backend: each neural tagger alone and merged with the CRF hybrid.

Trains the CRF hybrid (``benchmarks/meddocan.toml``) on MEDDOCAN train, or loads it from
``--crf-model`` when an earlier run saved it there, then trains each neural architecture
(settings: ``benchmarks/neural_meddocan.toml``) and scores everything on dev in the same run:
strict micro P/R/F1 over the fine MEDDOCAN types, training seconds and notes/second (one process,
tokenisation included; the neural taggers tag in batches). CPU only unless ``--device`` says otherwise.

    python benchmarks/neural_meddocan.py [--architectures bigru,tsgru,cedi] [--threads 2]
        [--crf-model /tmp/meddocan-crf] [--save-dir /tmp/meddocan-neural] [--json OUT]

The word clusters the tables embed (`meddocan-clusters`, next to this script) are built first when
missing: start one run and wait until it prints "train ... notes" before starting another beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import tomllib
from pathlib import Path

import torch

from hybriddeid.backends.neural.tagger import NeuralTagger
from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.build import ensure_clusters
from hybriddeid.pipeline.core import Pipeline, load_config


def save_tagger(tagger: NeuralTagger, folder: Path) -> None:
    """Save a neural tagger as a one-component pipeline (its settings in the pipeline's config),
    which ``Pipeline.load(folder).components["neural"]`` reads back."""
    params = {key: value for key, value in tagger.get_params().items() if key != "language"}
    pipeline = Pipeline(
        {
            "pipeline": {"language": tagger.language, "components": ["neural"], "precedence": ["neural"]},
            "neural": params,
        }
    )
    pipeline.components = {"neural": tagger}
    pipeline.to_disk(folder)


HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "corpora" / "meddocan"


def crf_hybrid(args: argparse.Namespace, train: list[Document]) -> tuple[Pipeline, float]:
    """The CRF hybrid and its training seconds (as recorded when it was trained, if loaded)."""
    if args.crf_model and (args.crf_model / "config.toml").is_file():
        pipeline = Pipeline.load(args.crf_model)
        print(f"CRF hybrid loaded from {args.crf_model}", flush=True)
        return pipeline, float(pipeline.meta.get("fit_wall_seconds", max(pipeline.meta["fit_seconds"].values())))
    config = load_config(args.config)
    for folder in ensure_clusters(config, [args.train, args.dev], config["pipeline"]["language"]):
        print(f"built word clusters from the train + dev text: {folder}", flush=True)
    started = time.perf_counter()
    pipeline = Pipeline(config).fit(train, corpus_name="meddocan-train")
    pipeline.meta["fit_wall_seconds"] = round(time.perf_counter() - started, 1)
    if args.crf_model:
        pipeline.to_disk(args.crf_model)
    return pipeline, pipeline.meta["fit_wall_seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--config", type=Path, default=HERE / "meddocan.toml", help="the CRF hybrid's pipeline config")
    parser.add_argument("--neural-config", type=Path, default=HERE / "neural_meddocan.toml")
    parser.add_argument("--architectures", default="bigru,tsgru,cedi", help="tables of --neural-config to run")
    parser.add_argument("--crf-model", type=Path, help="load the CRF hybrid from here, or train it and save it here")
    parser.add_argument("--save-dir", type=Path, help="save each neural model to DIR/<architecture>")
    parser.add_argument(
        "--reuse", action="store_true", help="load neural models found in --save-dir instead of training"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)  # one line per epoch
    torch.set_num_threads(args.threads)
    neural_settings = tomllib.loads(args.neural_config.read_text(encoding="utf-8"))
    # The word clusters the neural tables embed are the CRF hybrid's; a fresh checkout has none yet,
    # and the neural taggers train before the hybrid, so build them first (once; later runs find them).
    for folder in ensure_clusters(load_config(args.config), [args.train, args.dev], "es"):
        print(f"built word clusters from the train + dev text: {folder}", flush=True)
    train, dev = read_corpus(args.train), read_corpus(args.dev)
    print(
        f"train {len(train)} notes, dev {len(dev)} notes; torch {torch.__version__}, {args.threads} threads, "
        f"device {args.device}",
        flush=True,
    )

    # Neural models first, so runs started together can share a CRF hybrid saved by the first to finish it.
    taggers: dict[str, NeuralTagger] = {}
    for architecture in [name for name in args.architectures.split(",") if name]:
        saved = args.save_dir / architecture if args.save_dir else None
        if args.reuse and saved and (saved / "neural" / "model.pt").is_file():
            taggers[architecture] = Pipeline.load(saved).components["neural"]  # training seconds as recorded then
            print(f"{architecture} loaded from {saved}", flush=True)
            continue
        settings = {
            **neural_settings[architecture],
            "num_threads": args.threads,
            "device": args.device,
            "verbose": True,
        }
        if settings.get("clusters"):  # relative to the settings file, as in pipeline configs
            settings["clusters"] = str(args.neural_config.parent / settings["clusters"])
        taggers[architecture] = NeuralTagger(language="es", **settings).fit(train)
        print(f"{architecture} trained in {taggers[architecture].fit_seconds_} s", flush=True)
        if saved:
            save_tagger(taggers[architecture], saved)

    pipeline, crf_seconds = crf_hybrid(args, train)
    predictions: dict[str, list[list[Span]]] = {name: [] for name in pipeline.components}
    seconds = dict.fromkeys(predictions, 0.0)
    for doc in dev:
        for name, component in pipeline.components.items():
            started = time.perf_counter()
            predictions[name].append(component.predict(doc))
            seconds[name] += time.perf_counter() - started
    for architecture, tagger in taggers.items():
        started = time.perf_counter()
        predictions[architecture] = [
            [span.with_source(architecture) for span in spans] for spans in tagger.predict_many(dev)
        ]
        seconds[architecture] = time.perf_counter() - started
    crf_order = [name for name in pipeline.precedence if name in pipeline.components]

    def score(spans_per_doc: list[list[Span]]) -> dict[str, float]:
        prf = evaluate(dev, [doc.with_spans(spans) for doc, spans in zip(dev, spans_per_doc)]).score("strict")
        return {"precision": prf.precision, "recall": prf.recall, "f1": prf.f1}

    rows: list[dict] = []

    def row(system: str, sources: list[str], train_seconds: float, merged: bool = True) -> None:
        started = time.perf_counter()
        spans = [
            pipeline.combine(doc, {n: predictions[n][i] for n in sources}, sources)
            if merged
            else predictions[sources[0]][i]
            for i, doc in enumerate(dev)
        ]
        rate = len(dev) / (sum(seconds[n] for n in sources) + time.perf_counter() - started)
        rows.append(
            {
                "system": system,
                **score(spans),
                "train_seconds": round(train_seconds, 1),
                "notes_per_second": round(rate, 1),
            }
        )
        r = rows[-1]
        print(
            f"{system:52s} {r['precision']:7.4f} {r['recall']:7.4f} {r['f1']:7.4f} {train_seconds:8.1f} {rate:8.1f}",
            flush=True,
        )

    print(f"\n{'system':52s} {'P':>7s} {'R':>7s} {'F1':>7s} {'train s':>8s} {'notes/s':>8s}")
    row("CRF hybrid " + " > ".join(crf_order), crf_order, crf_seconds)
    rule, crfs = crf_order[:1], crf_order[1:]
    for architecture, tagger in taggers.items():
        fit_seconds = tagger.fit_seconds_ or 0.0
        row(f"{architecture} alone ({len(tagger.history_)} epochs)", [architecture], fit_seconds, merged=False)
        row(f"CRF hybrid + {architecture} last", [*crf_order, architecture], crf_seconds + fit_seconds)
        row(f"CRF hybrid, {architecture} after rule", [*rule, architecture, *crfs], crf_seconds + fit_seconds)
        row(f"CRF hybrid, {architecture} first", [architecture, *crf_order], crf_seconds + fit_seconds)
    if len(taggers) > 1:
        names = list(taggers)
        row(
            f"CRF hybrid, {' > '.join(names)} after rule",
            [*rule, *names, *crfs],
            crf_seconds + sum(tagger.fit_seconds_ or 0.0 for tagger in taggers.values()),
        )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "threads": args.threads, "device": args.device}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
