"""benchmarks/en_real.py's scoring and error grouping on a hand-made two-note fixture (no peers, no corpora)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hybriddeid.core.document import Document, Span
from hybriddeid.core.profiles import PHI_SETS
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.evaluation import evaluate

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "en_real.py"


@pytest.fixture(scope="module")
def en_real():
    """The benchmark module, imported by path (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("en_real_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _spans(text: str, *marks: tuple[str, str] | tuple[str, str, int]) -> list[Span]:
    """Spans by their text (and which occurrence, default the first) instead of by offsets."""
    spans = []
    for surface, label, *nth in marks:
        start = -1
        for _ in range((nth or [0])[0] + 1):
            start = text.index(surface, start + 1)
        spans.append(Span(start, start + len(surface), label))
    return spans


NOTE_A = "Guidelines for a 70yo pt of Dr. Sarah P. at UCSF, seen 2021 on Jan 8, 2023 (MRN UCSF-12345). Lasix 80-90 mg, HTN/DM."
NOTE_B = "Is mary jones or Anna at Boston General?\nReviewed: Smith Jones, Boston."
GOLD = [  # ASQ-PHI labels
    Document(
        "a",
        NOTE_A,
        tuple(
            _spans(
                NOTE_A,
                ("Dr. Sarah P.", "NAME"),
                ("UCSF", "GEOGRAPHIC_LOCATION"),
                ("Jan 8, 2023", "DATE"),
                ("UCSF-12345", "MEDICAL_RECORD_NUMBER"),
            )
        ),
    ),
    Document(
        "b",
        NOTE_B,
        tuple(
            _spans(
                NOTE_B,
                ("mary jones", "NAME"),
                ("Anna", "NAME"),
                ("Boston General", "GEOGRAPHIC_LOCATION"),
                ("Smith Jones", "NAME"),
                ("Boston", "GEOGRAPHIC_LOCATION", 1),
            )
        ),
    ),
]
PRED = [  # i2b2 2014 labels, as hybriddeid's
    GOLD[0].with_spans(
        _spans(
            NOTE_A,
            ("70", "AGE"),
            ("Guidelines", "PATIENT"),
            ("Sarah P.", "DOCTOR"),
            ("2021", "DATE"),
            ("Jan 8", "DATE"),
            ("12345", "MEDICALRECORD"),
            ("80-90", "DATE"),
            ("Lasix", "DOCTOR"),
            ("HTN/DM", "URL"),
        )
    ),
    GOLD[1].with_spans(
        _spans(NOTE_B, ("Boston", "CITY"), ("Reviewed", "PATIENT"), ("Smith Jones", "PATIENT"), ("at", "PATIENT"))
    ),
]


def _score(en_real, phi_set: str) -> dict:
    return en_real.score_row(
        GOLD, PRED, load_taxonomy("asq-phi"), load_taxonomy("i2b2-2014"), phi_set, en_real.ErrorRules.english()
    )


def _counts(groups: dict) -> dict[str, int]:
    return {group: entry["tokens"] for group, entry in groups.items() if entry["tokens"]}


def test_counts_recall_and_groups_under_i2b2(en_real):
    score = _score(en_real, "i2b2-2014")
    assert (score["tp"], score["fp"], score["fn"]) == (8, 10, 9)
    report = evaluate(GOLD, PRED, load_taxonomy("asq-phi"), "i2b2-2014", load_taxonomy("i2b2-2014"))
    assert score["recall"] == report.score("binary_token").recall == 8 / 17
    assert {k: (v["recall"], v["tokens"]) for k, v in score["recall_by_category"].items()} == {
        "NAME": (0.5, 8),
        "LOCATION": (0.25, 4),
        "DATE": (2 / 3, 3),
        "ID": (0.5, 2),
    }
    assert score["recall_by_label"]["MEDICAL_RECORD_NUMBER"] == {"recall": 0.5, "tokens": 2}
    assert _counts(score["false_alarms"]) == {
        "age": 1,
        "year": 1,
        "number": 2,
        "joined": 2,
        "drug": 1,
        "capitalised": 2,
        "other": 1,
    }
    assert _counts(score["misses"]) == {
        "title": 1,
        "id_prefix": 1,
        "institution": 2,
        "lower_case_name": 2,
        "short_name": 1,
        "date": 1,
        "other": 1,
    }
    assert score["false_alarms"]["number"]["examples"] == [("[80]-[90] DATE", 2)]
    assert score["misses"]["title"]["examples"] == [("[Dr]. Sarah P. NAME", 1)]
    assert sorted(score["false_alarms"]["capitalised"]["examples"]) == [
        ("[Guidelines] PATIENT", 1),
        ("[Reviewed] PATIENT", 1),
    ]


def test_hipaa_drops_ages_under_90(en_real):
    score = _score(en_real, "hipaa")
    assert (score["tp"], score["fp"], score["fn"]) == (8, 8, 9)  # "2021" alone is a year, outside hipaa too
    assert score["false_alarms"]["age"]["tokens"] == 0
    assert score["pred_spans_dropped"] == 2


def test_dont_care_tokens_count_neither_way(en_real):
    """Under hipaa a presidio TITLE is outside the set: a prediction over it is no false alarm, and Philter's
    untyped spans stay in every set."""
    text = "Mr. Lee called."
    gold = [Document("c", text, tuple(_spans(text, ("Mr.", "TITLE"), ("Lee", "PERSON"))))]
    pred = en_real.predicted(gold, {"c": [[0, 2, None], [4, 7, None], [8, 14, None]]}, "philter")
    assert {s.label for s in pred[0].spans} == {en_real.UNTYPED}
    assert en_real.untyped_kept(PHI_SETS)
    outcome = en_real.token_outcomes(gold[0], pred[0], load_taxonomy("presidio"), load_taxonomy("i2b2-2014"), "hipaa")
    assert [(s, e) for s, e, _ in outcome.tp] == [(4, 7)]
    assert [(s, e) for s, e, _ in outcome.fp] == [(8, 14)]
    assert outcome.fn == []
    i2b2 = en_real.token_outcomes(gold[0], pred[0], load_taxonomy("presidio"), load_taxonomy("i2b2-2014"), "i2b2-2014")
    assert len(i2b2.tp) == 2 and len(i2b2.fp) == 1


@pytest.mark.parametrize(
    "text, surface, label, group",
    [
        ("a 60-year-old man", "60-year-old", "DATE_TIME", "age"),  # an age phrase under another label
        ("I'm from Cyprus and I'm 26 y/o", "from Cyprus and I'm 26 y/o", "TITLE", "other"),  # holding one is not enough
        ("BP 142 today", "142", "DATE_TIME", "number"),
        ("seen by Dr. Zoolander", "Zoolander", "PERSON", "other"),  # after a title: no sentence start
        ("Wow. Zoolander again", "Zoolander", "PERSON", "capitalised"),
        ("CHIEF COMPLAINT\nfever", "COMPLAINT", "PERSON", "capitalised"),  # a line in capitals
    ],
)
def test_false_alarm_rules(en_real, text: str, surface: str, label: str, group: str):
    start = text.index(surface)
    span = Span(start, start + len(surface), label)
    token_end = start + len(re.match(r"[^\W_]+", surface).group())  # its first token, as the scorer cuts them
    assert en_real.ErrorRules.english().false_alarm(text, start, token_end, span, load_taxonomy("presidio")) == group


# PhysioNet's groups and the surrogate check, on made-up nursing-note text (no note of the corpus).


@pytest.mark.parametrize(
    "text, surface, token, group",
    [
        ("ABG 88/40/7.31/22/-2 drawn", "88/40/7.31/22/-2", "40", "vital"),  # a lab panel after its keyword
        ("CO/CI/SVR 6.1/3.2/910 stable", "6.1/3.2/910", "910", "vital"),
        ("BP 96-124/60's on levophed", "96-124/60's", "124", "vital"),
        ("MAP61-70 overnight", "61-70", "61", "vital"),  # glued to its keyword
        ("IVF at 75-150/HOUR", "75-150", "150", "vital"),  # a unit after it
        ("on a/c 650x14/8/50% overnight", "650x14/8/50%", "650x14", "vital"),
        ("report 0700-1930 quiet", "0700-1930", "1930", "number"),  # no keyword: a time
        ("TEMP 101.2 ON 4/11. SLEPT", "4/11", "11", "number"),  # a keyword reaches the first number after it only
        ("labs drawn at 1400 today", "1400", "1400", "number"),  # a time after a keyword
        ("lines placed 6/12 GM stain", "6/12", "12", "number"),  # a date-like run needs its keyword right before it
        ("SEEN MONDAY AM", "MONDAY", "MONDAY", "weekday"),
        ("O2 SAT STABLE", "SAT", "SAT", "capitals"),  # a vital keyword, not a weekday
        ("THICK SPUTUM AND COUGH", "SPUTUM AND COUGH", "AND", "and"),
        ("TO OR TODAY", "OR", "OR", "capitals"),  # "or" alone is no joining word
        ("PT REMAINS AFEBRILE", "REMAINS AFEBRILE", "AFEBRILE", "capitals"),
        ("Cont same plan", "Cont", "Cont", "other"),
    ],
)
def test_physionet_false_alarm_rules(en_real, text: str, surface: str, token: str, group: str):
    start = text.index(surface)
    token_start = text.index(token, start)
    span = Span(start, start + len(surface), "DATE")
    rules = en_real.rules_for("physionet")
    assert rules.false_alarm(text, token_start, token_start + len(token), span, load_taxonomy("i2b2-2014")) == group


NOTE_P = (
    "Seen 10/3 by KIM B. OSTROWSKI RN; wife tamsin called. S/P CABG '86.\n"
    "To Bellweather 4 from Granmoor, T 99.1 on 10/4."
)
GOLD_P = Document(
    "p",
    NOTE_P,
    tuple(
        _spans(
            NOTE_P,
            ("10/3", "Date"),
            ("KIM", "HCPName"),
            ("B.", "HCPName"),
            ("OSTROWSKI", "HCPName"),
            ("tamsin", "RelativeProxyName"),
            ("'86", "DateYear"),
            ("Bellweather", "Location"),
            ("Granmoor", "Location"),
            ("10/4.", "Date"),
        )
    ),
)
PRED_P = GOLD_P.with_spans(_spans(NOTE_P, ("Granmoor", "HOSPITAL"), ("99.1", "DATE"), ("RN", "PATIENT")))


def test_physionet_groups_through_score_row(en_real):
    """Every gold token missed and every false alarm lands in PhysioNet's groups; the other corpora keep theirs."""
    score = en_real.score_row(
        [GOLD_P],
        [PRED_P],
        load_taxonomy("physionet"),
        load_taxonomy("i2b2-2014"),
        "hipaa",
        en_real.rules_for("physionet"),
    )
    assert list(score["misses"]) == list(en_real.PHYSIONET_MISS_GROUPS)
    # the two-digit year (DateYear) is neutral under hipaa: a year alone is no Safe Harbor identifier
    assert _counts(score["misses"]) == {
        "month_day": 4,
        "lower_case_name": 1,
        "capitals_name": 2,
        "place": 1,
        "initial": 1,
    }
    assert _counts(score["false_alarms"]) == {"vital": 2, "capitals": 1}  # "99" "1" of "T 99.1"; "RN"
    assert score["misses"]["place"]["examples"] == [("[Bellweather] Location", 1)]
    assert list(en_real.rules_for("asq").false_alarm_groups) == list(en_real.FALSE_ALARM_GROUPS)


def test_output_position_follows_the_replacement_records(en_real):
    from hybriddeid.surrogates import Replacement

    text = "AB 12 CD 34"
    reps = [
        Replacement(3, 5, 3, 8, "DATE", "DATE", "date", "m", "s", 1.0, "12345"),  # "12" -> "12345"
        Replacement(6, 8, 9, 10, "NAME", "NAME", "person", "m", "s", 1.0, "X"),
    ]  # "CD" -> "X"
    output = "AB 12345 X 34"
    assert [en_real.output_position(reps, i) for i in (0, 3, 5, 6, 9)] == [0, 3, 8, 9, 11]
    assert en_real.output_position(reps, 4, "start") == 3 and en_real.output_position(reps, 4, "end") == 8
    assert not en_real.changed_in_output(text, output, reps, 9, 11)  # "34" unchanged, moved by 2
    assert en_real.changed_in_output(text, output, reps, 3, 5)  # "12" inside a replacement that wrote "12345"


def test_surrogate_check_counts_changed_vitals_and_left_phi(en_real):
    """One patient's two notes: a predicted date over "120/80" changes a vital pattern; a missed name stays."""
    one = "Night note. BP 120/80, HR 72. Wife Tamsin Okafor called on 3/14; seen by Dr. Brandvold.\n"
    two = "RR 18-20, sats 95% on 2L.\nPlan: continue."
    gold = [
        Document(
            "n1",
            one,
            tuple(
                _spans(
                    one,
                    ("Tamsin", "RelativeProxyName"),
                    ("Okafor", "RelativeProxyName"),
                    ("3/14", "Date"),
                    ("Brandvold", "HCPName"),
                )
            ),
        ),
        Document("n2", two, ()),
    ]
    pred = [
        gold[0].with_spans(_spans(one, ("Tamsin Okafor", "PATIENT"), ("3/14", "DATE"), ("120/80", "DATE"))),
        gold[1].with_spans(()),
    ]
    assert [[t[s:e] for s, e in en_real.vital_patterns(t)] for t in (one, two)] == [
        ["120/80", "72"],
        ["18-20", "95%", "2L"],
    ]
    check = en_real.surrogate_check(
        gold, pred, {"n1": "p1", "n2": "p1"}, load_taxonomy("physionet"), load_taxonomy("i2b2-2014"), "hipaa"
    )
    assert check["patients"] == 1 and check["spans_replaced"] == 3
    assert (check["vital_patterns"], check["vital_patterns_changed"]) == (5, 1)
    assert (check["vital_numbers"], check["vital_numbers_changed"]) == (7, 2)
    assert check["vital_changed_examples"][0][0].startswith("120/80 -> ")
    assert (check["gold_strings"], check["gold_strings_left"]) == (4, 1)
    assert check["gold_left_share"] == 0.25
    assert check["gold_left_examples"] == [("Brandvold HCPName", 1)]
    assert check["gold_strings_by_label"]["HCPName"] == {"strings": 1, "left": 1}


def test_surrogate_check_leaves_out_a_vital_shape_the_annotators_call_phi(en_real):
    """'UO-9/10' reads as urine output but is a gold date: shifting it is right, not a changed vital."""
    text = "DECREASED UO-9/10 LASIX. BP 120/80.\n"
    gold = [Document("n1", text, tuple(_spans(text, ("9/10", "Date"))))]
    pred = [gold[0].with_spans(_spans(text, ("9/10", "DATE")))]
    assert [text[s:e] for s, e in en_real.vital_patterns(text)] == ["-9/10", "120/80"]
    check = en_real.surrogate_check(gold, pred, {}, load_taxonomy("physionet"), load_taxonomy("i2b2-2014"), "hipaa")
    assert check["spans_replaced"] == 1
    assert (check["vital_patterns"], check["vital_patterns_changed"], check["vital_patterns_gold_phi"]) == (1, 0, 1)


def test_model_title_says_where_it_is_optimistic(en_real):
    meta = {"training_data": {"real_text": {"corpora": {"asq": "...", "presidio": "..."}}}}
    assert en_real.trained_halves(meta) == {"asq", "presidio"}
    assert en_real.trained_halves({}) == frozenset()
    assert (
        en_real.model_title("en", {"asq", "presidio"}, ["asq", "physionet"])
        == "bundled model (trained on the asq half: optimistic there; never trained on the physionet half)"
    )


def test_peer_worker_gives_up_a_slow_note():
    """The worker's per-note limit interrupts a backtracking regular expression (Philter's failure) and goes on."""
    spec = importlib.util.spec_from_file_location("peer_worker_under_test", BENCHMARK.with_name("peer_worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)

    def slow(text: str):
        re.match(r"(a+)+$", text)  # exponential backtracking
        return [(0, 1, None)]

    with pytest.raises(worker.NoteTimeout):
        worker.within(slow, "a" * 40 + "b", 0.2)
    assert worker.within(slow, "ab", 0.2) == [(0, 1, None)]
    assert worker.within(slow, "ab", 0) == [(0, 1, None)]
