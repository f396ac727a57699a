"""Per-rule precision and recall of the Spanish rule pack on MEDDOCAN gold.

Usage: python benchmarks/rules_meddocan.py [--corpus DIR] [--splits train dev]

For each rule: hits, correct hits (same offsets and label as a gold span), precision, and the
share of its label's gold spans it finds. Then, per label, the classifier's output after overlap
resolution. Prints counts only, never note text. Rules go into the merger above the CRFs, so a
kept rule should stay at precision >= 0.98 on train.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from hybriddeid.classifiers.rules import RuleClassifier, measure_rules
from hybriddeid.core.document import Document
from hybriddeid.io import read_corpus

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "meddocan"


def report(split: str, docs: list[Document]) -> None:
    clf = RuleClassifier("es")
    stats = measure_rules(clf.rules, docs)
    print(f"\n## {split}: {len(docs)} documents, {sum(len(d.spans) for d in docs)} gold spans\n")
    print("| rule | label | hits | correct | precision | label recall |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for rule in clf.rules:
        s = stats[rule.name]
        precision = f"{s.precision:.3f}" if s.hits else "-"
        print(f"| {rule.name} | {rule.label} | {s.hits} | {s.correct} | {precision} | {s.recall:.3f} |")

    started = time.perf_counter()
    predicted = [clf.predict(doc) for doc in docs]
    elapsed = time.perf_counter() - started
    gold = Counter(span.label for doc in docs for span in doc.spans)
    hits, correct = Counter(), Counter()
    for doc, spans in zip(docs, predicted):
        truth = {(s.start, s.end, s.label) for s in doc.spans}
        for span in spans:
            hits[span.label] += 1
            correct[span.label] += (span.start, span.end, span.label) in truth
    print("\n| label (all rules, after overlap resolution) | hits | correct | precision | recall |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label in sorted(hits):
        print(
            f"| {label} | {hits[label]} | {correct[label]} | {correct[label] / hits[label]:.3f} "
            f"| {correct[label] / gold[label] if gold[label] else 0.0:.3f} |"
        )
    total_hits, total_correct = sum(hits.values()), sum(correct.values())
    print(
        f"| all | {total_hits} | {total_correct} | {total_correct / max(total_hits, 1):.3f} "
        f"| {total_correct / max(sum(gold.values()), 1):.3f} (of all gold) |"
    )
    chars = sum(len(doc.text) for doc in docs)
    per_rule_ms = elapsed * 1000 / len(docs) / len(clf.rules) * 3000 / (chars / len(docs))
    print(
        f"\npredict: {elapsed * 1000 / len(docs):.2f} ms per document, "
        f"{per_rule_ms:.4f} ms per rule per 3,000 characters"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--splits", nargs="+", default=["train", "dev"])
    args = parser.parse_args()
    for split in args.splits:
        report(split, read_corpus(args.corpus / split / "brat", fmt="brat"))


if __name__ == "__main__":
    main()
