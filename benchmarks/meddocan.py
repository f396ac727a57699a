"""MEDDOCAN benchmark: the paper's Table 4 analogue, measured side by side in one run.

Trains on ``../shared/corpora/meddocan/train`` (or --train), evaluates on ``dev`` and prints
strict micro P/R/F1 (fine MEDDOCAN types) for a plain token-CRF baseline, each classifier, each
pair and the merged system, with training time and annotation speed (notes/second, one process,
feature extraction included). Speeds of the combinations are the sums of their parts' times.

    python benchmarks/meddocan.py [--train DIR] [--dev DIR] [--json OUT] [--save-model DIR | --model DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.merge import merge
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.build import ensure_clusters
from hybriddeid.pipeline.core import Pipeline

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan"
BASELINE_FEATURES = ["words", "affixes", "shapes"]  # word, shape, affixes, words in [-2, 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=SHARED / "train" / "brat")
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument("--config", type=Path, help="pipeline config TOML (default: the Spanish benchmark config)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--save-model", type=Path, help="save the pipeline trained on train here")
    parser.add_argument(
        "--model",
        type=Path,
        help="use a pipeline saved by --save-model instead of training one "
        "(its [pipeline] settings are replaced by the config's)",
    )
    args = parser.parse_args()

    from hybriddeid.pipeline.core import load_config

    config_path = args.config or Path(__file__).with_name("meddocan.toml")
    config = load_config(config_path)
    for folder in ensure_clusters(config, [args.train, args.dev], config["pipeline"]["language"]):
        print(f"built word clusters from the train + dev text: {folder}", flush=True)
    train, dev = read_corpus(args.train), read_corpus(args.dev)
    print(f"train {len(train)} notes, dev {len(dev)} notes; config {config_path.name}", flush=True)

    if args.model:  # trained earlier on train (its training times are the recorded ones)
        pipeline = Pipeline.load(args.model)
        pipeline.config["pipeline"].update(config["pipeline"])  # score floors, precedence, focus: this config's
        fit_wall = float(pipeline.meta.get("fit_wall_seconds", max(pipeline.meta["fit_seconds"].values())))
    else:
        started = time.perf_counter()
        pipeline = Pipeline(config).fit(train, corpus_name="meddocan-train")
        fit_wall = time.perf_counter() - started
        pipeline.meta["fit_wall_seconds"] = round(fit_wall, 1)
        if args.save_model:
            pipeline.to_disk(args.save_model)
    fit_seconds = pipeline.meta["fit_seconds"]

    baseline = TokenCRF(
        features=BASELINE_FEATURES, window=2, language="es", max_iterations=config["token"]["max_iterations"]
    )
    started = time.perf_counter()
    baseline.fit(train)
    baseline_fit = time.perf_counter() - started

    # One pass over dev per classifier, timing each; merges are recombined from these outputs.
    predictions: dict[str, list] = {name: [] for name in [*pipeline.components, "baseline"]}
    seconds: dict[str, float] = dict.fromkeys(predictions, 0.0)
    components = {**pipeline.components, "baseline": baseline}
    for doc in dev:
        for name, component in components.items():
            t0 = time.perf_counter()
            predictions[name].append(component.predict(doc))
            seconds[name] += time.perf_counter() - t0

    def score(spans_per_doc: list) -> dict:
        pred_docs = [doc.with_spans(spans) for doc, spans in zip(dev, spans_per_doc)]
        prf = evaluate(dev, pred_docs).score("strict", "subtype", "micro")
        return {"precision": prf.precision, "recall": prf.recall, "f1": prf.f1}

    # (label, sources in precedence order, training seconds, apply the config's score floors and propagation)
    rows = [("token baseline (word, shape, affixes, [-2,2])", ["baseline"], baseline_fit, False)]
    sources = [name for name in pipeline.precedence if name in pipeline.components]
    for size in (1, 2, 3):
        for combo in itertools.combinations(sources, size):
            label = " + ".join(combo) if size < 3 else "merged " + " > ".join(combo)
            rows.append((label, list(combo), max(fit_seconds.get(n, 0.0) for n in combo), True))
    everything = max(fit_seconds.values())
    rows.append(("merged, plain precedence (no score floor/propagation)", sources, everything, False))
    alt = ["rule", "token", "char"] if sources != ["rule", "token", "char"] else ["rule", "char", "token"]
    if set(alt) <= set(sources) and alt != sources:
        rows.append(("merged " + " > ".join(alt), alt, everything, True))

    # The configured pipeline as a user runs it (Pipeline.predict, so with its focus if any), timed
    # end to end: wall and CPU seconds of the best of three passes over dev (machines are noisy).
    focus = dict(config["pipeline"]["focus"])
    passes = []
    for _ in range(3):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        configured = [pipeline.predict(doc) for doc in dev]
        passes.append((time.perf_counter() - wall0, time.process_time() - cpu0))
    end_to_end_wall, end_to_end_cpu = min(passes)
    if focus:  # the rows recombined from independent runs read the whole note with every classifier
        rows = [
            (
                label + " (every classifier on every line)" if len(combo) == 3 and "char" in combo else label,
                combo,
                seconds_,
                post,
            )
            for label, combo, seconds_, post in rows
        ]

    results = []
    print(f"settings: min_score={dict(config['pipeline']['min_score'])} propagate={config['pipeline']['propagate']}")
    print(f"\n{'system':56s} {'P':>7s} {'R':>7s} {'F1':>7s} {'train s':>8s} {'notes/s':>8s}")
    for label, combo, train_seconds, post in rows:
        t0 = time.perf_counter()
        merged = [
            pipeline.combine(doc, {n: predictions[n][i] for n in combo}, combo)
            if post
            else merge({n: predictions[n][i] for n in combo}, combo)
            for i, doc in enumerate(dev)
        ]
        merge_seconds = time.perf_counter() - t0
        prf = score(merged)
        rate = len(dev) / (sum(seconds[n] for n in combo) + merge_seconds)
        results.append(
            {"system": label, **prf, "train_seconds": round(train_seconds, 1), "notes_per_second": round(rate, 1)}
        )
        print(
            f"{label:56s} {prf['precision']:7.4f} {prf['recall']:7.4f} {prf['f1']:7.4f} {train_seconds:8.1f} {rate:8.1f}"
        )
    focus_text = ", ".join(f"{a} focused by {b}" for a, b in focus.items()) or "no focus"
    label = f"merged as configured, end to end ({focus_text})"
    results.append(
        {
            "system": label,
            **score(configured),
            "train_seconds": round(everything, 1),
            "notes_per_second": round(len(dev) / end_to_end_wall, 1),
            "notes_per_cpu_second": round(len(dev) / end_to_end_cpu, 1),
        }
    )
    r = results[-1]
    print(
        f"{label:56s} {r['precision']:7.4f} {r['recall']:7.4f} {r['f1']:7.4f} {everything:8.1f} {r['notes_per_second']:8.1f}"
    )
    print(
        f"\nend to end: Pipeline.predict over the {len(dev)} dev notes in one process, best of 3 passes: "
        f"{end_to_end_wall:.1f} s wall ({r['notes_per_second']} notes/s), {end_to_end_cpu:.1f} CPU s "
        f"({r['notes_per_cpu_second']} notes per CPU-second); all passes (wall notes/s): "
        + ", ".join(f"{len(dev) / wall:.1f}" for wall, _ in passes)
    )
    print(f"pipeline training wall time (CRFs in parallel, 2 processes): {fit_wall:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"rows": results, "fit_wall_seconds": fit_wall}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
