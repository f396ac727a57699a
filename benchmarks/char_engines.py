"""The character CRF alone, engine "fast" against "crfsuite": seconds per 100 notes and memory.

For each note set (the English test mix of the bundled ``en`` model, MEDDOCAN dev with ``es``
when ``../shared/corpora/meddocan`` exists): ``component.predict(note)`` over ``--notes`` analysed
notes with each engine, a warm-up pass each, then ``--rounds`` rounds, the engines alternating
within a round; the best round of each and their ratio. Both engines' spans are compared
(offsets and labels exactly, scores to 1e-9). A warm round re-reads notes the memos have seen,
so ``--fresh N`` also times one pass over up to N notes not seen before (as in a long batch,
where memos fill up and are emptied). ``--rss N`` tags N generated English notes with each
engine, each in its own process, and prints the process's resident memory before and after.

    PYTHONPATH=. python benchmarks/char_engines.py --fresh 400 --rss 2000
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hybriddeid.features.analysis import analyse
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus
from procinfo import resident_mb  # noqa: E402

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
ENGINES = ("fast", "crfsuite")


def note_sets(n: int, fresh: int) -> dict[str, tuple[str, list, list]]:
    """Set name -> (model, notes timed in rounds, notes for the fresh pass)."""
    english = list(generate_corpus(n + fresh, 2, "test"))
    sets = {"en-test-mix": ("en", english[:n], english[n:])}
    if MEDDOCAN_DEV.is_dir():
        spanish = read_corpus(MEDDOCAN_DEV)
        sets["meddocan-dev"] = ("es", spanish[:n], spanish[n : n + fresh])
    return sets


def same(spans: list, others: list) -> bool:
    """Whether two engines' spans agree: offsets, labels and sources exactly, scores to 1e-9
    (marginals differ in the last bits: summation order)."""
    return len(spans) == len(others) and all(
        len(a) == len(b)
        and all(
            (x.start, x.end, x.label, x.source) == (y.start, y.end, y.label, y.source)
            and abs(x.score - y.score) <= 1e-9
            for x, y in zip(a, b)
        )
        for a, b in zip(spans, others)
    )


def timed(component, notes: list) -> tuple[float, list]:
    gc.collect()
    start = time.perf_counter()
    spans = [component.predict(note) for note in notes]
    return time.perf_counter() - start, spans


def compare(n: int, rounds: int, fresh: int) -> None:
    for name, (model, docs, unseen) in note_sets(n, fresh).items():
        component = Pipeline.load(model).components["char"]
        notes = [analyse(doc, model) for doc in docs]
        best = {}
        spans = {}
        for engine in ENGINES:  # warm-up: the memos
            component.engine = engine
            spans[engine] = timed(component, notes)[1]
        for _ in range(rounds):
            for engine in ENGINES:
                component.engine = engine
                seconds, spans[engine] = timed(component, notes)
                best[engine] = min(best.get(engine, seconds), seconds)
        scale = 100 / len(notes)
        print(
            f"{name} ({len(notes)} notes, {sum(len(d.text) for d in docs) / len(docs):.0f} chars each): "
            f"fast {best['fast'] * scale:.3f} s, crfsuite {best['crfsuite'] * scale:.3f} s per 100 notes "
            f"(best of {rounds}), crfsuite/fast {best['crfsuite'] / best['fast']:.2f}x, "
            f"same spans: {same(spans['fast'], spans['crfsuite'])}"
        )
        if unseen:
            notes = [analyse(doc, model) for doc in unseen]
            times = {}
            for engine in ENGINES:
                component.engine = engine
                times[engine], spans[engine] = timed(component, notes)
            print(
                f"  fresh pass over {len(notes)} unseen notes: fast {times['fast'] * 100 / len(notes):.3f} s, "
                f"crfsuite {times['crfsuite'] * 100 / len(notes):.3f} s per 100 notes, "
                f"crfsuite/fast {times['crfsuite'] / times['fast']:.2f}x, "
                f"same spans: {same(spans['fast'], spans['crfsuite'])}"
            )


def memory(engine: str, n: int) -> dict[str, float]:
    """Resident memory of this process tagging ``n`` English notes with ``engine`` (run alone)."""
    component = Pipeline.load("en").components["char"]
    component.engine = engine
    docs = list(generate_corpus(n + 20, 7, "test"))
    for doc in docs[:20]:
        component.predict(analyse(doc, "en"))
    loaded = resident_mb()
    start = time.perf_counter()
    for doc in docs[20:]:
        component.predict(analyse(doc, "en"))
    return {
        "engine": engine,
        "notes": n,
        "rss_loaded_mb": round(loaded, 1),
        "rss_after_mb": round(resident_mb(), 1),
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fresh", type=int, default=0, help="also time one pass over this many unseen notes")
    parser.add_argument("--rss", type=int, default=0, help="notes to tag for the memory figures (0: skip)")
    parser.add_argument("--memory-of", choices=ENGINES, help=argparse.SUPPRESS)  # the child process's job
    args = parser.parse_args()
    if args.memory_of:
        print(json.dumps(memory(args.memory_of, args.rss)))
        return 0
    compare(args.notes, args.rounds, args.fresh)
    if args.rss:
        for engine in ENGINES:
            result = subprocess.run(
                [sys.executable, __file__, "--rss", str(args.rss), "--memory-of", engine],
                capture_output=True,
                text=True,
                check=True,
            )
            figures = json.loads(result.stdout.strip().splitlines()[-1])
            print(
                f"{engine}: RSS {figures['rss_loaded_mb']} MB after loading and 20 notes, "
                f"{figures['rss_after_mb']} MB after {figures['notes']} more ({figures['seconds']} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
