"""Character-level CRF features (paper section 3.2.3): character n-grams in a window plus
token-level information projected onto the characters of each token.

Speed matters here (a note has ~3,000 characters): n-gram features are built one offset at a
time with list comprehensions over the whole line, and a token's projected features are built
once and shared by all its characters.
"""
from __future__ import annotations

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
    def symmetric(cls, radius: int, bigram_radius: int | None = None, trigram_radius: int | None = None) -> "CharWindow":
        b = radius if bigram_radius is None else bigram_radius
        t = radius if trigram_radius is None else trigram_radius
        return cls(tuple(range(-radius, radius + 1)), tuple(range(-b, b)), tuple(range(-t, t - 1)))


def _ngram_columns(chars: str, window: CharWindow) -> list[list[str]]:
    """One column per (n, offset): the feature string of every position of the line."""
    n = len(chars)
    pad = 6
    padded = "\x02" * pad + chars + "\x03" * pad
    columns: list[list[str]] = []
    for size, offsets in ((1, window.unigrams), (2, window.bigrams), (3, window.trigrams)):
        grams = [padded[j:j + size] for j in range(len(padded) - size + 1)]
        for k in offsets:
            prefix = f"c{size}[{k}]="
            first = pad + k
            columns.append([prefix + g for g in grams[first:first + n]])
    return columns


def token_projection(tokens: list[Token], index: int, line: LineContext, lowers: list[str]) -> list[str]:
    """Features of token ``index`` that every one of its characters inherits."""
    tok = tokens[index]
    prev_word = lowers[index - 1] if index > 0 else "<s>"
    next_word = lowers[index + 1] if index + 1 < len(tokens) else "</s>"
    feats = [
        "tw=" + lowers[index],
        "ts=" + short_shape(tok.text),
        "tw[-1]=" + prev_word,
        "tw[1]=" + next_word,
    ]
    feats.append("key=" + (line.key or "none") if tok.start >= line.key_end else "inkey")
    return feats


def char_features(
    text: str,
    line: LineContext,
    tokens: list[Token],
    window: CharWindow,
    token_features: list[list[str]] | None = None,
) -> list[list[str]]:
    """Features of every character of ``line``: n-grams, position in token, projected token info.

    ``token_features`` (one list per token) are appended to each character of that token; when
    ``None`` the default ``token_projection`` is used. Whitespace gets only n-grams and line facts.
    """
    chars = text[line.start:line.end].replace(" ", SPACE).replace("\t", SPACE)
    columns = _ngram_columns(chars, window)
    feats = [list(row) for row in zip(*columns)]
    shared = list(line.features)
    for row in feats:
        row.extend(shared)
    if token_features is None:
        lowers = [tok.text.lower() for tok in tokens]
        token_features = [token_projection(tokens, i, line, lowers) for i in range(len(tokens))]
    base = line.start
    for tok, projected in zip(tokens, token_features):
        last = tok.end - tok.start - 1
        for offset in range(tok.end - tok.start):
            row = feats[tok.start - base + offset]
            row.append("tp=S" if last == 0 else "tp=B" if offset == 0 else "tp=E" if offset == last else "tp=I")
            row.extend(projected)
    return feats
