"""Brown clustering (Brown et al. 1992) with Liang's (2005) windowed variant, in numpy.

Words are sorted by frequency; the ``n_clusters`` most frequent start as clusters and every other
word is added as a new cluster in turn, after which the pair of clusters whose merge loses the
least average mutual information (AMI) between adjacent clusters is merged (stage 1). When all
words are in, the clusters are merged down to one (stage 2); the stage-2 merges form the binary
tree whose root-to-leaf bit strings are the words' paths, as in Liang's ``wcluster``: the words of
one stage-1 cluster share a path.

The model follows ``wcluster``: p(c) is a cluster's share of the tokens, p(c, c') its share of the
bigrams (within a sequence; bigrams touching a word under ``min_count`` are dropped), and
AMI = sum over cluster pairs of q(c, c') = p(c, c') log(p(c, c') / (p(c) p(c'))).

Speed: ``L[k, l]``, the AMI lost by merging k and l, is kept for all active pairs (C + 1 slots).
Adding or merging a cluster changes ``L[k, l]`` only through the q terms that involve it, and those
vanish unless k or l is a bigram neighbour of it (for a merge of i and j: of whichever of i and j
has fewer neighbours), so a step updates O(C x neighbours) entries rather than all O(C^2), and the
new cluster's own row costs O(C x its neighbours) with running row and column sums. Rare words
have few neighbours, so most stage-1 steps are cheap; a step between two dense clusters is still
O(C^2). ``_AMITable.check`` recomputes every entry from the definition; the tests compare the two.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("hybriddeid")

_REFRESH_EVERY = 500  # merges between exact recomputations of the running sums


@dataclass(frozen=True)
class BrownResult:
    """Each clustered word's bit-string path and corpus count, in tree order (Liang's ``paths``)."""

    entries: tuple[tuple[str, str, int], ...]  # (path, word, count)
    n_tokens: int
    n_clusters: int  # leaves of the tree (stage-1 clusters)

    def paths(self) -> dict[str, str]:
        return {word: path for path, word, _ in self.entries}


def _q(joint: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """joint * log(joint / denominator), with 0 where joint is 0 (inactive slots included)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(joint > 0, joint * np.log(joint / denominator), 0.0)


class _AMITable:
    """Clusters in slots 0..size-1 with their unigram/bigram probabilities and merge losses."""

    def __init__(self, size: int) -> None:
        self.p = np.zeros(size)  # p(c)
        self.P = np.zeros((size, size))  # p(c, c'): c followed by c'
        self.Q = np.zeros((size, size))  # q(c, c')
        self.row_q = np.zeros(size)  # sum_x Q[c, x]
        self.col_q = np.zeros(size)  # sum_x Q[x, c]
        self.row_p = np.zeros(size)
        self.col_p = np.zeros(size)
        self.L = np.full((size, size), np.inf)  # merge loss, symmetric; inf off the active pairs
        self.active = np.zeros(size, dtype=bool)

    # -- pieces of the loss ---------------------------------------------------------------
    def _contribution(self, col: np.ndarray, row: np.ndarray, prob: float, rows: np.ndarray) -> np.ndarray:
        """What a third cluster x (column ``col`` = p(k, x), row ``row`` = p(x, k), p(x) = ``prob``)
        adds to ``L[k, l]`` for k in ``rows`` and every slot l: the q terms between x and k, l
        before the merge minus those between x and k+l after it."""
        p = self.p
        single = _q(col, p * prob) + _q(row, prob * p)
        merged_p = (p[rows, None] + p[None, :]) * prob
        return (
            single[rows, None]
            + single[None, :]
            - _q(col[rows, None] + col[None, :], merged_p)
            - _q(row[rows, None] + row[None, :], merged_p)
        )

    def _apply(self, rows: np.ndarray, delta: np.ndarray, exclude: Sequence[int]) -> None:
        """Add ``delta`` (rows x all slots) to L symmetrically, skipping ``exclude`` and inactive slots."""
        delta[:, ~self.active] = 0.0
        delta[:, list(exclude)] = 0.0
        self.L[rows, :] += delta
        self.L[:, rows] = self.L[rows, :].T

    def _losses_with(self, a: int) -> np.ndarray:
        """L[a, k] for every slot k, from the current tables (O(size x neighbours of a))."""
        with np.errstate(divide="ignore", invalid="ignore"):  # inactive slots: set to inf below
            losses = self._raw_losses_with(a)
        losses[~self.active] = np.inf
        losses[a] = np.inf
        return losses

    def _raw_losses_with(self, a: int) -> np.ndarray:
        p, P, Q = self.p, self.P, self.Q
        merged = p[a] + p
        rescale = np.log(merged / p)  # log p(a+k) / p(k)
        diag_p = np.diagonal(P)
        right = np.flatnonzero(P[a])
        left = np.flatnonzero(P[:, a])
        # sum_x q(a+k, x): exact over a's right neighbours, from k's running row sums elsewhere
        block = P[:, right]
        to_right = (
            _q(P[a, right][None, :] + block, merged[:, None] * p[right][None, :]).sum(1)
            + self.row_q
            - Q[:, right].sum(1)
            - rescale * (self.row_p - block.sum(1))
        )
        to_right -= _q(P[a, a] + P[:, a], merged * p[a]) + _q(P[a, :] + diag_p, merged * p)  # x = a, x = k
        block = P[left, :]
        from_left = (
            _q(P[left, a][:, None] + block, p[left][:, None] * merged[None, :]).sum(0)
            + self.col_q
            - Q[left, :].sum(0)
            - rescale * (self.col_p - block.sum(0))
        )
        from_left -= _q(P[a, a] + P[a, :], p[a] * merged) + _q(P[:, a] + diag_p, p * merged)
        inside = _q(P[a, a] + P[a, :] + P[:, a] + diag_p, merged * merged)
        weight = self.row_q + self.col_q - np.diagonal(Q)  # all q terms touching a cluster
        return weight[a] + weight - Q[a, :] - Q[:, a] - to_right - from_left - inside

    def _set_row(self, a: int) -> None:
        self.L[a, :] = self.L[:, a] = self._losses_with(a)

    def _add_sums(self, a: int, sign: float) -> None:
        """Add (sign=1) or remove (sign=-1) slot a's entries in every other slot's running sums."""
        self.row_q += sign * self.Q[:, a]
        self.col_q += sign * self.Q[a, :]
        self.row_p += sign * self.P[:, a]
        self.col_p += sign * self.P[a, :]

    def _reset_sums(self, a: int) -> None:
        self.row_q[a], self.col_q[a] = self.Q[a].sum(), self.Q[:, a].sum()
        self.row_p[a], self.col_p[a] = self.P[a].sum(), self.P[:, a].sum()

    def _set_q(self, a: int) -> None:
        self.Q[a, :] = _q(self.P[a, :], self.p[a] * self.p)
        self.Q[:, a] = _q(self.P[:, a], self.p * self.p[a])

    # -- the two steps ------------------------------------------------------------------------
    def add(self, slot: int, prob: float, right: np.ndarray, left: np.ndarray) -> None:
        """Put a new cluster in the empty ``slot``: ``right``/``left`` are its bigram probabilities
        with each slot (itself included) as right/left neighbour."""
        self.p[slot] = prob
        self.P[slot, :] = right
        self.P[:, slot] = left
        self.P[slot, slot] = right[slot]
        self._set_q(slot)
        self._add_sums(slot, 1.0)
        self._reset_sums(slot)
        self.active[slot] = True
        neighbours = np.flatnonzero((self.P[:, slot] > 0) | (self.P[slot, :] > 0))
        neighbours = neighbours[neighbours != slot]
        if len(neighbours):
            delta = self._contribution(self.P[:, slot], self.P[slot, :], prob, neighbours)
            self._apply(neighbours, delta, (slot,))
        self._set_row(slot)

    def merge(self, i: int, j: int, keep: int) -> None:
        """Merge the clusters in slots i and j into slot ``keep`` (i or j); the other slot empties."""
        gone = j if keep == i else i
        P, p = self.P, self.p
        degree = [np.count_nonzero(P[a]) + np.count_nonzero(P[:, a]) for a in (i, j)]
        sparse = i if degree[0] <= degree[1] else j
        neighbours = np.flatnonzero((P[:, sparse] > 0) | (P[sparse, :] > 0))
        neighbours = neighbours[(neighbours != i) & (neighbours != j)]
        if len(neighbours):
            # Pairs of other clusters change only through their terms with i, j and i+j, and only
            # where one of them neighbours the sparser of i and j (see the module docstring).
            delta = (
                self._contribution(P[:, i] + P[:, j], P[i, :] + P[j, :], p[i] + p[j], neighbours)
                - self._contribution(P[:, i], P[i, :], p[i], neighbours)
                - self._contribution(P[:, j], P[j, :], p[j], neighbours)
            )
            self._apply(neighbours, delta, (i, j))
        self._add_sums(i, -1.0)
        self._add_sums(j, -1.0)
        inside = P[i, i] + P[i, j] + P[j, i] + P[j, j]
        row, col = P[i, :] + P[j, :], P[:, i] + P[:, j]
        for a in (i, j):
            P[a, :] = P[:, a] = 0.0
            self.Q[a, :] = self.Q[:, a] = 0.0
            self.row_q[a] = self.col_q[a] = self.row_p[a] = self.col_p[a] = 0.0
        P[keep, :], P[:, keep] = row, col
        P[keep, i] = P[keep, j] = P[i, keep] = P[j, keep] = 0.0
        P[keep, keep] = inside
        p[keep], p[gone] = p[i] + p[j], 0.0
        self.active[gone] = False
        self.L[gone, :] = self.L[:, gone] = np.inf
        self._set_q(keep)
        self._add_sums(keep, 1.0)
        self._reset_sums(keep)
        self._set_row(keep)

    def best_pair(self) -> tuple[int, int]:
        """The active pair (i < j) whose merge loses the least AMI; ties go to the lowest index."""
        flat = int(np.argmin(self.L))
        i, j = divmod(flat, len(self.p))
        return (i, j) if i < j else (j, i)

    def refresh_sums(self) -> None:
        """Recompute the running sums exactly (they drift by rounding over thousands of updates)."""
        self.row_q, self.col_q = self.Q.sum(1), self.Q.sum(0)
        self.row_p, self.col_p = self.P.sum(1), self.P.sum(0)

    # -- reference ---------------------------------------------------------------------------
    def ami(self) -> float:
        return float(self.Q[np.ix_(self.active, self.active)].sum())

    def check(self) -> float:
        """Largest difference between the kept losses and losses recomputed from the definition
        (AMI before minus AMI after each merge); O(C^5), for tests on small tables."""
        slots = np.flatnonzero(self.active)
        n = len(slots)
        joint_before, probs_before = self.P[np.ix_(slots, slots)], self.p[slots]
        before = self.ami()
        worst = 0.0
        for x in range(n):
            for y in range(x + 1, n):
                assign = np.zeros((n, n - 1))  # cluster -> cluster after merging x and y
                rest = [s for s in range(n) if s not in (x, y)]
                assign[rest, np.arange(n - 2)] = 1.0
                assign[[x, y], n - 2] = 1.0
                probs = probs_before @ assign
                after = float(_q(assign.T @ joint_before @ assign, np.outer(probs, probs)).sum())
                worst = max(worst, abs(self.L[slots[x], slots[y]] - (before - after)))
        return worst


def _count(sequences: Iterable[Sequence[str]], min_count: int) -> tuple[list[str], np.ndarray, np.ndarray, int, int]:
    """Vocabulary (by falling count, then alphabetically), counts, and bigram (left, right, count)
    rows over words with at least ``min_count`` occurrences; plus token and bigram totals."""
    sequences = [list(seq) for seq in sequences]
    counts: dict[str, int] = {}
    for seq in sequences:
        for word in seq:
            counts[word] = counts.get(word, 0) + 1
    vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter(
        (-1 if w is None else index.get(w, -1) for seq in sequences for w in (*seq, None)), dtype=np.int64
    )
    n_tokens = len(ids) - len(sequences)
    n_bigrams = n_tokens - sum(1 for seq in sequences if seq)
    left, right = ids[:-1], ids[1:]
    kept = (left >= 0) & (right >= 0)
    keys, pair_counts = np.unique(left[kept] * len(vocab) + right[kept], return_counts=True)
    bigrams = np.stack([keys // max(len(vocab), 1), keys % max(len(vocab), 1), pair_counts], axis=1)
    return vocab, np.array([counts[w] for w in vocab], dtype=np.int64), bigrams, n_tokens, max(n_bigrams, 1)


def brown_clusters(
    sequences: Iterable[Sequence[str]],
    n_clusters: int = 1000,
    min_count: int = 2,
    progress: bool = False,
) -> BrownResult:
    """Brown clusters of the words of ``sequences`` (e.g. lines of normalised tokens).

    Words seen fewer than ``min_count`` times get no path. ``n_clusters`` is Liang's C: the width
    of the window and the number of leaves of the path tree.
    """
    if n_clusters < 1 or min_count < 1:
        raise ValueError("n_clusters and min_count must be at least 1")
    vocab, counts, bigrams, n_tokens, n_bigrams = _count(sequences, min_count)
    if not vocab:
        return BrownResult((), n_tokens, 0)
    width = min(n_clusters, len(vocab))
    size = width + 1
    table = _AMITable(size)

    # Each word's bigrams with itself and the words before it, found when it is added.
    owner = bigrams[:, :2].max(axis=1)
    order = np.argsort(owner, kind="stable")
    bigrams, owner = bigrams[order], owner[order]
    bounds = np.searchsorted(owner, np.arange(len(vocab) + 1))

    slot_of_word = np.full(len(vocab), -1, dtype=np.int64)
    members: list[list[int]] = [[] for _ in range(size)]
    node_of_slot = np.full(size, -1, dtype=np.int64)
    next_node = len(vocab)  # words are nodes 0..V-1; merges get new ids
    free = list(range(size - 1, -1, -1))
    merges = 0

    def merge_best() -> tuple[int, int]:
        nonlocal next_node, merges
        i, j = table.best_pair()
        keep, gone = (i, j) if len(members[i]) >= len(members[j]) else (j, i)
        table.merge(i, j, keep)
        slot_of_word[members[gone]] = keep
        members[keep].extend(members[gone])
        members[gone] = []
        a, b = int(node_of_slot[i]), int(node_of_slot[j])
        children = (a, b) if a <= b else (b, a)
        node_of_slot[keep], node_of_slot[gone] = next_node, -1
        next_node += 1
        free.append(gone)
        merges += 1
        if merges % _REFRESH_EVERY == 0:
            table.refresh_sums()
        return children

    for word in range(len(vocab)):
        slot = free.pop()
        slot_of_word[word] = slot
        a, b, count = bigrams[bounds[word] : bounds[word + 1]].T
        right, left = np.zeros(size), np.zeros(size)
        np.add.at(right, slot_of_word[b[a == word]], count[a == word])  # word, then b
        np.add.at(left, slot_of_word[a[b == word]], count[b == word])  # a, then word
        table.add(slot, counts[word] / n_tokens, right / n_bigrams, left / n_bigrams)
        members[slot] = [word]
        node_of_slot[slot] = word
        if table.active.sum() > width:
            merge_best()
        if progress and (word + 1) % 5000 == 0:
            log.info("brown: %d/%d words added", word + 1, len(vocab))

    # Stage 2: the leaves are the clusters now active; their merges make the path tree.
    leaves = {int(node_of_slot[s]): sorted(members[s]) for s in np.flatnonzero(table.active)}
    tree: dict[int, tuple[int, int]] = {}
    while table.active.sum() > 1:
        children = merge_best()
        tree[next_node - 1] = children
    root = int(node_of_slot[np.flatnonzero(table.active)[0]])

    entries: list[tuple[str, str, int]] = []
    stack = [(root, "")]
    while stack:
        node, path = stack.pop()
        if node in tree:
            zero, one = tree[node]  # the older cluster is the 0 branch, as in wcluster
            stack.extend([(one, path + "1"), (zero, path + "0")])
        else:
            entries.extend((path, str(vocab[w]), int(counts[w])) for w in leaves[node])
    return BrownResult(tuple(entries), n_tokens, len(leaves))
