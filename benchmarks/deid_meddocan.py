"""De-identified output on MEDDOCAN dev with gold spans: is the surrogate output safe and realistic?

Replaces the 250 dev notes' gold PHI spans with surrogates (Spanish, one patient per note, a fixed
key) and prints:

* non-PHI characters kept byte-identical: every stretch between replaced spans, aligned through the
  audit offsets (input start/end, output start/end), is compared with the input;
* original PHI left in the output: for every gold value, its whole-token occurrences (not inside a
  longer word or number, exact case) in the output note beyond those already in the note's non-PHI
  text (which is kept as is, so "M" or "padre" written elsewhere in the note is not counted), and
  the spans whose own surrogate equals the original (case-insensitive); per label where not zero;
* reproducibility: a second run with the same key gives identical notes, a run with another key
  changes the surrogates;
* realism: each model re-annotates the surrogate notes and its recall of the surrogate spans
  (strict, relaxed, and PHI-vs-not tokens) is set beside its recall of the original spans.

    python benchmarks/deid_meddocan.py [--dev DIR] [--model DIR ...]

The bundled model was trained on MEDDOCAN train + dev, so its figures on dev are optimistic; pass a
model trained on train only (``hybriddeid train --train .../train/brat --config
benchmarks/meddocan.toml --out /tmp/m_train``) for the honest figure.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from pathlib import Path

from hybriddeid.core.document import Document
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.surrogates import DeidOptions, DeidResult, deidentify_document
from hybriddeid.surrogates.language import fold

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan"
KEY_A, KEY_B = bytes(range(32)), bytes(range(1, 33))


def deidentify(docs: list[Document], key: bytes) -> list[DeidResult]:
    options = DeidOptions(mode="surrogate", language="es", key=key)
    return [deidentify_document(doc, options) for doc in docs]


def kept_characters(docs: list[Document], results: list[DeidResult]) -> tuple[int, int]:
    """(non-PHI characters compared, characters that differ), aligned through the audit offsets."""
    compared = differing = 0
    for doc, result in zip(docs, results):
        cursor_in = cursor_out = 0
        out = result.text
        for rep in result.replacements:
            kept_in, kept_out = doc.text[cursor_in : rep.start], out[cursor_out : rep.out_start]
            compared += len(kept_in)
            differing += sum(a != b for a, b in zip(kept_in, kept_out)) + abs(len(kept_in) - len(kept_out))
            if out[rep.out_start : rep.out_end] != rep.replacement:
                differing += 1
            cursor_in, cursor_out = rep.end, rep.out_end
        tail_in, tail_out = doc.text[cursor_in:], out[cursor_out:]
        compared += len(tail_in)
        differing += sum(a != b for a, b in zip(tail_in, tail_out)) + abs(len(tail_in) - len(tail_out))
    return compared, differing


def _whole(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)")


def leaks(docs: list[Document], results: list[DeidResult]) -> tuple[Counter[str], Counter[str], int]:
    """(values found in the output beyond the non-PHI text, by label; surrogates equal to their
    original, by label; number of spans)."""
    beyond: Counter[str] = Counter()
    same: Counter[str] = Counter()
    spans = 0
    for doc, result in zip(docs, results):
        non_phi = list(doc.text)
        for span in doc.spans:
            non_phi[span.start : span.end] = [" "] * len(span)
        non_phi_text = "".join(non_phi)
        for span, rep in zip(doc.spans, result.replacements):
            spans += 1
            value = doc.span_text(span).strip()
            pattern = _whole(value)
            if len(pattern.findall(result.text)) > len(pattern.findall(non_phi_text)):
                beyond[span.label] += 1
            if fold(rep.replacement) == fold(doc.span_text(span)):
                same[span.label] += 1
    return beyond, same, spans


def recall(model: Pipeline, gold: list[Document]) -> dict[str, float]:
    report = evaluate(gold, [model.annotate(doc) for doc in gold])
    return {criterion: report.score(criterion).recall for criterion in ("strict", "relaxed", "binary_token")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", type=Path, default=SHARED / "dev" / "brat")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="model folder to re-annotate with (repeatable; default: the bundled Spanish model)",
    )
    args = parser.parse_args()

    docs = read_corpus(args.dev)
    started = time.perf_counter()
    first = deidentify(docs, KEY_A)
    seconds = time.perf_counter() - started
    again, other = deidentify(docs, KEY_A), deidentify(docs, KEY_B)
    n_spans = sum(len(doc.spans) for doc in docs)
    print(
        f"MEDDOCAN dev: {len(docs)} notes, {n_spans} gold spans; surrogates in {seconds:.1f} s "
        f"({len(docs) / seconds:.0f} notes/s)"
    )

    compared, differing = kept_characters(docs, first)
    print(f"non-PHI characters kept byte-identical: {compared - differing}/{compared} ({differing} differ)")

    beyond, same, spans = leaks(docs, first)
    print(
        f"original values found in the output beyond the note's own non-PHI text (whole token, exact case): "
        f"{sum(beyond.values())}/{spans} spans {dict(beyond.most_common())}"
    )
    print(
        f"surrogate equal to its original (case-insensitive): {sum(same.values())}/{spans} spans "
        f"{dict(same.most_common())}"
    )

    identical = sum(a.text == b.text for a, b in zip(first, again))
    changed_notes = sum(a.text != b.text for a, b in zip(first, other))
    changed_spans = sum(
        ra.replacement != rb.replacement for a, b in zip(first, other) for ra, rb in zip(a.replacements, b.replacements)
    )
    print(f"same key, second run: {identical}/{len(docs)} notes identical")
    print(f"other key: {changed_notes}/{len(docs)} notes differ, {changed_spans}/{spans} surrogates differ")

    unparsed = sum(rep.method == "date-fallback" for result in first for rep in result.replacements)
    print(
        f"dates not understood (same-shape surrogate): {unparsed}/{sum(s.label == 'FECHAS' for d in docs for s in d.spans)}"
    )

    surrogate_gold = [result.document for result in first]  # spans at output offsets
    print("\nre-annotation recall | original notes: strict relaxed token | surrogate notes: strict relaxed token")
    for model_path in args.model or ["es"]:
        model = Pipeline.load(model_path)
        original, surrogate = recall(model, docs), recall(model, surrogate_gold)
        corpus = model.meta.get("training_corpus", {})
        print(
            f"{model_path} (trained on {corpus.get('name', '?')}, {corpus.get('documents', '?')} notes) | "
            + " ".join(f"{original[c]:.4f}" for c in original)
            + " | "
            + " ".join(f"{surrogate[c]:.4f}" for c in surrogate)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
