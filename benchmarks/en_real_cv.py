"""Cross-validated predictions of the English default's recipe on the three English dev halves.

The bundled English model (tools/train_en_default.py --real) learns from generated notes *and* the
dev halves of ASQ-PHI, presidio-research and PhysioNet's nursing notes. Scoring it on those halves
would score notes it has seen, so this script retrains the same recipe K times: each time on the
generated notes plus the dev notes of K-1 folds, tagging the fold it left out. Every dev note is
thus tagged by a model that never saw it, and a patient's notes are always in one fold
(``real_text.folds``). The predictions are written as BRAT (``OUT/asq/``, ``OUT/presidio/``,
``OUT/physionet/``) for ``benchmarks/en_real.py --hybriddeid-pred OUT`` (or ``hybriddeid
evaluate``) to score. With
``--thresholds``, each fold model also tags its held-out notes at those P(O) thresholds (the
operating point, ``hybriddeid evaluate --sweep``), read once per note, into ``OUT/threshold-T/``.

Notes are tagged as the CLI tags them (``processing.process_notes``): each note alone, a name word found
in it also marked where it stands alone elsewhere in it (``hybriddeid annotate``); with ``--by-patient``,
a patient's held-out notes together, a name word found in one marked in all of them (``hybriddeid
deid`` with ``--patient-map``).

    python benchmarks/en_real_cv.py --out /tmp/en_cv [--folds 5] [--n 1500] [--jobs 2] [--thresholds 0.5,0.9]
        [--only 1,2]   # a quick look: train and tag these folds only
        [--save-models DIR]  # keep each fold's model (DIR/fold-K)
        [--from-models DIR]  # tag with those models instead of training (rules refitted): minutes, not hours
        [--by-patient]  # a patient's notes tagged together, as deid with a patient map does
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from real_text import CORPORA, cross_validation_splits, load_relabelled  # noqa: E402
from train_en_default import DEFAULT_CONFIG, SYNTH_SEED  # noqa: E402

from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.evaluation.sweep import parse_thresholds  # noqa: E402
from hybriddeid.io import write_document  # noqa: E402
from hybriddeid.pipeline import build_component, load_config  # noqa: E402
from hybriddeid.processing import process_notes  # noqa: E402
from hybriddeid.synth import generate_corpus  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--only", type=lambda s: {int(x) for x in s.split(",")}, default=None,
                        help="train and tag only these folds (1-based, comma-separated): a partial run")
    parser.add_argument("--n", type=int, default=1500, help="generated training notes (as the bundled model)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="fold assignment seed")
    parser.add_argument("--thresholds", type=parse_thresholds, default=(),
                        help="also tag at these P(O) thresholds, comma-separated (into OUT/threshold-T/)")
    parser.add_argument("--save-models", type=Path, default=None,
                        help="save each fold's model to DIR/fold-K (to try rules on it without retraining)")
    parser.add_argument("--from-models", type=Path, default=None,
                        help="tag with DIR/fold-K (saved by --save-models) instead of training: its CRFs as "
                             "saved, its rule component refitted on the fold's training notes as training would, "
                             "so changes to the rules and to what follows the merge are measured in minutes")
    parser.add_argument("--by-patient", action="store_true",
                        help="tag a patient's held-out notes together (a name found in one is looked for in all)")
    args = parser.parse_args()

    synthetic = list(generate_corpus(args.n, SYNTH_SEED, "train"))
    real = [doc for corpus in CORPORA for doc in load_relabelled(corpus)]
    timings = []
    for fold, (train, held_out) in enumerate(cross_validation_splits(real, args.folds, args.seed), start=1):
        if args.only and fold not in args.only:
            continue
        started = time.perf_counter()
        if args.from_models:
            pipeline = Pipeline.load(args.from_models / f"fold-{fold}")
            pipeline.components["rule"] = build_component("rule", pipeline.config).fit(synthetic + train)
        else:
            pipeline = Pipeline(load_config(args.config)).fit(synthetic + train, n_jobs=args.jobs)
        fit_s = time.perf_counter() - started
        if args.save_models:
            pipeline.to_disk(args.save_models / f"fold-{fold}")
        groups: dict[str, list] = defaultdict(list)
        for doc in held_out:
            groups[doc.meta["group"] if args.by_patient else f"{doc.meta['corpus']}/{doc.name}"].append(doc)
        for group, docs in groups.items():
            for note in process_notes(pipeline, docs, patient=group if args.by_patient else None):
                write_document(note.document, args.out / note.document.meta["corpus"], "brat")
        for doc in held_out:
            if args.thresholds:
                reading = pipeline.read(doc, max(args.thresholds))
                for threshold in args.thresholds:
                    write_document(doc.with_spans(pipeline.within_phi_set(doc, reading.spans(threshold))),
                                   args.out / f"threshold-{threshold:g}" / doc.meta["corpus"], "brat")
        timings.append(round(fit_s, 1))
        print(f"fold {fold}/{args.folds}: {'rules refitted' if args.from_models else 'trained'} on {len(synthetic)} generated + {len(train)} dev notes "
              f"in {fit_s:.0f} s, tagged {len(held_out)}", flush=True)
    (args.out / "cv.json").write_text(json.dumps({
        "folds": args.folds, "only": sorted(args.only or ()), "seed": args.seed, "generated_notes": args.n, "config": str(args.config),
        "thresholds": list(args.thresholds), "from_models": str(args.from_models) if args.from_models else None,
        "by_patient": args.by_patient,
        "fit_seconds": timings}, indent=2) + "\n", encoding="utf-8")
    print(f"predictions in {args.out}/{{{','.join(CORPORA)}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
