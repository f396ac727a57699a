"""The English default model on held-out generated notes: per-category strict and token scores,
binary token precision/recall, and what the clinical safe-list removes.

The notes are of the "test" mix (hybriddeid/synth: note types, label and header styles, date
formats and name locales that the "train" mix behind the bundled model never uses) and of a seed
that training did not use.

    python benchmarks/en_synthetic.py [--model en] [--n 500] [--seed 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hybriddeid import Pipeline
from hybriddeid.evaluation import evaluate
from hybriddeid.synth import generate_corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="en")
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--mix", choices=("train", "test"), default="test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    pipeline = Pipeline.load(args.model)
    gold = list(generate_corpus(args.n, args.seed, args.mix))
    started = time.perf_counter()
    by_source = [pipeline.predict_by_source(doc) for doc in gold]
    final = [doc.with_spans(pipeline.combine(doc, spans)) for doc, spans in zip(gold, by_source)]
    seconds = time.perf_counter() - started
    safelist = pipeline.config["pipeline"]["safelist"]
    pipeline.config["pipeline"]["safelist"] = ""
    unfiltered = [doc.with_spans(pipeline.combine(doc, spans)) for doc, spans in zip(gold, by_source)]
    pipeline.config["pipeline"]["safelist"] = safelist

    report = evaluate(gold, final)
    out: dict = {
        "model": args.model,
        "notes": len(gold),
        "mix": args.mix,
        "seed": args.seed,
        "notes_per_second": len(gold) / seconds,
    }
    print(f"{len(gold)} generated notes ({args.mix} mix, seed {args.seed}); {out['notes_per_second']:.1f} notes/s\n")
    print("| category | strict P | strict R | strict F1 | token P | token R | token F1 | gold spans |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    strict, token = report.per_label("strict", "category"), report.per_label("token", "category")
    gold_counts: dict[str, int] = {}
    for doc in gold:
        for span in doc.spans:
            category = report.taxonomy.category(span.label)
            gold_counts[category] = gold_counts.get(category, 0) + 1
    for category in strict:
        s, t = strict[category], token[category]
        print(
            f"| {category} | {s.precision:.4f} | {s.recall:.4f} | {s.f1:.4f} | {t.precision:.4f} | {t.recall:.4f} | "
            f"{t.f1:.4f} | {gold_counts.get(category, 0)} |"
        )
    rows = {name: report.score(name) for name in ("strict", "token", "binary_token")}
    for name, score in rows.items():
        print(f"| **all, {name} micro** | {score.precision:.4f} | {score.recall:.4f} | {score.f1:.4f} | | | | |")
    out["scores"] = {name: score.to_dict() for name, score in rows.items()}
    out["per_category"] = {c: {"strict": strict[c].to_dict(), "token": token[c].to_dict()} for c in strict}

    removed = [
        (doc, span)
        for doc, before, after in zip(gold, unfiltered, final)
        for span in sorted(set(before.spans) - set(after.spans))
    ]
    false_positives = sum(not any(span.overlaps(g) for g in doc.spans) for doc, span in removed)
    before = evaluate(gold, unfiltered).score("binary_token")
    after = rows["binary_token"]
    out["safelist"] = {
        "removed": len(removed),
        "false_positives_removed": false_positives,
        "binary_token_before": before.to_dict(),
        "binary_token_after": after.to_dict(),
    }
    print(
        f"\nsafe-list: removed {len(removed)} merged spans, {false_positives} of them false positives "
        f"(no gold overlap); binary token P {before.precision:.4f} -> {after.precision:.4f}, "
        f"R {before.recall:.4f} -> {after.recall:.4f}"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
