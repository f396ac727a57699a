"""The precedence merger, table-driven: each row is (spans by source, precedence, expected)."""

from __future__ import annotations

import pytest

from hybriddeid.core.document import Document, Span, span_order
from hybriddeid.core.merge import (
    DEFAULT_PRECEDENCE,
    SHORT_NAME_WORD,
    filter_scores,
    given_names_before,
    link_name_words,
    merge,
    names_widened_by_readings,
    propagate,
    whole_name_words,
)


def s(start: int, end: int, label: str, source: str) -> Span:
    return Span(start, end, label, source)


CASES = [
    pytest.param({"rule": [], "char": [], "token": []}, DEFAULT_PRECEDENCE, [], id="nothing"),
    pytest.param(
        {"token": [s(0, 5, "NAME", "token")], "char": [s(10, 15, "DATE", "char")], "rule": [s(20, 25, "ID", "rule")]},
        DEFAULT_PRECEDENCE,
        [s(0, 5, "NAME", "token"), s(10, 15, "DATE", "char"), s(20, 25, "ID", "rule")],
        id="disjoint spans from all sources are all kept",
    ),
    pytest.param(
        {"token": [s(0, 10, "ID", "token")], "char": [s(2, 8, "DATE", "char")], "rule": [s(5, 12, "PHONE", "rule")]},
        DEFAULT_PRECEDENCE,
        [s(5, 12, "PHONE", "rule")],
        id="rule beats char and token",
    ),
    pytest.param(
        {"token": [s(0, 10, "NAME", "token")], "char": [s(0, 9, "NAME", "char")]},
        DEFAULT_PRECEDENCE,
        [s(0, 9, "NAME", "char")],
        id="char beats token on a boundary disagreement",
    ),
    pytest.param(
        {"token": [s(0, 10, "NAME", "token")], "char": [s(0, 9, "NAME", "char")]},
        ["token", "char"],
        [s(0, 10, "NAME", "token")],
        id="precedence is configurable",
    ),
    pytest.param(
        {"char": [s(0, 4, "NAME", "char"), s(6, 10, "NAME", "char")], "token": [s(0, 10, "NAME", "token")]},
        DEFAULT_PRECEDENCE,
        [s(0, 4, "NAME", "char"), s(6, 10, "NAME", "char")],
        id="a long lower-precedence span loses to two short ones it overlaps",
    ),
    pytest.param(
        {"token": [s(0, 4, "NAME", "token"), s(20, 30, "DATE", "token")], "rule": [s(2, 6, "ID", "rule")]},
        DEFAULT_PRECEDENCE,
        [s(2, 6, "ID", "rule"), s(20, 30, "DATE", "token")],
        id="only the overlapped span of a source is dropped",
    ),
    pytest.param(
        {"token": [s(0, 5, "NAME", "token")], "neural": [s(3, 8, "NAME", "neural")]},
        DEFAULT_PRECEDENCE,
        [s(0, 5, "NAME", "token")],
        id="unlisted sources rank last",
    ),
    pytest.param(
        {"rule": [s(0, 4, "ID", "rule"), s(0, 8, "ID", "rule")]},
        DEFAULT_PRECEDENCE,
        [s(0, 8, "ID", "rule")],
        id="within a source the longest span wins",
    ),
    pytest.param(
        {"token": [s(0, 5, "NAME", "token")], "char": [s(5, 9, "NAME", "char")]},
        DEFAULT_PRECEDENCE,
        [s(0, 5, "NAME", "token"), s(5, 9, "NAME", "char")],
        id="touching spans do not overlap",
    ),
    pytest.param(
        {
            "rule": [
                s(0, 4, "PATIENT", "rule+fallback"),
                s(20, 24, "PATIENT", "rule+fallback"),
                s(30, 34, "ID", "rule"),
            ],
            "token": [s(0, 12, "PATIENT", "token"), s(30, 40, "ID", "token")],
        },
        DEFAULT_PRECEDENCE,
        [s(0, 12, "PATIENT", "token"), s(20, 24, "PATIENT", "rule+fallback"), s(30, 34, "ID", "rule")],
        id="a fallback rule span ranks after every source: it fills gaps only",
    ),
]


@pytest.mark.parametrize("by_source, precedence, expected", CASES)
def test_merge(by_source, precedence, expected):
    assert merge(by_source, precedence) == expected


def test_merged_spans_never_overlap_and_keep_their_source():
    by_source = {
        "token": [s(i, i + 3, "NAME", "token") for i in range(0, 60, 2)],
        "char": [s(i, i + 4, "DATE", "char") for i in range(1, 60, 5)],
        "rule": [s(i, i + 2, "ID", "rule") for i in range(0, 60, 7)],
    }
    out = merge(by_source)
    assert all(a.end <= b.start for a, b in zip(out, out[1:]))
    assert {span.source for span in out} <= {"token", "char", "rule"}
    rule_spans = set(by_source["rule"])
    assert rule_spans <= set(out)  # nothing outranks the rules, and they do not overlap each other


def test_filter_scores_drops_only_the_named_sources_low_spans():
    spans = {
        "char": [Span(0, 3, "A", "char", 0.5), Span(5, 8, "A", "char", 0.95)],
        "token": [Span(0, 3, "A", "token", 0.1)],
    }
    out = filter_scores(spans, {"char": 0.9})
    assert out == {"char": [Span(5, 8, "A", "char", 0.95)], "token": [Span(0, 3, "A", "token", 0.1)]}


def test_filter_scores_keeps_a_low_span_another_source_found_exactly():
    """Two sources agreeing on a stretch, each at least the agreement score, keep it below their floors;
    a partial overlap, a partner below the agreement score or one source alone does not."""
    spans = {
        "char": [
            Span(0, 14, "NAME", "char", 0.69),
            Span(20, 26, "NAME", "char", 0.6),
            Span(30, 35, "NAME", "char", 0.5),
        ],
        "token": [
            Span(0, 14, "NAME", "token", 0.42),
            Span(20, 28, "NAME", "token", 0.45),
            Span(30, 35, "NAME", "token", 0.2),
        ],
        "rule": [],
    }
    floors = {"char": 0.9, "token": 0.5}
    assert filter_scores(spans, floors) == {"char": [], "token": [], "rule": []}
    out = filter_scores(spans, floors, agreement_score=0.3)
    assert out == {"char": [spans["char"][0]], "token": [spans["token"][0]], "rule": []}
    assert filter_scores(spans, floors, agreement_score=0.5) == {"char": [], "token": [], "rule": []}
    # pieces of the other source tiling the stretch, only spaces between them, agree with it too
    text = "Vino hoy a Nadia Robles Pardo con su hija."
    whole = Span(11, 29, "NOMBRE", "token", 0.47)
    pieces = [Span(11, 16, "NOMBRE", "char", 0.57), Span(17, 29, "FAMILIARES", "char", 0.53)]
    tiled = filter_scores({"token": [whole], "char": pieces}, floors, 0.3, text)
    assert tiled == {"token": [whole], "char": []}
    gap = [pieces[0], Span(24, 29, "NOMBRE", "char", 0.6)]  # "Robles" left out
    assert filter_scores({"token": [whole], "char": gap}, floors, 0.3, text) == {"token": [], "char": []}
    crossing = [pieces[0], Span(17, 32, "NOMBRE", "char", 0.6)]  # past the stretch's end
    assert filter_scores({"token": [whole], "char": crossing}, floors, 0.3, text) == {"token": [], "char": []}
    # where one source already kept the stretch, the other's low span is not added beside it
    sure = {"char": [Span(0, 14, "NAME", "char", 0.6)], "token": [Span(0, 14, "DOCTOR", "token", 0.7)]}
    assert filter_scores(sure, floors, agreement_score=0.3) == {"char": [], "token": sure["token"]}


def test_propagate_marks_whole_word_repeats_and_respects_existing_spans():
    text = "Ana Ruiz vino. Ana Ruiz volvió con Anastasia y Ana Ruizz. Ruiz."
    found = [Span(0, 8, "NAME", "token")]
    out = propagate(text, found)
    assert out == [Span(0, 8, "NAME", "token"), Span(15, 23, "NAME", "propagated")]
    # a repeat overlapping an existing span is left alone; short strings are not propagated
    assert propagate("Dr. Li and Li", [Span(4, 6, "NAME", "token")]) == [Span(4, 6, "NAME", "token")]


def _propagate_at_every_position(text, spans, min_length=3):
    """propagate as first written: every occurrence tried, one character further each time."""
    labels = {}
    for span in spans:
        surface = text[span.start : span.end]
        if len(surface) >= min_length and any(ch.isalnum() for ch in surface):
            labels.setdefault(surface, span.label)
    out, taken = list(spans), [False] * len(text)
    for span in spans:
        taken[span.start : span.end] = [True] * (span.end - span.start)
    for surface, label in labels.items():
        for start in range(len(text) - len(surface) + 1):
            end = start + len(surface)
            if (
                text.startswith(surface, start)
                and (start == 0 or not text[start - 1].isalnum())
                and (end == len(text) or not text[end].isalnum())
                and not any(taken[start:end])
            ):
                out.append(Span(start, end, label, "propagated"))
                taken[start:end] = [True] * (end - start)
    return sorted(out, key=span_order)


def test_propagate_skipping_alphanumeric_runs_finds_what_trying_every_position_finds():
    import random

    rng = random.Random(7)
    words = ["111", "1111", "a11", "Ana", "ANA", "é11", "11²", "٣٣٣", "(11)"]
    for _ in range(400):  # repeats of a few words, glued into alphanumeric runs or apart
        text = "".join(rng.choice(words) + rng.choice(["", "", " ", "-", "_", "\n"]) for _ in range(rng.randint(2, 25)))
        spans = []
        for _ in range(rng.randint(1, 4)):
            start = rng.randrange(len(text))
            end = min(len(text), start + rng.randint(3, 6))
            if not any(s.start < end and start < s.end for s in spans):
                spans.append(Span(start, end, rng.choice(["ID", "NAME"]), "rule"))
        spans.sort(key=span_order)
        assert propagate(text, spans) == _propagate_at_every_position(text, spans), (text, spans)


def test_name_words_are_linked_across_a_patients_notes_as_whole_capitalised_words():
    texts = [
        "Patient: Beatrice Harlowe, seen by Dr. Ng.",
        "Call Beatrice or BEATRICE; beatrice lower; Beatrices; Harlowe-Smith.",
    ]
    spans = [[Span(9, 25, "PATIENT", "token"), Span(39, 41, "DOCTOR", "rule")], []]

    def words_of(span: Span, surface: str) -> list[str]:
        return surface.split() if span.label == "PATIENT" else []  # the doctor's words are not linked

    first, second = link_name_words(texts, spans, words_of)
    assert first == sorted(spans[0])  # nothing new: both words are inside the found span
    assert [(texts[1][s.start : s.end], s.label, s.source) for s in second] == [
        ("Beatrice", "PATIENT", "linked"),
        ("BEATRICE", "PATIENT", "linked"),
    ]  # not lower case, not inside words
    again = link_name_words(
        ["Beatrice Harlowe came. Later Beatrice left."], [[Span(0, 16, "PATIENT", "char")]], words_of
    )[0]
    assert [(s.start, s.end) for s in again] == [(0, 16), (29, 37)]  # a first name alone, later in the same note


def test_linked_words_are_marked_where_the_whole_pattern_of_them_matches():
    """Linking looks each run of word characters, apostrophes and hyphens up among the name forms; that
    marks what one pattern of the forms (not after or before such a character) marks, on words glued to
    hyphens, apostrophes, underscores, digits and other scripts."""
    import random
    import re

    rng = random.Random(11)
    pieces = ["Ann", "ANN", "ann", "O'Neil", "O’Neil", "Lee-Ann", "Ann-Marie", "José", "JOSÉ", "ß", "Ng", "x", "7"]
    glue = ["", " ", "-", "'", "’", "_", ".", ", ", "\n"]
    for _ in range(400):
        texts = ["".join(rng.choice(pieces) + rng.choice(glue) for _ in range(rng.randint(1, 12))) for _ in range(2)]
        words = rng.sample(["Ann", "O'Neil", "Lee-Ann", "José", "Ng", "ß"], rng.randint(1, 3))

        def words_of(span: Span, surface: str, words: list[str] = words) -> list[str]:
            return words

        seed = [[Span(0, 1, "PATIENT", "token")], []]
        linked = link_name_words(texts, seed, words_of)
        forms = {
            f
            for w in words
            for f in (w, w.upper() if len(w) > SHORT_NAME_WORD else w, w[:1].upper() + w[1:].lower())
            if not f.islower()
        }
        pattern = re.compile(
            rf"(?<![\w'’-])(?:{'|'.join(map(re.escape, sorted(forms, key=len, reverse=True)))})(?![\w'’-])"
        )
        for text, note_seed, found in zip(texts, seed, linked):
            expected, taken = list(note_seed), [(s.start, s.end) for s in note_seed]
            for match in pattern.finditer(text):
                if not any(s < match.end() and match.start() < e for s, e in taken):
                    expected.append(Span(match.start(), match.end(), "PATIENT", "linked"))
                    taken.append(match.span())
            assert found == sorted(expected, key=span_order), (text, words)


def test_linking_carries_only_name_like_words_of_confident_name_spans():
    """A wrong name span ("Will Hct", read as a name) must not mark every "will" and "Hct" of a patient's
    notes: ordinary words (lower case in the word list) and unsure spans are not carried; names are."""
    from hybriddeid import Pipeline

    pipeline = Pipeline.load("en")
    texts = [
        "WILL CALL. Pt Rosa Bernini-Ames seen. May Hct drop? Seen with Grace.",
        "Rosa will call; BERNINI WILL FOLLOW. Hct 30. MAY go home. Grace here.",
    ]
    first = [
        Span(0, 4, "PATIENT", "token", 0.97),
        Span(13, 30, "PATIENT", "token", 0.99),
        Span(37, 44, "PATIENT", "token", 0.95),
        Span(61, 66, "PATIENT", "token", 0.6),
    ]
    docs = pipeline.link_names([Document("a", texts[0], tuple(first)), Document("b", texts[1])])
    linked = [texts[1][s.start : s.end] for s in docs[1].spans]
    assert linked == [
        "Rosa",
        "BERNINI",
    ]  # not "will"/"WILL"/"MAY" (ordinary words), not Grace (unsure), not Hct (unsure)


def test_a_name_span_holding_an_ordinary_word_that_is_no_name_carries_none_of_its_words():
    """ "BS:Scattered Rhonchi" read as a patient's name: "scattered" is an ordinary word and no name, so
    the span is no name the model is sure of, and "RHONCHI" in the patient's other notes stays. A name
    span of name-like words in the same note is still carried."""
    from hybriddeid import Pipeline
    from hybriddeid.knowledge.dictionaries import lower_words, name_words

    assert "scattered" in lower_words("en") and "scattered" not in name_words("en")
    pipeline = Pipeline.load("en")
    texts = ["BS:Scattered Rhonchi. Pt Rosa Nakagawa seen.", "WHEEZES & RHONCHI. Rhonchi cleared. NAKAGAWA AWARE."]
    spans = (Span(3, 20, "PATIENT", "token", 0.97), Span(25, 38, "PATIENT", "token", 0.99))
    docs = pipeline.link_names([Document("a", texts[0], spans), Document("b", texts[1])])
    assert [texts[1][s.start : s.end] for s in docs[1].spans] == ["NAKAGAWA"]


def test_spanish_name_linking_carries_no_ordinary_word_and_ordinary_names_only_capitalised():
    """The Spanish pack's word list (words.txt) guards linking as the English one does: "Sin Alergias" read
    as a name carries neither word ("sin" is an ordinary word and no name), and "Rosa" of "Rosa Nakagawa"
    is carried where capitalised, never into "MUCOSA ROSA" (pink) typed in capitals."""
    from hybriddeid import Pipeline
    from hybriddeid.knowledge.dictionaries import lower_words, name_words

    assert {"sin", "rosa"} <= lower_words("es") and "sin" not in name_words("es") and "rosa" in name_words("es")
    pipeline = Pipeline.load("es")
    texts = ["Sin Alergias. Paciente: Rosa Nakagawa.", "SIN CAMBIOS. MUCOSA ROSA. Rosa refiere mejoría. NAKAGAWA."]
    label = "NOMBRE_SUJETO_ASISTENCIA"
    spans = (Span(0, 12, label, "token", 0.97), Span(24, 37, label, "token", 0.99))
    docs = pipeline.link_names([Document("a", texts[0], spans), Document("b", texts[1])])
    assert [texts[1][s.start : s.end] for s in docs[1].spans] == ["Rosa", "NAKAGAWA"]


def test_a_short_name_word_is_carried_in_capitals_only_where_it_was_found_in_capitals():
    """ "moves Lue,LLL" read as a name: "Lue" is a surname, and "LUE" (left upper extremity) is in every
    neuro line of notes typed in capitals. A word of three letters is carried as it was found and
    capitalised; one found in capitals ("SUE") is carried in capitals too."""
    texts = ["moves Lue,LLL. SPOKE WITH SUE.", "MOVES LUE AND LLE. Lue here. SUE CALLED. Sue aware."]
    spans = [[Span(6, 9, "PATIENT", "token"), Span(26, 29, "PATIENT", "token")], []]
    linked = link_name_words(texts, spans, lambda span, surface: [surface])
    assert [texts[1][s.start : s.end] for s in linked[1]] == ["Lue", "SUE", "Sue"]


def test_a_name_that_is_an_ordinary_word_is_carried_only_where_capitalised():
    """ "Art White" is a name, but "art" and "white" are ordinary words too: carried in capitals, they would
    mark every "ART LINE" and "WHITE SPUTUM" of a patient's notes typed in capitals. They are carried where
    written as a name is ("White called"); a name that is no ordinary word in any case ("NAKAGAWA")."""
    from hybriddeid import Pipeline
    from hybriddeid.knowledge.dictionaries import lower_words, name_words

    assert {"art", "white"} <= name_words("en") & lower_words("en")  # in both lists: the case decides
    pipeline = Pipeline.load("en")
    texts = ["Seen by Dr. Art White Nakagawa today.", "LEFT ART LINE. WHITE SPUTUM. NAKAGAWA AWARE. White called."]
    docs = pipeline.link_names(
        [Document("a", texts[0], (Span(12, 30, "DOCTOR", "token", 0.98),)), Document("b", texts[1])]
    )
    assert [texts[1][s.start : s.end] for s in docs[1].spans] == ["NAKAGAWA", "White"]


def test_a_fallback_widens_shorter_spans_inside_it_but_never_cuts_a_longer_one():
    """ "Bernard Foley CRT": a rule read the whole name where the token CRF found "Bernard"."""
    from hybriddeid.core.merge import FALLBACK_SUFFIX

    fallback = "rule" + FALLBACK_SUFFIX
    token = [Span(0, 7, "PATIENT", "token"), Span(20, 30, "DOCTOR", "token")]
    rule = [
        Span(0, 13, "DOCTOR", fallback),
        Span(22, 26, "DOCTOR", fallback),
        Span(28, 34, "DOCTOR", fallback),
        Span(40, 45, "CITY", fallback),
        Span(50, 55, "CITY", fallback),
    ]
    token.append(Span(50, 55, "CITY", "token"))
    merged = merge({"token": token, "rule": rule})
    assert [(s.start, s.end, s.source) for s in merged] == [
        (0, 13, fallback),  # widened: the CRF's "Bernard" lay inside it
        (20, 30, "token"),  # the CRF's longer span is never cut, by the span inside it or the one crossing it
        (40, 45, fallback),  # a gap filled
        (50, 55, "token"),  # the same extent: the classifier's span stays
    ]


# ---- remainders: what a span that loses an overlap covers outside the winner ----------------------


def _surfaces(text: str, spans: list[Span]) -> list[tuple[str, str, str, float]]:
    return [(text[s.start : s.end], s.label, s.source, s.score) for s in spans]


def test_a_cut_span_keeps_its_remainder_trimmed_of_the_field_label_at_the_cut():
    """The token CRF's "Jordi Kowalczyk, DNI 45123987Z" cut by the DNI rule: the name stays PHI, with the
    CRF's label, source and score; "DNI" (a field label) and ", " at the cut are not."""
    text = "Paciente: Jordi Kowalczyk, DNI 45123987Z."
    by_source = {"rule": [Span(31, 40, "ID_SUJETO_ASISTENCIA", "rule")], "token": [Span(10, 40, "CALLE", "token", 0.5)]}
    assert _surfaces(text, merge(by_source, text=text, labels={"dni", "paciente"})) == [
        ("Jordi Kowalczyk", "CALLE", "token", 0.5),
        ("45123987Z", "ID_SUJETO_ASISTENCIA", "rule", 1.0),
    ]
    # without the note's text the merger cannot tell a name from a label: the lower span goes whole, as before
    assert merge(by_source) == [Span(31, 40, "ID_SUJETO_ASISTENCIA", "rule")]
    # without the label, "DNI" stays in the remainder: only punctuation and blanks are trimmed then
    assert _surfaces(text, merge(by_source, text=text))[0][0] == "Jordi Kowalczyk, DNI"


@pytest.mark.parametrize(
    "text, lower, higher, labels, expected",
    [
        pytest.param("Tel: 612 345 678", (0, 16), [(5, 16)], {"tel"}, [], id="a remainder of a label alone is dropped"),
        pytest.param("DNI: 45123987Z", (0, 14), [(5, 14)], {"dni"}, [], id="case is ignored"),
        pytest.param(
            "al lado, - 612 345 678",
            (0, 22),
            [(11, 22)],
            {"al", "lado"},
            [],
            id="a remainder of stop words and punctuation is dropped",
        ),
        pytest.param(
            "Ana Ruiz fecha de nacimiento 01/02/1990",
            (0, 39),
            [(29, 39)],
            {"fecha de nacimiento", "de"},
            ["Ana Ruiz"],
            id="a label of several words, the longest first",
        ),
        pytest.param(
            "de Ana, tel 612 345 678",
            (0, 23),
            [(12, 23)],
            {"de", "tel"},
            ["de Ana"],
            id="the edge the classifier drew is left as drawn",
        ),
        pytest.param(
            "Ana Ruiz 612 345 678 de Madrid.",
            (0, 30),
            [(9, 20)],
            {"de"},
            ["Ana Ruiz", "Madrid"],
            id="a span cut in the middle keeps both sides, each trimmed where cut",
        ),
        pytest.param(
            "Ana Ruiz 612 345 678 Sevilla",
            (0, 28),
            [(0, 3), (9, 20)],
            set(),
            ["Ruiz", "Sevilla"],
            id="several winners: every stretch outside them",
        ),
        pytest.param("45123987Z", (0, 9), [(0, 8)], set(), ["Z"], id="a letter left of a word the cut split is kept"),
        pytest.param(
            "Ana, Ruiz", (0, 9), [(0, 3), (5, 9)], set(), [], id="punctuation alone between winners is dropped"
        ),
    ],
)
def test_remainders(text, lower, higher, labels, expected):
    by_source = {
        "rule": [Span(start, end, "ID", "rule") for start, end in higher],
        "token": [Span(*lower, "NAME", "token")],
    }
    out = merge(by_source, text=text, labels=labels)
    assert [text[s.start : s.end] for s in out if s.source == "token"] == expected
    assert [(s.start, s.end) for s in out if s.source == "rule"] == higher  # the winners are untouched


def test_remainders_never_overlap_each_other_or_a_winner_and_hold_a_letter_or_digit():
    import random

    rng = random.Random(3)
    for _ in range(300):
        text = "".join(
            rng.choice(["Ana", "DNI", "de", " ", ", ", "12", "-", "\n", "Ruiz"]) for _ in range(rng.randint(5, 30))
        )
        by_source = {}
        for source in ("rule", "char", "token"):
            spans = []
            for _ in range(rng.randint(0, 4)):
                start = rng.randrange(len(text))
                spans.append(Span(start, rng.randint(start + 1, len(text)), "X", source))
            by_source[source] = spans
        out = merge(by_source, text=text, labels={"dni", "de"})
        assert all(a.end <= b.start for a, b in zip(out, out[1:])), text
        assert all(any(ch.isalnum() for ch in text[s.start : s.end]) for s in out if s not in by_source[s.source])

        def letters_and_digits(spans, text=text):
            return {i for s in spans for i in range(s.start, s.end) if text[i].isalnum()}

        # without labels to trim, every letter and digit the merger kept without the text it keeps with it
        assert letters_and_digits(merge(by_source)) <= letters_and_digits(merge(by_source, text=text)), text


def test_a_fallback_still_widens_a_remainder_inside_it():
    """Remainders are merged spans like any other: a fallback rule span around one widens it."""
    from hybriddeid.core.merge import FALLBACK_SUFFIX

    text = "Bernard Foley 45123987Z"
    fallback = "rule" + FALLBACK_SUFFIX
    # the token CRF's "Foley 45123987Z" cut by the ID rule leaves "Foley", inside the fallback's "Bernard Foley"
    by_source = {
        "rule": [Span(14, 23, "ID", "rule"), Span(0, 13, "DOCTOR", fallback)],
        "token": [Span(8, 23, "PATIENT", "token")],
    }
    assert _surfaces(text, merge(by_source, text=text)) == [
        ("Bernard Foley", "DOCTOR", fallback, 1.0),
        ("45123987Z", "ID", "rule", 1.0),
    ]


@pytest.mark.parametrize(
    ("text", "found", "expected"),
    [
        ("Born in Southend-on-Sea.", "Southend", "Southend-on-Sea"),  # the rest of the place would stay in the output
        ("Born in Southend-on-Sea.", "Southend-", "Southend-on-Sea"),
        ("Lives in Stratford-upon-Avon", "Avon", "Stratford-upon-Avon"),
        ("Jean-Pierre Dubois admitted", "Pierre Dubois", "Jean-Pierre Dubois"),
        ("B. KARGAS-PT AWARE", "B. KARGAS", "B. KARGAS"),  # capitals glue words with hyphens
        ("Carafate-W. Marotta", "W. Marotta", "W. Marotta"),  # a lone letter is no part of a name
        ("O'Brien-Kelly seen", "O'Brien", "O'Brien-Kelly"),
        ("Boston-based team", "Boston", "Boston"),  # a lower-case last part is no name's
        ("seen by non-Hodgkin team", "Hodgkin", "Hodgkin"),  # nor a lower-case first part
        ("Smith-Jones seen", "Smith-Jones", "Smith-Jones"),
        ("ID Lee-Chen", "ID:Lee", "Lee"),  # a label that is no name or place stays as found
        ("Se trata de Hyun-woo Choi", "woo Choi", "Hyun-woo Choi"),  # a romanised given name's second syllable
        ("Hyun-woo Choi", "Hyun", "Hyun"),  # its first alone is not widened: "Boston-based" has the same form
        ("Se trata de Ciara O'Rourke", "Rourke", "O'Rourke"),  # an elided particle
        ("D’Angelo seen", "Angelo", "D’Angelo"),
        ("Pt's Smith seen", "Smith", "Smith"),  # no particle: a word before the apostrophe
        ("I'M SMITH", "M SMITH", "M SMITH"),  # a capital before the apostrophe that is a word's end
        ("Pt Keali'i Kahale", "Keali", "Keali'i"),  # a name going on after an inner apostrophe
        ("Ulug’bek seen", "Ulug", "Ulug’bek"),
        ("Smith's wife", "Smith", "Smith"),  # a possessive
        ("Ruiz'Lopez", "Ruiz", "Ruiz"),  # a capitalised rest is another word
    ],
)
def test_whole_name_words_widens_a_name_cut_inside_its_word(text: str, found: str, expected: str):
    label = "CITY"
    if found.startswith("ID:"):
        found, label = found.removeprefix("ID:"), "MEDICALRECORD"
    start = text.index(found)
    span = Span(start, start + len(found), label, "token")
    (widened,) = whole_name_words(text, [span], {"CITY", "PATIENT"})
    assert text[widened.start : widened.end] == expected
    assert (widened.label, widened.source) == (span.label, span.source)


def test_whole_name_words_never_widens_into_another_span():
    text = "Southend-on-Sea"
    first, other = Span(0, 8, "CITY", "token"), Span(12, 15, "PATIENT", "rule")
    assert whole_name_words(text, [first, other], {"CITY", "PATIENT"}) == [first, other]


GIVEN = frozenset({"nadia", "teodoro", "yusuf"})


@pytest.mark.parametrize(
    ("text", "found", "expected"),
    [
        ("Seen with Nadia Whitcombe today.", "Whitcombe", "Nadia Whitcombe"),
        ("Seen with Teodoro Nadia Whitcombe.", "Whitcombe", "Teodoro Nadia Whitcombe"),  # two given names
        ("Seen with Nadia  Whitcombe.", "Whitcombe", "Nadia  Whitcombe"),  # blanks between them
        ("Seen with NADIA Whitcombe.", "Whitcombe", "Whitcombe"),  # capitals: an abbreviation as often
        ("Seen with nadia Whitcombe.", "Whitcombe", "Whitcombe"),  # lower case: no name written as one
        ("Seen with Nadia\nWhitcombe.", "Whitcombe", "Whitcombe"),  # another line
        ("Seen with Nadia \nWhitcombe.", "Whitcombe", "Whitcombe"),  # another line, a blank before its break
        ("Seen with Nadia, Whitcombe.", "Whitcombe", "Whitcombe"),  # a comma parts them
        ("Seen with Al-Nadia Whitcombe.", "Whitcombe", "Whitcombe"),  # part of a longer word
        ("Seen with Gregor Whitcombe.", "Whitcombe", "Whitcombe"),  # not among the given names
        ("Seen with Nadia Whitcombe.", "ID:Whitcombe", "Whitcombe"),  # a label of no person
    ],
)
def test_given_names_before_widens_a_person_over_the_given_names_before_it(text: str, found: str, expected: str):
    label = "PATIENT"
    if found.startswith("ID:"):
        found, label = found.removeprefix("ID:"), "MEDICALRECORD"
    start = text.index(found)
    span = Span(start, start + len(found), label, "token", 0.8)
    (widened,) = given_names_before(text, [span], {"PATIENT", "FAMILIARES_SUJETO_ASISTENCIA"}, GIVEN)
    assert text[widened.start : widened.end] == expected
    assert (widened.end, widened.label, widened.source, widened.score) == (span.end, label, "token", 0.8)


def test_given_names_before_never_takes_a_word_another_span_holds():
    text = "Dr Nadia Whitcombe"
    doctor, patient = Span(3, 8, "DOCTOR", "rule"), Span(9, 18, "PATIENT", "token")
    assert given_names_before(text, [doctor, patient], {"PATIENT", "DOCTOR"}, GIVEN) == [doctor, patient]
    partly = Span(0, 5, "DOCTOR", "rule")  # "Dr Na": it reaches into the given name
    assert given_names_before(text, [partly, patient], {"PATIENT"}, GIVEN) == [partly, patient]


def _span_of(text: str, words: str, label: str, source: str, score: float) -> Span:
    start = text.index(words)
    return Span(start, start + len(words), label, source, score)


@pytest.mark.parametrize(
    ("text", "kept", "reading", "score", "expected"),
    [
        # another source read the given name (a word too) as part of the name, with another label
        (
            "Pt Journey Lindgren Okafor seen.",
            "Lindgren Okafor",
            "Journey Lindgren Okafor",
            0.35,
            "Journey Lindgren Okafor",
        ),
        ("Saw Idris Al-Amin Ferro today.", "Idris", "Idris Al-Amin Ferro", 0.6, "Idris Al-Amin Ferro"),
        ("Saw Eamon O'Reilly today.", "Eamon", "Eamon O'Reilly", 0.6, "Eamon O'Reilly"),
        # below the floor, a word in lower case, another line, a comma, a digit: the span as it was
        ("Pt Journey Lindgren Okafor seen.", "Lindgren Okafor", "Journey Lindgren Okafor", 0.2, "Lindgren Okafor"),
        ("Called wife Lindgren Okafor today.", "Lindgren Okafor", "wife Lindgren Okafor", 0.9, "Lindgren Okafor"),
        ("Journey\nLindgren Okafor seen.", "Lindgren Okafor", "Journey\nLindgren Okafor", 0.9, "Lindgren Okafor"),
        ("Lindgren Okafor, Bergen seen.", "Lindgren Okafor", "Lindgren Okafor, Bergen", 0.9, "Lindgren Okafor"),
        ("Lindgren Okafor Room 4B.", "Lindgren Okafor", "Lindgren Okafor Room 4B", 0.9, "Lindgren Okafor"),
        # a reading that does not hold the whole span widens nothing, nor one reaching far past it
        ("Pt Journey Lindgren Okafor seen.", "Lindgren Okafor", "Journey Lindgren", 0.9, "Lindgren Okafor"),
        ("Lindgren Okafor" + " Ward" * 20, "Lindgren Okafor", "Lindgren Okafor" + " Ward" * 20, 0.9, "Lindgren Okafor"),
    ],
)
def test_a_person_takes_a_longer_reading_of_the_same_name(
    text: str, kept: str, reading: str, score: float, expected: str
) -> None:
    span = _span_of(text, kept, "PATIENT", "token", 0.8)
    other = _span_of(text, reading, "CITY", "char", score)
    (widened,) = names_widened_by_readings(text, [span], [span, other], {"PATIENT"}, 0.3)
    assert text[widened.start : widened.end] == expected
    assert (widened.label, widened.source, widened.score) == ("PATIENT", "token", 0.8)


def test_a_longer_reading_adds_no_stop_word_or_title() -> None:
    text = "Called Lindgren Okafor And Dr Rhee."
    span = _span_of(text, "Lindgren Okafor", "DOCTOR", "token", 0.8)
    reading = _span_of(text, "Lindgren Okafor And Dr", "DOCTOR", "char", 0.6)
    assert names_widened_by_readings(text, [span], [reading], {"DOCTOR"}, 0.3, {"and", "dr"}) == [span]
    (widened,) = names_widened_by_readings(text, [span], [reading], {"DOCTOR"}, 0.3)
    assert text[widened.start : widened.end] == "Lindgren Okafor And Dr"  # without the words, any capital goes


def test_a_longer_reading_never_takes_another_span_or_widens_other_labels() -> None:
    text = "Dr Journey Lindgren Okafor, Boston General"
    doctor = _span_of(text, "Lindgren Okafor", "DOCTOR", "token", 0.8)
    given = _span_of(text, "Journey", "CITY", "char", 0.99)
    reading = _span_of(text, "Journey Lindgren Okafor", "DOCTOR", "char", 0.5)
    assert names_widened_by_readings(text, [given, doctor], [reading], {"DOCTOR"}, 0.3) == [given, doctor]
    hospital = _span_of(text, "Boston", "HOSPITAL", "token", 0.8)
    wider = _span_of(text, "Boston General", "HOSPITAL", "char", 0.9)
    assert names_widened_by_readings(text, [hospital], [wider], {"DOCTOR"}, 0.3) == [hospital]


def test_agreement_asks_for_the_same_kind_when_given_one():
    """With ``kind``, the other source's pieces must be of the low span's kind: a person read as a
    person and a doctor agree, a person and a hospital do not."""
    text = "Seen with Lucia Castro today."
    token = Span(10, 22, "PATIENT", "token", 0.45)
    kinds = {"PATIENT": "person", "DOCTOR": "person", "HOSPITAL": "hospital"}.__getitem__
    for other, kept in (("DOCTOR", True), ("HOSPITAL", False)):
        char = Span(10, 22, other, "char", 0.6)
        out = filter_scores({"token": [token], "char": [char]}, {"token": 0.5, "char": 0.95}, 0.3, text, kinds)
        assert out["token"] == ([token] if kept else [])
        assert filter_scores({"token": [token], "char": [char]}, {"token": 0.5, "char": 0.95}, 0.3, text)["token"] == [
            token
        ]  # without kinds any label agrees
