"""The precedence merger, table-driven: each row is (spans by source, precedence, expected)."""
from __future__ import annotations

import pytest

from hybriddeid.document import Document, Span, span_order
from hybriddeid.merge import DEFAULT_PRECEDENCE, filter_scores, link_name_words, merge, propagate


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
        {"rule": [s(0, 4, "PATIENT", "rule+fallback"), s(20, 24, "PATIENT", "rule+fallback"), s(30, 34, "ID", "rule")],
         "token": [s(0, 12, "PATIENT", "token"), s(30, 40, "ID", "token")]},
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
    spans = {"char": [Span(0, 3, "A", "char", 0.5), Span(5, 8, "A", "char", 0.95)], "token": [Span(0, 3, "A", "token", 0.1)]}
    out = filter_scores(spans, {"char": 0.9})
    assert out == {"char": [Span(5, 8, "A", "char", 0.95)], "token": [Span(0, 3, "A", "token", 0.1)]}


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
        surface = text[span.start:span.end]
        if len(surface) >= min_length and any(ch.isalnum() for ch in surface):
            labels.setdefault(surface, span.label)
    out, taken = list(spans), [False] * len(text)
    for span in spans:
        taken[span.start:span.end] = [True] * (span.end - span.start)
    for surface, label in labels.items():
        for start in range(len(text) - len(surface) + 1):
            end = start + len(surface)
            if text.startswith(surface, start) and (start == 0 or not text[start - 1].isalnum()) \
                    and (end == len(text) or not text[end].isalnum()) and not any(taken[start:end]):
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
    texts = ["Patient: Beatrice Harlowe, seen by Dr. Ng.", "Call Beatrice or BEATRICE; beatrice lower; Beatrices; Harlowe-Smith."]
    spans = [[Span(9, 25, "PATIENT", "token"), Span(39, 41, "DOCTOR", "rule")], []]

    def words_of(span: Span, surface: str) -> list[str]:
        return surface.split() if span.label == "PATIENT" else []  # the doctor's words are not linked

    first, second = link_name_words(texts, spans, words_of)
    assert first == sorted(spans[0])  # nothing new: both words are inside the found span
    assert [(texts[1][s.start:s.end], s.label, s.source) for s in second] == [
        ("Beatrice", "PATIENT", "linked"), ("BEATRICE", "PATIENT", "linked")]  # not lower case, not inside words
    again = link_name_words(["Beatrice Harlowe came. Later Beatrice left."], [[Span(0, 16, "PATIENT", "char")]], words_of)[0]
    assert [(s.start, s.end) for s in again] == [(0, 16), (29, 37)]  # a first name alone, later in the same note


def test_linking_carries_only_name_like_words_of_confident_name_spans():
    """A wrong name span ("Will Hct", read as a name) must not mark every "will" and "Hct" of a patient's
    notes: ordinary words (lower case in the word list) and unsure spans are not carried; names are."""
    from hybriddeid import Pipeline

    pipeline = Pipeline.load("en")
    texts = ["WILL CALL. Pt Rosa Bernini-Ames seen. May Hct drop? Seen with Grace.",
             "Rosa will call; BERNINI WILL FOLLOW. Hct 30. MAY go home. Grace here."]
    first = [Span(0, 4, "PATIENT", "token", 0.97), Span(13, 30, "PATIENT", "token", 0.99),
             Span(37, 44, "PATIENT", "token", 0.95), Span(61, 66, "PATIENT", "token", 0.6)]
    docs = pipeline.link_names([Document("a", texts[0], tuple(first)), Document("b", texts[1])])
    linked = [texts[1][s.start:s.end] for s in docs[1].spans]
    assert linked == ["Rosa", "BERNINI"]  # not "will"/"WILL"/"MAY" (ordinary words), not Grace (unsure), not Hct (unsure)


def test_a_fallback_widens_shorter_spans_inside_it_but_never_cuts_a_longer_one():
    """"Bernard Foley CRT": a rule read the whole name where the token CRF found "Bernard"."""
    from hybriddeid.merge import FALLBACK_SUFFIX

    fallback = "rule" + FALLBACK_SUFFIX
    token = [Span(0, 7, "PATIENT", "token"), Span(20, 30, "DOCTOR", "token")]
    rule = [Span(0, 13, "DOCTOR", fallback), Span(22, 26, "DOCTOR", fallback), Span(28, 34, "DOCTOR", fallback),
            Span(40, 45, "CITY", fallback), Span(50, 55, "CITY", fallback)]
    token.append(Span(50, 55, "CITY", "token"))
    merged = merge({"token": token, "rule": rule})
    assert [(s.start, s.end, s.source) for s in merged] == [
        (0, 13, fallback),       # widened: the CRF's "Bernard" lay inside it
        (20, 30, "token"),       # the CRF's longer span is never cut, by the span inside it or the one crossing it
        (40, 45, fallback),      # a gap filled
        (50, 55, "token"),       # the same extent: the classifier's span stays
    ]
