"""The ``hybriddeid`` command line: train, annotate, evaluate.

Exit codes: 0 success, 1 some inputs failed (the others were processed), 2 nothing could be done.
Messages name files and problems only; note text never reaches the terminal or the logs.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Sequence

log = logging.getLogger("hybriddeid")

OUTPUT_FORMATS = ("brat", "i2b2", "jsonl")


def _train(args: argparse.Namespace) -> int:
    from hybriddeid.evaluation import evaluate
    from hybriddeid.io import read_corpus
    from hybriddeid.pipeline import Pipeline, load_config

    config = load_config(args.config) if args.config else None
    train = read_corpus(args.train, args.input_format)
    if not train:
        log.error("%s: no documents found", args.train)
        return 2
    log.info("training on %d documents from %s", len(train), args.train)
    started = time.perf_counter()
    pipeline = Pipeline(config).fit(train, n_jobs=args.jobs, corpus_name=Path(args.train).name)
    log.info("trained in %.1f s", time.perf_counter() - started)
    if args.dev:
        dev = read_corpus(args.dev, args.input_format)
        report = evaluate(dev, [pipeline.annotate(doc) for doc in dev])
        strict = report.score("strict")
        pipeline.meta["dev_metrics"] = {"documents": len(dev), "scores": report.to_dict()["scores"]}
        log.info("dev strict micro P %.4f R %.4f F1 %.4f", strict.precision, strict.recall, strict.f1)
    pipeline.to_disk(args.out)
    log.info("model written to %s", args.out)
    return 0


def _annotate(args: argparse.Namespace) -> int:
    from hybriddeid.batch import run_batch
    from hybriddeid.pipeline import Pipeline

    pipeline = Pipeline.load(args.model)
    result = run_batch(
        args.in_dir, args.out_dir, pipeline.annotate, args.format, args.input_format,
        overwrite=args.overwrite, progress=not args.quiet,
    )
    log.info("%s: %s", args.out_dir, result.summary())
    return result.exit_code


def _evaluate(args: argparse.Namespace) -> int:
    from hybriddeid.evaluation import evaluate_directories

    report = evaluate_directories(args.gold_dir, args.pred_dir, args.input_format)
    print(report.to_json() if args.json else report.format_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from hybriddeid import __version__

    parser = argparse.ArgumentParser(prog="hybriddeid", description="Find and remove PHI in clinical notes.")
    parser.add_argument("--version", action="version", version=f"hybriddeid {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar, errors only")
    sub = parser.add_subparsers(dest="command", required=True)
    formats = ("auto", "text", "brat", "i2b2", "i2b2-2006", "jsonl")

    train = sub.add_parser("train", help="train a pipeline on annotated notes")
    train.add_argument("--train", type=Path, required=True, help="folder of annotated notes (BRAT, i2b2 XML, JSONL)")
    train.add_argument("--dev", type=Path, help="folder of annotated notes to score the trained model on")
    train.add_argument("--config", type=Path, help="pipeline config TOML (defaults fill what it leaves out)")
    train.add_argument("--out", type=Path, required=True, help="folder to write the model to")
    train.add_argument("--jobs", type=int, default=2, help="processes for training the two CRFs (default 2)")
    train.add_argument("--input-format", choices=formats, default="auto")
    train.set_defaults(run=_train)

    annotate = sub.add_parser("annotate", help="find PHI spans and write them as annotations")
    annotate.add_argument("in_dir", type=Path)
    annotate.add_argument("out_dir", type=Path)
    annotate.add_argument("--model", default="default", help="model folder (default: the bundled model)")
    annotate.add_argument("--format", choices=OUTPUT_FORMATS, default="brat")
    annotate.add_argument("--input-format", choices=formats, default="auto")
    annotate.add_argument("--overwrite", action="store_true", help="redo inputs whose outputs exist")
    annotate.set_defaults(run=_annotate)

    evaluate = sub.add_parser("evaluate", help="score predictions against gold (i2b2 2014 criteria)")
    evaluate.add_argument("gold_dir", type=Path)
    evaluate.add_argument("pred_dir", type=Path)
    evaluate.add_argument("--json", action="store_true", help="print the full report as JSON")
    evaluate.add_argument("--input-format", choices=formats, default="auto")
    evaluate.set_defaults(run=_evaluate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from hybriddeid.io import InputError
    from hybriddeid.pipeline import ConfigError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.INFO, format="hybriddeid: %(message)s")
    try:
        return args.run(args)
    except (InputError, ConfigError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
