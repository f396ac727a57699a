"""Character-level CRF features (paper section 3.2.3): character n-grams in a window plus
token-level information projected onto the characters of each token.

Speed matters here (a note has ~3,000 characters): n-gram features are built one offset at a
time with list comprehensions over the whole line, and a token's projected features are built
once and shared by all its characters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hybriddeid.features.context import LineContext
from hybriddeid.features.lexical import short_shape
from hybriddeid.text.tokenize import Token

SPACE = "_"  # the paper writes whitespace as "&#"; any reserved symbol works


@dataclass(frozen=True, slots=True)
class CharWindow:
    """Which character n-grams to use: offsets of unigrams, bigrams and trigrams (start offsets)."""

    unigrams: tuple[int, ...] = tuple(range(-5, 6))
    bigrams: tuple[int, ...] = tuple(range(-5, 5))
    trigrams: tuple[int, ...] = tuple(range(-5, 4))

    @classmethod
    def symmetric(cls, radius: int, bigram_radius: int | None = None, trigram_radius: int | None = None) -> CharWindow:
        b = radius if bigram_radius is None else bigram_radius
        t = radius if trigram_radius is None else trigram_radius
        return cls(tuple(range(-radius, radius + 1)), tuple(range(-b, b)), tuple(range(-t, t - 1)))


_PAD = 6
_NGRAM_CACHE: dict[CharWindow, dict[str, tuple[str, ...]]] = {}
_NGRAM_CACHE_LIMIT = (
    1 << 16
)  # contexts; 1 << 19 let a worker grow to ~1.2 GB over 50k notes (benchmarks/soak.py) at no gain in speed


def window_spans(window: CharWindow) -> tuple[list[tuple[int, int]], int, int]:
    """The window's n-grams as (start, end) offsets around a character, and the context they
    read: offsets ``low`` (inclusive) to ``high`` (exclusive)."""
    spans = [
        (k, k + size)
        for size, offsets in ((1, window.unigrams), (2, window.bigrams), (3, window.trigrams))
        for k in offsets
    ]
    return spans, min(start for start, _ in spans), max(end for _, end in spans)


def context_ngrams(context: str, spans: Sequence[tuple[int, int]], low: int) -> tuple[str, ...]:
    """The n-gram feature strings of one character whose context (its ``window_spans``) is ``context``."""
    return tuple(f"c{end - start}[{start}]=" + context[start - low : end - low] for start, end in spans)


def _ngram_rows(chars: str, window: CharWindow, positions: list[int]) -> list[tuple[str, ...]]:
    """The n-gram feature strings at each of ``positions`` of the line.

    A position's strings depend only on the characters around it, and those few-character
    neighbourhoods recur throughout clinical text, so each is built once and memoised.
    """
    spans, low, high = window_spans(window)
    padded = "\x02" * _PAD + chars + "\x03" * _PAD
    cache = _NGRAM_CACHE.setdefault(window, {})
    if len(cache) > _NGRAM_CACHE_LIMIT:
        cache.clear()
    rows = []
    for i in range(len(positions)):
        at = positions[i] + _PAD
        context = padded[at + low : at + high]
        row = cache.get(context)
        if row is None:
            row = cache[context] = context_ngrams(context, spans, low)
        rows.append(row)
    return rows


def token_projections(tokens: Sequence[Token], line: LineContext, lowers: Sequence[str]) -> list[list[str]]:
    """Per token, the features its edge characters inherit (its form comes first), built
    column-wise over the line."""
    padded = ["<s>", "<s>", *lowers, "</s>", "</s>"]
    n = len(lowers)
    key_feature = "key=" + (line.key or "none")
    return [
        list(row)
        for row in zip(
            ["tw=" + low for low in lowers],
            ["ts=" + short_shape(tok.text) for tok in tokens],
            ["tsuf=" + low[-3:] for low in lowers],
            ["tw[-1]=" + w for w in padded[1 : n + 1]],
            ["tw[1]=" + w for w in padded[3 : n + 3]],
            ["tw[-2]=" + w for w in padded[0:n]],
            ["tw[2]=" + w for w in padded[4 : n + 4]],
            [key_feature if tok.start >= line.key_end else "inkey" for tok in tokens],
        )
    ]


_WHITESPACE_CACHE: dict[str, tuple[str, ...]] = {}


class _OwnCharFeatures(dict):
    """char -> "c1[0]=<char>", built on first use (indexing it never misses)."""

    def __missing__(self, ch: str) -> str:
        feature = self[ch] = "c1[0]=" + ch
        return feature


_OWN_CHAR = _OwnCharFeatures()


def _whitespace_features(before: str, after: str) -> tuple[str, ...]:
    """A whitespace character's features: inside or outside a span depends on its neighbours."""
    pair = before + after
    feats = _WHITESPACE_CACHE.get(pair)
    if feats is None:
        feats = ("sp", "c1[-1]=" + before, "c1[1]=" + after, "c3[-1]=" + before + SPACE + after)
        if len(_WHITESPACE_CACHE) < 1 << 16:
            _WHITESPACE_CACHE[pair] = feats
    return feats


def char_features(
    text: str,
    line: LineContext,
    tokens: Sequence[Token],
    window: CharWindow,
    token_features: list[list[str]] | None = None,
    thin_interior: bool = True,
    token_tags: Mapping[str, Sequence[str]] | None = None,
    settled: Sequence[bool] | None = None,
    lowers: Sequence[str] | None = None,
    token_classes: Sequence[Sequence[str]] | None = None,
    line_facts: bool = True,
    projection: bool = True,
    bounds: tuple[int, int] | None = None,
) -> list[Sequence[str]]:
    """Features of every character of ``line``: n-grams, position in token, projected token info.

    Boundaries fall at token edges in all but a tiny fraction of spans, so with ``thin_interior``
    the characters strictly inside a token get only their own character, its position and the
    token's form, and whitespace only its two neighbours; token edges get the full n-gram window.
    That keeps character-level labels while cutting the feature count (and time) by more than half.
    ``token_features`` (one list per token) replace the default ``token_projections``;
    ``token_tags`` (name -> one tag per token, e.g. dictionary BIOES tags) and ``token_classes``
    (feature strings per token, e.g. its word clusters) are added to its edge characters.
    Every character of a ``settled`` token (a word never seen in PHI) gets thin features only.
    ``lowers`` are the tokens' lower-cased forms, if the caller has them already; ``line_facts``
    adds the line's sentence and section facts to the characters with the full window;
    ``projection=False`` leaves the token facts out (for ablations), keeping position in token.
    ``bounds`` (offsets into ``text`` within the line; ``tokens`` must lie inside them): features of
    just those characters, the same as in the whole line's (n-grams see the real neighbours).
    """
    chars = text[line.start : line.end].replace(" ", SPACE).replace("\t", SPACE)
    base = line.start
    low, high = (0, len(chars)) if bounds is None else (bounds[0] - base, bounds[1] - base)
    if not projection:
        token_features = [[] for _ in tokens]
    elif token_features is None:
        if lowers is None:
            lowers = [tok.text.lower() for tok in tokens]
        token_features = token_projections(tokens, line, lowers)
    # the token's form (first projected feature), which its thin characters keep
    forms: Sequence[tuple[str, ...]] = [(feats[0],) for feats in token_features] if projection else [()] * len(tokens)
    for name, tags in (token_tags or {}).items():
        prefix = name + "="
        for feats_of_token, tag in zip(token_features, tags):
            feats_of_token.append(prefix + tag)
    if token_classes is not None:
        for feats_of_token, classes in zip(token_features, token_classes):
            feats_of_token.extend(classes)
    # 1 = strictly inside a token, 2 = whitespace; both get thin features when thin_interior is set.
    kind = bytearray(len(chars))
    if thin_interior:
        for tok in tokens:
            kind[tok.start - base + 1 : tok.end - base - 1] = b"\x01" * max(tok.end - tok.start - 2, 0)
        position = chars.find(SPACE)
        while position >= 0:
            kind[position] = 2
            position = chars.find(SPACE, position + 1)
        if settled is not None:
            for tok, done in zip(tokens, settled):
                if done:
                    kind[tok.start - base : tok.end - base] = b"\x03" * (tok.end - tok.start)
    full = [i for i in range(low, high) if not kind[i]]
    feats: list[Sequence[str]] = [()] * len(chars)
    shared = line.features if line_facts else ()
    for i, row in zip(full, _ngram_rows(chars, window, full)):
        feats[i] = [*row, *shared]
    last_index = len(chars) - 1
    if thin_interior:
        position = chars.find(SPACE, low, high)
        while position >= 0:
            before = chars[position - 1] if position else "\x02"
            after = chars[position + 1] if position < last_index else "\x03"
            feats[position] = _whitespace_features(before, after)
            position = chars.find(SPACE, position + 1, high)
    own_char = _OWN_CHAR
    for index, (tok, projected) in enumerate(zip(tokens, token_features)):
        first, last = tok.start - base, tok.end - base - 1
        form = forms[index]
        if settled is not None and settled[index]:
            for i in range(first, last + 1):
                feats[i] = ("safe", own_char[chars[i]], *form)
            continue
        # (an edge may hold a whitespace tuple: "_" is written as whitespace, so build new lists)
        if first == last:
            feats[first] = [*feats[first], "tp=S", *projected]
            continue
        feats[first] = [*feats[first], "tp=B", *projected]
        feats[last] = [*feats[last], "tp=E", *projected]
        for i in range(first + 1, last):
            if kind[i]:
                feats[i] = ("tp=I", own_char[chars[i]], *form)
            else:
                feats[i] = [*feats[i], "tp=I", *projected]
    return feats if bounds is None else feats[low:high]
