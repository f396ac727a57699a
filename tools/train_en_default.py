"""Train the bundled English model (hybriddeid/models/en, `Pipeline.load("en")`) on synthetic notes.

English clinical corpora cannot be shipped (data use agreements), so the model learns from notes that
`hybriddeid.synth` writes: the "train" mix of note types and layouts, with PHI drawn from Faker, plus
(``--real``, the default) the public English dev halves of ASQ-PHI and presidio-research and of
PhysioNet's deid nursing notes (real ICU notes with surrogate PHI), relabelled into i2b2 2014 types
(tools/real_text.py; read from ../shared/corpora). The nursing notes' PHI values enter no lexicon
(features.gazetteer.NOT_IN_LEXICON): the model learns from those notes without carrying a list of
their surrogate names. It is then scored on
notes of the "test" mix (another seed, held-out note types, layouts, date formats and name locales)
and the scores are stored in the model's meta.json; its figures on the dev halves come from
cross-validation (benchmarks/en_real_cv.py), never from this model. Reproducible: the same
arguments give the same notes and, crfsuite being deterministic, the same model. Run from the
repository root:

    python tools/train_en_default.py [--n 1500] [--seed 1] [--test-n 500] [--test-seed 2] [--no-real]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from hybriddeid import Pipeline
from hybriddeid.evaluation import evaluate
from hybriddeid.pipeline.core import load_config
from hybriddeid.synth import generate_corpus
from real_text import CORPORA, load_relabelled

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "tools" / "en_default.toml"
SYNTH_SEED = 1
TRAINING_DATA = {
    "corpus": "hybriddeid synth, English 'train' mix (synthetic notes; no real patient data)",
    "phi_source": "Faker (MIT) locales and templates, resources/languages/en/surrogates.toml and synth.toml",
    "license": "MIT, as the rest of hybriddeid",
}

REAL_TEXT = {
    "asq": "ASQ-PHI development half (525 queries; JamesWeatherhead/asq-phi, Data in Brief 2026, MIT)",
    "presidio": "presidio-research synth_dataset_v2 development half (750 sentences; MIT)",
    "physionet": (
        "PhysioNet deid gold standard, development half (1,236 real MIMIC-II ICU nursing notes of 94 "
        "patients with surrogate PHI; Neamatullah et al., BMC Med Inform Decis Mak 2008;8:32; Goldberger "
        "et al., Circulation 2000; GPL; its PHI values enter no lexicon)"
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1500, help="training notes (default 1500)")
    parser.add_argument("--seed", type=int, default=SYNTH_SEED)
    parser.add_argument(
        "--no-real",
        dest="real",
        action="store_false",
        help="generated notes only (default: add the ASQ-PHI and presidio dev halves)",
    )
    parser.add_argument("--test-n", type=int, default=500, help="held-out test notes scored into meta.json")
    parser.add_argument("--test-seed", type=int, default=2)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--out", type=Path, default=ROOT / "hybriddeid" / "models" / "en")
    parser.add_argument("--jobs", type=int, default=2, help="processes for the two CRFs (default 2)")
    args = parser.parse_args()
    if args.seed == args.test_seed:
        parser.error("--seed and --test-seed must differ")

    train = list(generate_corpus(args.n, args.seed, "train"))
    real = [doc for corpus in CORPORA for doc in load_relabelled(corpus)] if args.real else []
    started = time.perf_counter()
    pipeline = Pipeline(load_config(args.config)).fit(
        train + real, n_jobs=args.jobs, corpus_name=f"synth-en-train-seed{args.seed}"
    )
    pipeline.meta["fit_wall_seconds"] = round(time.perf_counter() - started, 1)
    pipeline.meta["training_data"] = TRAINING_DATA | {"mix": "train", "seed": args.seed, "notes": args.n}
    if real:
        pipeline.meta["training_data"]["real_text"] = {
            "corpora": REAL_TEXT,
            "notes": len(real),
            "relabelled_by": "tools/real_text.py with tools/real_text_labels.toml",
        }
    if args.test_n:
        test = list(generate_corpus(args.test_n, args.test_seed, "test"))
        report = evaluate(test, [pipeline.annotate(doc) for doc in test])
        binary = report.score("binary_token")
        pipeline.meta["test_metrics"] = {
            "mix": "test",
            "seed": args.test_seed,
            "documents": len(test),
            "scores": report.to_dict()["scores"],
        }
        print(f"held-out test ({len(test)} notes): binary token P {binary.precision:.4f} R {binary.recall:.4f}")
    replace_model(pipeline, args.out)
    print(
        f"trained on {len(train)} generated + {len(real)} real notes in {pipeline.meta['fit_wall_seconds']} s -> {args.out}"
    )
    return 0


def replace_model(pipeline: Pipeline, out: Path) -> None:
    """Write the model next to ``out`` first, so a failed write never leaves the package without one."""
    staging = out.with_name(out.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    pipeline.to_disk(staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


if __name__ == "__main__":
    sys.exit(main())
