"""Token-level CRF features (paper section 3.2.2), registered by name.

An extractor takes a whole line's ``TokenSequence`` and appends feature strings to every token's
list at once: one Python call per line and extractor instead of one per token keeps extraction
cheap. Keys are namespaced by extractor so configs can mix them freely.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hybriddeid.features.context import LineContext
from hybriddeid.features.lexical import affixes, orthography, shape, short_shape
from hybriddeid.features.resources import ClusterFeatures
from hybriddeid.text.tokenize import Token


@dataclass(slots=True)
class TokenSequence:
    """One line's tokens and everything extractors may read about them."""

    tokens: Sequence[Token]
    line: LineContext
    window: int
    lowers: list[str] = field(default_factory=list)
    pos: list[str] | None = None  # filled by a POS source when one is configured
    extra: dict[str, list[str]] = field(default_factory=dict)  # per-token tags from resources
    clusters: ClusterFeatures | None = None  # word clusters, when the model has them
    vocabulary: frozenset[str] | None = None  # the language's known words, for the "vocabulary" extractor
    proper_nouns: frozenset[str] | None = None  # words the word list writes only capitalised, for "proper"
    surnames: frozenset[str] | None = None  # case-folded surnames, for "usernames"

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

    def column(self, values: list[str], offset: int) -> list[str]:
        """``values`` shifted by ``offset`` (value of token i + offset for every token i), padded."""
        n = len(values)
        pad = abs(offset)
        padded = ["<s>"] * pad + values + ["</s>"] * pad
        return padded[pad + offset : pad + offset + n]


def _add_columns(feats: list[list[str]], columns: list[list[str]]) -> None:
    """Append one string per column to every token's feature list."""
    for out, values in zip(feats, zip(*columns)):
        out.extend(values)


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
    columns = [["w=" + tok.text for tok in seq.tokens]]
    for k in range(-seq.window, seq.window + 1):
        prefix = f"w[{k}]="
        columns.append([prefix + w for w in seq.column(seq.lowers, k)])
    _add_columns(feats, columns)


@token_extractor("ngrams")
def _ngrams(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Word bigrams and trigrams inside [-window, window]."""
    w = seq.window
    shifted = {k: seq.column(seq.lowers, k) for k in range(-w, w + 1)}
    columns = []
    for k in range(-w, w):
        prefix = f"b[{k}]="
        columns.append([prefix + a + "|" + b for a, b in zip(shifted[k], shifted[k + 1])])
    for k in range(-w, w - 1):
        prefix = f"t[{k}]="
        columns.append([prefix + a + "|" + b + "|" + c for a, b, c in zip(shifted[k], shifted[k + 1], shifted[k + 2])])
    _add_columns(feats, columns)


@token_extractor("context")
def _context(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Bags of the nearest words (punctuation skipped) left and right, up to 2 x window each:
    catches cues such as "Hospital", "Dr." or "calle" a few tokens away, whatever the order."""
    reach = 2 * seq.window
    words = [i for i, low in enumerate(seq.lowers) if low[:1].isalnum()]
    # next_word[i]: rank among words of the first word at or after token i
    next_word = [len(words)] * (len(seq.tokens) + 1)
    for n in range(len(words) - 1, -1, -1):
        for i in range(words[n], words[n - 1] if n else -1, -1):
            next_word[i] = n
    left_of = ["L=" + seq.lowers[j] for j in words]
    right_of = ["R=" + seq.lowers[j] for j in words]
    for i, out in enumerate(feats):
        n = next_word[i]
        skip = 1 if n < len(words) and words[n] == i else 0  # a word is not its own right context
        # dict.fromkeys drops repeats but keeps the order: a set's order changes with the process's
        # hash seed, and crfsuite's sums (hence scores) with the order of the features
        out.extend(dict.fromkeys((*left_of[max(0, n - reach) : n], *right_of[n + skip : n + skip + reach])))


@token_extractor("affixes")
def _affixes(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Prefixes and suffixes of length 1-5 of the current word."""
    for out, low in zip(feats, seq.lowers):
        out.extend(affixes(low))


@token_extractor("orthography")
def _orthography(seq: TokenSequence, feats: list[list[str]]) -> None:
    for i, tok in enumerate(seq.tokens):
        feats[i].extend(orthography(tok.text))


@token_extractor("shapes")
def _shapes(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Both word shapes of the current word, the short shape of its neighbours."""
    shorts = [short_shape(tok.text) for tok in seq.tokens]
    before, after = seq.column(shorts, -1), seq.column(shorts, 1)
    _add_columns(
        feats,
        [
            ["sh=" + shape(tok.text) for tok in seq.tokens],
            ["ss=" + x for x in shorts],
            ["ss[-1]=" + x for x in before],
            ["ss[1]=" + x for x in after],
            [f"ss[-1:1]={a}|{b}|{c}" for a, b, c in zip(before, shorts, after)],
        ],
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


@token_extractor("clusters")
def _clusters(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Brown path prefixes and word2vec ids of the word, Brown prefixes of its neighbours; no-op
    without clusters."""
    clusters = seq.clusters
    if clusters is None:
        return
    words = [tok.text for tok in seq.tokens]
    near = [clusters.neighbour(word) for word in words]
    before = seq.column(near, -1)
    after = seq.column(near, 1)
    for out, word, left, right in zip(feats, words, before, after):
        out.extend(clusters.own(word))
        out.append("bc[-1]=" + left)
        out.append("bc[1]=" + right)


def _each_word(
    seq: TokenSequence,
    feats: list[list[str]],
    words: frozenset[str] | None,
    features: Callable[[str, frozenset[str]], list[str]],
) -> None:
    """Each token's ``features(text, words)``; nothing without a word list."""
    if words:
        for out, tok in zip(feats, seq.tokens):
            out.extend(features(tok.text, words))


def word_case(text: str) -> str:
    """ "upper", "title", "lower" or "mixed": how a word is written."""
    return "upper" if text.isupper() else "title" if text.istitle() else "lower" if text.islower() else "mixed"


def vocabulary_features(text: str, vocabulary: frozenset[str]) -> list[str]:
    """Whether a word of two or more letters is one the language's word lists know, alone and with
    its case: a name from a locale no gazetteer holds ("Nguyen", "Andravi") or a lower-case surname
    in a terse note is unknown, most clinical words are known. Other tokens get nothing."""
    if len(text) < 2 or not text.isalpha():
        return []
    state = "known" if text.casefold() in vocabulary else "unk"
    return ["voc=" + state, f"voc={state}|{word_case(text)}"]


@token_extractor("vocabulary")
def _vocabulary(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Known or unknown word (``vocabulary_features``); no-op without the language's word list."""
    _each_word(seq, feats, seq.vocabulary, vocabulary_features)


def proper_noun_features(text: str, proper_nouns: frozenset[str]) -> list[str]:
    """Whether a word of two or more letters is one the language's word list knows only as a proper
    noun ("Bernini", "Nguyen"; not "will" or "Smith", which it also writes in lower case), with the
    word's case: the evidence a name keeps when a note is typed in capitals or in lower case."""
    if len(text) < 2 or not text.isalpha() or text.casefold() not in proper_nouns:
        return []
    return ["prop=1", "prop=1|" + word_case(text)]


@token_extractor("proper")
def _proper(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Proper nouns of the word list (``proper_noun_features``); no-op without one."""
    _each_word(seq, feats, seq.proper_nouns, proper_noun_features)


def username_features(text: str, surnames: frozenset[str], vocabulary: frozenset[str] | None) -> list[str]:
    """Whether a word is shaped as the commonest log-in names are made, one or two initials before a
    surname or one after it ("mrossi", "pmurphy", "smithj"), with the word's case: user names in
    signatures, cc lines and audit trails, which no list holds. The surname must be one of the
    dictionaries' (``surnames``, four letters or more: short ones make "pacer" of "p" + "Acer"), the word
    itself no name, no known word ("aware" is "a" + "Ware") and not capitalised."""
    if not 5 <= len(text) <= 16 or not text.isalpha() or text.istitle():
        return []  # a capitalised word is a name or a word, not a log-in
    folded = text.casefold()
    if folded in surnames or (vocabulary is not None and folded in vocabulary):
        return []
    if folded[1:] in surnames:
        kind = "i+last"
    elif len(folded) > 5 and folded[2:] in surnames:
        kind = "ii+last"
    elif folded[:-1] in surnames:
        kind = "last+i"
    else:
        return []
    return ["user=" + kind, f"user={kind}|{word_case(text)}"]


@token_extractor("usernames")
def _usernames(seq: TokenSequence, feats: list[list[str]]) -> None:
    """User-name shapes (``username_features``); no-op without the language's surnames."""
    if seq.surnames:
        surnames, vocabulary = seq.surnames, seq.vocabulary
        for out, tok in zip(feats, seq.tokens):
            out.extend(username_features(tok.text, surnames, vocabulary))


@token_extractor("extra")
def _extra(seq: TokenSequence, feats: list[list[str]]) -> None:
    """Per-token tags supplied by resources (clusters, gazetteer BIOES tags, NER), with neighbours."""
    for name, tags in seq.extra.items():
        at = seq.padded(tags)
        for i in range(len(seq.tokens)):
            feats[i].extend((f"{name}={tags[i]}", f"{name}[-1]={at(i - 1)}", f"{name}[1]={at(i + 1)}"))


def check_token_features(names: Iterable[str]) -> None:
    """A ValueError naming any of ``names`` that no extractor is registered under."""
    unknown = [name for name in names if name not in TOKEN_EXTRACTORS]
    if unknown:
        raise ValueError(f"unknown token feature(s): {', '.join(unknown)}; known: {', '.join(TOKEN_EXTRACTORS)}")


def extract_token_features(seq: TokenSequence, names: list[str]) -> list[list[str]]:
    """The feature strings of every token in ``seq`` from the named extractors."""
    check_token_features(names)
    feats: list[list[str]] = [[] for _ in seq.tokens]
    for name in names:
        TOKEN_EXTRACTORS[name](seq, feats)
    return feats
