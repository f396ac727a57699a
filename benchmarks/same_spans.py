"""Do the bundled models still give the same spans? Record them once, check them after a change.

The notes: MEDDOCAN dev (the Spanish model, ``es``) and the generated English test mix (the
English default, ``en``; seed 2, the mix ``benchmarks/en_synthetic.py`` scores). Each set is
tagged at the model's defaults and at ``threshold=0.5``. ``--save`` writes one digest of each note's merged spans (offsets, label, source; scores rounded to 1e-9)
and of its text; ``--check`` prints the count of notes whose spans differ (0 means identical)
and exits 1 when any do. ``tests/test_bundled_outputs.py`` checks the same digests.

    python benchmarks/same_spans.py --save tests/fixtures/bundled_spans.json
    python benchmarks/same_spans.py --check tests/fixtures/bundled_spans.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from hybriddeid import Pipeline
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
ENGLISH_NOTES, ENGLISH_SEED = 200, 2
OPERATING_POINT = 0.5


def span_digest(spans: Sequence[Span]) -> str:
    """A digest of spans that changes when any offset, label, source or score (to 1e-9) does."""
    rows = [[s.start, s.end, s.label, s.source, round(float(s.score), 9)] for s in spans]
    return hashlib.sha256(json.dumps(rows).encode("utf-8")).hexdigest()[:16]


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def note_sets(
    meddocan: Path = MEDDOCAN_DEV, english_notes: int = ENGLISH_NOTES
) -> dict[str, tuple[str, list[Document]]]:
    """Set name -> (bundled model, notes); MEDDOCAN only when ``meddocan`` exists."""
    sets = {"en-test-mix": ("en", list(generate_corpus(english_notes, ENGLISH_SEED, "test")))}
    if meddocan.is_dir():
        sets["meddocan-dev"] = ("es", read_corpus(meddocan))
    return sets


def digests(model: str, docs: Iterable[Document], threshold: float | None = None) -> dict[str, list[str]]:
    """Note name -> [text digest, span digest] under the bundled ``model`` (at a P(O) ``threshold``)."""
    pipeline = Pipeline.load(model)
    return {doc.name: [text_digest(doc.text), span_digest(pipeline.predict(doc, threshold=threshold))] for doc in docs}


def all_digests(meddocan: Path = MEDDOCAN_DEV) -> dict[str, dict[str, list[str]]]:
    """Each note set's digests at the models' defaults and at the operating point 0.5 (a
    separate path through the pipeline: ``Pipeline.read``)."""
    results = {}
    for name, (model, docs) in note_sets(meddocan).items():
        results[name] = digests(model, docs)
        results[f"{name}@{OPERATING_POINT}"] = digests(model, docs, OPERATING_POINT)
    return results


def compare(expected: dict[str, list[str]], got: dict[str, list[str]]) -> tuple[int, int]:
    """(notes whose text differs or is missing, notes whose spans differ)."""
    texts = sum(1 for name, (text, _) in expected.items() if got.get(name, [None])[0] != text)
    spans = sum(
        1 for name, (text, spans) in expected.items() if name in got and got[name][0] == text and got[name][1] != spans
    )
    return texts, spans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--save", type=Path, help="write the digests here")
    action.add_argument("--check", type=Path, help="compare with digests written by --save")
    parser.add_argument("--meddocan", type=Path, default=MEDDOCAN_DEV)
    args = parser.parse_args()

    results = all_digests(args.meddocan)
    if args.save:
        args.save.write_text(
            json.dumps(results, indent=0, sort_keys=True).replace(',\n"', ', "') + "\n", encoding="utf-8"
        )
        print(f"saved digests of {sum(map(len, results.values()))} notes to {args.save}")
        return 0
    expected = json.loads(args.check.read_text(encoding="utf-8"))
    failed = False
    for name, got in results.items():
        texts, spans = compare(expected.get(name, {}), got)
        print(f"{name}: {len(got)} notes, {spans} with different spans, {texts} with different or missing text")
        failed = failed or bool(texts or spans) or name not in expected
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
