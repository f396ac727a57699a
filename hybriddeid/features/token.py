"""Token-level CRF features (paper section 3.2.2), registered by name.

An extractor takes a whole line's ``TokenSequence`` and appends feature strings to every token's
list at once: one Python call per line and extractor instead of one per token keeps extraction
cheap. Keys are namespaced by extractor so configs can mix them freely.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hybriddeid.features.context import LineContext
from hybriddeid.features.lexical import orthography, shape, short_shape
from hybriddeid.text.tokenize import Token


@dataclass(slots=True)
class TokenSequence:
    """One line's tokens and everything extractors may read about them."""

    tokens: list[Token]
    line: LineContext
    window: int
    lowers: list[str] = field(default_factory=list)
    pos: list[str] | None = None  # filled by a POS source when one is configured
    extra: dict[str, list[str]] = field(default_factory=dict)  # per-token tags from resources

    def __post_init__(self) -> None:
        if not self.lowers:
            self.lowers = [tok.text.lower() for tok in self.tokens]

    def padded(self, values: list[str]) -> Callable[[int], str]:
        """Index into ``values`` with "<s>"/"</s>" beyond the edges."""
        n = len(values)

        def at(i: int) -> str:
            if i < 0:
                return "<s>"
            if i >= n:
                return "</s>"
            return values[i]

        return at


Extractor = Callable[[TokenSequence, list[list[str]]], None]
TOKEN_EXTRACTORS: dict[str, Extractor] = {}


def token_extractor(name: str) -> Callable[[Extractor], Extractor]:
    """Register a token feature extractor under ``name`` (the name configs use)."""

    def register(fn: Extractor) -> Extractor:
        TOKEN_EXTRACTORS[name] = fn
        return fn

    return register


@token_extractor("words")
def _words(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Lower-cased words in [-window, window] and the exact form of the current word."""
    at = seq.padded(seq.lowers)
    offsets = [k for k in range(-seq.window, seq.window + 1)]
    for i, tok in enumerate(seq.tokens):
        out = feats[i]
        out.append("w=" + tok.text)
        for k in offsets:
            out.append(f"w[{k}]={at(i + k)}")


@token_extractor("ngrams")
def _ngrams(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Word bigrams and trigrams inside [-window, window]."""
    at = seq.padded(seq.lowers)
    w = seq.window
    for i in range(len(seq.tokens)):
        out = feats[i]
        for k in range(-w, w):
            out.append(f"b[{k}]={at(i + k)}|{at(i + k + 1)}")
        for k in range(-w, w - 1):
            out.append(f"t[{k}]={at(i + k)}|{at(i + k + 1)}|{at(i + k + 2)}")


@token_extractor("affixes")
def _affixes(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Prefixes and suffixes of length 1-5 of the current word."""
    for i, low in enumerate(seq.lowers):
        out = feats[i]
        for n in range(1, min(5, len(low)) + 1):
            out.append(f"p{n}={low[:n]}")
            out.append(f"s{n}={low[-n:]}")


@token_extractor("orthography")
def _orthography(seq: TokenSequence, feats: list[list[str]]) -> None:
    for i, tok in enumerate(seq.tokens):
        feats[i].extend(orthography(tok.text))


@token_extractor("shapes")
def _shapes(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Both word shapes of the current word, the short shape of its neighbours."""
    shorts = [short_shape(tok.text) for tok in seq.tokens]
    at = seq.padded(shorts)
    for i, tok in enumerate(seq.tokens):
        feats[i].extend(
            (
                "sh=" + shape(tok.text),
                "ss=" + shorts[i],
                f"ss[-1]={at(i - 1)}",
                f"ss[1]={at(i + 1)}",
                f"ss[-1:1]={at(i - 1)}|{shorts[i]}|{at(i + 1)}",
            )
        )


@token_extractor("line")
def _line(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Sentence/line and section facts, and the "Field:" key a value sits behind."""
    line = seq.line
    shared = list(line.features)
    key_feature = "key=" + line.key if line.key else "key=none"
    for i, tok in enumerate(seq.tokens):
        out = feats[i]
        out.extend(shared)
        if tok.start >= line.key_end:
            out.append(key_feature)
        else:
            out.append("inkey")
        if i == 0:
            out.append("first")
        elif i == len(seq.tokens) - 1:
            out.append("last")
        out.append(f"pos={min(i, 5)}")


@token_extractor("pos")
def _pos(seq: TokenSequence, feats: list[list[str]]) -> None:
    """POS n-grams in [-2, 2] and the paper's word x POS combinations; no-op without a POS source."""
    if seq.pos is None:
        return
    at = seq.padded(seq.pos)
    for i, low in enumerate(seq.lowers):
        p_1, p0, p1 = at(i - 1), at(i), at(i + 1)
        feats[i].extend(
            (
                f"pos[-2]={at(i - 2)}",
                f"pos[-1]={p_1}",
                f"pos[0]={p0}",
                f"pos[1]={p1}",
                f"pos[2]={at(i + 2)}",
                f"pos[-1:0]={p_1}|{p0}",
                f"pos[0:1]={p0}|{p1}",
                f"w|p[-1]={low}|{p_1}",
                f"w|p[0]={low}|{p0}",
                f"w|p[1]={low}|{p1}",
                f"w|p[-1:0]={low}|{p_1}|{p0}",
                f"w|p[0:1]={low}|{p0}|{p1}",
                f"w|p[-1,1]={low}|{p_1}|{p1}",
                f"w|p[-1:1]={low}|{p_1}|{p0}|{p1}",
            )
        )


@token_extractor("extra")
def _extra(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Per-token tags supplied by resources (clusters, gazetteer BIOES tags, NER), with neighbours."""
    for name, tags in seq.extra.items():
        at = seq.padded(tags)
        for i in range(len(seq.tokens)):
            feats[i].extend((f"{name}={tags[i]}", f"{name}[-1]={at(i - 1)}", f"{name}[1]={at(i + 1)}"))


def extract_token_features(seq: TokenSequence, names: list[str]) -> list[list[str]]:
    """The feature strings of every token in ``seq`` from the named extractors."""
    unknown = [name for name in names if name not in TOKEN_EXTRACTORS]
    if unknown:
        raise ValueError(f"unknown token feature(s): {', '.join(unknown)}; known: {', '.join(TOKEN_EXTRACTORS)}")
    feats: list[list[str]] = [[] for _ in seq.tokens]
    for name in names:
        TOKEN_EXTRACTORS[name](seq, feats)
    return feats
