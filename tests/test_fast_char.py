"""The character CRF's fast engine: scores from memoised weight sums (``features.char_ids``) must
equal the string path's (``CRFWeights.emissions`` of ``CharCRF.sequences``) for every sequence,
and both engines must find the same spans."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from hybriddeid.classifiers.char_crf import CharCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.features import char_ids
from hybriddeid.features.analysis import analyse
from hybriddeid.features.char import CharWindow
from hybriddeid.features.char_ids import CharScorer, _CodeMemo, _Memo
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.clusters import WordClusters
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
TOLERANCE = 1e-9

# Lines no generated note has: a NUL, tabs, underscores, combining marks, right-to-left text,
# emoji (outside the BMP), a lone space line, and a line far longer than a small segment_chars.
HOSTILE = (
    "Name:\tJohn\x00Smith\t\tMRN:  0042\x00 seen 12/03/2019\n"
    "Nota: Zoë Ñúñez-García (e\u0301) visitó a José — «bien» …\n"
    "Ward: \u05de\u05d7\u05dc\u05e7\u05d4 \u05d1 / \u0645\u0633\u062a\u0634\u0641\u0649 \u0627\u0644\u0642\u0627\u0647\u0631\u0629 room 12\n"
    "   \n"
    "Mood 😀😀 family 👨‍👩‍👧 ok __init__ snake_case a_b\n"
    + " ".join(f"Dr Alice Brown saw patient {i} at Mercy Hospital on 0{i % 9 + 1}/1{i % 3}/2020." for i in range(14))
    + "\n"
)


def assert_same_emissions(model: CharCRF, note, regions=None, skip=()) -> int:
    """Every sequence of the fast path equals the string path's; returns how many there were."""
    slow = [seq for seq in model._sequences_for(note, regions, skip) if seq.units]
    fast = list(model.emission_sequences(note, regions, skip))
    assert len(fast) == len(slow)
    weights = model.weights_
    for a, b in zip(slow, fast):
        assert (b.units, b.core, b.key) == (a.units, a.core, a.key)
        assert b.features == [] and b.emissions.shape == (len(a.units), len(weights.labels))
        expected = weights.emissions(a.features)
        assert np.abs(b.emissions - expected).max() <= TOLERANCE
    return len(fast)


def random_stretches(text: str, rng: random.Random, count: int = 4) -> list[tuple[int, int]]:
    """Sorted, disjoint character stretches of ``text``, some a single character."""
    points = sorted(rng.sample(range(len(text) + 1), min(2 * count, len(text) + 1)))
    return [(a, max(b, a + 1)) for a, b in zip(points[::2], points[1::2]) if a < len(text)]


def check_note(model: CharCRF, note, rng: random.Random, regions=None) -> None:
    """Whole note, given regions, random stretches, and each with some runs skipped."""
    assert assert_same_emissions(model, note) > 0
    for stretches in (regions, random_stretches(note.text, rng)):
        if not stretches:
            continue
        read = [seq.key or (seq.units[0][0], seq.units[-1][1]) for seq in model.emission_sequences(note, stretches)]
        assert_same_emissions(model, note, stretches)
        if read:
            assert_same_emissions(model, note, stretches, set(read[::2]))


# -- the bundled models --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def english():
    return Pipeline.load("en")


def test_bundled_english_model_scores_generated_notes_exactly(english):
    char, token = english.components["char"], english.components["token"]
    rng = random.Random(3)
    for doc in generate_corpus(12, 11, "test"):
        note = analyse(doc, "en")
        check_note(char, note, rng, token.predict_with_focus(note, 0.999, 8)[1])


def test_bundled_english_model_scores_hostile_text_exactly(english):
    char = english.components["char"]
    note = analyse(Document("hostile", HOSTILE), "en")
    check_note(char, note, random.Random(4))


@pytest.mark.skipif(not MEDDOCAN_DEV.is_dir(), reason="MEDDOCAN dev is not beside the repository")
def test_bundled_spanish_model_scores_meddocan_notes_exactly():
    pipeline = Pipeline.load("es")
    char, token = pipeline.components["char"], pipeline.components["token"]
    assert char.clusters_ is not None  # the Spanish model projects word clusters
    rng = random.Random(5)
    for doc in read_corpus(MEDDOCAN_DEV)[:8]:
        note = analyse(doc, "es")
        check_note(char, note, rng, token.predict_with_focus(note, 0.999, 8)[1])


@pytest.mark.parametrize("engine", ["fast", "crfsuite"])
def test_the_bundled_english_model_finds_the_same_spans_with_either_engine(english, engine):
    char = english.components["char"]
    docs = [*generate_corpus(15, 12, "test"), Document("hostile", HOSTILE)]
    char.engine = "crfsuite"
    try:
        expected = [char.predict(doc) for doc in docs]
        char.engine = engine
        got = [char.predict(doc) for doc in docs]
    finally:
        char.engine = "fast"
    assert sum(map(len, expected)) > 50
    assert_same_spans(got, expected)


def assert_same_spans(got: list[list[Span]], expected: list[list[Span]]) -> None:
    """Offsets, labels and sources identical; scores (marginals, summed in another order) to 1e-9."""
    assert [[(s.start, s.end, s.label, s.source) for s in spans] for spans in got] == [
        [(s.start, s.end, s.label, s.source) for s in spans] for spans in expected
    ]
    for spans, others in zip(got, expected):
        for span, other in zip(spans, others):
            assert abs(span.score - other.score) <= TOLERANCE


# -- small models trained here, one per group of settings ----------------------------------------------


def training_notes() -> list[Document]:
    """Generated notes plus one with the hostile lines (a NUL reaches crfsuite's attribute names)."""
    docs = list(generate_corpus(6, 21, "train"))
    text = HOSTILE
    name = text.index("John")
    return [*docs, Document("hostile", text, (Span(name, name + 10, "PATIENT"),))]


@pytest.fixture(scope="module")
def clusters_dir(tmp_path_factory) -> Path:
    rng = random.Random(6)
    words = {tok.lower() for doc in training_notes() for tok in doc.text.split()}
    brown = {word: ("".join(rng.choice("01") for _ in range(rng.randint(2, 12))), 3) for word in sorted(words)}
    ids = {word: rng.randrange(20) for word in sorted(words)}
    folder = tmp_path_factory.mktemp("clusters")
    WordClusters(brown=brown, w2v={10: ids, 20: ids}).to_disk(folder)
    return folder


SETTINGS = {
    "wide-thin-off-knowledge": dict(
        thin_interior=False, lexicon=False, safe_min_count=2, gazetteers=["*"], clusters="CLUSTERS"
    ),
    "no-ngrams-segments": dict(features=["projection", "line"], segment_chars=200, segment_overlap=40),
    "no-projection-clusters-safe": dict(features=["ngrams", "line"], clusters="CLUSTERS", safe_min_count=1),
    "no-line-thin-off": dict(features=["ngrams", "projection"], thin_interior=False, gazetteers=["first_names"]),
    "radius-2-subtype": dict(
        radius=2, bigram_radius=1, trigram_radius=1, label_level="subtype", segment_chars=300, segment_overlap=50
    ),
}


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def small_model(request, clusters_dir) -> CharCRF:
    params = {
        key: (str(clusters_dir) if value == "CLUSTERS" else value) for key, value in SETTINGS[request.param].items()
    }
    return CharCRF(language="en", max_iterations=15, **params).fit(training_notes())


def test_a_small_model_scores_every_sequence_exactly(small_model):
    rng = random.Random(7)
    held_out = [*generate_corpus(4, 22, "test"), Document("hostile", HOSTILE)]
    for doc in held_out:
        check_note(small_model, analyse(doc, "en"), rng)
    if small_model.segment_chars < 1000:  # the long line was read in segments, and stitched
        note = analyse(held_out[-1], "en")
        assert any(seq.core is not None for seq in small_model.emission_sequences(note))


def test_a_small_model_finds_the_same_spans_with_either_engine(small_model):
    docs = [*generate_corpus(5, 23, "test"), Document("hostile", HOSTILE)]
    small_model.engine = "crfsuite"
    try:
        expected = [small_model.predict(doc) for doc in docs]
    finally:
        small_model.engine = "fast"
    assert_same_spans([small_model.predict(doc) for doc in docs], expected)


def test_settled_tokens_and_clusters_reach_the_scores(clusters_dir):
    """The settings the scorer takes from the model (safe words, cluster classes) change scores."""
    model = CharCRF(language="en", max_iterations=15, safe_min_count=1, clusters=str(clusters_dir)).fit(
        training_notes()
    )
    assert model.safe_words_ and model.clusters_ is not None
    note = analyse(next(generate_corpus(1, 24, "test")), "en")
    assert_same_emissions(model, note)
    flat = {name for seq in model.sequences(note) for feats in seq.features for name in feats}
    assert "safe" in flat and any(name.startswith("tbc=") for name in flat)


# -- memos: bounded, and right after being emptied -------------------------------------------------------


def test_memos_stay_bounded_and_exact_when_emptied(english, monkeypatch):
    """With tiny caps every memo is emptied many times over a few notes; scores stay exact."""
    char = english.components["char"]
    for name in ("_NGRAM_CACHE_LIMIT", "WORD_MEMO_SIZE", "_SMALL_MEMO"):
        monkeypatch.setattr(char_ids, name, 40)
    char._featurizer_ = None
    try:
        scorer = char._scorer()
        rng = random.Random(8)
        for doc in [*generate_corpus(3, 25, "test"), Document("hostile", HOSTILE)]:
            note = analyse(doc, "en")
            check_note(char, note, rng)
            # a memo holds more than its cap only while one batch needs more distinct keys
            assert all(size <= max(40, len(note.text) + 12 * len(note.lines)) for size in scorer.memo_sizes().values())
    finally:
        char._featurizer_ = None  # the next test builds a scorer with the real caps


def test_code_memo_values_survive_emptying_and_overflow():
    built: list[int] = []

    def build(keys: list[int]) -> np.ndarray:
        built.extend(keys)
        return np.array([[key * 2, key + 1] for key in keys], np.int64).reshape(len(keys), 2)

    memo = _CodeMemo(2, np.int64, 8, build)
    rng = np.random.default_rng(9)
    for size in (3, 5, 8, 20, 2, 40, 1):  # 20 and 40 distinct keys: more than the cap in one call
        keys = rng.integers(0, 1 << 62, size) if size > 8 else rng.integers(0, 12, size)
        rows = memo.rows(keys)
        assert np.array_equal(memo.table[rows], np.stack([keys * 2, keys + 1], axis=1))
    assert len(memo) <= 40
    assert len(built) > len(set(built))  # emptied: some keys were built again


def test_memo_values_survive_emptying():
    memo = _Memo(
        1, np.float64, 4, lambda keys: np.array([[len(key)] for key in keys], np.float64).reshape(len(keys), 1)
    )
    for keys in (["a", "bb"], ["a", "ccc", "dddd", "ee"], ["fffff", "a", "a"], [str(i) * i for i in range(1, 9)]):
        assert memo.values(keys)[:, 0].tolist() == [len(key) for key in keys]
        assert len(memo) <= max(4, len(set(keys)))


def test_windows_beyond_the_padding_take_the_string_path():
    assert CharScorer.supports(CharWindow.symmetric(4, 2, 2)) and CharScorer.supports(CharWindow.symmetric(6))
    assert not CharScorer.supports(CharWindow.symmetric(7))


def test_inconsistent_lines_are_refused_before_the_sums(english):
    """The numpy sums do not check their indices (negative ones wrap): a run outside its line, or
    tokens outside their run, must be refused first."""
    char = english.components["char"]
    note = analyse(Document("n", "Seen by Dr Alice Brown today.\n"), "en")
    item = next(iter(char._char_lines(note, None, None, ())))[1]
    scorer = char._scorer()
    assert len(scorer.score(note.text, [item])) == 1
    first, end, start, stop = item.runs[0]
    outside = char_ids.CharLine(item.line, item.tokens, item.lowers, [(first, end, start, stop + 5)], item.tags)
    with pytest.raises(ValueError):
        scorer.score(note.text, [outside])
    short = char_ids.CharLine(item.line, item.tokens, item.lowers, [(first, end, start + 2, stop)], item.tags)
    with pytest.raises(ValueError):
        scorer.score(note.text, [short])
