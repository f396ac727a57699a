"""From notes to integer sequences: whole-note token sequences, vocabularies, the text skeleton.

No PyTorch here (the skeleton and vocabularies are plain data, saved as JSON). A note is one
sequence: its lines' tokens (the project tokenizer, via ``hybriddeid.features.analysis``)
joined by a ``#RETURN`` marker, as TS-GRU does (paper 000, "Text skeleton"), so no model ever
depends on sentence splitting (CEDI's point, paper 002 §2.1).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from hybriddeid.classifiers.schemes import OUTSIDE, encode_tags
from hybriddeid.core.document import Document, Span
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.gazetteer import phrase_key
from hybriddeid.features.resources import ClusterFeatures

RETURN = "#RETURN"  # between two lines of a note (paper 000)
PAD, UNK = "<PAD>", "<UNK>"  # ids 0 and 1 of every vocabulary
PAD_ID, UNK_ID = 0, 1
NESTED_FEATURES = ("chars", "clusters")  # several ids per token
WORD_CACHE_SIZE = 1 << 18  # distinct words whose character and cluster ids are kept
DIGIT = "DIGIT"  # each digit of a TS-GRU token: "46" -> "DIGITDIGIT" (paper 000)
RETURN_CHAR = "\n"  # the character sequence a line marker is spelled with
_DIGITS = re.compile(r"\d")
OPTIONAL_VOCABULARIES = ("chars", "skeleton", "prefixes", "suffixes", "clusters")


@dataclass(frozen=True, slots=True)
class NoteTokens:
    """A whole note as one sequence; ``positions`` index the real tokens (not markers) in ``words``."""

    words: tuple[str, ...]
    positions: tuple[int, ...]
    units: tuple[tuple[int, int], ...]  # character offsets of the real tokens


def note_tokens(note: AnalysedNote) -> NoteTokens:
    """The note's tokens line by line, with ``RETURN`` between consecutive lines."""
    words: list[str] = []
    positions: list[int] = []
    units: list[tuple[int, int]] = []
    for line_number, line in enumerate(note.lines):
        tokens = line.tokens
        if line_number:
            words.append(RETURN)
        for token in tokens:
            positions.append(len(words))
            units.append((token.start, token.end))
            words.append(token.text)
    return NoteTokens(tuple(words), tuple(positions), tuple(units))


@lru_cache(maxsize=1 << 18)
def stored_key(word: str) -> str:
    """A word as saved word and skeleton vocabularies hold it: hashed like the CRF lexicon
    (``features.gazetteer.phrase_key``), since training vocabularies hold PHI; markers stay readable."""
    return word if word in (PAD, UNK, RETURN) else phrase_key((word,))


def digit_form(word: str) -> str:
    """TS-GRU's form of a token: every digit becomes ``DIGIT`` (paper 000, "Text skeleton")."""
    return word if word == RETURN else _DIGITS.sub(DIGIT, word)


def lower_form(word: str) -> str:
    """Lower case with every digit as 0: the word-embedding key of the bi-GRU and CEDI."""
    return word if word == RETURN else _DIGITS.sub("0", word.lower())


def skeleton_threshold(counts: Counter[str], ratio: float) -> int:
    """Paper 000, Eq. (4): the t minimising |sum_{i>=t} f_i - r * vocabSize| for 0 < t <= maxFreq,
    where f_i is the number of words seen exactly i times; ties go to the smaller t."""
    if not counts:
        return 1
    words_with_count = Counter(counts.values())
    target = ratio * len(counts)
    kept = len(counts)  # words seen at least t times, starting at t = 1
    best_t, best_gap = 1, float("inf")
    for t in range(1, max(counts.values()) + 1):
        gap = abs(kept - target)
        if gap < best_gap:
            best_t, best_gap = t, gap
        kept -= words_with_count.get(t, 0)
    return best_t


def skeleton_vocabulary(counts: Counter[str], ratio: float) -> frozenset[str]:
    """The words a text skeleton keeps: those seen at least t times in training (Eq. 4)."""
    threshold = skeleton_threshold(counts, ratio)
    return frozenset(word for word, count in counts.items() if count >= threshold)


def skeleton(words: Iterable[str], kept: frozenset[str]) -> list[str]:
    """A text skeleton (paper 000, Fig. 3): kept words and line markers stay, the rest become <UNK>."""
    return [word if word in kept or word == RETURN else UNK for word in words]


def prefix(word: str, length: int) -> str:
    """A token's deep-prefix key (paper 002 §2.2): its first ``length`` characters, lower-cased."""
    return word if word == RETURN else word.lower()[:length]


def suffix(word: str, length: int) -> str:
    """A token's deep-suffix key (paper 002 §2.2): its last ``length`` characters, lower-cased."""
    return word if word == RETURN else word.lower()[-length:]


def affix_vocabulary(
    notes: Sequence[NoteTokens], affix: Callable[[str, int], str], length: int, min_count: int
) -> Vocabulary:
    """Prefixes or suffixes seen at least ``min_count`` times in training (rarer ones are unlikely to be
    true affixes, §2.2); the rest share <UNK>."""
    counts = Counter(affix(word, length) for note in notes for word in note.words if word != RETURN)
    return Vocabulary.from_counts(counts, min_count)


@dataclass
class Vocabulary:
    """Strings to ids; id 0 is padding and id 1 stands for anything unseen."""

    items: list[str]
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = {item: i for i, item in enumerate(self.items)}

    @classmethod
    def from_counts(cls, counts: Counter[str], min_count: int = 1) -> Vocabulary:
        kept = sorted((item for item, n in counts.items() if n >= min_count), key=lambda item: (-counts[item], item))
        return cls([PAD, UNK, *kept])

    def ids(self, items: Iterable[str]) -> list[int]:
        return [self.index.get(item, UNK_ID) for item in items]

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class EncodedNote:
    """A note's integer features (one list per feature, aligned with ``note.words``) and tag ids."""

    note: NoteTokens
    features: dict[str, list[Any]]
    tags: list[int] | None = None

    def __len__(self) -> int:
        return len(self.note.words)


@dataclass
class Vocabularies:
    """Everything a trained tagger maps strings with, saved as one JSON document."""

    architecture: str
    tags: list[str]
    words: Vocabulary
    chars: Vocabulary | None = None
    skeleton: Vocabulary | None = None
    prefixes: Vocabulary | None = None
    suffixes: Vocabulary | None = None  # same length and frequency threshold as the prefixes
    clusters: Vocabulary | None = None  # cluster feature strings ("bc4=0110", "wv200=17")
    prefix_length: int = 3
    max_word_length: int = 20
    tag_index: dict[str, int] = field(init=False, repr=False)
    cluster_features: ClusterFeatures | None = field(default=None, repr=False)  # the tagger's clusters, not saved here
    # Ids of a word's characters and clusters, worked out once per distinct word (most words of a
    # batch repeat); the lists are shared, never changed in place.
    _spelled: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _clustered: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tag_index = {tag: i for i, tag in enumerate(self.tags)}

    @classmethod
    def build(
        cls,
        notes: Sequence[NoteTokens],
        tag_sequences: Sequence[Sequence[str]],
        settings: Any,
        cluster_features: ClusterFeatures | None = None,
    ) -> Vocabularies:
        """Vocabularies from training notes (``settings`` is a ``NeuralSettings``)."""
        architecture = settings.architecture
        form = digit_form if architecture == "tsgru" else lower_form
        word_counts = Counter(form(word) for note in notes for word in note.words if word != RETURN)
        key_counts = Counter({stored_key(word): n for word, n in word_counts.items()})
        key_counts[RETURN] = sum(note.words.count(RETURN) for note in notes)
        tags = [OUTSIDE, *sorted({tag for tags in tag_sequences for tag in tags} - {OUTSIDE})]
        vocabularies = cls(
            architecture,
            tags,
            Vocabulary.from_counts(key_counts, settings.min_word_count),
            prefix_length=settings.prefix_length,
            max_word_length=settings.max_word_length,
        )
        if settings.resolved("char_encoder") != "none":
            char_counts = Counter(char for note in notes for word in note.words if word != RETURN for char in word)
            vocabularies.chars = Vocabulary([PAD, UNK, RETURN_CHAR, *sorted(char_counts)])
        if architecture == "tsgru":
            kept = skeleton_vocabulary(word_counts, settings.skeleton_ratio)
            vocabularies.skeleton = Vocabulary([PAD, UNK, RETURN, *sorted(stored_key(word) for word in kept)])
        if architecture == "cedi":
            vocabularies.prefixes = affix_vocabulary(notes, prefix, settings.prefix_length, settings.prefix_min_count)
            if settings.suffixes:
                vocabularies.suffixes = affix_vocabulary(
                    notes, suffix, settings.prefix_length, settings.prefix_min_count
                )
        if cluster_features is not None:
            vocabularies.cluster_features = cluster_features
            cluster_counts = Counter(
                feature
                for note in notes
                for word in note.words
                if word != RETURN
                for feature in cluster_features.own(word)
            )
            vocabularies.clusters = Vocabulary.from_counts(cluster_counts)
        return vocabularies

    def word_forms(self, words: Sequence[str]) -> list[str]:
        form = digit_form if self.architecture == "tsgru" else lower_form
        return [form(word) for word in words]

    def encode(self, note: NoteTokens, spans: Iterable[Span] | None = None, scheme: str = "BIO") -> EncodedNote:
        """The note's feature ids (and tag ids when gold ``spans`` are given)."""
        keys = [stored_key(form) for form in self.word_forms(note.words)]
        features: dict[str, list[Any]] = {"words": self.words.ids(keys)}
        if self.chars is not None:
            features["chars"] = [self._char_ids(word) for word in note.words]
        if self.skeleton is not None:
            features["skeleton"] = self.skeleton.ids(keys)  # a word outside the skeleton is <UNK>
        if self.prefixes is not None:
            features["prefixes"] = self.prefixes.ids(prefix(word, self.prefix_length) for word in note.words)
        if self.suffixes is not None:
            features["suffixes"] = self.suffixes.ids(suffix(word, self.prefix_length) for word in note.words)
        if self.clusters is not None:
            if self.cluster_features is None:
                raise ValueError("a clusters vocabulary needs the tagger's cluster features (cluster_features)")
            features["clusters"] = [self._cluster_ids(word) for word in note.words]
        tags = None
        if spans is not None:
            tags = [self.tag_index[OUTSIDE]] * len(note.words)
            for position, tag in zip(note.positions, encode_tags(note.units, spans, scheme)):
                tags[position] = self.tag_index.get(tag, self.tag_index[OUTSIDE])
        return EncodedNote(note, features, tags)

    def _char_ids(self, word: str) -> list[int]:
        ids = self._spelled.get(word)
        if ids is None:
            assert self.chars is not None
            ids = self.chars.ids(RETURN_CHAR if word == RETURN else word[: self.max_word_length])
            if len(self._spelled) < WORD_CACHE_SIZE:
                self._spelled[word] = ids
        return ids

    def _cluster_ids(self, word: str) -> list[int]:
        ids = self._clustered.get(word)
        if ids is None:
            assert self.clusters is not None and self.cluster_features is not None
            ids = [] if word == RETURN else self.clusters.ids(self.cluster_features.own(word))
            if len(self._clustered) < WORD_CACHE_SIZE:
                self._clustered[word] = ids
        return ids

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "architecture": self.architecture,
            "tags": self.tags,
            "words": self.words.items,
            "prefix_length": self.prefix_length,
            "max_word_length": self.max_word_length,
        }
        for name in OPTIONAL_VOCABULARIES:
            vocabulary = getattr(self, name)
            if vocabulary is not None:
                data[name] = vocabulary.items
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Vocabularies:
        optional: dict[str, Any] = {name: Vocabulary(data[name]) for name in OPTIONAL_VOCABULARIES if name in data}
        return cls(
            data["architecture"],
            data["tags"],
            Vocabulary(data["words"]),
            **optional,
            prefix_length=data["prefix_length"],
            max_word_length=data["max_word_length"],
        )


@dataclass(frozen=True)
class PreparedNote:
    """A note ready for a tagging batch: its feature ids as arrays (``[T]``, or ``[T, L]`` padded
    for several ids per token), and where its real tokens are (``positions`` in the sequence,
    ``units`` their character offsets). Plain arrays, so a worker process can make it and send it."""

    features: dict[str, np.ndarray]
    positions: np.ndarray
    units: np.ndarray  # [N, 2]
    length: int


def id_arrays(encoded: EncodedNote, vocabularies: Vocabularies | None = None) -> dict[str, np.ndarray]:
    """Each feature's ids as an array: ``[T]``, or ``[T, L]`` padded for several ids per token. With
    ``vocabularies``, in the narrowest integers each vocabulary's ids fit (arrays that cross between
    processes); without, int64 (what embeddings take)."""
    arrays = {}
    for name, values in encoded.features.items():
        dtype: type[np.integer] = np.int64
        if vocabularies is not None:
            vocabulary = getattr(vocabularies, name)
            dtype = np.int16 if vocabulary is not None and len(vocabulary) < 1 << 15 else np.int32
        if name in NESTED_FEATURES:  # several ids per token, padded to the longest
            depth = max(1, max(map(len, values), default=1))
            array = np.full((len(values), depth), PAD_ID, dtype=dtype)
            for row, items in enumerate(values):
                array[row, : len(items)] = items
        else:
            array = np.asarray(values, dtype=dtype)
        arrays[name] = array
    return arrays


def prepare_note(vocabularies: Vocabularies, language: str, note: AnalysedNote | Document) -> PreparedNote:
    """``note`` analysed, tokenised into one sequence and turned into id arrays."""
    tokens = note_tokens(analyse(note, language))
    features = id_arrays(vocabularies.encode(tokens), vocabularies)
    return PreparedNote(
        features,
        np.asarray(tokens.positions, dtype=np.int32),
        np.asarray(tokens.units, dtype=np.int32).reshape(-1, 2),
        len(tokens.words),
    )
