"""Character-level CRF features (paper section 3.2.3): character n-grams in a window plus
token-level information projected onto the characters of each token.

Speed matters here (a note has ~3,000 characters): n-gram features are built one offset at a
time with list comprehensions over the whole line, and a token's projected features are built
once and shared by all its characters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
    def symmetric(cls, radius: int, bigram_radius: int | None = None, trigram_radius: int | None = None) -> "CharWindow":
        b = radius if bigram_radius is None else bigram_radius
        t = radius if trigram_radius is None else trigram_radius
        return cls(tuple(range(-radius, radius + 1)), tuple(range(-b, b)), tuple(range(-t, t - 1)))


def _ngram_columns(chars: str, window: CharWindow, positions: list[int]) -> list[list[str]]:
    """One column per (n, offset): the feature string at each of ``positions`` of the line."""
    pad = 6
    padded = "\x02" * pad + chars + "\x03" * pad
    columns: list[list[str]] = []
    for size, offsets in ((1, window.unigrams), (2, window.bigrams), (3, window.trigrams)):
        grams = [padded[j:j + size] for j in range(len(padded) - size + 1)]
        for k in offsets:
            prefix = f"c{size}[{k}]="
            shift = pad + k
            columns.append([prefix + grams[shift + i] for i in positions])
    return columns


def token_projection(tokens: Sequence[Token], index: int, line: LineContext, lowers: list[str]) -> list[str]:
    """Features of token ``index`` that its edge characters inherit (its form comes first)."""
    tok = tokens[index]
    n = len(tokens)

    def word(i: int) -> str:
        return lowers[i] if 0 <= i < n else ("<s>" if i < 0 else "</s>")

    feats = [
        "tw=" + lowers[index],
        "ts=" + short_shape(tok.text),
        "tsuf=" + lowers[index][-3:],
        "tw[-1]=" + word(index - 1),
        "tw[1]=" + word(index + 1),
        "tw[-2]=" + word(index - 2),
        "tw[2]=" + word(index + 2),
    ]
    feats.append("key=" + (line.key or "none") if tok.start >= line.key_end else "inkey")
    return feats


def char_features(
    text: str,
    line: LineContext,
    tokens: Sequence[Token],
    window: CharWindow,
    token_features: list[list[str]] | None = None,
    thin_interior: bool = True,
    token_tags: list[str] | None = None,
    settled: Sequence[bool] | None = None,
) -> list[list[str]]:
    """Features of every character of ``line``: n-grams, position in token, projected token info.

    Boundaries fall at token edges in all but a tiny fraction of spans, so with ``thin_interior``
    the characters strictly inside a token get only their own character, its position and the
    token's form, and whitespace only its two neighbours; token edges get the full n-gram window.
    That keeps character-level labels while cutting the feature count (and time) by more than half.
    ``token_features`` (one list per token) replace the default ``token_projection``;
    ``token_tags`` (one per token, e.g. dictionary BIOES tags) are added to its edge characters.
    Every character of a ``settled`` token (a word never seen in PHI) gets thin features only.
    """
    chars = text[line.start:line.end].replace(" ", SPACE).replace("\t", SPACE)
    base = line.start
    if token_features is None:
        lowers = [tok.text.lower() for tok in tokens]
        token_features = [token_projection(tokens, i, line, lowers) for i in range(len(tokens))]
    if token_tags is not None:
        token_features = [[*feats, "lex=" + tag] for feats, tag in zip(token_features, token_tags)]
    # 1 = strictly inside a token, 2 = whitespace; both get thin features when thin_interior is set.
    kind = bytearray(len(chars))
    if thin_interior:
        for tok in tokens:
            kind[tok.start - base + 1:tok.end - base - 1] = b"\x01" * max(tok.end - tok.start - 2, 0)
        for i, ch in enumerate(chars):
            if ch == SPACE:
                kind[i] = 2
        if settled is not None:
            for tok, done in zip(tokens, settled):
                if done:
                    kind[tok.start - base:tok.end - base] = b"\x03" * (tok.end - tok.start)
    full = [i for i, k in enumerate(kind) if not k]
    feats: list[list[str]] = [[] for _ in chars]
    shared = line.features
    for i, row in zip(full, zip(*_ngram_columns(chars, window, full))):
        feats[i] = [*row, *shared]
    last_index = len(chars) - 1
    for i, k in enumerate(kind):
        if k == 2:  # whitespace: inside or outside a span depends on its neighbours only
            before = chars[i - 1] if i else "\x02"
            after = chars[i + 1] if i < last_index else "\x03"
            feats[i] = ["sp", "c1[-1]=" + before, "c1[1]=" + after, "c3[-1]=" + before + SPACE + after]
    for index, (tok, projected) in enumerate(zip(tokens, token_features)):
        first, last = tok.start - base, tok.end - base - 1
        if settled is not None and settled[index]:
            word = projected[0]
            for i in range(first, last + 1):
                feats[i] = ["safe", "c1[0]=" + chars[i], word]
            continue
        if first == last:
            feats[first] += ["tp=S", *projected]
            continue
        feats[first] += ["tp=B", *projected]
        feats[last] += ["tp=E", *projected]
        word = projected[0]
        for i in range(first + 1, last):
            if kind[i]:
                feats[i] = ["tp=I", "c1[0]=" + chars[i], word]
            else:
                feats[i] += ["tp=I", *projected]
    return feats
