"""benchmarks/en_real.py's scoring and error grouping on a hand-made two-note fixture (no peers, no corpora)."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hybriddeid.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.profiles import PHI_SETS
from hybriddeid.taxonomy import load_taxonomy

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
    Document("a", NOTE_A, tuple(_spans(NOTE_A, ("Dr. Sarah P.", "NAME"), ("UCSF", "GEOGRAPHIC_LOCATION"),
                                       ("Jan 8, 2023", "DATE"), ("UCSF-12345", "MEDICAL_RECORD_NUMBER")))),
    Document("b", NOTE_B, tuple(_spans(NOTE_B, ("mary jones", "NAME"), ("Anna", "NAME"),
                                       ("Boston General", "GEOGRAPHIC_LOCATION"), ("Smith Jones", "NAME"),
                                       ("Boston", "GEOGRAPHIC_LOCATION", 1)))),
]
PRED = [  # i2b2 2014 labels, as hybriddeid's
    GOLD[0].with_spans(_spans(NOTE_A, ("70", "AGE"), ("Guidelines", "PATIENT"), ("Sarah P.", "DOCTOR"), ("2021", "DATE"),
                              ("Jan 8", "DATE"), ("12345", "MEDICALRECORD"), ("80-90", "DATE"), ("Lasix", "DOCTOR"),
                              ("HTN/DM", "URL"))),
    GOLD[1].with_spans(_spans(NOTE_B, ("Boston", "CITY"), ("Reviewed", "PATIENT"), ("Smith Jones", "PATIENT"),
                              ("at", "PATIENT"))),
]


def _score(en_real, phi_set: str) -> dict:
    return en_real.score_row(GOLD, PRED, load_taxonomy("asq-phi"), load_taxonomy("i2b2-2014"), phi_set,
                             en_real.ErrorRules.english())


def _counts(groups: dict) -> dict[str, int]:
    return {group: entry["tokens"] for group, entry in groups.items() if entry["tokens"]}


def test_counts_recall_and_groups_under_i2b2(en_real):
    score = _score(en_real, "i2b2-2014")
    assert (score["tp"], score["fp"], score["fn"]) == (8, 10, 9)
    report = evaluate(GOLD, PRED, load_taxonomy("asq-phi"), "i2b2-2014", load_taxonomy("i2b2-2014"))
    assert score["recall"] == report.score("binary_token").recall == 8 / 17
    assert {k: (v["recall"], v["tokens"]) for k, v in score["recall_by_category"].items()} == {
        "NAME": (0.5, 8), "LOCATION": (0.25, 4), "DATE": (2 / 3, 3), "ID": (0.5, 2)}
    assert score["recall_by_label"]["MEDICAL_RECORD_NUMBER"] == {"recall": 0.5, "tokens": 2}
    assert _counts(score["false_alarms"]) == {
        "age": 1, "year": 1, "number": 2, "joined": 2, "drug": 1, "capitalised": 2, "other": 1}
    assert _counts(score["misses"]) == {
        "title": 1, "id_prefix": 1, "institution": 2, "lower_case_name": 2, "short_name": 1, "date": 1, "other": 1}
    assert score["false_alarms"]["number"]["examples"] == [("[80]-[90] DATE", 2)]
    assert score["misses"]["title"]["examples"] == [("[Dr]. Sarah P. NAME", 1)]
    assert sorted(score["false_alarms"]["capitalised"]["examples"]) == [("[Guidelines] PATIENT", 1), ("[Reviewed] PATIENT", 1)]


def test_hipaa_drops_ages_under_90(en_real):
    score = _score(en_real, "hipaa")
    assert (score["tp"], score["fp"], score["fn"]) == (8, 9, 9)
    assert score["false_alarms"]["age"]["tokens"] == 0
    assert score["pred_spans_dropped"] == 1


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


@pytest.mark.parametrize("text, surface, label, group", [
    ("a 60-year-old man", "60-year-old", "DATE_TIME", "age"),  # an age phrase under another label
    ("I'm from Cyprus and I'm 26 y/o", "from Cyprus and I'm 26 y/o", "TITLE", "other"),  # holding one is not enough
    ("BP 142 today", "142", "DATE_TIME", "number"),
    ("seen by Dr. Zoolander", "Zoolander", "PERSON", "other"),  # after a title: no sentence start
    ("Wow. Zoolander again", "Zoolander", "PERSON", "capitalised"),
    ("CHIEF COMPLAINT\nfever", "COMPLAINT", "PERSON", "capitalised"),  # a line in capitals
])
def test_false_alarm_rules(en_real, text: str, surface: str, label: str, group: str):
    start = text.index(surface)
    span = Span(start, start + len(surface), label)
    token_end = start + len(re.match(r"[^\W_]+", surface).group())  # its first token, as the scorer cuts them
    assert en_real.ErrorRules.english().false_alarm(text, start, token_end, span, load_taxonomy("presidio")) == group

