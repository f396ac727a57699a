"""BIO/BIOES encoding and decoding, feature extraction and the CRF taggers on a tiny corpus."""

from __future__ import annotations

import pytest

from hybriddeid.classifiers.char_crf import CharCRF
from hybriddeid.classifiers.focus import runs_in_regions, unsure_stretches
from hybriddeid.classifiers.schemes import decode_tags, encode_tags
from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.features.lexical import shape, short_shape
from hybriddeid.text.tokenize import tokenize


def test_word_shapes_follow_the_paper_example():
    assert shape("PO/5mg") == "AA-#aa"
    assert short_shape("PO/5mg") == "A-#a"


def test_word_shapes_give_every_character_its_class_as_one_call_per_character_did() -> None:
    """The shapes read a translate table filled on first sight: every code point (surrogates and
    characters that are upper case, lower case, title case, digits or none of these) gets the class
    the character tests give it, and runs of one class collapse whatever their length."""

    def char_class(ch: str) -> str:
        return "A" if ch.isupper() else "a" if ch.islower() else "#" if ch.isdigit() else "-"

    for start in range(0, 0x110000, 20):
        word = "".join(map(chr, range(start, min(start + 20, 0x110000))))
        expected = "".join(map(char_class, word))
        assert shape(word) == expected
        assert short_shape(word) == "".join(cls for i, cls in enumerate(expected) if i == 0 or expected[i - 1] != cls)
    assert short_shape("ǅemal99--x") == "-a#-a"  # a title-case letter is neither upper nor lower case


def test_tokens_split_letters_digits_and_punctuation_with_offsets():
    text = "NºCol:28 Ana-María"
    tokens = tokenize(text)
    assert [t.text for t in tokens] == ["NºCol", ":", "28", "Ana", "-", "María"]
    assert all(text[t.start : t.end] == t.text for t in tokens)


UNITS = [(0, 3), (4, 8), (9, 12), (13, 15)]


@pytest.mark.parametrize(
    "scheme, spans, tags",
    [
        ("BIO", [Span(4, 12, "NAME")], ["O", "B-NAME", "I-NAME", "O"]),
        ("BIOES", [Span(4, 12, "NAME")], ["O", "B-NAME", "E-NAME", "O"]),
        ("BIOES", [Span(0, 3, "ID"), Span(4, 15, "LOC")], ["S-ID", "B-LOC", "I-LOC", "E-LOC"]),
        ("BIO", [Span(5, 7, "NAME")], ["O", "B-NAME", "O", "O"]),  # a span inside a unit tags the unit
    ],
)
def test_encode_tags(scheme, spans, tags):
    assert encode_tags(UNITS, spans, scheme) == tags


@pytest.mark.parametrize(
    "tags, expected",
    [
        (["O", "B-NAME", "I-NAME", "O"], [Span(4, 12, "NAME", "t")]),
        (["S-ID", "B-LOC", "I-LOC", "E-LOC"], [Span(0, 3, "ID", "t"), Span(4, 15, "LOC", "t")]),
        (["O", "I-NAME", "I-NAME", "O"], [Span(4, 12, "NAME", "t")]),  # ill-formed start is tolerated
        (["B-NAME", "I-DATE", "O", "O"], [Span(0, 3, "NAME", "t"), Span(4, 8, "DATE", "t")]),
        (
            ["B-NAME", "B-NAME", "O", "B-ID"],
            [Span(0, 3, "NAME", "t"), Span(4, 8, "NAME", "t"), Span(13, 15, "ID", "t")],
        ),
    ],
)
def test_decode_tags(tags, expected):
    assert decode_tags(UNITS, tags, "t") == expected


def _tiny_corpus() -> list[Document]:
    names = ["Ana Ruiz", "Pedro Gil", "Marta Sanz", "Luis Vega", "Eva Mora", "Juan Ortiz"]
    docs = []
    for i, name in enumerate(names):
        date = f"{i + 10}/0{i + 1}/2019"
        text = f"Nombre: {name}.\nFecha de ingreso: {date}.\nPaciente con fiebre y tos.\n"
        start = text.index(name)
        dstart = text.index(date)
        docs.append(
            Document(
                f"d{i}",
                text,
                (
                    Span(start, start + len(name), "NOMBRE_SUJETO_ASISTENCIA"),
                    Span(dstart, dstart + len(date), "FECHAS"),
                ),
            )
        )
    return docs


@pytest.mark.parametrize(
    "make",
    [
        lambda: TokenCRF(language="es", max_iterations=50),
        lambda: CharCRF(language="es", max_iterations=50, label_level="phi"),
        lambda: CharCRF(language="es", max_iterations=50, label_level="subtype"),
    ],
)
def test_taggers_learn_a_tiny_corpus_and_round_trip_to_disk(make, tmp_path):
    docs = _tiny_corpus()
    model = make().fit(docs[:5])
    held_out = docs[5]
    predicted = model.predict(held_out)
    assert {(s.start, s.end, s.label, s.source) for s in predicted} == {
        (s.start, s.end, s.label, model.source) for s in held_out.spans
    }
    assert all(0.0 < s.score <= 1.0 for s in predicted)
    model.to_disk(tmp_path / "m")
    reloaded = type(model).from_disk(tmp_path / "m", model.get_params())
    assert reloaded.predict(held_out) == predicted
    assert set(reloaded.labels) == {"NOMBRE_SUJETO_ASISTENCIA", "FECHAS"}


def test_predict_before_fit_is_a_clear_error():
    from hybriddeid.classifiers.base import NotFittedError

    with pytest.raises(NotFittedError):
        TokenCRF().predict(Document("x", "texto"))


def test_char_features_thin_interior_whitespace_and_edges():
    from hybriddeid.features.char import CharWindow, char_features
    from hybriddeid.features.context import line_contexts

    text = "Sr. Ana_Ruiz 12\n"
    line = line_contexts(text, "es")[0]
    tokens = list(tokenize(text, line.start, line.end))
    feats = char_features(text, line, tokens, CharWindow.symmetric(2), token_tags={"lex": ["O"] * len(tokens)})
    assert len(feats) == line.end - line.start
    by_char = dict(zip(range(line.start, line.end), feats))
    # a token's first and last characters get the n-gram window and the projected token facts
    assert "tp=B" in by_char[0] and "tw=sr" in by_char[0] and "c1[1]=r" in by_char[0]
    assert "tp=E" in by_char[1] and "lex=O" in by_char[1]
    # a one-character token is its own edge
    assert "tp=S" in by_char[2]
    # interior characters are thin: their own character, the position, the token form
    assert list(by_char[5]) == ["tp=I", "c1[0]=n", "tw=ana"]
    # whitespace gets its two neighbours only
    assert list(by_char[3]) == ["sp", "c1[-1]=.", "c1[1]=A", "c3[-1]=._A"]
    # "_" is written as whitespace, yet as a token of its own it still gets its edge features
    underscore = by_char[text.index("_")]
    assert underscore[0] == "sp" and "tp=S" in underscore
    # the memoised n-gram rows are identical to a fresh build
    again = char_features(text, line, tokens, CharWindow.symmetric(2), token_tags={"lex": ["O"] * len(tokens)})
    assert [list(f) for f in again] == [list(f) for f in feats]


def test_unsure_stretches_cover_phi_and_doubtful_units_widened_by_the_margin():
    units = [(0, 3), (4, 7), (8, 11), (12, 15), (16, 19), (20, 23), (24, 27)]
    tags = ["O", "B-X", "O", "O", "O", "O", "O"]
    p_outside = [1.0, 0.01, 0.9999, 1.0, 1.0, 1.0, 0.5].__getitem__
    # unit 1 is tagged (whatever its marginal), unit 6 is doubtful, unit 2 is sure enough
    assert unsure_stretches(units, tags, p_outside, 0.999, 0) == [(4, 7), (24, 27)]
    assert unsure_stretches(units, tags, p_outside, 0.999, 1) == [(0, 11), (20, 27)]
    assert unsure_stretches(units, tags, p_outside, 0.999, 2) == [(0, 27)]  # touching stretches join
    assert unsure_stretches(units, ["O"] * 7, ([1.0] * 7).__getitem__, 0.999, 2) == []
    # units inside a claimed span (the focuser's own confident finding) neither count nor widen
    claimed = [Span(4, 7, "X", "token", 0.99)]
    assert unsure_stretches(units, tags, p_outside, 0.999, 1, claimed) == [(20, 27)]
    assert unsure_stretches(units, tags, p_outside, 0.999, 0, [Span(24, 27, "X")]) == [(4, 7)]


def test_runs_in_regions_group_the_tokens_a_stretch_touches():
    tokens = tokenize("Ana vive en Soria con Luis .")
    regions = [(0, 3), (12, 17), (24, 26)]  # "Ana", "Soria", part of "Luis"
    assert runs_in_regions(tokens, regions, [start for start, _ in regions]) == [(0, 1), (3, 4), (5, 6)]
    regions = [(2, 14)]  # from inside "Ana" to inside "Soria"
    assert runs_in_regions(tokens, regions, [2]) == [(0, 4)]
    assert runs_in_regions(tokens, [], []) == []


def test_runs_in_regions_are_the_runs_of_tokens_overlapping_a_stretch_on_random_lines():
    """Against the definition: a token is in a run when it shares a character with a stretch; runs
    are the maximal runs of such tokens (random lines and sorted, disjoint stretches, some empty)."""
    import random

    rng = random.Random(5)
    for _ in range(2_000):
        text = "".join(rng.choice("ab 1.,") for _ in range(rng.randint(0, 40)))
        offset = rng.randint(0, 5)
        tokens = tokenize(" " * offset + text, offset)
        places = range(0, len(text) + offset + 8)
        cuts = sorted(rng.sample(places, min(len(places) // 2 * 2, rng.randint(0, 8) * 2)))
        regions = [(cuts[i], cuts[i + 1] + rng.choice((0, 0, 1))) for i in range(0, len(cuts), 2)]
        regions = [r for i, r in enumerate(regions) if i == 0 or r[0] >= regions[i - 1][1]]  # disjoint
        touched = [any(start < tok.end and tok.start < end for start, end in regions) for tok in tokens]
        expected, index = [], 0
        while index < len(tokens):
            if touched[index]:
                first = index
                while index < len(tokens) and touched[index]:
                    index += 1
                expected.append((first, index))
            index += 1
        assert runs_in_regions(tokens, regions, [start for start, _ in regions]) == expected, (text, regions)


def test_char_features_of_a_run_equal_those_of_the_whole_line():
    from hybriddeid.features.char import CharWindow, char_features, token_projections
    from hybriddeid.features.context import line_contexts

    text = "Nombre: Zebulon Quagmire. NHC: 4417920. Fecha de ingreso: 14/03/2019."
    line = line_contexts(text, "es")[0]
    tokens = tokenize(text, line.start, line.end)
    window = CharWindow.symmetric(4, 2, 2)
    whole = char_features(text, line, tokens, window)
    first, end = 5, 9  # a run inside the line: n-grams at its edges reach into the neighbours
    start, stop = tokens[first].start, tokens[end - 1].end
    projected = token_projections(tokens, line, [tok.text.lower() for tok in tokens])  # as CharCRF does
    part = char_features(
        text, line, tokens[first:end], window, token_features=projected[first:end], bounds=(start, stop)
    )
    assert [list(f) for f in part] == [list(f) for f in whole[start - line.start : stop - line.start]]


def test_trim_unsure_leaves_out_units_more_probably_outside_and_splits_the_span_there():
    from hybriddeid.classifiers.crf import _without_unsure_units

    window = ["B-PATIENT", "I-PATIENT", "I-PATIENT", "I-PATIENT", "I-PATIENT"]
    own = [1.0, 0.99, 0.40, 0.38, 0.45]  # the tags' marginals: a name, then a comma and a label carried along
    outside = [0.0, 0.01, 0.60, 0.62, 0.30]

    def marginal(tag: str, i: int) -> float:
        return outside[i - 3] if tag == "O" else own[i - 3]

    tags = _without_unsure_units(window, own, marginal, 3)
    assert tags == ["B-PATIENT", "I-PATIENT", "O", "O", "I-PATIENT"]  # the last unit is likelier in than out
    units = [(0, 4), (5, 9), (9, 10), (11, 14), (15, 22)]
    assert [(s.start, s.end, s.score) for s in decode_tags(units, tags, "token", own)] == [(0, 9, 0.99), (15, 22, 0.45)]
    assert _without_unsure_units(window, [1.0] * 5, marginal, 3) == window


@pytest.mark.parametrize("make", [TokenCRF, lambda **kw: CharCRF(label_level="phi", **kw)])
def test_trim_unsure_keeps_sure_spans_and_is_saved_with_the_params(make, tmp_path):
    docs = _tiny_corpus()
    plain = make(language="es", max_iterations=50).fit(docs[:5])
    trimmed = make(language="es", max_iterations=50, trim_unsure=True).fit(docs[:5])
    assert trimmed.get_params()["trim_unsure"] is True and plain.get_params()["trim_unsure"] is False
    assert trimmed.predict(docs[5]) == plain.predict(docs[5])  # every unit of these spans is sure
    trimmed.to_disk(tmp_path / "m")
    assert type(trimmed).from_disk(tmp_path / "m", trimmed.get_params()).trim_unsure is True


@pytest.mark.parametrize("make", [TokenCRF, lambda **kw: CharCRF(label_level="phi", **kw)])
def test_trim_unsure_reads_a_long_line_in_stitched_segments(make):
    # a line longer than segment_chars is read in segments whose P(O) the stitched chain must keep for trimming
    docs = _tiny_corpus()
    params = dict(language="es", max_iterations=50, segment_chars=120, segment_overlap=30)
    plain = make(**params).fit(docs[:5])
    trimmed = make(trim_unsure=True, **params).fit(docs[:5])
    line = " ".join(doc.text.replace("\n", " ") for doc in docs)  # one line of ~400 characters
    long_doc = Document("long", line)
    spans = trimmed.predict(long_doc)
    assert spans and all(0.0 < s.score <= 1.0 for s in spans)
    covered = {i for s in plain.predict(long_doc) for i in range(s.start, s.end)}
    assert all(i in covered for s in spans for i in range(s.start, s.end))  # trimming only takes units away
