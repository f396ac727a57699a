"""The character CRF's scores without its feature strings (the fast engine's featurizer).

``features.char`` writes about 13 feature strings per character and crfsuite (or
``CRFWeights.emissions``) looks each one up: most of the time of tagging a note. The fast engine
needs only each character's summed weights per label (one float per label), and those sums are
made of parts that recur: the weights of the n-grams around a character, of a character alone,
of a whitespace's two neighbours, of a word as a token and as a neighbour, of a dictionary tag,
of a line's facts. ``CharScorer`` keeps these per model, each the first time its key is seen
(the only time its feature strings are built), and adds them up with numpy for a whole batch of
lines at once: one gather per group of characters (n-gram, thin, whitespace, token edge), no
Python work per character. The scores equal ``CRFWeights.emissions(char_features(...))`` up to
the order of summation (~1e-13).

N-grams: what the window reads at offset k of a character is the n-grams of each size starting
there, i.e. the longest one and its prefixes. So the n-gram memo is keyed by the longest n-gram
(code points packed in an int) and holds, per offset, the weights of it and its prefixes at that
offset summed: a character adds one block per offset (11 for the default window, not 30
attributes). Why n-grams and not whole contexts: a memo of each character's nine-character
context (the string memo's key, ``_ngram_rows``) missed 50-70% of its lookups over long batches
(MEDDOCAN and generated English: contexts in running text rarely repeat once the memo has been
emptied), and a miss costs 16 feature strings; trigrams nearly always hit (12,000 generated
notes: 50,405 of them, the memo never emptied). Integer keys sit in hash tables probed with numpy
for all of a batch's keys at once (``_CodeMemo``); words, tags and line facts in dicts.

No compiled code: numba, which this module once used, added ~126 MB of resident memory and
~0.5 s per worker process at start, over the budget for a worker's growth.

Every memo is capped and emptied when full, as the string memo is (``_NGRAM_CACHE_LIMIT``), so
a long batch does not grow a worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hybriddeid.features.char import _NGRAM_CACHE_LIMIT, _PAD, SPACE, CharWindow, _whitespace_features, window_spans
from hybriddeid.features.context import LineContext
from hybriddeid.features.lexical import WORD_MEMO_SIZE, short_shape
from hybriddeid.text.tokenize import Token

_CODE_BITS, _CODE_MASK = 21, (1 << 21) - 1  # a code point's bits in a packed n-gram or pair
_SPACE_CODE = ord(SPACE)
_SMALL_MEMO = 1 << 12  # keys with few values: dictionary tags, line facts, line keys
_LEFT_PADS, _RIGHT_PADS = ("<s>", "<s>"), ("</s>", "</s>")  # a line's edge neighbours (token_projections)
# A token character's role: what it adds to its own scores (see CharScorer._scores).
_B, _E, _S, _I, _I_THIN, _SAFE = range(6)
# A word's row in the word memo holds these blocks of one score per label, then its settled flag.
_OWN, _FORM, _BEFORE1, _AFTER1, _BEFORE2, _AFTER2 = range(6)


@dataclass(frozen=True, slots=True)
class CharLine:
    """One line (or segment of a line) to score: what ``char_features`` is given for it.

    ``runs`` are the stretches to read: (first token, end token, start offset, stop offset), the
    offsets into the note's text; a run of all ``tokens`` spans the whole ``line``. ``lowers`` are
    the tokens' lower-cased texts (for the string path; the scorer lower-cases a token's text once,
    in its word memo), ``tags`` one tag per token for each name (dictionary tags)."""

    line: LineContext
    tokens: Sequence[Token]
    lowers: Sequence[str]
    runs: Sequence[tuple[int, int, int, int]]
    tags: Mapping[str, Sequence[str]]


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique`` of an int64 array (its distinct values, sorted), without the import of ``numpy.ma``
    (~12 ms of a run's start-up) that numpy 2's ``np.unique`` makes on its first call."""
    ordered = np.sort(keys)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


# -- memos -------------------------------------------------------------------------------------------
# A memo hands out rows of its table, valid until its next call: CharScorer.score holds one lock.
def _grown(table: np.ndarray, used: int, needed: int, limit: int) -> np.ndarray:
    """``table`` with room for ``needed`` rows (doubling, at most ``limit``), its first ``used`` kept."""
    if needed <= len(table):
        return table
    grown = np.zeros((min(limit, max(needed, 2 * len(table))), table.shape[1]), table.dtype)
    grown[:used] = table[:used]
    return grown


class _Memo:
    """Hashable key -> a row of ``table`` (``build`` makes the rows of new keys); emptied when
    ``limit`` keys are held."""

    __slots__ = ("_rows", "table", "_limit", "_build")

    def __init__(self, width: int, dtype: type, limit: int, build: Callable[[list], np.ndarray]) -> None:
        self._rows: dict[Hashable, int] = {}
        self.table: np.ndarray = np.zeros((min(limit, 1024), width), dtype)
        self._limit = limit
        self._build = build

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self, keys: list) -> np.ndarray:
        """The row of ``table`` of each key."""
        get = self._rows.get
        found = list(map(get, keys))
        if None in found:
            new = list(dict.fromkeys(key for key, row in zip(keys, found) if row is None))
            if len(self._rows) + len(new) > self._limit:  # full: empty it
                self._rows.clear()
                new = list(dict.fromkeys(keys))
                self.table = self.table[: self._limit]
            start = len(self._rows)
            # (more new keys than ``limit`` lets the table outgrow it until the next emptying)
            self.table = _grown(self.table, start, start + len(new), max(self._limit, start + len(new)))
            self.table[start : start + len(new)] = self._build(new)
            self._rows.update(zip(new, range(start, start + len(new))))
            found = list(map(get, keys))
        return np.array(found, np.int64)

    def values(self, keys: list) -> np.ndarray:
        """The row of values of each key (a new array)."""
        rows = self.rows(keys)  # first: it may replace the table
        return self.table[rows]


_EMPTY = -1  # an empty slot of a hash table (keys are never negative)
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: a slot is the top bits of key * this


class _CodeMemo:
    """Non-negative integer key -> a row of ``table`` (``build`` makes the rows of new keys);
    emptied when ``limit`` keys are held.

    The keys sit in an open-addressing hash table (linear probing) kept at most a quarter full,
    probed with numpy for all of a batch's keys at once: each step probes every key still
    unresolved, and few need more than one or two steps. (A sorted array and ``np.searchsorted``
    took four times as long; a dict costs a Python lookup per key.)"""

    __slots__ = ("_slot_keys", "_slot_rows", "_shift", "table", "_count", "_limit", "_build")

    def __init__(self, width: int, dtype: type, limit: int, build: Callable[[list[int]], np.ndarray]) -> None:
        self._limit = limit
        self._build = build
        self.table: np.ndarray = np.zeros((min(limit, 1024), width), dtype)
        self._count = 0
        self._slots(1024)

    def _slots(self, slots: int) -> None:
        """An empty hash table of ``slots`` slots (a power of two)."""
        self._slot_keys = np.full(slots, _EMPTY, np.int64)
        self._slot_rows = np.zeros(slots, np.int64)
        self._shift = np.uint64(64 - (slots.bit_length() - 1))

    def __len__(self) -> int:
        return self._count

    def _probe(self, keys: np.ndarray) -> np.ndarray:
        """Each key's slot: the one holding it, or the empty one that ends its probe."""
        slot_keys, mask = self._slot_keys, len(self._slot_keys) - 1
        slot = ((keys.astype(np.uint64) * _MULTIPLIER) >> self._shift).astype(np.int64)
        held = slot_keys[slot]
        going = np.flatnonzero((held != keys) & (held != _EMPTY))
        while len(going):
            at = (slot[going] + 1) & mask
            slot[going] = at
            held = slot_keys[at]
            going = going[(held != keys[going]) & (held != _EMPTY)]
        return slot

    def _insert(self, keys: np.ndarray, rows: np.ndarray) -> None:
        """Add distinct keys not held, with their rows (growing the table to stay a quarter full)."""
        if 4 * (self._count + len(keys)) > len(self._slot_keys):  # grow: insert the held keys again
            held = np.flatnonzero(self._slot_keys != _EMPTY)
            keys = np.concatenate((self._slot_keys[held], keys))
            rows = np.concatenate((self._slot_rows[held], rows))
            self._slots(1 << (4 * len(keys) - 1).bit_length())
        slot_keys, slot_rows, mask = self._slot_keys, self._slot_rows, len(self._slot_keys) - 1
        slot = self._probe(keys)  # each key's first empty slot; keys that share one take turns
        going = np.arange(len(keys))
        while True:
            free, first = np.unique(slot[going], return_index=True)
            slot_keys[free] = keys[going[first]]
            slot_rows[free] = rows[going[first]]
            losers = np.ones(len(going), bool)
            losers[first] = False
            going = going[losers]
            if not len(going):
                return
            at = slot[going]  # taken now: each moves on to its next empty slot
            busy = np.ones(len(going), bool)
            while busy.any():
                at[busy] = (at[busy] + 1) & mask
                busy = slot_keys[at] != _EMPTY
            slot[going] = at

    def rows(self, keys: np.ndarray) -> np.ndarray:
        """The row of ``table`` of each key (an int64 array)."""
        slot = self._probe(keys)
        missing = self._slot_keys[slot] != keys
        if missing.any():
            new = _sorted_unique(keys[missing])
            if self._count + len(new) > self._limit:  # full: empty it
                new = _sorted_unique(keys)
                self._count = 0
                self._slots(1024)
                self.table = self.table[: self._limit]
            start, stop = self._count, self._count + len(new)
            # (more new keys than ``limit`` lets the table outgrow it until the next emptying)
            self.table = _grown(self.table, start, stop, max(self._limit, stop))
            self.table[start:stop] = self._build(new.tolist())
            self._insert(new, np.arange(start, stop))
            self._count = stop
            slot = self._probe(keys)
        return self._slot_rows[slot]

    def values(self, keys: np.ndarray) -> np.ndarray:
        """The row of values of each key (a new array)."""
        rows = self.rows(keys)  # first: it may replace the table
        return self.table[rows]


# -- the scorer --------------------------------------------------------------------------------------
class CharScorer:
    """Scores (characters x labels) of the character CRF's sequences, from a model's weights.

    ``state`` is the model's weight matrix (one row per attribute, the last all zeros) and
    ``attribute_id`` maps a feature string to its row (``CRFWeights``); ``window``,
    ``thin_interior``, ``projection`` and ``line_facts`` are ``char_features``'s settings. A token
    whose lower-cased text is in ``safe_words`` is settled; ``token_classes`` gives a token text's
    cluster features (what ``char_features`` is given as ``token_classes``)."""

    def __init__(
        self,
        state: np.ndarray,
        attribute_id: Callable[[str], int],
        window: CharWindow,
        thin_interior: bool = True,
        projection: bool = True,
        line_facts: bool = True,
        safe_words: Collection[str] = frozenset(),
        token_classes: Callable[[str], Sequence[str]] | None = None,
    ) -> None:
        if not self.supports(window):
            raise ValueError("the n-gram window reaches past the padding of features.char")
        self.state = np.ascontiguousarray(state, np.float64)
        self.attribute_id = attribute_id
        self.thin_interior = thin_interior
        self.projection = projection
        self.line_facts = line_facts
        self.safe_words = safe_words
        self.token_classes = token_classes
        n_labels = self.state.shape[1]
        spans = window_spans(window)[0]
        # The n-grams read around a character, by the offset they start at: what starts at each
        # offset is one n-gram of each size there (its prefixes), so the longest one's weights at
        # every offset, its prefixes' included, are summed once per n-gram and a character sums
        # one row per offset. Each size's memo: n-gram (code points packed) -> those sums, offsets
        # x labels (a size's builder adds its own features to its prefix's row).
        offsets = {size: {start for start, end in spans if end - start == size} for size in (1, 2, 3)}
        self._ngram_size = max(size for size, at in offsets.items() if at)
        self._ngram_offsets = np.array(sorted({start for start, _ in spans}), np.int64)
        width = len(self._ngram_offsets) * n_labels
        # (the shorter n-grams are read only to build a longer one's row: a quarter of the cap)
        self._ngrams = {
            size: _CodeMemo(
                width,
                np.float64,
                _NGRAM_CACHE_LIMIT // (1 if size == self._ngram_size else 4),
                self._ngram_builder(size, offsets[size]),
            )
            for size in range(1, self._ngram_size + 1)
        }
        # a whitespace's features by its neighbours' code points (packed), a thin character's by its own
        self._whitespace = _CodeMemo(n_labels, np.float64, _NGRAM_CACHE_LIMIT, self._whitespace_scores)
        self._chars = _CodeMemo(
            n_labels,
            np.float64,
            _NGRAM_CACHE_LIMIT,
            lambda codes: self._sum([["c1[0]=" + chr(code)] for code in codes]),
        )
        self._words = _Memo(6 * n_labels + 1, np.float64, WORD_MEMO_SIZE, self._word_scores)
        self._line_facts = _Memo(n_labels, np.float64, _SMALL_MEMO, lambda facts: self._sum([list(f) for f in facts]))
        self._keys = _Memo(
            n_labels, np.float64, _SMALL_MEMO, lambda keys: self._sum([["key=" + (key or "none")] for key in keys])
        )
        self._tags: dict[str, _Memo] = {}
        self._role_scores = self._sum([["tp=B"], ["tp=E"], ["tp=S"], ["tp=I"], ["tp=I"], ["safe"]])
        self._inkey = self._sum([["inkey"]])[0]
        self._lock = threading.Lock()  # memos hand out rows valid until their next call

    @staticmethod
    def supports(window: CharWindow) -> bool:
        """Whether ``window``'s n-grams stay within the padding ``features.char`` gives a line
        (any window up to radius 6); wider ones take the string path."""
        spans, low, high = window_spans(window)
        return -_PAD <= low and high <= _PAD + 1 and all(1 <= end - start <= 3 for start, end in spans)

    def memo_sizes(self) -> dict[str, int]:
        """Keys held by each memo (for tests and memory checks)."""
        sizes = {
            name: len(getattr(self, "_" + name)) for name in ("whitespace", "chars", "words", "line_facts", "keys")
        }
        sizes.update({f"ngrams{size}": len(memo) for size, memo in self._ngrams.items()})
        sizes.update({"tags_" + name: len(memo) for name, memo in self._tags.items()})
        return sizes

    # -- the rows and scores of new keys --------------------------------------------------------
    def _ids(self, names: list[list[str]]) -> np.ndarray:
        """Rows of ``state`` for lists of feature strings, padded with the zero row."""
        width = max((len(row) for row in names), default=0)
        none = len(self.state) - 1
        ids_of = getattr(getattr(self.attribute_id, "__self__", None), "attribute_ids_of", None)
        if ids_of is None:  # an attribute_id of another kind: one call per name
            attribute_id = self.attribute_id
            return np.array(
                [[attribute_id(name) for name in row] + [none] * (width - len(row)) for row in names], np.int64
            ).reshape(len(names), width)
        # every name looked up in one pass (CRFWeights.attribute_ids_of), each row padded with the zero row
        ids = np.full((len(names), width), none, np.int64)
        lengths = np.fromiter(map(len, names), np.int64, len(names))
        ids[np.arange(width) < lengths[:, None]] = ids_of([name for row in names for name in row])
        return ids

    def _sum(self, names: list[list[str]]) -> np.ndarray:
        """The summed weights (one row per list) of lists of feature strings."""
        return self.state[self._ids(names)].sum(axis=1)

    def _ngram_builder(self, size: int, offsets: Collection[int]) -> Callable[[list[int]], np.ndarray]:
        """The n-gram memo's ``build`` for ``size``: n-grams (code points packed) -> the summed
        weights, at each offset of the window, of the n-gram's features at that offset (strings
        ``features.char.context_ngrams`` writes for ``offsets``) and its prefixes'."""
        columns = [f"c{size}[{offset}]=" if offset in offsets else None for offset in self._ngram_offsets.tolist()]
        shifts = np.array([_CODE_BITS * (size - 1 - j) for j in range(size)], np.int64)
        n_labels = self.state.shape[1]
        present = [i for i, prefix in enumerate(columns) if prefix]  # the offsets where this size is read
        prefixes = [prefix for prefix in columns if prefix]  # theirs, in the same order
        ids_of = getattr(getattr(self.attribute_id, "__self__", None), "attribute_ids_of", None)

        def build(keys: list[int]) -> np.ndarray:
            # the n-grams as strings: their code points unpacked, decoded at once (not a chr per character)
            codes = (np.array(keys, np.int64)[:, None] >> shifts) & _CODE_MASK
            joined = codes.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
            grams = [joined[i : i + size] for i in range(0, len(joined), size)]
            if ids_of is not None:  # one feature (or none) per offset: its weights' row, the zero row where none
                ids = np.full((len(keys), len(columns)), len(self.state) - 1, np.int64)
                ids[:, present] = np.array(
                    ids_of([prefix + gram for gram in grams for prefix in prefixes]), np.int64
                ).reshape(len(keys), len(present))
                own = self.state[ids].reshape(len(keys), len(columns) * n_labels)
            else:
                own = self._sum([[prefix + gram] if prefix else [] for gram in grams for prefix in columns])
                own = own.reshape(len(keys), len(columns) * n_labels)
            if size > 1:
                own += self._ngrams[size - 1].values(np.array(keys, np.int64) >> _CODE_BITS)
            return own

        return build

    def _whitespace_scores(self, pairs: list[int]) -> np.ndarray:
        return self._sum(
            [list(_whitespace_features(chr(pair >> _CODE_BITS), chr(pair & _CODE_MASK))) for pair in pairs]
        )

    def _word_scores(self, texts: list[str]) -> np.ndarray:
        """Per token text, the blocks ``_OWN`` (its form, suffix, shape and classes), ``_FORM``
        and what it gives the tokens around it (``token_projections``), then 1.0 if it is settled."""
        blocks: list[list[str]] = []
        for text in texts:
            w = text.lower()
            classes = list(self.token_classes(text)) if self.token_classes is not None else []
            if self.projection:
                blocks += (
                    ["tw=" + w, "tsuf=" + w[-3:], "ts=" + short_shape(text), *classes],
                    ["tw=" + w],
                    ["tw[-1]=" + w],
                    ["tw[1]=" + w],
                    ["tw[-2]=" + w],
                    ["tw[2]=" + w],
                )
            else:  # projection off leaves a token its classes (and tags) only
                blocks += (classes, [], [], [], [], [])
        n_labels = self.state.shape[1]
        scores = self._sum(blocks).reshape(len(texts), 6 * n_labels)
        settled = np.array([[text.lower() in self.safe_words] for text in texts], np.float64).reshape(len(texts), 1)
        return np.hstack((scores, settled))

    def _tag_memo(self, name: str) -> _Memo:
        memo = self._tags.get(name)
        if memo is None:
            prefix = name + "="
            memo = self._tags[name] = _Memo(
                self.state.shape[1], np.float64, _SMALL_MEMO, lambda tags: self._sum([[prefix + tag] for tag in tags])
            )
        return memo

    # -- scoring ---------------------------------------------------------------------------------
    def score(self, text: str, lines: Sequence[CharLine]) -> list[np.ndarray]:
        """The scores of every run of ``lines`` (lines of the note ``text``), in order: one array
        (the run's characters x the model's labels) per run, what ``CRFWeights.emissions`` gives
        for ``char_features`` of that run. Lines are scored together: numpy's cost per call is paid
        once per batch of lines, not per line."""
        pad = _PAD
        left, right = "\x02" * pad, "\x03" * pad
        pieces: list[str] = []
        joined_at = 0  # length of the padded lines joined so far
        run_s, run_len, run_line, run_delta, run_word, run_ntok, run_key_end = [], [], [], [], [], [], []
        run_tokens: list[Token] = []
        word_keys: list[str] = []  # each line's token texts between pads: rows of the word memo
        tag_keys: dict[str, list[str]] = {}
        line_keys: list[tuple[str, ...]] = []
        key_keys: list[str] = []
        out_at = 0  # rows so far
        for index, item in enumerate(lines):
            ctx = item.line
            line_start = ctx.start
            pieces += (left, text[line_start : ctx.end], right)
            to_joined = joined_at + pad - line_start  # a text offset plus this is its position in the joined string
            joined_at += ctx.end - line_start + 2 * pad
            tokens = item.tokens
            word0 = len(word_keys) + 2
            word_keys += _LEFT_PADS
            word_keys += [tok.text for tok in tokens]
            word_keys += _RIGHT_PADS
            line_keys.append(ctx.features)
            key_keys.append(ctx.key)
            for first, end, start, stop in item.runs:
                if not line_start <= start <= stop <= ctx.end:
                    raise ValueError("a run lies outside its line")
                run_s.append(start + to_joined)
                run_len.append(stop - start)
                run_line.append(index)
                run_delta.append(out_at - start)
                run_word.append(word0 + first)
                run_ntok.append(end - first)
                run_key_end.append(ctx.key_end)
                run_tokens += tokens[first:end]
                out_at += stop - start
                for name, values in item.tags.items():
                    tag_keys.setdefault(name, []).extend(values[first:end])
        n_labels = self.state.shape[1]
        if not out_at:
            return [np.zeros((0, n_labels)) for _ in run_len]
        joined = "".join(pieces).replace(" ", SPACE).replace("\t", SPACE)
        codes = np.frombuffer(joined.encode("utf-32-le"), np.uint32).astype(np.int64)

        # The runs' tokens: first row, length, row among the words, line, inside the line's key.
        n_tokens = len(run_tokens)
        ntok = np.array(run_ntok, np.int64)
        starts = np.array([tok.start for tok in run_tokens], np.int64)
        token_len = np.array([tok.end for tok in run_tokens], np.int64) - starts
        token_row = starts + np.repeat(np.array(run_delta, np.int64), ntok)
        # the sums trust these indices (numpy wraps negative ones): every token must lie inside its run
        run_first_row = np.repeat(np.cumsum(run_len) - np.array(run_len, np.int64), ntok)
        if n_tokens and (
            (token_row < run_first_row).any()
            or (token_len < 1).any()
            or (token_row + token_len > run_first_row + np.repeat(np.array(run_len, np.int64), ntok)).any()
        ):
            raise ValueError("a run's tokens lie outside it")
        token_word = np.arange(n_tokens) + np.repeat(np.array(run_word, np.int64) - (np.cumsum(ntok) - ntok), ntok)
        token_line = np.repeat(np.array(run_line, np.int64), ntok)
        token_inkey = starts < np.repeat(np.array(run_key_end, np.int64), ntok)
        with self._lock:
            return self._scores(
                codes,
                run_s,
                run_len,
                run_line,
                token_row,
                token_len,
                token_word,
                token_line,
                token_inkey,
                word_keys,
                tag_keys,
                line_keys,
                key_keys,
            )

    def _scores(
        self,
        codes: np.ndarray,
        run_s: list[int],
        run_len: list[int],
        run_line: list[int],
        token_row: np.ndarray,
        token_len: np.ndarray,
        token_word: np.ndarray,
        token_line: np.ndarray,
        token_inkey: np.ndarray,
        word_keys: list[str],
        tag_keys: dict[str, list[str]],
        line_keys: list[tuple[str, ...]],
        key_keys: list[str],
    ) -> list[np.ndarray]:
        """``score``'s memo lookups and sums (under the scorer's lock), as ``char_features`` builds
        its features: a character strictly inside a token (with ``thin``) or of a settled token gets
        its own character, its token's form and its role; a whitespace (with ``thin``) its neighbour
        pair; any other character its n-grams and its line's facts, plus its role and its token's
        projected facts if it belongs to a token. Each group is summed for all the batch's
        characters at once (numpy gathers), not character by character.

        ``codes``: code points of the padded lines joined. Runs: their first character's position
        in ``codes``, length, line. Tokens (of the runs, in order): first row, length, index in
        ``word_keys`` (each line's token texts between pads), line, whether it lies inside its
        line's key."""
        n_labels = self.state.shape[1]
        thin = self.thin_interior
        lengths = np.array(run_len, np.int64)
        n_rows = int(lengths.sum())
        # each row's (character's) position in codes, and its line
        at = np.arange(n_rows) + np.repeat(np.array(run_s, np.int64) - (np.cumsum(lengths) - lengths), lengths)
        out = np.empty((n_rows, n_labels))

        # Per token: what its edge characters add (projected facts), what its thin ones add (form).
        n_tokens = len(token_row)
        token_of = np.full(n_rows, -1, np.int64)
        role_of = np.zeros(n_rows, np.int64)  # _B where no token: only read where token_of >= 0
        if n_tokens:
            words = self._words.rows(word_keys)
            table = self._words.table

            def block(which: int, shift: int) -> np.ndarray:
                return table[words[token_word + shift], which * n_labels : (which + 1) * n_labels]

            projected = (
                block(_OWN, 0) + block(_BEFORE1, -1) + block(_AFTER1, 1) + block(_BEFORE2, -2) + block(_AFTER2, 2)
            )
            form = block(_FORM, 0)
            settled = table[words[token_word], -1] > 0
            for name, keys in tag_keys.items():
                if len(keys) != n_tokens:
                    raise ValueError(f"tags {name!r} are missing on some lines")
                projected += self._tag_memo(name).values(keys)
            if self.projection:
                projected += np.where(token_inkey[:, None], self._inkey, self._keys.values(key_keys)[token_line])
            # every token character's row, token and role
            token = np.repeat(np.arange(n_tokens), token_len)
            offset = np.arange(len(token)) - np.repeat(np.cumsum(token_len) - token_len, token_len)
            length = token_len[token]
            role = np.full(len(token), _I_THIN if thin else _I, np.int64)
            role[offset == length - 1] = _E
            role[offset == 0] = _B
            role[length == 1] = _S
            role[settled[token]] = _SAFE
            rows = token_row[token] + offset
            token_of[rows] = token
            role_of[rows] = role
        thin_rows = role_of >= _I_THIN  # thin token characters (role is _B where there is no token)
        rows = np.flatnonzero(thin_rows)
        if len(rows):
            tokens = token_of[rows]
            out[rows] = self._chars.values(codes[at[rows]]) + form[tokens] + self._role_scores[role_of[rows]]
        full = ~thin_rows
        if thin:  # whitespace (and "_", written as whitespace): its two neighbours
            spaces = full & (codes[at] == _SPACE_CODE)
            full &= ~spaces
            rows = np.flatnonzero(spaces)
            if len(rows):
                where = at[rows]
                out[rows] = self._whitespace.values((codes[where - 1] << _CODE_BITS) | codes[where + 1])
        rows = np.flatnonzero(full)
        if len(rows):
            out[rows] = self._ngram_scores(codes, at[rows])
            if self.line_facts:
                lines = np.repeat(np.array(run_line, np.int64), lengths)[rows]
                out[rows] += self._line_facts.values(line_keys)[lines]
        if n_tokens:  # token edges (and all of a token's characters without thin): role and projected facts
            rows = np.flatnonzero((token_of >= 0) & ~thin_rows)
            tokens = token_of[rows]
            out[rows] += projected[tokens] + self._role_scores[role_of[rows]]
        bounds = np.cumsum(run_len).tolist()
        return [out[stop - length : stop] for stop, length in zip(bounds, run_len)]

    def _ngram_scores(self, codes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The summed n-gram weights (positions x labels) of the characters at ``positions`` of
        ``codes``: the longest n-gram's memo row at every position, then for each character the
        rows' blocks at its offsets, gathered for all characters at once and summed."""
        size, offsets = self._ngram_size, self._ngram_offsets
        n = len(codes)
        if size > 1:  # n-grams near the end read past it: only their first characters count there
            codes = np.concatenate((codes, np.full(size - 1, 3, np.int64)))
        keys = codes[:n]
        for j in range(1, size):  # the n-gram starting at every position, its code points packed
            keys = (keys << _CODE_BITS) | codes[j : n + j]
        memo = self._ngrams[size]
        rows = memo.rows(keys)
        n_labels = self.state.shape[1]
        blocks = memo.table.reshape(-1, n_labels)  # a row's block at each offset
        # offsets x positions: numpy sums the gathered (offsets x positions x labels) fastest over
        # its first axis (several times faster than over a middle one)
        picked = rows[offsets[:, None] + positions] * len(offsets) + np.arange(len(offsets))[:, None]
        return np.take(blocks, picked, axis=0).sum(axis=0)
