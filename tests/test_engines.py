"""The fast engine against crfsuite's own tagger: same weights, same tags, same marginals, same spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hybriddeid.classifiers.crf import ENGINES, check_segments
from hybriddeid.classifiers.crfsuite_decoding import Decoder
from hybriddeid.classifiers.crfsuite_files import emission_model, read_weights
from hybriddeid.features.analysis import analyse
from hybriddeid.io import read_corpus
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "notes"


@pytest.fixture(scope="module")
def english() -> Pipeline:
    return Pipeline.load("en")


@pytest.fixture(scope="module")
def english_notes() -> list:
    return list(generate_corpus(12, 5, "test"))


def test_weights_match_the_taggers_own_dump(english: Pipeline) -> None:
    component = english.components["token"]
    weights = read_weights(component.model_bytes_)
    info = component.tagger_.info()  # crfsuite's dump: weights to six decimals
    assert weights.labels == tuple(component.tagger_.labels())
    assert len(weights.attribute_ids) == len(info.attributes)
    column = {label: i for i, label in enumerate(weights.labels)}
    for (attribute, label), value in info.state_features.items():
        assert weights.state[weights.attribute_ids[attribute], column[label]] == pytest.approx(value, abs=1e-6)
    for (before, after), value in info.transitions.items():
        assert weights.transitions[column[before], column[after]] == pytest.approx(value, abs=1e-6)
    assert not weights.state[weights.none].any()  # an unknown attribute adds nothing
    assert weights.attribute_id("no such feature") == weights.none


def test_a_nul_inside_a_name_is_read_as_crfsuite_reads_it(english: Pipeline) -> None:
    weights = read_weights(english.components["token"].model_bytes_)
    known = next(iter(weights.attribute_ids))
    assert weights.attribute_id(known + "\x00whatever") == weights.attribute_ids[known]
    # looked up in one pass, as the fast engine's caches do: the same ids, a NUL read the same way
    names = [known, "no such feature", known + "\x00whatever", *list(weights.attribute_ids)[:50]]
    assert weights.attribute_ids_of(names) == [weights.attribute_id(name) for name in names]
    assert weights.attribute_ids_of(names[:2]) == [weights.attribute_ids[known], weights.none]


@pytest.mark.parametrize("damage", [b"", b"lCRF", b"not a model at all" * 10])
def test_damaged_model_files_are_refused(damage: bytes) -> None:
    with pytest.raises(ValueError, match="crfsuite"):
        read_weights(damage)


@pytest.mark.parametrize("marginals_first", [False, True])
@pytest.mark.parametrize("component_name", ["token", "char"])
@pytest.mark.parametrize("path", ["crfsuite functions", "emission model"])
def test_decoding_scores_matches_crfsuite(
    english: Pipeline, english_notes: list, component_name: str, path: str, marginals_first: bool
) -> None:
    component = english.components[component_name]
    weights, tagger = component.weights_, component.tagger_
    decoder = Decoder(weights, tagger)
    assert decoder._context is not None  # on Linux, crfsuite's own functions are reachable
    if path == "emission model":  # what a python-crfsuite build without them falls back to
        decoder._release()
    sequences = [seq for doc in english_notes for seq in component.sequences(analyse(doc, "en")) if seq.units]
    assert len(sequences) > 50
    tagged_phi = 0
    for seq in sequences:
        tags, marginal = decoder.decode(weights.emissions(seq.features), marginals_first)
        expected_tags = tagger.tag(seq.features)
        assert tags == expected_tags
        for i in range(len(seq.units)):
            for label in weights.labels:
                assert abs(marginal(label, i) - tagger.marginal(label, i)) < 1e-9
        tagged_phi += any(tag != "O" for tag in expected_tags)
    assert tagged_phi > 10  # the comparison covered sequences with PHI, not only all-O ones


def test_skipping_viterbi_where_one_path_is_sure_gives_viterbis_tags(english: Pipeline) -> None:
    """Where forward-backward runs first, a sequence whose most probable labels make a path of probability
    over the bound takes them without Viterbi: on sequences drawn around that bound, the tags are still
    Viterbi's."""
    decoder = english.components["token"].decoder_
    outside, n_labels = decoder.columns["O"], len(decoder.labels)
    generator = np.random.default_rng(5)
    skipped = decoded = with_phi = 0
    for _ in range(600):
        length = int(generator.integers(1, 12))
        emissions = generator.normal(0.0, 1.0, (length, n_labels))
        # each unit leans to O or to another label, from unsure to nearly sure
        leaning = np.where(generator.random(length) < 0.7, outside, generator.integers(0, n_labels, length))
        emissions[np.arange(length), leaning] += generator.uniform(1.0, 9.0, length)
        tags, marginal = decoder.decode(emissions, marginals_first=True)
        sure = decoder._path_probability(np.array([decoder.columns[tag] for tag in tags]), length) > 0.51
        expected_tags, expected = decoder._decode_with_tagger(emissions)
        assert tags == expected_tags
        assert all(abs(marginal("O", i) - expected("O", i)) < 1e-12 for i in range(length))
        skipped += sure
        decoded += not sure
        with_phi += sure and any(tag != "O" for tag in tags)
    assert with_phi > 20  # paths holding PHI were taken without Viterbi too
    assert skipped > 50 and decoded > 50  # both sides of the bound were drawn


def test_the_emission_model_scores_exactly_what_it_is_given() -> None:
    weights = read_weights(emission_model(read_weights(Pipeline.load("en").components["char"].model_bytes_)))
    given = [0.125, -3.5, 7.0, 0.0, 1e-300]
    scores = [
        sum(value * weights.state[weights.attribute_ids[str(j)], k] for j, value in enumerate(given)) for k in range(5)
    ]
    assert scores == given  # each value x 1.0 on its own label, nothing else added


def test_a_long_sequence_after_short_ones_grows_crfsuites_arrays(english: Pipeline) -> None:
    decoder = english.components["char"].decoder_
    generator = np.random.default_rng(3)
    for length in (3, 5000, 2):
        emissions = generator.normal(0.0, 2.0, (length, len(decoder.labels)))
        tags, marginal = decoder.decode(emissions)
        expected_tags, expected = decoder._decode_with_tagger(emissions)
        assert tags == expected_tags
        assert all(
            abs(marginal(label, i) - expected(label, i)) < 1e-12 for i in (0, length - 1) for label in decoder.labels
        )


def _spans(pipeline: Pipeline, docs: list, threshold: float | None = None) -> list:
    return [
        [(s.start, s.end, s.label, s.source, round(s.score, 9)) for s in pipeline.predict(doc, threshold=threshold)]
        for doc in docs
    ]


def test_both_engines_give_the_same_spans_in_english(english_notes: list) -> None:
    fast, crfsuite = Pipeline.load("en"), Pipeline.load("en", engine="crfsuite")
    assert {c.engine for c in fast.components.values() if hasattr(c, "engine")} == {"fast"}
    assert {c.engine for c in crfsuite.components.values() if hasattr(c, "engine")} == {"crfsuite"}
    expected = _spans(crfsuite, english_notes)
    assert sum(map(len, expected)) > 50
    assert _spans(fast, english_notes) == expected
    assert _spans(fast, english_notes, 0.5) == _spans(crfsuite, english_notes, 0.5)


@pytest.mark.skipif(not MEDDOCAN_DEV.is_dir(), reason="MEDDOCAN dev is not beside the repository")
def test_both_engines_give_the_same_spans_on_meddocan() -> None:
    docs = read_corpus(MEDDOCAN_DEV)[:15]
    fast, crfsuite = Pipeline.load("es"), Pipeline.load("es", engine="crfsuite")
    expected = _spans(crfsuite, docs)
    assert sum(map(len, expected)) > 100
    assert _spans(fast, docs) == expected


def test_unknown_engines_are_refused() -> None:
    assert check_segments({"engine": "gpu"})
    assert not check_segments({"engine": "crfsuite"})
    with pytest.raises(ValueError, match="engine"):
        Pipeline.load("en", engine="gpu")


def test_the_cli_offers_every_engine_and_both_write_the_same(tmp_path: Path) -> None:
    from hybriddeid.cli import build_parser

    annotate = build_parser().parse_args(["annotate", "in", "out", "--engine", "crfsuite"])
    assert annotate.engine == "crfsuite"
    outputs = {}
    for engine in ENGINES:
        out = tmp_path / engine
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from hybriddeid.cli import main; sys.exit(main())",
                "annotate",
                str(EXAMPLES),
                str(out),
                "--engine",
                engine,
                "--format",
                "jsonl",
            ],
            check=True,
            cwd=tmp_path,
            capture_output=True,
        )
        outputs[engine] = {
            path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(out.glob("*.jsonl"))
        }
    assert outputs["fast"].keys() == outputs["crfsuite"].keys() and outputs["fast"]
    for name, note in outputs["fast"].items():  # the same spans; scores agree to ~1e-15, not to the last digit
        expected = outputs["crfsuite"][name]["spans"]
        assert [{**span, "score": pytest.approx(span["score"], abs=1e-9)} for span in expected] == note["spans"]
