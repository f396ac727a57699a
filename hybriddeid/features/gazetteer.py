"""Dictionary (gazetteer) matching over token sequences, yielding the paper's BIOES tags.

"Mississippi" -> S-STATE, "Grand Island" -> B-CITY E-CITY (paper section 3.2.2, dictionary
features). Matching is multi-word and longest-match-first over lower-cased token forms; every
lookup is one hash of a token tuple, so a note costs O(tokens x longest entry).

``Gazetteer.from_documents`` learns one from the gold spans of training notes. Such a lexicon
holds training PHI, so it is stored as keyed hashes (BLAKE2b of the phrase), never as text.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import cast

from hybriddeid.core.cache import read_once
from hybriddeid.core.document import Document
from hybriddeid.text.tokenize import tokenize

LEXICON_FILE = "lexicon.json"  # where a model keeps its training lexicon (hashed entries)
# A training document whose meta sets this key true trains the CRFs but gives the lexicon none of its
# spans: a model that ships must not carry a list of some corpus's PHI values, even hashed (the
# values would be learnt by heart, e.g. the surrogate names of a held-out half of the same corpus).
NOT_IN_LEXICON = "not_in_lexicon"

OUTSIDE = "O"
_SEPARATOR = "\x1f"


def phrase_key(words: Sequence[str]) -> str:
    """The stored key of a lower-cased token sequence: a 16-hex-digit BLAKE2b digest."""
    return hashlib.blake2b(_SEPARATOR.join(words).encode("utf-8"), digest_size=8, person=b"hybriddeid").hexdigest()


@lru_cache(maxsize=1 << 15)
def cached_phrase_key(words: tuple[str, ...]) -> str:
    """``phrase_key`` memoised: tagging hashes the same few thousand words note after note."""
    return phrase_key(words)


# word -> phrase_key of the word alone: a note's words cost one dict lookup each, not a call each
_WORD_KEYS: dict[str, str] = {}
_WORD_KEYS_LIMIT = 1 << 15  # emptied when full, as the phrase memo's size


def keys_of_words(words: Sequence[str]) -> list[str]:
    """Each word's own key (``phrase_key`` of the word alone), as ``Gazetteer.tag`` takes them."""
    keys = list(map(_WORD_KEYS.get, words))
    if None in keys:
        if len(_WORD_KEYS) >= _WORD_KEYS_LIMIT:
            _WORD_KEYS.clear()
        for i, key in enumerate(keys):
            if key is None:
                keys[i] = _WORD_KEYS[words[i]] = phrase_key((words[i],))
    return cast("list[str]", keys)  # every None filled above


def phrase_tokens(phrase: str) -> tuple[str, ...]:
    """Lower-cased tokens of a phrase, split exactly as notes are."""
    return tuple(tok.text.lower() for tok in tokenize(phrase))


def hit_tags(label: str, length: int, suffix: str = "") -> list[str]:
    """The BIOES tags of one hit of ``length`` words ("S-CITY"; "B-CITY", "I-CITY", "E-CITY"), each
    followed by ``suffix`` (a case mark, ``resources.case_mark``)."""
    if length == 1:
        return [f"S-{label}{suffix}"]
    return [f"B-{label}{suffix}", *[f"I-{label}{suffix}"] * (length - 2), f"E-{label}{suffix}"]


class Gazetteer:
    """Longest-match BIOES tagging of token sequences from a phrase -> label table."""

    def __init__(self, table: Mapping[str, str], max_words: int, prefixes: Iterable[str] = ()) -> None:
        self.table = dict(table)  # phrase_key -> label
        self.max_words = max_words
        # Keys of every phrase prefix: a match is extended only while its prefix is known, so
        # most tokens cost a single hash.
        self.prefixes = set(prefixes)
        self.prefixes.update(self.table)  # not set(prefixes) | set(table): two sets fewer of ~100,000 keys at load

    @classmethod
    def from_phrases(cls, phrases: Mapping[str, Iterable[str]]) -> Gazetteer:
        """A gazetteer from ``{label: phrases}``; a phrase listed under two labels keeps the first."""
        table: dict[str, str] = {}
        prefixes: set[str] = set()
        longest = 1
        for label, entries in phrases.items():
            for phrase in entries:
                words = phrase_tokens(phrase)
                if words:
                    table.setdefault(phrase_key(words), label)
                    prefixes.update(phrase_key(words[:n]) for n in range(1, len(words)))
                    longest = max(longest, len(words))
        return cls(table, longest, prefixes)

    @classmethod
    def from_documents(cls, docs: Iterable[Document], max_words: int = 6) -> Gazetteer:
        """Every gold span's phrase (up to ``max_words`` tokens) with its most frequent label; documents
        marked ``NOT_IN_LEXICON`` give none."""
        votes: dict[str, Counter[str]] = defaultdict(Counter)
        prefixes: set[str] = set()
        longest = 1
        for doc in docs:
            if doc.meta.get(NOT_IN_LEXICON):
                continue
            for span in doc.spans:
                words = phrase_tokens(doc.text[span.start : span.end])
                if 0 < len(words) <= max_words:
                    votes[phrase_key(words)][span.label] += 1
                    prefixes.update(phrase_key(words[:n]) for n in range(1, len(words)))
                    longest = max(longest, len(words))
        return cls({key: counts.most_common(1)[0][0] for key, counts in votes.items()}, longest, prefixes)

    @classmethod
    def union(cls, gazetteers: Iterable[Gazetteer]) -> Gazetteer:
        """One matcher for several (e.g. first and last names): a phrase in two keeps the first's label."""
        table: dict[str, str] = {}
        prefixes: set[str] = set()
        longest = 1
        for gazetteer in gazetteers:
            for key, label in gazetteer.table.items():
                table.setdefault(key, label)
            prefixes |= gazetteer.prefixes
            longest = max(longest, gazetteer.max_words)
        return cls(table, longest, prefixes)

    def __len__(self) -> int:
        return len(self.table)

    def tag(
        self, words: Sequence[str], word_keys: Sequence[str] | None = None, starts: Sequence[int] | None = None
    ) -> list[str]:
        """BIOES tags ("B-CITY", "S-PAIS", "O") for lower-cased ``words``, longest match first.
        ``word_keys`` (``keys_of_words(words)``, shared by every gazetteer tagging the same words)
        saves hashing them again; ``starts``, the positions whose key is a known prefix (in
        order), saves looking each word up (the fast engine knows them from its word cache)."""
        tags = [OUTSIDE] * len(words)
        for i, length, label in self.matches(words, word_keys, starts):
            tags[i : i + length] = hit_tags(label, length)
        return tags

    def matches(
        self, words: Sequence[str], word_keys: Sequence[str] | None = None, starts: Sequence[int] | None = None
    ) -> list[tuple[int, int, str]]:
        """The longest-match-first hits of ``tag`` as (first word, number of words, label), in order:
        what a caller that needs only the hits reads instead of a tag per word."""
        table, prefixes = self.table, self.prefixes
        if word_keys is None:
            word_keys = keys_of_words(words)
        # only a word whose own key is a known prefix can start a match: one set lookup per word
        if starts is None:
            starts = [i for i, key in enumerate(word_keys) if key in prefixes]
        found: list[tuple[int, int, str]] = []
        if not starts:
            return found
        n = len(words)
        phrase: tuple[str, ...] | None = None  # the words as a tuple, made for the first longer phrase
        longest = self.max_words
        free = 0  # the first word not inside a match already made
        for i in starts:
            if i < free:
                continue
            key = word_keys[i]
            if key not in prefixes:
                continue
            label = table.get(key)
            best_length, best_label = (0, "") if label is None else (1, label)
            for length in range(2, min(longest, n - i) + 1):
                if phrase is None:
                    phrase = tuple(words)
                key = cached_phrase_key(phrase[i : i + length])
                if key not in prefixes:
                    break
                label = table.get(key)
                if label is not None:
                    best_length, best_label = length, label
            if best_length:
                found.append((i, best_length, best_label))
                free = i + best_length
        return found

    def to_disk(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "max_words": self.max_words,
            "hash": "blake2b-8/hybriddeid",
            "entries": dict(sorted(self.table.items())),
            "prefixes": sorted(self.prefixes - set(self.table)),
        }
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def from_disk(cls, path: Path) -> Gazetteer:
        """The gazetteer ``to_disk`` wrote to ``path``; a file of the same bytes as one read before gives
        that same object."""
        raw = Path(path).read_bytes()

        def read() -> Gazetteer:
            data = json.loads(raw.decode("utf-8"))
            return cls(data["entries"], int(data["max_words"]), data.get("prefixes", ()))

        return read_once(cls, hashlib.blake2b(raw, digest_size=16).digest(), read)


def jackknife(docs: Sequence[Document], folds: int = 5) -> Iterator[tuple[Sequence[Document], Gazetteer]]:
    """Each fold of ``docs`` with a lexicon learned from the other folds' gold spans.

    Features from a lexicon of the training notes' own PHI would be perfectly reliable on those
    notes; tagging each fold with the other folds' lexicon shows a model how reliable a lexicon
    hit is on text it has not seen, which is the situation at prediction time.
    """
    folds = max(2, folds)
    for fold in range(folds):
        lexicon = Gazetteer.from_documents(doc for i, doc in enumerate(docs) if i % folds != fold)
        yield docs[fold::folds], lexicon
