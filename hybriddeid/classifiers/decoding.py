"""Viterbi and forward-backward for a linear-chain CRF, given each position's emission scores.

The fast engine (``engine = "fast"``) computes emission scores itself, from a crfsuite model's
weights (``crfsuite_files.read_weights``), and decodes here. The loops follow crfsuite's own
(crf1d_context.c): the same recursions, the same tie-breaking (the first label with the highest
score wins), forward-backward in scaled probability space. They are compiled by numba, which
installs as a wheel: a loop over positions in numpy would cost microseconds per position, about
what the whole crfsuite call costs per token.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def viterbi(emissions: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    """The highest-scoring label path (label ids) of one sequence, as crfsuite finds it."""
    n, n_labels = emissions.shape
    path = np.zeros(n, np.int64)
    if n == 0:
        return path
    back = np.zeros((n, n_labels), np.int64)
    previous = emissions[0].copy()
    current = np.empty(n_labels)
    for t in range(1, n):
        for j in range(n_labels):
            best = -np.inf
            best_at = 0
            for i in range(n_labels):
                score = previous[i] + transitions[i, j]
                if best < score:
                    best = score
                    best_at = i
            back[t, j] = best_at
            current[j] = best + emissions[t, j]
        previous, current = current, previous
    best = -np.inf
    for i in range(n_labels):
        if best < previous[i]:
            best = previous[i]
            path[n - 1] = i
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path


@njit(cache=True, nogil=True)
def marginals(emissions: np.ndarray, transitions: np.ndarray) -> np.ndarray:
    """Each position's probability of each label (rows sum to 1), by scaled forward-backward.

    Scores are exponentiated after subtracting each position's highest score, which changes no
    probability and keeps exp() finite whatever the weights."""
    n, n_labels = emissions.shape
    out = np.zeros((n, n_labels))
    if n == 0:
        return out
    exp_transitions = np.exp(transitions)
    exp_state = np.empty((n, n_labels))
    for t in range(n):
        top = emissions[t].max()
        for j in range(n_labels):
            exp_state[t, j] = np.exp(emissions[t, j] - top)
    alpha = np.zeros((n, n_labels))
    scale = np.empty(n)
    total = 0.0
    for j in range(n_labels):
        alpha[0, j] = exp_state[0, j]
        total += alpha[0, j]
    scale[0] = 1.0 / total
    for j in range(n_labels):
        alpha[0, j] *= scale[0]
    for t in range(1, n):
        total = 0.0
        for j in range(n_labels):
            acc = 0.0
            for i in range(n_labels):
                acc += alpha[t - 1, i] * exp_transitions[i, j]
            alpha[t, j] = acc * exp_state[t, j]
            total += alpha[t, j]
        scale[t] = 1.0 / total
        for j in range(n_labels):
            alpha[t, j] *= scale[t]
    beta = np.empty((n, n_labels))
    for i in range(n_labels):
        beta[n - 1, i] = scale[n - 1]
    row = np.empty(n_labels)
    for t in range(n - 2, -1, -1):
        for j in range(n_labels):
            row[j] = beta[t + 1, j] * exp_state[t + 1, j]
        for i in range(n_labels):
            acc = 0.0
            for j in range(n_labels):
                acc += exp_transitions[i, j] * row[j]
            beta[t, i] = acc * scale[t]
    for t in range(n):
        for i in range(n_labels):
            out[t, i] = alpha[t, i] * beta[t, i] / scale[t]
    return out


def warm_up() -> None:
    """Compile (or load from numba's cache) both functions now, e.g. in a parent process before
    it forks workers, so no note pays for it."""
    emissions = np.zeros((2, 2))
    viterbi(emissions, emissions)
    marginals(emissions, emissions)
