"""Do the English rules and safe-list entries written from the PhysioNet dev half pay on the lockbox?

Issue 42: rules and safe-list entries written from what the dev half showed are tried on the sealed
lockbox patients (``benchmarks/lockbox.txt``) and removed where they do not pay there. This script
tags the lockbox notes (each note alone, as ``annotate`` does) with a model trained without them
(``en_real_cv.py --only lockbox --save-models DIR`` writes ``DIR/lockbox``), once with everything
and once per candidate left out: each rule whose comment in the pack's ``regex.toml`` says it was
written from the PhysioNet dev half (or from nursing notes), and each section of the safe-list
written from those notes. It prints only aggregates (binary token TP, FP, FN under ``--phi-set``
and what leaving the candidate out changes), never a note's text or an error, so nothing can be
written from the lockbox.

A rule pays where leaving it out loses more true PHI tokens than false alarms; a safe-list section
pays where leaving it out adds more false alarms than it finds PHI tokens.

    python benchmarks/lockbox_rules.py --model /tmp/models/lockbox [--phi-set hipaa] [--json F]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import hybriddeid.pipeline.core as pipeline_module  # noqa: E402
from en_real import GOLD_TAXONOMY, PRED_TAXONOMY  # noqa: E402
from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.classifiers.safelist import SafeList, load_safelist  # noqa: E402
from hybriddeid.core.languages import language_pack  # noqa: E402
from hybriddeid.core.profiles import PHI_SETS  # noqa: E402
from hybriddeid.core.taxonomy import load_taxonomy  # noqa: E402
from hybriddeid.evaluation import evaluate  # noqa: E402
from hybriddeid.io import read_corpus  # noqa: E402
from hybriddeid.knowledge.dictionaries import read_entries  # noqa: E402
from hybriddeid.runs.processing import process_notes  # noqa: E402
from hybriddeid.surrogates.language import load_language  # noqa: E402
from real_text import CORPORA, load_relabelled, split_lockbox  # noqa: E402

WRITTEN_FROM = re.compile(r"PhysioNet dev half|nursing|PhysioNet's notes|cross-validated", re.IGNORECASE)
SECTION = re.compile(r"^# -{2,} (.+?) -{2,}\s*$")


def dev_written_rules(language: str = "en") -> list[str]:
    """Names of the pack's rules whose preceding comment says they were written from the dev half."""
    names, comment = [], []
    for line in language_pack(language).read_text("regex").splitlines():
        if line.startswith("#"):
            comment.append(line)
        elif line.startswith("name = "):
            if WRITTEN_FROM.search(" ".join(comment)):
                names.append(line.split('"')[1])
            comment = []
    return names


def safelist_sections(language: str = "en") -> dict[str, list[str]]:
    """Section title -> the lines of the pack's safe-list under it (comments kept, for read_entries)."""
    sections: dict[str, list[str]] = {"(top)": []}
    current = "(top)"
    for line in language_pack(language).read_text("safelist").splitlines():
        match = SECTION.match(line)
        if match:
            current = match.group(1)
            sections[current] = []
        sections[current].append(line)
    return sections


def dev_written_sections(sections: dict[str, list[str]]) -> list[str]:
    return [title for title, lines in sections.items() if WRITTEN_FROM.search("\n".join(lines))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a model trained without the lockbox (DIR/lockbox)")
    parser.add_argument("--phi-set", default="hipaa", choices=PHI_SETS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    _, sealed = split_lockbox([doc for doc in load_relabelled("physionet")])
    gold_by_name = {doc.name: doc for doc in read_corpus(CORPORA["physionet"], "brat")}
    gold = [gold_by_name[doc.name] for doc in sealed]
    gold_taxonomy, pred_taxonomy = (
        load_taxonomy(GOLD_TAXONOMY["physionet"]),
        load_taxonomy(PRED_TAXONOMY["hybriddeid-cv"]),
    )
    pipeline = Pipeline.load(args.model)
    rule = pipeline.components["rule"]
    all_rules = tuple(r.name for r in rule.enabled_rules)
    sections = safelist_sections()

    def score() -> dict[str, float]:
        pred = [note.document for doc in sealed for note in process_notes(pipeline, [doc])]
        s = evaluate(gold, pred, taxonomy=gold_taxonomy, phi_set=args.phi_set, pred_taxonomy=pred_taxonomy).score(
            "binary_token"
        )
        return {"tp": s.tp, "fp": s.fp, "fn": s.fn, "precision": s.precision, "recall": s.recall}

    def variants() -> Iterator[tuple[str, str, Callable[[], None]]]:
        for name in dev_written_rules():
            if name in all_rules:
                yield (
                    "rule",
                    name,
                    lambda name=name: setattr(rule, "enabled_", tuple(r for r in all_rules if r != name)),
                )
        for title in dev_written_sections(sections):

            def without(title: str = title) -> None:
                kept = [line for other, lines in sections.items() if other != title for line in lines]
                reduced = SafeList.from_entries(read_entries("\n".join(kept)), load_language("en").titles)
                pipeline_module.load_safelist = lambda language: reduced  # type: ignore[assignment]  # a stand-in for the run

            yield "safe-list section", title, without

    started = time.perf_counter()
    base = score()
    print(
        f"lockbox: {len(sealed)} notes, PHI set {args.phi_set}: TP {base['tp']} FP {base['fp']} FN {base['fn']} "
        f"P {base['precision']:.4f} R {base['recall']:.4f}\n"
    )
    print("| left out | kind | TP lost | FP removed | pays |")
    print("| --- | --- | ---: | ---: | --- |")
    rows = []
    for kind, name, apply in variants():
        apply()
        figures = score()
        rule.enabled_ = all_rules
        pipeline_module.load_safelist = load_safelist
        lost, removed = base["tp"] - figures["tp"], base["fp"] - figures["fp"]
        # a rule pays when leaving it out loses more PHI than false alarms; a section when leaving it out
        # adds more false alarms (removed < 0) than PHI it lets through (lost < 0)
        pays = lost > removed if kind == "rule" else -removed > -lost
        rows.append({"kind": kind, "name": name, "tp_lost": lost, "fp_removed": removed, "pays": pays, **figures})
        print(f"| {name} | {kind} | {lost} | {removed} | {'yes' if pays else 'no'} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"base": base, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
