"""Token CRF features as attribute ids: the fast engine's emission scores without feature strings.

``features.token`` builds about 50 strings per token, which crfsuite (or ``CRFWeights.emissions``)
then looks up; building them costs more than the rest of tagging. ``TokenIds`` computes the same
scores, the sums of the model's state rows (in another order, so within ~1e-13), from ids:

- what depends on a token's form alone (``w=``, affixes, orthography, shapes, its own clusters) is
  summed once per distinct form into a row of ``own``; beside it are kept the attribute ids of what
  its neighbours read of it (``w[k]=``, ``ss[-1]=``/``ss[1]=``, ``bc[-1]=``/``bc[1]=``, ``L=``/``R=``)
  and its ids in the model's n-gram vocabularies. Forms are cached per model, at most
  ``FORM_CACHE_SIZE``, and the cache is cleared when full;
- word bigrams and trigrams and the shape trigram are found by their words' ids in sorted keys
  read off the model's own attribute names (an n-gram the model lacks adds nothing);
- a line's facts (``sec=``, ``key=``...) are summed once per distinct combination, and a token's
  place in its line (``first``, ``pos=``, dictionary tags "O" or a pad) picks one of a few fixed
  rows; dictionary tags are added one by one only at and beside the tags that are not "O";
- every window is then an id column shifted over the lines laid end to end, and numpy adds up
  the rows, a column at a time, for every token of a batch of lines at once.

Extractors with no id version here (``pos`` with a tag source, custom extractors, a built-in name
registered again, a name listed twice) fall back to their strings, and so do the n-grams of a line
holding a NUL (crfsuite reads a name only up to a NUL): any config gives the string path's scores.
A token's lower-case form is its text's ``lower()``, as ``analysis`` makes it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from hybriddeid.features import token as token_features
from hybriddeid.features.analysis import AnalysedLine
from hybriddeid.features.gazetteer import OUTSIDE, Gazetteer, cached_phrase_key, hit_tags, keys_of_words
from hybriddeid.features.lexical import affixes, orthography, shape, short_shape
from hybriddeid.features.resources import ClusterFeatures, case_mark, case_marked
from hybriddeid.features.token import (
    TOKEN_EXTRACTORS,
    TokenSequence,
    check_token_features,
    extract_token_features,
    proper_noun_features,
    username_features,
    vocabulary_features,
)
from hybriddeid.text.tokenize import Token

if TYPE_CHECKING:
    from hybriddeid.classifiers.crfsuite_files import CRFWeights

# Distinct token forms kept per model (as features.lexical's WORD_MEMO_SIZE): the cache is cleared
# when full, so a long batch holds at most this many rows of ``own`` (labels x 8 bytes each).
FORM_CACHE_SIZE = 1 << 15
# Distinct line-fact combinations kept (each two rows of labels x 8 bytes).
LINE_CACHE_SIZE = 1 << 12
_SUM_CHUNK = 256  # new forms summed at once (ids x features x labels floats held meanwhile)
# The extractors computed from ids, by the function each name must still be registered as.
ID_EXTRACTORS: dict[str, Callable[..., None]] = {
    name: getattr(token_features, "_" + name)
    for name in (
        "words",
        "ngrams",
        "context",
        "affixes",
        "orthography",
        "shapes",
        "line",
        "clusters",
        "vocabulary",
        "proper",
        "usernames",
        "extra",
    )
}
_POS = token_features._pos  # no id version: read as strings on lines a tag source tagged
_LEFT, _RIGHT = "<s>", "</s>"  # the string path's pads, and the two pad forms (ids 0 and 1)
# The pad forms' texts hold a line break, which no token does, so no token is taken for one.
_PAD_TEXTS = ("\n" + _LEFT, "\n" + _RIGHT)
_PAD_TOKENS = (Token(_PAD_TEXTS[0], -1, -1), Token(_PAD_TEXTS[1], -1, -1))
_NO_ID = -1  # safe-word column: not a safe word
_NEEDS_STRINGS = -2  # safe-word column: a safe word whose first feature only the string path knows
# Per-form columns after the 2 * window + 1 ``w[k]=`` ones.
_SSL, _SSR, _BCL, _BCR, _CL, _CR, _LOW, _ISW, _SAFE, _MASK, _WORDV, _SHAPEV = range(12)
_N_COLUMNS = 12
# A token's place in its line: what ``line`` and ``extra`` add for it depends on it and pos=min(i, 5).
_MIDDLE, _FIRST, _LAST, _ALONE = range(4)


class LineInput(NamedTuple):
    """One sequence to score: a line (or segment) and the tag source's POS and NER tags, if any."""

    line: AnalysedLine
    pos: list[str] | None = None
    ner: list[str] | None = None


class _Batch(NamedTuple):
    """How ``emissions`` laid out a batch of lines: what the steps after the id columns read."""

    lines: Sequence[LineInput]
    sizes: list[int]  # tokens per line
    line_base: list[int]  # where each line's first token is among the batch's forms (pads included)
    forms: list[int]  # form ids of the pads and tokens, line after line
    table: np.ndarray  # the per-form columns of each of those
    at: np.ndarray  # per token: its place among ``forms``
    place: np.ndarray  # per token: its place in its line
    n_of: np.ndarray  # ``sizes`` as an array
    line_of: np.ndarray  # per token: its line
    first_row: np.ndarray  # per line: its first token's row among the batch's tokens


class Dictionary(NamedTuple):
    """A matcher whose BIOES tags are an ``extra`` feature (``name=S-CITY``, ``name[-1]=...``)."""

    name: str
    gazetteer: Gazetteer
    case_marked: bool  # bundled dictionaries mark lower-case hits (resources.case_marked), the lexicon not


def _splits(rest: str, parts: int) -> Iterable[tuple[str, ...]]:
    """Every way to read ``rest`` as ``parts`` strings joined by "|" (a word may be "|" itself)."""
    if rest.count("|") == parts - 1:  # most names: one way
        yield tuple(rest.split("|"))
        return
    cuts = [i for i, ch in enumerate(rest) if ch == "|"]
    for chosen in itertools.combinations(cuts, parts - 1):
        bounds = (-1, *chosen, len(rest))
        yield tuple(rest[a + 1 : b] for a, b in zip(bounds, bounds[1:]))


_OFFSET = re.compile(r"-?\d+")  # k of a b[k]= or t[k]= name


def _ngram_tables(names: Mapping[str, int], window: int, none: int) -> tuple[_NgramTable, _NgramTable, _NgramTable]:
    """The model's word bigrams (``b[k]=``, k in [-window, window)), trigrams (``t[k]=``, k in
    [-window, window - 1)) and shape trigrams (``ss[-1:1]=``). Every model name is looked at once, by
    its first characters (a start-up cost of each process that tags)."""
    found: dict[str, dict[tuple[str, ...], list[int]]] = {"b": {}, "t": {}, "ss": {}}
    width = {"b": 2 * window, "t": max(2 * window - 1, 0), "ss": 1}
    for name, ident in names.items():
        head = name[:2]
        if head == "ss":
            if not name.startswith("ss[-1:1]="):
                continue
            kind, column, rest, parts = "ss", 0, name[len("ss[-1:1]=") :], 3
        elif head == "b[" or head == "t[":
            end = name.find("]", 2)  # "b[k]=rest": k holds no "]"
            if end < 0 or name[end + 1 : end + 2] != "=" or _OFFSET.fullmatch(name, 2, end) is None:
                continue
            kind, rest = head[0], name[end + 2 :]
            column, parts = int(name[2:end]) + window, 2 if kind == "b" else 3
            if not 0 <= column < width[kind]:
                continue
        else:
            continue
        table = found[kind]
        for key in _splits(rest, parts):
            row = table.get(key)
            if row is None:
                row = table[key] = [none] * width[kind]
            row[column] = ident
    words: dict[str, int] = {}  # one vocabulary for both word n-gram tables: a form has one id
    for key in itertools.chain(found["b"], found["t"]):
        for word in key:
            words.setdefault(word, len(words))
    shapes: dict[str, int] = {}
    for key in found["ss"]:
        for word in key:
            shapes.setdefault(word, len(shapes))
    return (
        _NgramTable(found["b"], width["b"], words),
        _NgramTable(found["t"], width["t"], words),
        _NgramTable(found["ss"], 1, shapes),
    )


class _NgramTable:
    """A model's n-grams of one kind by their words' ids (see ``_ngram_tables``).

    Every name is split at each choice of "|" (a word may be "|"), so each key read off a name
    spells exactly that name. Words get ids in ``vocabulary``; a key is its words' ids in base
    ``len(vocabulary)``; ``ids[row, k + window]`` is the attribute of the n-gram ``keys[row]``
    at offset k (``none`` where the model lacks it)."""

    def __init__(self, found: Mapping[tuple[str, ...], list[int]], width: int, vocabulary: dict[str, int]) -> None:
        self.vocabulary = vocabulary  # every word of ``found`` (perhaps shared with another table)
        self.base = max(len(self.vocabulary), 1)
        parts = max((len(key) for key in found), default=1)
        if self.base**parts >= 1 << 62:
            raise ValueError("an n-gram vocabulary too large for 64-bit keys")
        codes = np.zeros(len(found), np.int64)
        for row, key in enumerate(found):
            code = 0
            for word in key:
                code = code * self.base + self.vocabulary[word]
            codes[row] = code
        order = np.argsort(codes, kind="stable")
        self.keys = codes[order]
        self.ids = np.array(list(found.values()), np.int64).reshape(len(found), width)[order]

    def rows(self, word_ids: Sequence[np.ndarray]) -> np.ndarray:
        """The row of ``ids`` of each n-gram made of ``word_ids`` (one array per word, -1 for a
        word the table lacks), -1 where the model has no such n-gram."""
        size = len(word_ids[0])
        if not len(self.keys):
            return np.full(size, -1, np.int64)
        code = np.zeros(size, np.int64)
        known = np.ones(size, bool)
        for ids in word_ids:
            code *= self.base
            code += ids
            known &= ids >= 0
        at = np.minimum(np.searchsorted(self.keys, code), len(self.keys) - 1)
        return np.where(known & (self.keys[at] == code), at, -1)


class TokenIds:
    """A token CRF's features as ids for one model and feature config; ``emissions`` scores lines.

    Not for concurrent use from several threads: ``emissions`` grows and clears shared caches."""

    def __init__(
        self,
        weights: CRFWeights,
        features: Sequence[str],
        window: int,
        safe_words: frozenset[str] = frozenset(),
        clusters: ClusterFeatures | None = None,
        dictionaries: Sequence[Dictionary] = (),
        resource_tags: Callable[[Sequence[Token], Sequence[str]], dict[str, list[str]]] | None = None,
        cache_size: int = FORM_CACHE_SIZE,
        vocabulary: frozenset[str] | None = None,
        proper_nouns: frozenset[str] | None = None,
        surnames: frozenset[str] | None = None,
    ) -> None:
        self.weights = weights
        self.features = list(features)
        self.window = window
        self.safe_words = safe_words
        self.clusters = clusters
        self.dictionaries = list(dictionaries)
        self.resource_tags = resource_tags  # overrides ``dictionaries``: a subclass's own tags, line by line
        self.cache_size = cache_size
        self.vocabulary = vocabulary
        self.proper_nouns = proper_nouns
        self.surnames = surnames
        self.none = weights.none
        self._aid = weights.attribute_id
        self._aids = weights.attribute_ids_of
        # Which extractors run from ids: the first listing of a built-in name still registered as
        # itself; the rest run as strings. Order does not matter to a sum, but "safe" keeps a
        # safe word's first feature, which the ids know only when "words" (``w=`` + form) is first.
        on: set[str] = set()
        self.generic: list[str] = []
        for name in self.features:
            if name in ID_EXTRACTORS and name not in on and TOKEN_EXTRACTORS.get(name) is ID_EXTRACTORS[name]:
                on.add(name)
            else:
                self.generic.append(name)
        check_token_features(self.generic)
        self.words_first = bool(self.features) and self.features[0] == "words" and "words" in on
        if clusters is None:
            on.discard("clusters")
        if not vocabulary:
            on.discard("vocabulary")
        if not proper_nouns:
            on.discard("proper")
        if not surnames:
            on.discard("usernames")
        self.on = on
        self.pad = max(window, 1)
        self.reach = 2 * window if "context" in on else 0
        self.state = np.ascontiguousarray(weights.state)
        self.n_labels = self.state.shape[1]
        self.bigrams, self.trigrams, self.shape_trigrams = _ngram_tables(weights.attribute_ids, window, self.none)
        self._wk_names = [f"w[{k}]=" for k in range(-window, window + 1)]
        self.places = self._place_rows()
        self._own = np.zeros((0, self.n_labels))
        self._new_known: list[tuple[np.ndarray, np.ndarray]] = []  # new forms and their own ids, for _sum_new
        self._ids = np.zeros((0, 2 * window + 1 + _N_COLUMNS), np.int32)  # ids and small codes
        # per form and dictionary, the tag-table row of the form's hit as a phrase of one word ("O" if none)
        self._single = np.zeros((0, len(self.dictionaries)), np.int64)
        self._clear()

    def _place_rows(self) -> np.ndarray:
        """What a token's place adds, by place x 6 + min(i, 5), twice: rows 0-23 for lines whose
        dictionary tags are all "O" (the dictionaries' ``name[-1]=``/``name[1]=`` of "O" or a pad
        and ``name=O``), rows 24-47 without the dictionaries (their lines add them tag by tag)."""
        aid, state = self._aid, self.state
        rows = np.zeros((48, self.n_labels))
        names = [] if "extra" not in self.on or self.resource_tags else [d.name for d in self.dictionaries]
        for place in (_MIDDLE, _FIRST, _LAST, _ALONE):
            for at in range(6):
                found: list[str] = []
                if "line" in self.on:
                    found.append("first" if place in (_FIRST, _ALONE) else "last" if place == _LAST else "")
                    found.append(f"pos={at}")
                outside: list[str] = []
                for name in names:
                    outside += [
                        f"{name}={OUTSIDE}",
                        f"{name}[-1]={_LEFT if place in (_FIRST, _ALONE) else OUTSIDE}",
                        f"{name}[1]={_RIGHT if place in (_LAST, _ALONE) else OUTSIDE}",
                    ]
                plain = [aid(name) for name in found if name]
                rows[place * 6 + at] = state[plain + [aid(name) for name in outside]].sum(axis=0)
                rows[24 + place * 6 + at] = state[plain].sum(axis=0)
        return rows

    # -- caches ---------------------------------------------------------------------------------
    def _clear(self) -> None:
        """Forget every form and line combination (the arrays keep their size and are overwritten)."""
        self._forms: dict[str, int] = {_PAD_TEXTS[0]: 0, _PAD_TEXTS[1]: 1}
        self._lowers: dict[str, int] = {}
        self._word_keys: list[str] = ["", ""]  # each form's dictionary key (gazetteer.keys_of_words)
        self._tag_codes: dict[str, dict[str, int]] = {}  # extra name -> tag -> row of the tag table
        self._tag_pads: dict[str, tuple[int, int]] = {}  # extra name -> rows of its <s> and </s>
        self._tag_rows: list[tuple[int, int, int]] = []
        self._tag_table: np.ndarray | None = None
        self._line_rows: dict[tuple[tuple[str, ...], str], int] = {}  # line facts -> row of _line_table
        self._line_table = np.zeros((0, self.n_labels))
        # two lower-case form ids (each + 2, the first << 32) -> bits of the dictionaries where the two words,
        # one after the other, start a phrase
        self._pairs: dict[int, int] = {}
        self._ensure(2)
        none, w, aid, on = self.none, self.window, self._aid, self.on
        base = 2 * w + 1
        for form, pad in ((0, _LEFT), (1, _RIGHT)):
            self._own[form] = 0.0
            row = [none] * (base + _N_COLUMNS)
            if "words" in on:
                row[:base] = [aid(name + pad) for name in self._wk_names]
            side = "[-1]=" if form == 0 else "[1]="
            if "shapes" in on:
                row[base + (_SSL if form == 0 else _SSR)] = aid("ss" + side + pad)
            if "clusters" in on:
                row[base + (_BCL if form == 0 else _BCR)] = aid("bc" + side + pad)
            row[base + _LOW], row[base + _ISW], row[base + _SAFE], row[base + _MASK] = -1 - form, 0, _NO_ID, 0
            row[base + _WORDV] = self.bigrams.vocabulary.get(pad, -1)
            row[base + _SHAPEV] = self.shape_trigrams.vocabulary.get(pad, -1)
            self._ids[form] = row
            self._single[form] = [self._codes(dictionary.name, (OUTSIDE,))[0] for dictionary in self.dictionaries]
        self._count = 2

    def _ensure(self, rows: int) -> None:
        """Room for ``rows`` forms (the arrays double)."""
        if rows > len(self._own):
            size = max(rows, 2 * len(self._own), 1024)
            own = np.zeros((size, self.n_labels))
            own[: len(self._own)] = self._own
            ids = np.zeros((size, self._ids.shape[1]), np.int32)
            ids[: len(self._ids)] = self._ids
            single = np.zeros((size, self._single.shape[1]), np.int64)
            single[: len(self._single)] = self._single
            self._own, self._ids, self._single = own, ids, single

    def _intern_new(self, texts: list[str]) -> None:
        """Give each of ``texts`` (distinct forms not yet known) an id and its row: every feature
        family is computed over all of them at once and their names looked up in one pass."""
        first, count = self._count, len(texts)
        self._ensure(first + count)
        on, none, clusters = self.on, self.none, self.clusters
        lowers = [text.lower() for text in texts]
        shorts = list(map(short_shape, texts))
        # own names per form, family after family in the string path's order
        families: list[list[Sequence[str]]] = []
        if "words" in on:
            families.append([("w=" + text,) for text in texts])
        if "affixes" in on:
            families.append(list(map(affixes, lowers)))
        if "orthography" in on:
            families.append(list(map(orthography, texts)))
        if "shapes" in on:
            families.append([("sh=" + shape(text), "ss=" + short) for text, short in zip(texts, shorts)])
        # each of these is on only when its resource was given (__init__)
        if "clusters" in on and clusters is not None:
            families.append(list(map(clusters.own, texts)))
        if "vocabulary" in on and self.vocabulary is not None:
            vocabulary = self.vocabulary
            families.append([vocabulary_features(text, vocabulary) for text in texts])
        if "proper" in on and self.proper_nouns is not None:
            proper = self.proper_nouns
            families.append([proper_noun_features(text, proper) for text in texts])
        if "usernames" in on and self.surnames is not None:
            surnames, known = self.surnames, self.vocabulary
            families.append([username_features(text, surnames, known) for text in texts])
        own = [list(itertools.chain.from_iterable(names)) for names in zip(*families)] if families else [[]] * count
        # the per-form columns' names: what a token's neighbours read of it, (column, names) in order
        base = 2 * self.window + 1
        columns: list[tuple[int, list[str]]] = []
        if "words" in on:
            columns += [(k, [name + lower for lower in lowers]) for k, name in enumerate(self._wk_names)]
        if "shapes" in on:
            columns += [(base + _SSL, ["ss[-1]=" + short for short in shorts])]
            columns += [(base + _SSR, ["ss[1]=" + short for short in shorts])]
        if "clusters" in on and clusters is not None:
            near = list(map(clusters.neighbour, texts))
            columns += [(base + _BCL, ["bc[-1]=" + n for n in near]), (base + _BCR, ["bc[1]=" + n for n in near])]
        is_word = [lower[:1].isalnum() for lower in lowers]
        if "context" in on:
            columns += [
                (base + _CL, ["L=" + lower for lower in lowers]),
                (base + _CR, ["R=" + lower for lower in lowers]),
            ]
        lengths = np.fromiter(map(len, own), np.int64, count)
        names = list(itertools.chain.from_iterable(own))
        for _, column_names in columns:
            names += column_names
        ids = np.array(self._aids(names), np.int64)
        used = int(lengths.sum())
        # own rows: each form's ids padded with the zero row (``none``) are summed by _sum_new
        if used:
            width = int(lengths.max())
            padded = np.full((count, width), none, np.int64)
            padded[np.arange(width) < lengths[:, None]] = ids[:used]
            self._new_known.append((np.arange(first, first + count), padded))
        else:
            self._own[first : first + count] = 0.0
        block = np.full((count, base + _N_COLUMNS), none, np.int32)
        at = used
        for column, column_names in columns:
            block[:, column] = ids[at : at + len(column_names)]
            at += len(column_names)
        words = np.array(is_word, bool)
        if "context" in on:
            block[~words, base + _CL] = none
            block[~words, base + _CR] = none
        lower_ids = self._lowers
        block[:, base + _LOW] = [lower_ids.setdefault(lower, len(lower_ids)) for lower in lowers]
        block[:, base + _ISW] = words
        safe = self.safe_words
        block[:, base + _SAFE] = [
            (self._aid("w=" + text) if self.words_first else _NEEDS_STRINGS) if lower in safe else _NO_ID
            for text, lower in zip(texts, lowers)
        ]
        keys = keys_of_words(lowers) if self.dictionaries else [""] * count
        masks = np.zeros(count, np.int64)
        for bit, dictionary in enumerate(self.dictionaries):
            prefixes, table = dictionary.gazetteer.prefixes, dictionary.gazetteer.table
            masks |= np.array([key in prefixes for key in keys], np.int64) << bit
            tags = [OUTSIDE] * count
            for i, key in enumerate(keys):
                label = table.get(key)
                if label is not None:
                    tags[i] = hit_tags(label, 1, case_mark(texts[i]) if dictionary.case_marked else "")[0]
            self._single[first : first + count, bit] = self._codes(dictionary.name, tags)
        block[:, base + _MASK] = masks
        bigram_words, shape_words = self.bigrams.vocabulary, self.shape_trigrams.vocabulary
        block[:, base + _WORDV] = [bigram_words.get(lower, -1) for lower in lowers]
        block[:, base + _SHAPEV] = [shape_words.get(short, -1) for short in shorts]
        self._ids[first : first + count] = block
        self._word_keys += keys
        self._forms.update(zip(texts, range(first, first + count)))
        self._count += count

    def _sum_new(self) -> None:
        """Each new form's own row, the sum of its features' weights, for the batch's new forms a few
        hundred at a time: their ids padded with the zero row and summed over that axis, which adds
        row after row as ``state[known].sum(axis=0)`` does, so the same bits (np.add.reduceat does
        not; a zero row added between two changes nothing)."""
        pending, self._new_known = self._new_known, []
        for forms, padded in pending:
            for at in range(0, len(forms), _SUM_CHUNK):
                self._own[forms[at : at + _SUM_CHUNK]] = self.state[padded[at : at + _SUM_CHUNK]].sum(axis=1)

    def _line_row(self, features: tuple[str, ...], key: str) -> int:
        """The row of ``_line_table`` that sums a line's facts and ``key=`` (the next row: its
        facts and ``inkey``), made on first sight."""
        row = self._line_rows.get((features, key))
        if row is None:
            row = 2 * len(self._line_rows)
            if row + 2 > len(self._line_table):
                table = np.zeros((max(2 * len(self._line_table), 64), self.n_labels))
                table[: len(self._line_table)] = self._line_table
                self._line_table = table
            ids = [self._aid(name) for name in features]
            self._line_table[row] = self.state[ids + [self._aid("key=" + key if key else "key=none")]].sum(axis=0)
            self._line_table[row + 1] = self.state[ids + [self._aid("inkey")]].sum(axis=0)
            self._line_rows[(features, key)] = row
        return row

    def _tag_codes_of(self, name: str) -> dict[str, int]:
        """``extra`` name's rows of the tag table by tag (made with its pads' on first sight)."""
        by_tag = self._tag_codes.get(name)
        if by_tag is None:
            aid, none = self._aid, self.none
            self._tag_pads[name] = (
                self._tag_row((none, aid(f"{name}[-1]={_LEFT}"), none)),
                self._tag_row((none, none, aid(f"{name}[1]={_RIGHT}"))),
            )
            by_tag = self._tag_codes[name] = {}
        return by_tag

    def _tag_row(self, row: tuple[int, int, int]) -> int:
        self._tag_rows.append(row)
        self._tag_table = None
        return len(self._tag_rows) - 1

    def _codes(self, name: str, tags: Sequence[str]) -> list[int]:
        """Rows of the tag table holding ``name=tag``, ``name[-1]=tag`` and ``name[1]=tag``."""
        by_tag = self._tag_codes_of(name)
        found = list(map(by_tag.get, tags))
        if None in found:
            aid = self._aid
            for i, tag in enumerate(tags):
                if found[i] is None:
                    code = by_tag.get(tag)
                    if code is None:
                        code = by_tag[tag] = self._tag_row(
                            (aid(f"{name}={tag}"), aid(f"{name}[-1]={tag}"), aid(f"{name}[1]={tag}"))
                        )
                    found[i] = code
        return cast("list[int]", found)  # every None filled above

    # -- scoring --------------------------------------------------------------------------------
    def emissions(self, lines: Sequence[LineInput]) -> np.ndarray:
        """Each token's score per label (tokens of all ``lines`` in order x the model's labels):
        what ``weights.emissions`` gives for the string path's features of these lines.

        The lines are laid end to end, each between ``pad`` pad forms on either side (what the
        string path's windows read past a line's edges); every lookup then runs over the whole
        batch at once and numpy adds each token's state rows."""
        sizes = [len(item.line.tokens) for item in lines]
        total = sum(sizes)
        if self._count + total > self.cache_size or len(self._tag_rows) > self.cache_size:
            self._clear()
        if len(self._line_rows) >= LINE_CACHE_SIZE:
            self._line_rows.clear()
        out = np.zeros((total, self.n_labels))
        if not total:
            return out
        pad, on, state, none = self.pad, self.on, self.state, self.none
        pad_left, pad_right = [_PAD_TOKENS[0]] * pad, [_PAD_TOKENS[1]] * pad
        flat: list[Token] = []  # pads and tokens, line after line
        line_base: list[int] = []  # where each line's first token is in ``flat``
        line_rows: list[int] = []
        line_inkey: list[int] = []
        for item in lines:
            line = item.line
            tokens = line.tokens
            flat += pad_left
            line_base.append(len(flat))
            flat += tokens
            flat += pad_right
            if "line" in on:
                context = line.context
                line_rows.append(self._line_row(context.features, context.key))
                inkey, key_end, n = 0, context.key_end, len(tokens)
                while inkey < n and tokens[inkey].start < key_end:
                    inkey += 1
                line_inkey.append(inkey)
        texts = [tok.text for tok in flat]
        known = list(map(self._forms.get, texts))
        forms = cast("list[int]", known)  # as it is when every form is known
        if None in known:
            self._intern_new(list(dict.fromkeys(text for form, text in zip(known, texts) if form is None)))
            self._sum_new()
            forms = list(map(self._forms.__getitem__, texts))
        # per token: its line, place in the line and position in ``flat``
        n_of = np.array(sizes, np.int64)
        line_of = np.repeat(np.arange(len(lines)), n_of)
        first_row = np.cumsum(n_of) - n_of  # per line: its first token's row
        index = np.arange(total) - np.repeat(first_row, n_of)
        at = np.repeat(np.array(line_base, np.int64), n_of) + index
        form_of = np.array(forms, np.int64)
        table = self._ids[form_of]  # every per-form column of every position
        out += self._own[form_of[at]]
        columns: list[np.ndarray] = []  # ids of ``state`` rows to add, one per token
        w, base = self.window, 2 * self.window + 1
        offsets = np.arange(-w, w + 1)
        neighbours = at[:, None] + offsets
        if "words" in on:
            columns += list(table[neighbours, np.arange(base)].T)
        if "shapes" in on:
            columns += [table[at - 1, base + _SSL], table[at + 1, base + _SSR]]
            centred = self.shape_trigrams.rows(
                [table[at - 1, base + _SHAPEV], table[at, base + _SHAPEV], table[at + 1, base + _SHAPEV]]
            )
            columns.append(np.where(centred >= 0, self.shape_trigrams.ids[centred, 0], none))
        if "clusters" in on:
            columns += [table[at - 1, base + _BCL], table[at + 1, base + _BCR]]
        nul_lines: list[int] = []
        if "ngrams" in on and w > 0:
            words = table[:, base + _WORDV]
            if "\x00" in "".join(texts):  # crfsuite cuts names at a NUL: those lines' n-grams as strings
                nul_lines = [i for i, item in enumerate(lines) if any("\x00" in low for low in item.line.lowers)]
                for i in nul_lines:
                    words[line_base[i] - pad : line_base[i] + sizes[i] + pad] = -1
            for kind, parts in ((self.bigrams, 2), (self.trigrams, 3)):
                if not len(kind.keys):
                    continue
                # the n-gram starting at each position of ``flat``, then shifted to each token's offsets
                found = kind.rows([words[j : len(words) - parts + 1 + j] for j in range(parts)])
                for k in range(-w, w - parts + 2):
                    # most tokens' n-grams are not the model's: add only those that are
                    rows = np.flatnonzero(found[at + k] >= 0)
                    out[rows] += state[kind.ids[found[at[rows] + k], k + w]]
        if self.reach:
            columns += self._context(table, at, line_of, np.array(line_base, np.int64), n_of)
        for column in columns:
            out += state[column]
        if "line" in on:
            rows = np.array(line_rows, np.int64)[line_of] + (index < np.array(line_inkey, np.int64)[line_of])
            out += self._line_table[rows]
        place = np.where(
            n_of[line_of] == 1,
            _ALONE,
            np.where(index == 0, _FIRST, np.where(index == n_of[line_of] - 1, _LAST, _MIDDLE)),
        )
        spelled = self._extra(_Batch(lines, sizes, line_base, forms, table, at, index, n_of, line_of, first_row), out)
        out += self.places[place * 6 + np.minimum(index, 5) + 24 * spelled]
        self._strings(lines, sizes, nul_lines, table, at, out)
        return out

    def _context(
        self, table: np.ndarray, at: np.ndarray, line_of: np.ndarray, line_base: np.ndarray, n_of: np.ndarray
    ) -> list[np.ndarray]:
        """The ``context`` bags as id columns: the words (tokens starting with a letter or digit)
        nearest each token, up to ``reach`` on each side within its line, each distinct word once
        per side (as the string path's ``dict.fromkeys`` keeps them)."""
        base, reach, none = 2 * self.window + 1, self.reach, self.none
        is_word = table[:, base + _ISW]
        word_at = np.flatnonzero(is_word)  # positions of the words, in order: a word's rank is its index here
        if not len(word_at):
            return []
        # the rank of the previous word with the same lower-case form (-1 if none): a word repeats
        # in a bag when that one is in the bag too
        lowers = table[word_at, base + _LOW]
        order = np.argsort(lowers, kind="stable")
        same = lowers[order[1:]] == lowers[order[:-1]]
        previous = np.full(len(word_at), -1, np.int64)
        previous[order[1:][same]] = order[:-1][same]
        before = np.concatenate(([0], np.cumsum(is_word)))  # words before each position
        rank = before[at]  # the first word at or after each token
        low, high = before[line_base][line_of], before[line_base + n_of][line_of]  # the line's words
        steps = np.arange(reach)
        last = len(word_at) - 1
        columns = []
        for start, column in ((np.maximum(rank - reach, low), _CL), (rank + is_word[at], _CR)):
            ranks = (rank - reach if column == _CL else start)[:, None] + steps
            inside = (ranks >= low[:, None]) & (ranks < (rank[:, None] if column == _CL else high[:, None]))
            ranks = np.minimum(np.maximum(ranks, 0), last)
            keep = inside & (previous[ranks] < start[:, None])
            columns += list(np.where(keep, table[word_at[ranks], base + column], none).T)
        return columns

    def _extra(self, batch: _Batch, out: np.ndarray) -> np.ndarray:
        """Add the ``extra`` tags to ``out`` where the place rows do not hold them: the
        dictionaries' tags at and beside each tag that is not "O", and every tag of a tag source
        (``ner``) or of a subclass's own ``resource_tags``. Returns, per token, 1 where the
        dictionaries' tags were added so (its place row must leave them out), else 0."""
        lines, at, index, n_of, line_of = batch.lines, batch.at, batch.place, batch.n_of, batch.line_of
        first_row = batch.first_row
        total = len(at)
        spelled = np.zeros(total, np.int64)
        if "extra" not in self.on:
            return spelled
        codes: dict[str, np.ndarray] = {}  # tag table rows by extra name, per token (-1: none on that line)
        in_places: list[str] = []  # names whose "O"s the place rows hold
        if self.resource_tags is not None:
            for line, item in enumerate(lines):
                for name, tags in self._line_tags(item).items():
                    if name not in codes:
                        codes[name] = np.full(total, -1, np.int64)
                    codes[name][first_row[line] : first_row[line] + len(tags)] = self._codes(name, tags)
        else:
            if self.dictionaries:
                in_places = [dictionary.name for dictionary in self.dictionaries]
                self._dictionary_codes(batch, codes)
            if any(item.ner is not None for item in lines):
                codes["ner"] = np.full(total, -1, np.int64)
                for line, item in enumerate(lines):
                    if item.ner is not None:
                        codes["ner"][first_row[line] : first_row[line] + len(item.ner)] = self._codes("ner", item.ner)
        if not codes:
            return spelled
        if self._tag_table is None:
            self._tag_table = np.array(self._tag_rows, np.int64).reshape(-1, 3)
        last = n_of[line_of] - 1
        has_left, has_right = index > 0, index < last
        names = list(codes)
        grid = np.array([codes[name] for name in names], np.int64)  # names x tokens
        places = len(in_places)  # the first ``places`` names are the dictionaries
        tagged = np.zeros(total, bool)  # tokens at or beside a dictionary tag that is not "O"
        if places:
            outside = np.array([self._tag_codes[name][OUTSIDE] for name in in_places], np.int64)
            marked = (grid[:places] != outside[:, None]).any(axis=0)
            tagged |= marked
            tagged[1:] |= marked[:-1] & has_left[1:]
            tagged[:-1] |= marked[1:] & has_right[:-1]
            self._add_tags(out, np.flatnonzero(tagged), grid[:places], in_places, has_left, has_right)
        if places < len(names):
            self._add_tags(out, np.arange(total), grid[places:], names[places:], has_left, has_right)
        return tagged.astype(np.int64)

    def _add_tags(
        self,
        out: np.ndarray,
        rows: np.ndarray,
        grid: np.ndarray,
        names: list[str],
        has_left: np.ndarray,
        has_right: np.ndarray,
    ) -> None:
        """Add ``name=tag``, ``name[-1]=`` its left neighbour's and ``name[1]=`` its right one's
        to the ``rows`` of ``out``, for every name (``grid``: its codes per token, -1 for none)."""
        if not len(rows):
            return
        pads = np.array([self._tag_pads[name] for name in names], np.int64)
        mine = grid[:, rows]
        left = np.where(has_left[rows], grid[:, np.maximum(rows - 1, 0)], pads[:, :1])
        right = np.where(has_right[rows], grid[:, np.minimum(rows + 1, grid.shape[1] - 1)], pads[:, 1:])
        table = self._tag_table
        assert table is not None  # built by _extra before it adds tags
        ids = np.concatenate((table[mine, 0], table[left, 1], table[right, 2]))
        ids[np.tile(mine < 0, (3, 1))] = self.none
        found = self.state[ids[0]]
        for column in ids[1:]:
            found += self.state[column]
        out[rows] += found

    def _dictionary_codes(self, batch: _Batch, codes: dict[str, np.ndarray]) -> None:
        """Each dictionary's tag-table rows per token into ``codes``. Where no word of a line and the
        next one start a phrase of a dictionary, its hits there are its one-word phrases, none inside
        another: the rows each form keeps (``_single``). Only the lines where two words may start a
        longer phrase are matched word by word (``Gazetteer.matches``, longest first)."""
        lines, sizes, line_base, forms, table = batch.lines, batch.sizes, batch.line_base, batch.forms, batch.table
        at, index, n_of, line_of = batch.at, batch.place, batch.n_of, batch.line_of
        base = 2 * self.window + 1
        token_forms = np.array(forms, np.int64)[at]
        single = self._single[token_forms]  # tokens x dictionaries
        for bit, dictionary in enumerate(self.dictionaries):
            codes[dictionary.name] = single[:, bit]
        masks = table[at, base + _MASK]
        longer = sum(1 << bit for bit, d in enumerate(self.dictionaries) if d.gazetteer.max_words > 1)
        # a word that starts some phrase and is not its line's last: does it start a longer one with the next?
        candidates = np.flatnonzero(((masks & longer) != 0) & (index < n_of[line_of] - 1))
        if not len(candidates):
            return
        # each candidate's pair as one int (lower-case form ids from -2: pads), looked up once per kind
        lower_ids = table[at, base + _LOW].astype(np.int64) + 2
        keys = (lower_ids[candidates] << 32) | lower_ids[candidates + 1]
        pairs = self._pairs
        found = list(map(pairs.get, keys.tolist()))
        if None in found:
            for k, row in enumerate(candidates.tolist()):
                if found[k] is None:
                    lowers, i = lines[int(line_of[row])].line.lowers, int(index[row])
                    pair = cached_phrase_key((lowers[i], lowers[i + 1]))
                    found[k] = pairs[int(keys[k])] = sum(
                        1 << bit for bit, d in enumerate(self.dictionaries) if pair in d.gazetteer.prefixes
                    )
        bits = np.array(found, np.int64) & masks[candidates]
        walks: dict[int, int] = {}  # line -> bits of the dictionaries to match word by word there
        for line, line_bits in zip(line_of[candidates].tolist(), bits.tolist()):
            if line_bits:
                walks[line] = walks.get(line, 0) | line_bits
        if not walks:
            return
        first_row = batch.first_row
        word_key = self._word_keys.__getitem__
        cleared: dict[str, list[int]] = {}  # per dictionary, the rows of the lines matched word by word
        hit_rows: dict[str, tuple[list[int], list[str]]] = {}  # and the rows of their hits, with the tags
        for line, line_bits in walks.items():
            item, start, n, base_at = lines[line], int(first_row[line]), sizes[line], line_base[line]
            word_keys = list(map(word_key, forms[base_at : base_at + n]))
            line_masks = masks[start : start + n].tolist()
            for bit, dictionary in enumerate(self.dictionaries):
                if not line_bits >> bit & 1:
                    continue
                mine = [i for i, mask in enumerate(line_masks) if mask >> bit & 1]
                positions, tags = self._hit_tags(
                    item, dictionary, dictionary.gazetteer.matches(item.line.lowers, word_keys, mine)
                )
                cleared.setdefault(dictionary.name, []).extend(range(start, start + n))
                rows, values = hit_rows.setdefault(dictionary.name, ([], []))
                rows += [start + i for i in positions]
                values += tags
        for name, rows in cleared.items():
            codes[name][rows] = self._codes(name, (OUTSIDE,))[0]
            hits, values = hit_rows[name]
            if hits:
                codes[name][hits] = self._codes(name, values)

    @staticmethod
    def _hit_tags(
        item: LineInput, dictionary: Dictionary, hits: list[tuple[int, int, str]]
    ) -> tuple[list[int], list[str]]:
        """The words inside a line's dictionary ``hits`` and their BIOES tags, case-marked where the
        dictionary is (``resources.case_mark``)."""
        tokens = item.line.tokens
        positions: list[int] = []
        tags: list[str] = []
        for i, length, label in hits:
            positions += range(i, i + length)
            tags += hit_tags(label, length, case_mark(tokens[i].text) if dictionary.case_marked else "")
        return positions, tags

    def _line_tags(self, item: LineInput) -> dict[str, list[str]]:
        """The line's ``extra`` tags by name, as the string path has them in ``seq.extra``."""
        tokens, lowers = item.line.tokens, item.line.lowers
        if self.resource_tags is not None:
            tags = dict(self.resource_tags(tokens, lowers))
        else:
            word_keys = keys_of_words(lowers)
            tags = {}
            for dictionary in self.dictionaries:
                found = dictionary.gazetteer.tag(lowers, word_keys)
                tags[dictionary.name] = case_marked(found, tokens) if dictionary.case_marked else found
        if item.ner is not None:
            tags["ner"] = item.ner
        return tags

    def _strings(
        self,
        lines: Sequence[LineInput],
        sizes: list[int],
        nul_lines: list[int],
        table: np.ndarray,
        at: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """What only the string path computes: extractors with no id version, the n-grams of
        lines holding a NUL, the first feature of safe words when "words" is not first; then a
        safe word's row becomes "safe" plus its first feature (the string path drops the rest)."""
        aid, state = self._aid, self.state
        safe = table[at, 2 * self.window + 1 + _SAFE] if self.safe_words else None
        needs_first = safe is not None and bool((safe == _NEEDS_STRINGS).any())
        extra_rows: list[int] = []
        extra_ids: list[int] = []
        with_nul = set(nul_lines)
        row = 0
        for line, item in enumerate(lines):
            if not (self.generic or with_nul or needs_first):
                break
            n = sizes[line]
            extractors = [
                name
                for name in self.generic
                if name != "pos" or item.pos is not None or TOKEN_EXTRACTORS["pos"] is not _POS
            ]
            if line in with_nul:
                extractors.append("ngrams")
            first = needs_first and safe is not None and bool((safe[row : row + n] == _NEEDS_STRINGS).any())
            if extractors or first:
                seq = self._token_sequence(item)
                if extractors:
                    feats: list[list[str]] = [[] for _ in range(n)]
                    for name in extractors:
                        TOKEN_EXTRACTORS[name](seq, feats)
                    for i, found in enumerate(feats):
                        extra_rows += [row + i] * len(found)
                        extra_ids += map(aid, found)
                if first:
                    assert safe is not None  # first implies it
                    feats = extract_token_features(seq, self.features)
                    for i in range(n):
                        if safe[row + i] == _NEEDS_STRINGS:
                            safe[row + i] = aid(feats[i][0])
            row += n
        if extra_rows:
            np.add.at(out, np.array(extra_rows, np.int64), state[np.array(extra_ids, np.int64)])
        if safe is not None:
            rows = np.flatnonzero(safe != _NO_ID)
            if len(rows):
                out[rows] = state[self._aid("safe")] + state[safe[rows]]

    def _token_sequence(self, item: LineInput) -> TokenSequence:
        """The string path's ``TokenSequence`` of a line, for extractors read as strings."""
        line = item.line
        seq = TokenSequence(
            line.tokens,
            line.context,
            self.window,
            list(line.lowers),
            clusters=self.clusters,
            vocabulary=self.vocabulary,
            proper_nouns=self.proper_nouns,
            surnames=self.surnames,
        )
        seq.extra.update(self._line_tags(item))
        seq.pos = item.pos
        return seq
