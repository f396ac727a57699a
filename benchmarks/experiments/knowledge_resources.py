"""Knowledge resources on MEDDOCAN: cluster build times and gazetteer coverage of gold spans.

Usage: python benchmarks/experiments/knowledge_resources.py [--corpus DIR] [--out /tmp/meddocan_clusters]
                                                [--skip-clusters] [--skip-1m] [--1m-min-count 2 1]

1. Brown (C=1000) and word2vec + k-means (k = 50, 200, 1000) clusters of MEDDOCAN train+dev text
   (min count 2): vocabulary, words clustered, seconds for each; the folder is saved to --out.
2. The Spanish gazetteers on dev: per gold type, the share of gold spans whose whole text is an
   entry of some dictionary (exact), the share of gold-span tokens inside some dictionary hit,
   and per dictionary its hits in the running text and how many overlap no gold span.
3. Brown on about 1M tokens: train+dev text three times over, with every word seen at most 3
   times suffixed by the copy number in copies 2 and 3, so the vocabulary grows as a larger
   corpus's would (plain repetition would not add words). Timed for each --1m-min-count.
Prints counts and times only, never note text.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from hybriddeid.classifiers.crf import decode_tags
from hybriddeid.features.gazetteer import phrase_key, phrase_tokens
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.build import build_clusters, note_sequences
from hybriddeid.knowledge.dictionaries import load_gazetteers
from hybriddeid.text.tokenize import lines, tokenize

# the shared corpora sit beside the checkout; this script is in benchmarks/experiments/
DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "meddocan"
TYPES = (
    "NOMBRE_SUJETO_ASISTENCIA",
    "NOMBRE_PERSONAL_SANITARIO",
    "TERRITORIO",
    "PAIS",
    "CALLE",
    "HOSPITAL",
    "INSTITUCION",
    "PROFESION",
)


def clusters_report(sequences: list[list[str]], out: Path) -> None:
    started = time.perf_counter()
    clusters = build_clusters(sequences, "es", min_count=2, brown_clusters=1000, w2v_ks=(50, 200, 1000))
    clusters.meta["corpus"]["documents"] = "MEDDOCAN train+dev"
    clusters.to_disk(out)
    meta = clusters.meta
    print("## Clusters of MEDDOCAN train+dev (min count 2)\n")
    print(
        f"tokens {meta['corpus']['tokens']:,}, lines {meta['corpus']['lines']:,}, "
        f"distinct normalised words {meta['corpus']['vocabulary']:,}"
    )
    print(
        f"Brown C=1000: {meta['brown']['words']:,} words in {meta['brown']['leaves']} clusters, "
        f"{meta['brown']['seconds']:.1f} s"
    )
    print(
        f"word2vec (skip-gram, 100 dims, 5 epochs, 1 worker) + k-means k=50,200,1000: "
        f"{meta['word2vec']['words']:,} words, {meta['word2vec']['seconds']:.1f} s"
    )
    print(f"total {time.perf_counter() - started:.1f} s; saved to {out}\n")


def gazetteer_report(dev) -> None:
    gazetteers = load_gazetteers("es")
    exact, total, tokens_in, tokens_all = Counter(), Counter(), Counter(), Counter()
    hits, outside = Counter(), Counter()
    for doc in dev:
        gold = doc.spans
        covered: set[int] = set()  # character offsets inside some dictionary hit
        for start, end in lines(doc.text):
            toks = tokenize(doc.text, start, end)
            low = [t.text.lower() for t in toks]
            for kind, gazetteer in gazetteers.items():
                for hit in decode_tags([(t.start, t.end) for t in toks], gazetteer.tag(low), kind):
                    hits[kind] += 1
                    outside[kind] += not any(hit.overlaps(span) for span in gold)
                    covered.update(range(hit.start, hit.end))
        for span in gold:
            if span.label not in TYPES:
                continue
            total[span.label] += 1
            key = phrase_key(phrase_tokens(doc.text[span.start : span.end]))
            if any(key in g.table for g in gazetteers.values()):
                exact[span.label] += 1
            for tok in tokenize(doc.text, span.start, span.end):
                tokens_all[span.label] += 1
                tokens_in[span.label] += tok.start in covered
    print(f"## Spanish gazetteers on MEDDOCAN dev ({len(dev)} notes)\n")
    print("| gold type | spans | exact entry | tokens in a hit |")
    print("| --- | ---: | ---: | ---: |")
    for label in TYPES:
        if total[label]:
            print(
                f"| {label} | {total[label]} | {exact[label] / total[label]:.3f} | "
                f"{tokens_in[label] / tokens_all[label]:.3f} |"
            )
    print("\n| dictionary | entries | hits | hits overlapping no gold span |")
    print("| --- | ---: | ---: | ---: |")
    for kind, gazetteer in gazetteers.items():
        print(
            f"| {kind} | {len(gazetteer)} | {hits[kind]} | {outside[kind]} ({outside[kind] / max(hits[kind], 1):.0%}) |"
        )
    print()


def varied_copies(sequences: list[list[str]], copies: int = 3, rare: int = 3) -> list[list[str]]:
    counts = Counter(w for seq in sequences for w in seq)
    out = [list(seq) for seq in sequences]
    for copy in range(2, copies + 1):
        out += [[f"{w}~{copy}" if counts[w] <= rare else w for w in seq] for seq in sequences]
    return out


def million_report(sequences: list[list[str]], min_counts: list[int]) -> None:
    from hybriddeid.knowledge.brown import brown_clusters

    corpus = varied_copies(sequences)
    tokens = sum(len(seq) for seq in corpus)
    print(f"## Brown C=1000 on {tokens:,} tokens (train+dev x3, rare words varied per copy)\n")
    for min_count in min_counts:
        started = time.perf_counter()
        result = brown_clusters(corpus, n_clusters=1000, min_count=min_count)
        print(f"min count {min_count}: {len(result.entries):,} words clustered, {time.perf_counter() - started:.1f} s")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, default=Path("/tmp/meddocan_clusters"))
    parser.add_argument("--skip-clusters", action="store_true")
    parser.add_argument("--skip-1m", action="store_true")
    parser.add_argument("--1m-min-count", dest="million_min_counts", type=int, nargs="+", default=[2, 1])
    args = parser.parse_args()
    train = read_corpus(args.corpus / "train" / "brat")
    dev = read_corpus(args.corpus / "dev" / "brat")
    sequences = note_sequences(doc.text for doc in train + dev)
    if not args.skip_clusters:
        clusters_report(sequences, args.out)
    gazetteer_report(dev)
    if not args.skip_1m:
        million_report(sequences, args.million_min_counts)


if __name__ == "__main__":
    main()
