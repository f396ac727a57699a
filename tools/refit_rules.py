"""Re-measure a saved model's rule component after its language pack's rules changed, CRFs untouched.

A model's ``rule/rules.toml`` records a digest of the pack's ``regex.toml``, the enabled rules and
each rule's hits on the training corpus; it is not a copy of the rules, which are always read from
the pack. After editing the pack, this refits that component alone on the model's training notes
(``fit``: the same ``min_precision``; no label mapping when the saved state had none, as for the
bundled Spanish model, fitted before mapping existed) and writes ``rules.toml`` again, so the model
enables new rules and ``tests/test_languages.py`` finds the current digest. Retraining the CRFs
(``tools/train_default.py``) would change every span; this changes only what the rules change.

    python tools/refit_rules.py hybriddeid/models/es ../shared/corpora/meddocan/train/brat ../shared/corpora/meddocan/dev/brat
    python tools/refit_rules.py hybriddeid/models/en --synth 1500   # the bundled state: 1,500 train-mix notes
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from hybriddeid.classifiers.rules import STATE_FILE, RuleClassifier
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import CONFIG_FILE, case_copies, component_params, flattened_copies, load_config
from hybriddeid.synth import generate_corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the model folder (its rule/ folder is rewritten)")
    parser.add_argument("corpus", type=Path, nargs="*", help="the folders of notes the model was trained on")
    parser.add_argument(
        "--synth",
        type=int,
        default=0,
        metavar="N",
        help="also N generated notes of the 'train' mix (--synth-seed), as train_en_default.py makes them",
    )
    parser.add_argument("--synth-seed", type=int, default=1)
    args = parser.parse_args()
    if not (args.corpus or args.synth):
        parser.error("give the training folders or --synth N")
    config = load_config(args.model / CONFIG_FILE)
    folder = args.model / "rule"
    saved = tomllib.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    if saved.get("user_rules"):
        parser.error(f"{folder / STATE_FILE} holds user rule files; retrain the model instead")
    params = component_params("rule", config)
    if "label_map" not in saved:
        params["map_labels"] = "off"
    docs = [doc for corpus in args.corpus for doc in read_corpus(corpus)]
    if args.synth:
        docs += generate_corpus(args.synth, args.synth_seed, "train", config["pipeline"]["language"])
    # The notes Pipeline.fit gives its components: the model's flattened and case copies too.
    originals = list(docs)
    docs += flattened_copies(originals, float(config["pipeline"].get("flattened_copies", 0.0)))
    docs += case_copies(originals, config["pipeline"].get("case_copies", {}))
    clf = RuleClassifier(**params).fit(docs)
    clf.to_disk(folder)
    added = [name for name in (rule.name for rule in clf.enabled_rules) if name not in set(saved["enabled"])]
    dropped = [name for name in saved["enabled"] if name not in {rule.name for rule in clf.enabled_rules}]
    print(
        f"{folder / STATE_FILE}: {len(docs)} notes, {len(clf.enabled_rules)} rules enabled"
        f" (new: {', '.join(added) or 'none'}; off: {', '.join(dropped) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
