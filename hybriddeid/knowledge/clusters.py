"""Word clusters as CRF features: Brown bit-string paths and word2vec k-means ids, loaded from text.

A clusters folder holds
- ``brown.txt``: ``path<TAB>word<TAB>count`` per word, the ``paths`` format of Liang's ``wcluster``
  (a ``paths`` file made by ``wcluster`` is read too, so users can bring their own clusters);
- ``word2vec-k<K>.txt``: ``word<TAB>cluster id`` per word, one file per k;
- ``meta.json``: how they were built (language, min count, sizes, timings).

Words are keyed by ``normalize_word`` of the project's tokens, when built and when looked up, so
"Madrid" and "MADRID" share a cluster and every 5-digit number is "00000".
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hybriddeid.core.cache import read_once

BROWN_FILE = "brown.txt"
WCLUSTER_FILE = "paths"  # the name wcluster gives its output
META_FILE = "meta.json"
_W2V_FILE = re.compile(r"word2vec-k(\d+)\.txt")
NORMALIZATION = "lower, digits->0"
DEFAULT_PREFIX_LENGTHS = (4, 6, 10, 20)


_DIGIT = re.compile(r"\d")


def normalize_word(token: str) -> str:
    """The cluster key of a token: lower-cased, each digit replaced by "0" (length kept)."""
    if token.isdecimal():  # the tokenizer's digit runs; the common case, kept fast
        return "0" * len(token)
    lowered = token.lower()
    return lowered if lowered.isalpha() else _DIGIT.sub("0", lowered)


def path_prefixes(path: str, lengths: Sequence[int]) -> tuple[str, ...]:
    """A Brown path cut at each length (a shorter path whole): what a word's cluster features read."""
    return tuple(path[:n] for n in lengths)


def w2v_file(k: int) -> str:
    """The file name of the word2vec ids for k clusters."""
    return f"word2vec-k{k}.txt"


def write_brown(path: Path, entries: Iterable[tuple[str, str, int]]) -> None:
    """Write (path, word, count) rows in wcluster's ``paths`` format."""
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for bits, word, count in entries:
            out.write(f"{bits}\t{word}\t{count}\n")


def read_brown(path: Path) -> dict[str, tuple[str, int]]:
    """word -> (path, count) from a ``paths`` file; words that normalise alike keep the most frequent's path."""
    table: dict[str, tuple[str, int]] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or not fields[1] or not fields[2].isdigit() or set(fields[0]) - {"0", "1"}:
                raise ValueError(f"{path}:{number}: expected 'bitstring<TAB>word<TAB>count'")
            word, count = normalize_word(fields[1]), int(fields[2])
            if word not in table or count > table[word][1]:
                table[word] = (fields[0], count)
    return table


def write_ids(path: Path, ids: Mapping[str, int]) -> None:
    """Write ``word<TAB>id`` rows (sorted by id, then word)."""
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for word, cluster in sorted(ids.items(), key=lambda item: (item[1], item[0])):
            out.write(f"{word}\t{cluster}\n")


def read_ids(path: Path) -> dict[str, int]:
    """word -> cluster id from ``word<TAB>id`` rows."""
    table: dict[str, int] = {}
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            word, _, cluster = line.rstrip("\n").partition("\t")
            if not word or not cluster.isdigit():
                raise ValueError(f"{path}:{number}: expected 'word<TAB>cluster id'")
            table[word] = int(cluster)
    return table


class WordClusters:
    """O(1) cluster lookups for tokens: Brown path prefixes and word2vec cluster ids.

    ``brown`` maps normalised words to (path, count); ``w2v`` maps each k to normalised word -> id.
    """

    def __init__(
        self,
        brown: Mapping[str, tuple[str, int]] | None = None,
        w2v: Mapping[int, Mapping[str, int]] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.brown = dict(brown or {})
        self.w2v = {int(k): dict(ids) for k, ids in sorted((w2v or {}).items())}
        self.meta = dict(meta or {})
        # Per word, its (k, id) pairs in k order, built once so a lookup allocates nothing.
        words = set().union(*self.w2v.values()) if self.w2v else set()
        self._w2v_by_word = {
            word: tuple((k, ids[word]) for k, ids in self.w2v.items() if word in ids) for word in words
        }

    @property
    def w2v_ks(self) -> tuple[int, ...]:
        return tuple(self.w2v)

    def __len__(self) -> int:
        return len(self.brown.keys() | self._w2v_by_word.keys())

    def brown_path(self, word: str) -> str | None:
        entry = self.brown.get(normalize_word(word))
        return entry[0] if entry else None

    def brown_prefixes(self, word: str, lengths: Sequence[int] = DEFAULT_PREFIX_LENGTHS) -> tuple[str, ...]:
        """The word's path cut at each length (a shorter path is returned whole); () if unknown."""
        entry = self.brown.get(normalize_word(word))
        return () if entry is None else path_prefixes(entry[0], lengths)

    def w2v_ids(self, word: str) -> tuple[tuple[int, int], ...]:
        """The word's (k, cluster id) for each k it has an id for, in increasing k; () if unknown."""
        return self.w2v_ids_of_key(normalize_word(word))

    def w2v_ids_of_key(self, key: str) -> tuple[tuple[int, int], ...]:
        """``w2v_ids`` of a word already normalised (``normalize_word``)."""
        return self._w2v_by_word.get(key, ())

    def to_disk(self, directory: Path) -> None:
        """Write the folder format this module reads (a model stores its copy this way)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.brown:
            rows = sorted(
                ((path, word, count) for word, (path, count) in self.brown.items()),
                key=lambda row: (row[0], -row[2], row[1]),
            )
            write_brown(directory / BROWN_FILE, rows)
        for k, ids in self.w2v.items():
            write_ids(directory / w2v_file(k), ids)
        meta = {**self.meta, "normalization": NORMALIZATION}
        (directory / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def from_disk(cls, directory: Path) -> WordClusters:
        """Load a clusters folder (``brown.txt`` or wcluster's ``paths``, ``word2vec-k*.txt``, ``meta.json``);
        a folder whose files hold the same bytes as one read before gives that same object."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"{directory}: no such clusters folder")
        digest = hashlib.blake2b(digest_size=16)
        for path in sorted(directory.iterdir()):
            if path.is_file() and (
                path.name in (META_FILE, BROWN_FILE, WCLUSTER_FILE) or _W2V_FILE.fullmatch(path.name)
            ):
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return read_once(cls, digest.digest(), lambda: cls._read(directory))

    @classmethod
    def _read(cls, directory: Path) -> WordClusters:
        meta: dict[str, Any] = {}
        if (directory / META_FILE).is_file():
            meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
            if meta.get("normalization", NORMALIZATION) != NORMALIZATION:
                raise ValueError(
                    f"{directory}: clusters normalised as {meta['normalization']!r}, "
                    f"this version looks words up as {NORMALIZATION!r}"
                )
        brown_path = next(
            (directory / name for name in (BROWN_FILE, WCLUSTER_FILE) if (directory / name).is_file()), None
        )
        brown = read_brown(brown_path) if brown_path else {}
        w2v = {
            int(m.group(1)): read_ids(path)
            for path in sorted(directory.iterdir())
            if (m := _W2V_FILE.fullmatch(path.name))
        }
        if not brown and not w2v:
            raise ValueError(f"{directory}: no {BROWN_FILE}, {WCLUSTER_FILE} or word2vec-k*.txt file")
        return cls(brown, w2v, meta)
