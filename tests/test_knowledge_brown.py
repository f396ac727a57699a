"""Brown clustering: the incremental loss table against the definition, obvious clusterings, determinism."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")

from hybriddeid.knowledge import brown  # noqa: E402
from hybriddeid.knowledge.brown import brown_clusters  # noqa: E402


def zipf_corpus(seed: int, n_words: int = 30, n_sequences: int = 200) -> list[list[str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(n_words)]
    weights = [1 / (i + 1) for i in range(n_words)]
    return [rng.choices(words, weights, k=rng.randint(2, 14)) for _ in range(n_sequences)]


def alternating_corpus(seed: int, left: list[str], right: list[str], n_sequences: int = 300) -> list[list[str]]:
    """Sequences that alternate a word of ``left`` and a word of ``right``."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n_sequences):
        start = rng.randrange(2)
        corpus.append([rng.choice((left, right)[(start + i) % 2]) for i in range(rng.randint(2, 10))])
    return corpus


@pytest.mark.parametrize("seed, width", [(0, 6), (1, 3), (2, 40)])
def test_incremental_losses_match_the_definition_after_every_step(monkeypatch, seed, width):
    worst = []
    add, merge = brown._AMITable.add, brown._AMITable.merge

    def checked_add(self, *args):
        add(self, *args)
        worst.append(self.check())

    def checked_merge(self, *args):
        merge(self, *args)
        worst.append(self.check())

    monkeypatch.setattr(brown._AMITable, "add", checked_add)
    monkeypatch.setattr(brown._AMITable, "merge", checked_merge)
    monkeypatch.setattr(brown, "_REFRESH_EVERY", 4)
    result = brown_clusters(zipf_corpus(seed), n_clusters=width, min_count=1)
    assert len(worst) > 30
    assert max(worst) < 1e-9
    assert result.n_clusters == min(width, len(result.entries))


@pytest.mark.parametrize("width", [2, 4, 100])
def test_two_word_classes_in_alternating_contexts_split_at_the_root(width):
    nouns = ["cat", "dog", "bird", "fish", "horse"]
    verbs = ["runs", "eats", "sleeps", "sings"]
    paths = brown_clusters(alternating_corpus(0, nouns, verbs), n_clusters=width, min_count=1).paths()
    assert set(paths) == set(nouns) | set(verbs)
    noun_bits = {paths[w][0] for w in nouns}
    verb_bits = {paths[w][0] for w in verbs}
    assert len(noun_bits) == 1 and len(verb_bits) == 1 and noun_bits != verb_bits


def test_one_stage_one_cluster_shares_one_path_and_paths_are_prefix_free():
    result = brown_clusters(zipf_corpus(3, n_words=40), n_clusters=5, min_count=1)
    paths = sorted(set(result.paths().values()))
    assert len(paths) == result.n_clusters == 5
    for a in paths:
        assert not any(b != a and b.startswith(a) for b in paths)  # leaves of one binary tree
    assert all(set(p) <= {"0", "1"} for p in paths)


def test_deterministic_and_independent_of_sequence_order():
    corpus = zipf_corpus(4)
    first = brown_clusters(corpus, n_clusters=6, min_count=1)
    assert brown_clusters(corpus, n_clusters=6, min_count=1) == first
    assert brown_clusters(list(reversed(corpus)), n_clusters=6, min_count=1) == first


def test_rare_words_get_no_path_and_counts_are_kept():
    corpus = [["a", "b", "a", "b", "rare"], ["b", "a", "c", "c"]]
    result = brown_clusters(corpus, n_clusters=10, min_count=2)
    counts = {word: count for _, word, count in result.entries}
    assert counts == {"a": 3, "b": 3, "c": 2}
    assert result.n_tokens == 9


def test_bad_arguments_and_empty_input():
    with pytest.raises(ValueError):
        brown_clusters([["a"]], n_clusters=0)
    assert brown_clusters([["a"]], min_count=2).entries == ()
