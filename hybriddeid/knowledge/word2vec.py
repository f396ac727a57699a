"""word2vec clusters: gensim Word2Vec vectors of the words, then k-means over the unit vectors.

Each k gives a flat partition of the vocabulary (k = 50 coarse ... 1000 fine); the CRFs use the
ids as features. k-means is a short numpy implementation (k-means++ seeding, Lloyd iterations),
so scikit-learn is not needed. gensim is imported only when vectors are trained.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_KS = (50, 200, 1000)


def _stable_hash(text: str) -> int:
    # gensim seeds per-word vectors with hashfxn; Python's hash() differs between processes.
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "little")


def train_vectors(
    sentences: Sequence[Sequence[str]],
    dim: int = 100,
    window: int = 5,
    min_count: int = 2,
    epochs: int = 5,
    seed: int = 1,
    workers: int = 1,
) -> tuple[list[str], np.ndarray]:
    """Skip-gram word2vec vectors: (words by falling count, float32 array words x dim).

    ``workers=1`` makes the result depend on ``seed`` only; more workers are faster but not
    reproducible (gensim's threads race).
    """
    try:
        from gensim.models import Word2Vec
    except ImportError as exc:  # an optional dependency
        raise ImportError("word2vec clusters need gensim: pip install 'hybriddeid[knowledge]'") from exc
    gensim_log = logging.getLogger("gensim")
    level = gensim_log.level
    gensim_log.setLevel(logging.WARNING)  # its INFO lines (one per epoch and phase) drown ours
    try:
        model = Word2Vec(
            sentences=[list(s) for s in sentences],
            vector_size=dim,
            window=window,
            min_count=min_count,
            sg=1,
            epochs=epochs,
            seed=seed,
            workers=workers,
            hashfxn=_stable_hash,
        )
    finally:
        gensim_log.setLevel(level)
    words = list(model.wv.index_to_key)
    return words, np.asarray(model.wv.vectors, dtype=np.float32)


def kmeans(vectors: np.ndarray, k: int, seed: int = 1, max_iter: int = 100) -> np.ndarray:
    """Cluster ids (0..k-1) of the rows of ``vectors`` by Lloyd's k-means from k-means++ seeds.

    Ids are numbered by first appearance in row order, so the same clustering always gets the
    same ids. k is capped at the number of distinct rows.
    """
    points = np.asarray(vectors, dtype=np.float32)
    n = len(points)
    k = min(k, len(np.unique(points, axis=0))) if n else 0
    if k == 0:
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    sq_norms = np.einsum("ij,ij->i", points, points)

    def squared_distances(center: np.ndarray) -> np.ndarray:
        return np.maximum(sq_norms - 2 * points @ center + center @ center, 0).astype(np.float64)

    # k-means++: each next seed drawn with probability proportional to its squared distance.
    # float32 seeds; the updates below divide by integer sizes, so the centres are float64 from then on
    # (kept: float32 throughout would change the clusters a model was built with)
    centers: np.ndarray = np.empty((k, points.shape[1]), dtype=np.float32)
    centers[0] = points[rng.integers(n)]
    nearest = squared_distances(centers[0])
    for c in range(1, k):
        total = nearest.sum()
        centers[c] = points[rng.choice(n, p=nearest / total) if total > 0 else rng.integers(n)]
        nearest = np.minimum(nearest, squared_distances(centers[c]))

    labels = np.full(n, -1, dtype=np.int64)
    for _ in range(max_iter):
        distances = sq_norms[:, None] - 2 * points @ centers.T + np.einsum("ij,ij->i", centers, centers)[None, :]
        new_labels = distances.argmin(axis=1)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        sizes = np.bincount(labels, minlength=k)
        filled = np.flatnonzero(sizes)
        sums = np.zeros_like(centers)
        starts = (np.cumsum(sizes) - sizes)[filled]
        sums[filled] = np.add.reduceat(points[np.argsort(labels, kind="stable")], starts, axis=0)
        empty = np.flatnonzero(sizes == 0)
        if len(empty):  # re-seed an empty cluster at the points worst served by their centre
            worst = np.argsort(-distances[np.arange(n), labels], kind="stable")[: len(empty)]
            sums[empty], sizes[empty] = points[worst], 1
        centers = sums / sizes[:, None]
    _, first = np.unique(labels, return_index=True)
    renumber = np.empty(labels.max() + 1, dtype=np.int64)
    renumber[labels[np.sort(first)]] = np.arange(len(first))
    return renumber[labels]


def word2vec_clusters(
    sentences: Iterable[Sequence[str]],
    ks: Sequence[int] = DEFAULT_KS,
    min_count: int = 2,
    seed: int = 1,
    dim: int = 100,
    epochs: int = 5,
    workers: int = 1,
) -> dict[int, dict[str, int]]:
    """k -> (word -> cluster id) for each k, from word2vec vectors of ``sentences``."""
    words, vectors = train_vectors(
        list(sentences), dim=dim, min_count=min_count, epochs=epochs, seed=seed, workers=workers
    )
    if not words:
        return {k: {} for k in ks}
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return {k: dict(zip(words, kmeans(unit, k, seed=seed).tolist())) for k in ks}
