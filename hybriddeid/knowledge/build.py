"""Build a clusters folder (Brown paths + word2vec k-means ids) from folders of unlabelled notes.

Notes are split into lines and tokens exactly as the CRFs split them (``hybriddeid.text``) and each
token is keyed by ``normalize_word``; every line is one sequence for both methods. Only the note
text is used, so annotated folders (BRAT, i2b2 XML, JSONL) serve as well as plain ``.txt`` notes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from hybriddeid.io import InputError, iter_documents
from hybriddeid.knowledge.clusters import WordClusters, normalize_word
from hybriddeid.text.tokenize import lines, tokenize

log = logging.getLogger("hybriddeid")


def note_sequences(texts: Iterable[str]) -> list[list[str]]:
    """The normalised tokens of every non-empty line of every text."""
    return [
        [normalize_word(tok.text) for tok in tokenize(text, start, end)] for text in texts for start, end in lines(text)
    ]


def read_texts(folders: Sequence[Path], input_format: str = "auto") -> list[str]:
    """The text of every note in ``folders``; unreadable files are logged by name and skipped."""
    texts: list[str] = []
    for folder in folders:
        for _path, doc in iter_documents(Path(folder), input_format):
            if isinstance(doc, InputError):
                log.warning("%s", doc)
                continue
            texts.append(doc.text)
    return texts


def build_clusters(
    sequences: Sequence[Sequence[str]],
    language: str,
    min_count: int = 2,
    brown_clusters: int = 1000,
    w2v_ks: Sequence[int] = (50, 200, 1000),
    seed: int = 1,
    progress: bool = False,
) -> WordClusters:
    """Brown (``brown_clusters`` leaves; 0 skips it) and word2vec clusters (one k-means per k in
    ``w2v_ks``; empty skips it) of ``sequences``; the timings go into ``meta``."""
    try:
        from hybriddeid.knowledge.brown import brown_clusters as run_brown
        from hybriddeid.knowledge.word2vec import word2vec_clusters
    except ImportError as exc:
        raise ImportError(
            f"building clusters needs numpy and gensim: pip install 'hybriddeid[knowledge]' ({exc})"
        ) from exc

    n_tokens = sum(len(seq) for seq in sequences)
    meta: dict = {
        "language": language,
        "min_count": min_count,
        "corpus": {
            "lines": len(sequences),
            "tokens": n_tokens,
            "vocabulary": len({word for seq in sequences for word in seq}),
        },
    }
    brown: dict[str, tuple[str, int]] = {}
    if brown_clusters:
        started = time.perf_counter()
        result = run_brown(sequences, n_clusters=brown_clusters, min_count=min_count, progress=progress)
        brown = {word: (path, count) for path, word, count in result.entries}
        meta["brown"] = {
            "clusters": brown_clusters,
            "leaves": result.n_clusters,
            "words": len(brown),
            "seconds": round(time.perf_counter() - started, 1),
        }
        log.info("brown: %d words in %d clusters, %.1f s", len(brown), result.n_clusters, meta["brown"]["seconds"])
    w2v: dict[int, dict[str, int]] = {}
    if w2v_ks:
        started = time.perf_counter()
        w2v = word2vec_clusters(sequences, ks=w2v_ks, min_count=min_count, seed=seed)
        meta["word2vec"] = {
            "ks": list(w2v_ks),
            "words": len(next(iter(w2v.values()), {})),
            "seed": seed,
            "seconds": round(time.perf_counter() - started, 1),
        }
        log.info(
            "word2vec + k-means: %d words, k = %s, %.1f s",
            meta["word2vec"]["words"],
            ", ".join(map(str, w2v_ks)),
            meta["word2vec"]["seconds"],
        )
    return WordClusters(brown, w2v, meta)


def ensure_clusters(config: dict, text_folders: Sequence[Path], language: str) -> list[Path]:
    """Build every clusters folder a pipeline config names but that does not exist yet, from the
    notes in ``text_folders`` with the default settings (benchmarks and tools use this so a
    config can name a folder it does not ship). Returns the folders built."""
    built: list[Path] = []
    for section in config.values():  # every component section that names clusters
        folder = section.get("clusters") if isinstance(section, dict) else None
        if not folder or Path(folder).is_dir():
            continue
        clusters = build_clusters(note_sequences(read_texts(text_folders)), language)
        clusters.to_disk(Path(folder))
        built.append(Path(folder))
    return built
