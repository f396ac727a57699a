"""The token CRF's fast path (features.token_ids) against its string path: same sequences, same
emission scores (within 1e-9; only the order of the sums differs), same spans from both engines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hybriddeid.classifiers.token_crf import DEFAULT_TOKEN_FEATURES, TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.features import token as token_features
from hybriddeid.features.analysis import analyse
from hybriddeid.features.token import TokenSequence, extract_token_features, token_extractor
from hybriddeid.features.token_ids import Dictionary, LineInput, TokenIds
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
TOLERANCE = 1e-9

# Text the generator never writes: a NUL (crfsuite reads a name up to it), combining marks,
# right-to-left scripts, emoji, "|" inside n-grams, the same word twice within a context bag,
# a line of one token, and one line far longer than the tiny models' segments.
ODD_LINES = [
    "Patient: Ana\x00Ruiz seen by Dr. Smith | Smith | smith on 12/03/2019.",
    "Nom\u0301bre: Jose\u0301 Pe\u0301rez, DNI 12345678Z, \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \U0001f600\U0001f469\u200d\u2695\ufe0f ok",
    "x",
    "||| a | b || c ||| \x00 \x00x\x00 | Smith\x00 |",
    "Dr Dr Dr Smith Smith went home home home to Boston Boston.",
    " ".join(f"word{i % 37} Smith {i} Boston, MA" for i in range(160)),  # ~3,500 characters
]


def odd_document(name: str = "odd") -> Document:
    text = "\n".join(ODD_LINES) + "\n"
    spans = []
    for word, label in (("Smith", "DOCTOR"), ("Boston", "CITY")):
        start = text.find(word)
        while start >= 0:
            spans.append(Span(start, start + len(word), label))
            start = text.find(word, start + 1)
    return Document(name, text, tuple(sorted(spans, key=lambda s: s.start)))


def assert_same_sequences(component: TokenCRF, docs: list[Document]) -> int:
    """Every sequence of ``docs``: fast emissions equal the string path's; returns how many."""
    count = 0
    for doc in docs:
        note = analyse(doc, component.language)
        fast = list(component.emission_sequences(note))
        slow = [seq for seq in component.sequences(note) if seq.units]
        assert len(fast) == len(slow)
        for got, expected in zip(fast, slow):
            assert got.units == expected.units
            assert got.core == expected.core and got.key == expected.key
            assert got.emissions.shape == (len(expected.units), len(component.weights_.labels))
            scores = component.weights_.emissions(expected.features)
            np.testing.assert_allclose(got.emissions, scores, rtol=0, atol=TOLERANCE)
            count += 1
    return count


def assert_same_spans(component: TokenCRF, docs: list[Document]) -> None:
    """Both engines find the same spans (scores within 1e-9)."""
    engine = component.engine
    try:
        for doc in docs:
            component.engine = "fast"
            fast = component.predict(doc)
            component.engine = "crfsuite"
            slow = component.predict(doc)
            assert [(s.start, s.end, s.label, s.source) for s in fast] == [
                (s.start, s.end, s.label, s.source) for s in slow
            ]
            assert all(abs(a.score - b.score) <= TOLERANCE for a, b in zip(fast, slow))
    finally:
        component.engine = engine


# ---- the bundled models ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def english() -> TokenCRF:
    return Pipeline.load("en").components["token"]


def test_bundled_english_model_scores_as_its_strings(english: TokenCRF) -> None:
    docs = list(generate_corpus(40, 11, "test")) + [odd_document()]
    assert assert_same_sequences(english, docs) > 900


def test_bundled_english_model_finds_the_same_spans_with_either_engine(english: TokenCRF) -> None:
    docs = list(generate_corpus(15, 12, "test")) + [odd_document()]
    assert_same_spans(english, docs)


def test_a_full_form_cache_is_cleared_and_scores_stay_the_same(english: TokenCRF) -> None:
    featurizer = english._token_ids()
    size = featurizer.cache_size
    featurizer.cache_size = 300  # a few lines' worth: cleared again and again
    try:
        assert assert_same_sequences(english, list(generate_corpus(8, 13, "test"))) > 100
        assert (
            featurizer._count
            <= 300
            + max(len(line.tokens) for doc in generate_corpus(8, 13, "test") for line in analyse(doc, "en").lines)
            + 2
        )
    finally:
        featurizer.cache_size = size


def test_new_forms_summed_together_give_the_bits_one_sum_per_form_gives(english: TokenCRF) -> None:
    """A batch's new forms get their own rows from one padded sum per few hundred forms, the names the
    model lacks left in as its zero row: the same bits as ``state[known].sum(axis=0)`` per form over
    the names it knows (numpy's reduceat would differ in the last bits)."""
    featurizer = english._token_ids()
    generator = np.random.default_rng(3)
    none = featurizer.none
    known = [list(generator.integers(0, none, int(generator.integers(1, 70)))) for _ in range(600)]
    padded = np.full((600, 90), none, np.int64)
    for row, ids in enumerate(known):  # each form's ids in order, with unknown names among them
        places = np.sort(generator.choice(90, len(ids), replace=False))
        padded[row, places] = ids
    featurizer._ensure(featurizer._count + 600)
    saved = featurizer._own[:600].copy()
    try:
        featurizer._new_known = [(np.arange(0, 300), padded[:300]), (np.arange(300, 600), padded[300:])]
        featurizer._sum_new()
        expected = np.array([featurizer.state[ids].sum(axis=0) for ids in known])
        assert np.array_equal(featurizer._own[:600], expected) and featurizer._new_known == []
    finally:
        featurizer._own[:600] = saved


@pytest.mark.skipif(not MEDDOCAN_DEV.is_dir(), reason="MEDDOCAN dev is not next to the repository")
def test_bundled_spanish_model_scores_as_its_strings_on_meddocan() -> None:
    component = Pipeline.load("es").components["token"]
    docs = read_corpus(MEDDOCAN_DEV)[:40]
    assert assert_same_sequences(component, docs) > 500
    assert_same_spans(component, docs[:10])


# ---- tiny models trained here ---------------------------------------------------------------


def tiny_corpus() -> list[Document]:
    return list(generate_corpus(25, 3, "train")) + [odd_document("odd1"), odd_document("odd2")]


@pytest.fixture(scope="module")
def tiny_docs() -> list[Document]:
    return list(generate_corpus(10, 4, "test")) + [odd_document()]


@pytest.fixture(scope="module")
def custom_extractor():
    @token_extractor("test_vowels")
    def _vowels(seq: TokenSequence, feats: list[list[str]]) -> None:
        for i, low in enumerate(seq.lowers):
            feats[i].append(f"v={sum(ch in 'aeiou' for ch in low)}|{seq.extra.get('lex', ['?'] * len(seq.lowers))[i]}")

    yield "test_vowels"
    del token_features.TOKEN_EXTRACTORS["test_vowels"]


TINY_CONFIGS = {
    # the defaults, with safe words and lines cut into segments
    "default": dict(features=list(DEFAULT_TOKEN_FEATURES), window=2),
    # "words" not first: a safe word keeps another first feature; a wider window
    "reordered": dict(features=["shapes", "context", "words", "ngrams", "line", "extra", "affixes"], window=3),
    # a name listed twice and a window of one
    "twice": dict(features=["words", "ngrams", "words", "orthography", "context", "line", "extra"], window=1),
    # no window: no n-grams, context reaches nothing
    "narrow": dict(features=["words", "ngrams", "context", "shapes", "extra"], window=0),
    # the known-word feature of the bundled English recipe
    "vocabulary": dict(features=[*DEFAULT_TOKEN_FEATURES, "vocabulary"], window=2),
    # with the proper-noun feature (words the word list writes only capitalised)
    "proper": dict(features=[*DEFAULT_TOKEN_FEATURES, "vocabulary", "proper"], window=2),
    # the user-name shape of the bundled English recipe (initials and a surname)
    "usernames": dict(features=[*DEFAULT_TOKEN_FEATURES, "vocabulary", "usernames"], window=2),
}


def train_tiny(features: list[str], window: int, gazetteers: tuple[str, ...] = ("*",)) -> TokenCRF:
    return TokenCRF(
        features=features,
        window=window,
        language="en",
        max_iterations=15,
        safe_min_count=3,
        lexicon=True,
        gazetteers=gazetteers,
        segment_chars=400,
        segment_overlap=60,
    ).fit(tiny_corpus())


@pytest.mark.parametrize("config", sorted(TINY_CONFIGS))
def test_tiny_models_score_as_their_strings(config: str, tiny_docs: list[Document]) -> None:
    component = train_tiny(**TINY_CONFIGS[config])
    assert component.safe_words_  # safe words are read
    note = analyse(odd_document(), "en")
    assert any(seq.core is not None for seq in component.sequences(note))  # the long line comes in segments
    assert any("\x00" in name for seq in component.sequences(note) for feats in seq.features for name in feats)
    assert assert_same_sequences(component, tiny_docs) > 200
    assert_same_spans(component, tiny_docs)


def test_extractors_without_ids_are_read_as_strings(custom_extractor: str, tiny_docs: list[Document]) -> None:
    component = train_tiny(["words", custom_extractor, "ngrams", "context", "extra"], 2)
    assert custom_extractor in component._token_ids().generic
    assert assert_same_sequences(component, tiny_docs) > 200
    assert_same_spans(component, tiny_docs[:4])


def test_a_subclass_tagging_lines_its_own_way_is_asked(tiny_docs: list[Document]) -> None:
    class Tagged(TokenCRF):
        def resource_tags(self, tokens, lowers, lexicon):
            tags = super().resource_tags(tokens, lowers, lexicon)
            tags["caps"] = ["C" if tok.text.isupper() else "O" for tok in tokens]
            if len(tokens) % 2:  # a name some lines lack
                tags["odd"] = ["S-ODD"] * len(tokens)
            return tags

    component = Tagged(language="en", max_iterations=15, lexicon=True, gazetteers=("*",)).fit(tiny_corpus())
    assert component._token_ids().resource_tags is not None
    assert assert_same_sequences(component, tiny_docs) > 200


def test_pos_and_ner_tags_of_a_tag_source_are_scored(tiny_docs: list[Document]) -> None:
    # no spaCy here: POS and NER tags made up per token, as a tag source would align them
    component = train_tiny(list(DEFAULT_TOKEN_FEATURES), 2)
    names = [dictionary.name for dictionary in component._token_ids().dictionaries]
    dictionaries = [Dictionary("gaz_" + group, g, True) for group, g in component.gazetteers_.items()]
    dictionaries.append(Dictionary("lex", component.lexicon_, False))
    featurizer = TokenIds(
        component.weights_, component.features, component.window, component.safe_words_, None, dictionaries
    )
    assert [d.name for d in dictionaries] == names
    for doc in tiny_docs:
        note = analyse(doc, "en")
        lines = [line for line in note.lines if line.tokens]
        inputs = [
            LineInput(
                line,
                [tok.text[:1].upper() or "X" for tok in line.tokens],
                ["PER" if tok.text.istitle() else "O" for tok in line.tokens],
            )
            for line in lines
        ]
        got = featurizer.emissions(inputs)
        rows = []
        for item in inputs:
            line = item.line
            seq = TokenSequence(line.tokens, line.context, component.window, lowers=list(line.lowers))
            seq.extra.update(component.resource_tags(line.tokens, seq.lowers, component.lexicon_))
            seq.pos, seq.extra["ner"] = item.pos, item.ner
            feats = extract_token_features(seq, component.features)
            for i, low in enumerate(seq.lowers):
                if low in component.safe_words_:
                    feats[i] = ["safe", feats[i][0]]
            rows.append(component.weights_.emissions(feats))
        np.testing.assert_allclose(got, np.concatenate(rows), rtol=0, atol=TOLERANCE)


def test_no_lines_give_no_scores(english: TokenCRF) -> None:
    assert english._token_ids().emissions([]).shape == (0, len(english.weights_.labels))
    assert list(english.emission_sequences(Document("empty", "\n \n"))) == []
