"""Cross-validated predictions of the English default's recipe, and its score on the sealed lockbox.

The bundled English model (tools/train_en_default.py --real) learns from generated notes *and* the
dev halves of ASQ-PHI, presidio-research and PhysioNet's nursing notes. Scoring it on those halves
would score notes it has seen, so this script retrains the same recipe:

- **the lockbox** (issue 42): 30 of PhysioNet's 94 dev patients, drawn once by a fixed seed
  (``benchmarks/lockbox.txt``), are sealed: nobody reads their notes or errors. One model trains on
  the generated notes and every other dev note and tags the sealed notes; only aggregate figures are
  printed for them (never examples), so no rule or list can be written from them;
- **cross-validation** on the open notes: K times (``--folds``) on the generated notes plus the open
  dev notes of K-1 folds, tagging the fold left out; a patient's notes are always in one fold
  (``real_text.folds``).

Every note is tagged twice, as the CLI tags it (``processing.process_notes``): each note alone (a name
word found in it also marked where it stands alone elsewhere in it; ``hybriddeid annotate``), into
``OUT/<corpus>/`` (``OUT/lockbox/physionet/`` for the sealed notes), and a patient's notes together (a
name word found in one marked in all; ``hybriddeid deid`` with ``--patient-map``), into
``OUT/by-patient/<corpus>/`` (``OUT/lockbox/by-patient/physionet/``). At the end the script prints the
dev-CV and lockbox figures side by side (binary token P/R/F1, PhysioNet's gold under ``--phi-set``,
each note alone and by patient, and the surrogate check of ``en_real.py``: gold PHI strings left
verbatim, vital-sign and lab numbers changed) with the recall gap; ``cv.json`` keeps them.
``en_real.py --hybriddeid-pred OUT`` scores the open CV predictions in detail (errors with examples).
With ``--thresholds``, each fold model also tags its held-out open notes at those P(O) thresholds (the
operating point, ``hybriddeid evaluate --sweep``), read once per note, into ``OUT/threshold-T/``.

    python benchmarks/en_real_cv.py --out /tmp/en_cv [--folds 5] [--n 1500] [--jobs 2] [--thresholds 0.5,0.9]
        [--only lockbox,1,2]  # a quick look: train and tag these runs only (fold numbers, "lockbox"); the CV row
                              # then scores those folds' notes only (compare with a baseline run of the same --only)
        [--save-models DIR]  # keep each model (DIR/fold-K, DIR/lockbox)
        [--from-models DIR]  # tag with those models instead of training (rules refitted, the recipe's [pipeline]
                             # settings over theirs): minutes, not hours
        [--config FILE]  # another recipe (default: the bundled English model's)
        [--synth-seed S]  # another draw of the generated training notes (default: the bundled model's seed)
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from en_real import GOLD_TAXONOMY, PRED_TAXONOMY, patients_of, read_predictions, surrogate_check  # noqa: E402
from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.core.profiles import PHI_SETS  # noqa: E402
from hybriddeid.core.taxonomy import load_taxonomy  # noqa: E402
from hybriddeid.evaluation import evaluate  # noqa: E402
from hybriddeid.io import read_corpus, write_document  # noqa: E402
from hybriddeid.pipeline.core import build_component, load_config  # noqa: E402
from hybriddeid.pipeline.sweep import parse_thresholds  # noqa: E402
from hybriddeid.runs.processing import process_notes  # noqa: E402
from hybriddeid.synth import generate_corpus  # noqa: E402
from real_text import CORPORA, cross_validation_splits, load_relabelled, sealed_groups, split_lockbox  # noqa: E402
from train_en_default import DEFAULT_CONFIG, SYNTH_SEED  # noqa: E402

LOCKBOX = "lockbox"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--only",
        type=lambda s: set(s.split(",")),
        default=None,
        help="train and tag only these runs (fold numbers, 1-based, and/or 'lockbox'; comma-separated)",
    )
    parser.add_argument("--n", type=int, default=1500, help="generated training notes (as the bundled model)")
    parser.add_argument(
        "--synth-seed",
        type=int,
        default=SYNTH_SEED,
        help="seed of the generated training notes (default: the bundled model's); another seed is another draw",
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="fold assignment seed")
    parser.add_argument("--phi-set", default="hipaa", choices=PHI_SETS, help="PHI set of the printed figures")
    parser.add_argument(
        "--thresholds",
        type=parse_thresholds,
        default=(),
        help="also tag the CV folds at these P(O) thresholds, comma-separated (into OUT/threshold-T/)",
    )
    parser.add_argument(
        "--save-models",
        type=Path,
        default=None,
        help="save each model to DIR/fold-K and DIR/lockbox (to try rules on it without retraining)",
    )
    parser.add_argument(
        "--from-models",
        type=Path,
        default=None,
        help="tag with DIR/fold-K and DIR/lockbox (saved by --save-models) instead of training: the "
        "CRFs as saved, the rule component refitted on the run's training notes as training would, "
        "so changes to the rules and to what follows the merge are measured in minutes",
    )
    args = parser.parse_args()

    synthetic = list(generate_corpus(args.n, args.synth_seed, "train"))
    real = [doc for corpus in CORPORA for doc in load_relabelled(corpus)]
    open_notes, sealed = split_lockbox(real)
    runs = [
        (f"fold-{fold}", str(fold), train, held_out, args.out)
        for fold, (train, held_out) in enumerate(cross_validation_splits(open_notes, args.folds, args.seed), start=1)
    ]
    runs.append((LOCKBOX, LOCKBOX, open_notes, sealed, args.out / LOCKBOX))
    timings: dict[str, float] = {}
    scored = [] if args.only else open_notes  # with --only, the CV row covers the folds run, no other
    for name, key, train, held_out, out in runs:
        if args.only and key not in args.only:
            continue
        if name != LOCKBOX and args.only:
            scored += held_out
        started = time.perf_counter()
        if args.from_models:
            pipeline = Pipeline.load(args.from_models / name)
            # the recipe's [pipeline] settings (merging, post-processing) over the saved model's
            recipe = load_config(args.config)["pipeline"]
            pipeline.config["pipeline"].update({k: v for k, v in recipe.items() if k not in ("components", "language")})
            pipeline.components["rule"] = build_component("rule", pipeline.config).fit(synthetic + train)
        else:
            pipeline = Pipeline(load_config(args.config)).fit(synthetic + train, n_jobs=args.jobs)
        timings[name] = round(time.perf_counter() - started, 1)
        if args.save_models:
            pipeline.to_disk(args.save_models / name)
        tag(pipeline, held_out, out)
        if args.thresholds and name != LOCKBOX:
            for doc in held_out:
                reading = pipeline.read(doc, max(args.thresholds))
                for threshold in args.thresholds:
                    write_document(
                        doc.with_spans(pipeline.within_phi_set(doc, reading.spans(threshold))),
                        args.out / f"threshold-{threshold:g}" / doc.meta["corpus"],
                        "brat",
                    )
        print(
            f"{name}: {'rules refitted' if args.from_models else 'trained'} on {len(synthetic)} generated + "
            f"{len(train)} dev notes in {timings[name]:.0f} s, tagged {len(held_out)}",
            flush=True,
        )
    figures = side_by_side(args.out, scored, sealed, args.phi_set)
    (args.out / "cv.json").write_text(
        json.dumps(
            {
                "folds": args.folds,
                "only": sorted(args.only or ()),
                "seed": args.seed,
                "generated_notes": args.n,
                "synth_seed": args.synth_seed,
                "config": str(args.config),
                "thresholds": list(args.thresholds),
                "from_models": str(args.from_models) if args.from_models else None,
                "lockbox_patients": len(sealed_groups()),
                "fit_seconds": timings,
                "figures": figures,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return 0


def tag(pipeline: Pipeline, held_out: list, out: Path) -> None:
    """Each held-out note tagged alone into ``out/<corpus>``, and a patient's notes together into
    ``out/by-patient/<corpus>``, as ``annotate`` and ``deid --patient-map`` tag them."""
    by_patient: dict[str, list] = defaultdict(list)
    for doc in held_out:
        by_patient[doc.meta["group"]].append(doc)
        for note in process_notes(pipeline, [doc]):
            write_document(note.document, out / doc.meta["corpus"], "brat")
    for group, docs in by_patient.items():
        for note in process_notes(pipeline, docs, patient=group):
            write_document(note.document, out / "by-patient" / note.document.meta["corpus"], "brat")


def side_by_side(out: Path, open_notes: list, sealed: list, phi_set: str) -> dict:
    """PhysioNet's figures on the open notes (CV) and on the lockbox, printed side by side: binary token
    P/R/F1 each note alone and by patient, and the surrogate check of the by-patient predictions.
    Only aggregates are printed for the lockbox."""
    gold_taxonomy, pred_taxonomy = (
        load_taxonomy(GOLD_TAXONOMY["physionet"]),
        load_taxonomy(PRED_TAXONOMY["hybriddeid-cv"]),
    )
    gold_all = {doc.name: doc for doc in read_corpus(CORPORA["physionet"], "brat")}
    patients = patients_of("physionet")
    rows: dict[str, dict] = {}
    for row, notes, folder in (("dev CV", open_notes, out), ("lockbox", sealed, out / LOCKBOX)):
        gold = [gold_all[doc.name] for doc in notes if doc.meta["corpus"] == "physionet"]
        if not gold or not (folder / "physionet").is_dir():
            continue
        figures: dict = {"notes": len(gold), "patients": len({patients.get(doc.name) for doc in gold})}
        for mode, pred_dir in (
            ("each note", folder / "physionet"),
            ("by patient", folder / "by-patient" / "physionet"),
        ):
            pred = read_predictions(pred_dir, gold)
            score = evaluate(gold, pred, taxonomy=gold_taxonomy, phi_set=phi_set, pred_taxonomy=pred_taxonomy).score(
                "binary_token"
            )
            figures[mode] = {
                "precision": score.precision,
                "recall": score.recall,
                "f1": score.f1,
                "tp": score.tp,
                "fp": score.fp,
                "fn": score.fn,
            }
            if mode == "by patient":
                check = surrogate_check(gold, pred, patients, gold_taxonomy, pred_taxonomy, phi_set)
                figures["surrogate"] = {
                    key: check[key]
                    for key in (
                        "gold_strings",
                        "gold_strings_left",
                        "gold_left_share",
                        "vital_patterns",
                        "vital_patterns_changed",
                        "vital_numbers_changed",
                        "spans_replaced",
                    )
                }
        rows[row] = figures
    print(f"\nPhysioNet deid dev half, binary token, PHI set {phi_set}\n")
    print("| notes | patients | mode | P | R | F1 | FN | FP | verbatim | vitals changed |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row, figures in rows.items():
        for mode in ("each note", "by patient"):
            s = figures[mode]
            extra = "| |"
            if mode == "by patient":
                c = figures["surrogate"]
                extra = f"| {c['gold_strings_left']}/{c['gold_strings']} ({c['gold_left_share']:.1%}) | {c['vital_patterns_changed']} |"
            print(
                f"| {row} ({figures['notes']}) | {figures['patients']} | {mode} | {s['precision']:.4f} | {s['recall']:.4f} | "
                f"{s['f1']:.4f} | {s['fn']} | {s['fp']} {extra}"
            )
    if len(rows) == 2:
        gap = rows["dev CV"]["each note"]["recall"] - rows["lockbox"]["each note"]["recall"]
        rows["recall_gap"] = gap
        print(f"\nrecall gap, dev CV - lockbox (each note): {gap:+.4f}")
    for corpus in ("asq", "presidio"):
        names = {doc.name for doc in open_notes if doc.meta["corpus"] == corpus}
        gold = [doc for doc in read_corpus(CORPORA[corpus], "brat") if doc.name in names]
        if gold and (out / corpus).is_dir():
            score = evaluate(
                gold,
                read_predictions(out / corpus, gold),
                taxonomy=load_taxonomy(GOLD_TAXONOMY[corpus]),
                phi_set=phi_set,
                pred_taxonomy=pred_taxonomy,
            ).score("binary_token")
            rows[corpus] = {"precision": score.precision, "recall": score.recall, "f1": score.f1}
            print(f"{corpus} dev CV: P {score.precision:.4f} R {score.recall:.4f} F1 {score.f1:.4f}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
