"""Evaluator tests; every expected number is worked out by hand in the comments beside it."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from hybriddeid.core.document import Document, Span
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.evaluation import CRITERIA, LEVELS, PRF, EvaluationReport, evaluate, evaluate_directories

I2B2 = load_taxonomy("i2b2_2014")
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def mention(text: str, phrase: str, label: str, *, start_shift: int = 0, end_shift: int = 0) -> Span:
    """The span of the first ``phrase`` in ``text``, its start/end moved by the given shifts."""
    start = text.index(phrase)
    return Span(start + start_shift, start + len(phrase) + end_shift, label)


# Document "a" (synthetic). Gold has 7 mentions; the prediction has one case of each kind of error.
TEXT_A = "Patient John Smith, 45, seen Jan 5 2012 by Dr. Adams at Boston General in Springfield, MA."
GOLD_A = [
    mention(TEXT_A, "John Smith", "PATIENT"),  # G1 tokens John, Smith        HIPAA
    mention(TEXT_A, "45", "AGE"),  # G2 token 45                                HIPAA
    mention(TEXT_A, "Jan 5 2012", "DATE"),  # G3 tokens Jan, 5, 2012            HIPAA
    mention(TEXT_A, "Adams", "DOCTOR"),  # G4 token Adams
    mention(TEXT_A, "Boston General", "HOSPITAL"),  # G5 tokens Boston, General
    mention(TEXT_A, "Springfield", "CITY"),  # G6 token Springfield             HIPAA
    mention(TEXT_A, "MA", "STATE"),  # G7 token MA
]  # 11 gold tokens
PRED_A = [
    mention(TEXT_A, "John Smith", "PATIENT"),  # exact match of G1
    mention(TEXT_A, "45", "AGE"),  # exact match of G2
    mention(TEXT_A, "Jan 5", "DATE"),  # token-level partial overlap with G3 (end 5 chars short)
    mention(TEXT_A, "Dr. Adams", "DOCTOR"),  # start error on G4: tokens Dr (fp), Adams (tp)
    mention(TEXT_A, "Boston General", "ORGANIZATION"),  # type error on G5, same category LOCATION
    mention(TEXT_A, "Springfield", "CITY", end_shift=2),  # end 2 chars late (", "): relaxed only
    mention(TEXT_A, "Patient", "PROFESSION"),  # spurious
]  # G7 missed; 11 predicted tokens: John Smith 45 Jan 5 Dr Adams Boston General Springfield Patient

# Document "b": small, so that per-document (macro) averages differ from pooled (micro) ones.
TEXT_B = "Seen by Dr. Lee on 03/04/2010."
GOLD_B = [mention(TEXT_B, "Lee", "DOCTOR"), mention(TEXT_B, "03/04/2010", "DATE")]  # tokens Lee | 03 04 2010
PRED_B = [mention(TEXT_B, "03/04/2010", "DATE")]  # DOCTOR missed

TEXT_C = "Nothing to hide here."  # document "c": no PHI, nothing predicted
TEXT_D = "Call 555-1234 today."  # document "d": absent from the predictions
GOLD_D = [mention(TEXT_D, "555-1234", "PHONE")]  # tokens 555, 1234; HIPAA

GOLD = [
    Document("a", TEXT_A, tuple(GOLD_A)),
    Document("b", TEXT_B, tuple(GOLD_B)),
    Document("c", TEXT_C),
    Document("d", TEXT_D, tuple(GOLD_D)),
]
PRED = [
    Document("a", TEXT_A, tuple(PRED_A)),
    Document("b", TEXT_B, tuple(PRED_B)),
    Document("c", TEXT_C),
    Document("z", "A prediction without gold.", (Span(0, 1, "PATIENT"),)),
]


@pytest.fixture(scope="module")
def report() -> EvaluationReport:
    return evaluate(GOLD, PRED, I2B2)


Ratio = Fraction | float


def assert_prf(prf: PRF, tp: int, fp: int, fn: int, p: Ratio, r: Ratio, f: Ratio) -> None:
    """Exact counts; ratios equal to the hand-computed fractions."""
    assert (prf.tp, prf.fp, prf.fn) == (tp, fp, fn)
    assert prf.precision == pytest.approx(float(p))
    assert prf.recall == pytest.approx(float(r))
    assert prf.f1 == pytest.approx(float(f))


F = Fraction


# ---- micro, all PHI, subtype level ------------------------------------------------------------
# strict  a: tp 2 (G1 G2), fp 5 (Jan 5, Dr. Adams, ORGANIZATION, Springfield+2, Patient), fn 5 (G3-G7)
#         b: tp 1, fp 0, fn 1 (Lee)   c: nothing   d: fn 1
#         total tp 3, fp 5, fn 7: P 3/8, R 3/10, F1 2*3/(2*3+5+7) = 6/18 = 1/3
# relaxed as strict, but Springfield (end +2) now matches: a tp 3 fp 4 fn 4 -> tp 4 fp 4 fn 6:
#         P 4/8, R 4/10, F1 8/18 = 4/9
# token   a: tp 7 (John Smith 45 Jan 5 Adams Springfield), fp 4 (Dr, Boston+General as
#         ORGANIZATION, Patient), fn 4 (2012, Boston+General as HOSPITAL, MA)
#         b: tp 3 (03 04 2010), fn 1 (Lee)   d: fn 2 (555 1234)
#         total tp 10 fp 4 fn 7: P 10/14, R 10/17, F1 20/31
# binary_token (labels ignored) a: tp 9 (the 7 above + Boston General), fp 2 (Dr, Patient),
#         fn 2 (2012, MA); b: tp 3 fn 1; d: fn 2 -> tp 12 fp 2 fn 5: P 12/14, R 12/17, F1 24/31
@pytest.mark.parametrize(
    "criterion, counts, p, r, f",
    [
        ("strict", (3, 5, 7), F(3, 8), F(3, 10), F(1, 3)),
        ("relaxed", (4, 4, 6), F(4, 8), F(4, 10), F(4, 9)),
        ("token", (10, 4, 7), F(10, 14), F(10, 17), F(20, 31)),
        ("binary_token", (12, 2, 5), F(12, 14), F(12, 17), F(24, 31)),
    ],
)
def test_micro_subtype(report, criterion, counts, p, r, f):
    assert_prf(report.score(criterion, "subtype", "micro"), *counts, p, r, f)


# ---- micro, all PHI, category level -----------------------------------------------------------
# The type error (HOSPITAL predicted as ORGANIZATION) is right at category level (both LOCATION).
# strict  a: tp 3, fp 4, fn 4; b: tp 1 fn 1; d: fn 1 -> tp 4 fp 4 fn 6: P 1/2, R 2/5, F1 8/18 = 4/9
# relaxed a: tp 4 (+ Springfield), fp 3, fn 3 -> tp 5 fp 3 fn 5: P 5/8, R 1/2, F1 10/18 = 5/9
# token   a: tp 9, fp 2 (Dr, Patient), fn 2 (2012, MA) -> tp 12 fp 2 fn 5, as binary_token
@pytest.mark.parametrize(
    "criterion, counts, p, r, f",
    [
        ("strict", (4, 4, 6), F(1, 2), F(2, 5), F(4, 9)),
        ("relaxed", (5, 3, 5), F(5, 8), F(1, 2), F(5, 9)),
        ("token", (12, 2, 5), F(12, 14), F(12, 17), F(24, 31)),
        ("binary_token", (12, 2, 5), F(12, 14), F(12, 17), F(24, 31)),
    ],
)
def test_micro_category(report, criterion, counts, p, r, f):
    assert_prf(report.score(criterion, "category", "micro"), *counts, p, r, f)


# ---- macro: per-document P and R averaged over a, b, d; c has nothing to score and is left out --
# strict  a: P 2/7 R 2/7; b: P 1/1 R 1/2; d: P 0 (0/0 -> 0) R 0/1
#         P = (2/7 + 1 + 0)/3 = 3/7; R = (2/7 + 1/2 + 0)/3 = 11/42
#         F1 = 2 * 3/7 * 11/42 / (3/7 + 11/42) = (66/294) / (29/42) = 66/203   (micro was 1/3)
# relaxed a: 3/7, 3/7; b: 1, 1/2; d: 0, 0 -> P 10/21, R 13/42, F1 = (260/882)/(33/42) = 260/693
# token   a: 7/11, 7/11; b: 3/3, 3/4; d: 0, 0 -> P 6/11, R 61/132,
#         F1 = 2 * 6/11 * 61/132 / (133/132) = 732/1463
@pytest.mark.parametrize(
    "criterion, p, r, f",
    [
        ("strict", F(3, 7), F(11, 42), F(66, 203)),
        ("relaxed", F(10, 21), F(13, 42), F(260, 693)),
        ("token", F(6, 11), F(61, 132), F(732, 1463)),
    ],
)
def test_macro_subtype(report, criterion, p, r, f):
    macro = report.score(criterion, "subtype", "macro")
    micro = report.score(criterion, "subtype", "micro")
    assert_prf(macro, micro.tp, micro.fp, micro.fn, p, r, f)  # macro keeps the pooled counts
    assert macro.f1 != pytest.approx(micro.f1)


# ---- HIPAA subset (i2b2 2014: PATIENT AGE DATE CITY ORGANIZATION PHONE ... are in; DOCTOR,
# HOSPITAL, STATE, PROFESSION are out). Gold and predictions are filtered by their own labels.
# a: gold G1 G2 G3 G6 (tokens John Smith 45 Jan 5 2012 Springfield = 7);
#    pred PATIENT AGE DATE(Jan 5) ORGANIZATION CITY(+2) (tokens John Smith 45 Jan 5 Boston General
#    Springfield = 8). The ORGANIZATION guess is a HIPAA false positive: its gold, HOSPITAL, is not HIPAA.
# b: gold DATE only (DOCTOR is out), predicted exactly.   d: PHONE missed.
# strict  a: tp 2 fp 3 fn 2; b: tp 1; d: fn 1 -> tp 3 fp 3 fn 3: P R F1 = 1/2
# relaxed a: tp 3 fp 2 fn 1; b: tp 1; d: fn 1 -> tp 4 fp 2 fn 2: P R F1 = 2/3
# token   a: tp 6 fp 2 (Boston General) fn 1 (2012); b: tp 3; d: fn 2 -> tp 9 fp 2 fn 3:
#         P 9/11, R 9/12, F1 18/23
# macro strict a: P 2/5 R 2/4; b: 1, 1; d: 0, 0 -> P 7/15, R 1/2, F1 = (7/15)/(29/30) = 14/29
@pytest.mark.parametrize(
    "criterion, average, counts, p, r, f",
    [
        ("strict", "micro", (3, 3, 3), F(1, 2), F(1, 2), F(1, 2)),
        ("relaxed", "micro", (4, 2, 2), F(2, 3), F(2, 3), F(2, 3)),
        ("token", "micro", (9, 2, 3), F(9, 11), F(3, 4), F(18, 23)),
        ("binary_token", "micro", (9, 2, 3), F(9, 11), F(3, 4), F(18, 23)),
        ("strict", "macro", (3, 3, 3), F(7, 15), F(1, 2), F(14, 29)),
    ],
)
def test_hipaa(report, criterion, average, counts, p, r, f):
    assert_prf(report.score(criterion, "subtype", average, hipaa=True), *counts, p, r, f)


def test_hipaa_category_level_still_filters_by_subtype(report):
    # a: the HIPAA ORGANIZATION guess is LOCATION at category level, but its gold (HOSPITAL) was
    # filtered out, so it stays a false positive: same counts as at subtype level (tp 3 fp 3 fn 3).
    assert_prf(report.score("strict", "category", "micro", hipaa=True), 3, 3, 3, F(1, 2), F(1, 2), F(1, 2))


def test_per_label(report):
    strict = report.per_label("strict", "subtype")
    assert set(strict) == {
        "PATIENT",
        "AGE",
        "DATE",
        "DOCTOR",
        "HOSPITAL",
        "ORGANIZATION",
        "CITY",
        "STATE",
        "PROFESSION",
        "PHONE",
    }
    assert_prf(strict["PATIENT"], 1, 0, 0, 1, 1, 1)
    # DATE: b exact (tp), a "Jan 5" (fp) against "Jan 5 2012" (fn) -> 1/2 each
    assert_prf(strict["DATE"], 1, 1, 1, F(1, 2), F(1, 2), F(1, 2))
    # DOCTOR: a start error (fp + fn), b missed (fn) -> tp 0 fp 1 fn 2
    assert_prf(strict["DOCTOR"], 0, 1, 2, 0, 0, 0)
    assert_prf(strict["ORGANIZATION"], 0, 1, 0, 0, 0, 0)
    assert_prf(strict["HOSPITAL"], 0, 0, 1, 0, 0, 0)
    assert_prf(strict["CITY"], 0, 1, 1, 0, 0, 0)
    assert_prf(report.per_label("relaxed")["CITY"], 1, 0, 0, 1, 1, 1)
    # LOCATION (category): gold Boston General, Springfield, MA; pred Boston General, Springfield+2
    # strict: tp 1 fp 1 fn 2 -> P 1/2, R 1/3, F1 (1/3)/(5/6) = 2/5; relaxed: tp 2 fp 0 fn 1 -> 1, 2/3, 4/5
    assert_prf(report.per_label("strict", "category")["LOCATION"], 1, 1, 2, F(1, 2), F(1, 3), F(2, 5))
    assert_prf(report.per_label("relaxed", "category")["LOCATION"], 2, 0, 1, 1, F(2, 3), F(4, 5))
    # HIPAA per label keeps only HIPAA subtypes
    hipaa_labels = {"PATIENT", "AGE", "DATE", "ORGANIZATION", "CITY", "PHONE"}
    assert set(report.per_label("strict", hipaa=True)) == hipaa_labels


def test_per_label_sums_to_micro(report):
    for criterion in CRITERIA:
        for level in LEVELS:
            for hipaa in (False, True):
                labels = report.per_label(criterion, level, hipaa).values()
                micro = report.score(criterion, level, "micro", hipaa)
                assert (sum(p.tp for p in labels), sum(p.fp for p in labels), sum(p.fn for p in labels)) == (
                    micro.tp,
                    micro.fp,
                    micro.fn,
                )


def test_documents_unmatched_and_counts(report):
    assert report.documents == ("a", "b", "c", "d")
    assert report.unmatched == ("z",)  # reported by name, not scored: its PATIENT is no false positive
    assert (report.n_gold_spans, report.n_pred_spans) == (7 + 2 + 0 + 1, 7 + 1 + 0)


def test_relaxed_end_tolerance_is_two_characters():
    text = "x" * 30
    gold = [Document("n", text, (Span(0, 10, "DATE"), Span(20, 25, "DATE")))]
    for shift, hit in [(-2, 1), (2, 1), (3, 0), (-3, 0)]:
        pred = [Document("n", text, (Span(0, 10 + shift, "DATE"),))]
        assert evaluate(gold, pred, I2B2).score("relaxed").tp == hit
    # a shifted start never matches, whatever the end
    pred = [Document("n", text, (Span(1, 10, "DATE"), Span(19, 25, "DATE")))]
    assert evaluate(gold, pred, I2B2).score("relaxed").tp == 0


def test_relaxed_pairs_one_to_one_and_maximally():
    # gold ends 10, 12 and predicted ends 8, 11 on one start: pairing 10-8 and 12-11 matches both,
    # whereas pairing 10 with its nearest (11) would leave 12 and 8 (4 apart) unmatched.
    text = "x" * 20
    gold = [Document("n", text, (Span(0, 10, "DATE"), Span(0, 12, "DATE")))]
    pred = [Document("n", text, (Span(0, 8, "DATE"), Span(0, 11, "DATE")))]
    assert_prf(evaluate(gold, pred, I2B2).score("relaxed"), 2, 0, 0, 1, 1, 1)
    # one prediction cannot satisfy two gold mentions
    pred = [Document("n", text, (Span(0, 11, "DATE"),))]
    assert_prf(evaluate(gold, pred, I2B2).score("relaxed"), 1, 0, 1, 1, F(1, 2), F(2, 3))


def test_tokens_are_alphanumeric_runs_inside_the_span():
    # "García-López 3º": Unicode letters stay in one token; '-' and spaces split. A prediction
    # cut inside a word yields a different token (offsets differ) and earns nothing for that word.
    text = "Dra. García-López 3º"
    gold = [Document("n", text, (Span(5, 17, "DOCTOR"),))]  # tokens García, López
    pred = [Document("n", text, (Span(5, 15, "DOCTOR"),))]  # tokens García, Lóp
    assert_prf(evaluate(gold, pred, I2B2).score("token"), 1, 1, 1, F(1, 2), F(1, 2), F(1, 2))


def test_source_and_score_are_ignored():
    gold = [Document("n", "abc def", (Span(0, 3, "PATIENT"),))]
    pred = [Document("n", "abc def", (Span(0, 3, "PATIENT", source="crf", score=0.2),))]
    assert evaluate(gold, pred, I2B2).score("strict").f1 == 1.0


def test_nothing_to_score_gives_zero_not_an_error():
    report = evaluate([Document("n", "nothing")], [], I2B2)
    for average in ("micro", "macro"):
        assert_prf(report.score("strict", average=average), 0, 0, 0, 0, 0, 0)


def test_taxonomy_is_guessed_from_gold_labels():
    assert evaluate(GOLD, PRED).taxonomy.name == I2B2.name
    meddocan = [Document("n", "abc", (Span(0, 3, "FECHAS"),))]
    assert evaluate(meddocan, meddocan).taxonomy.name == load_taxonomy("meddocan").name


def test_bad_arguments_are_refused(report):
    with pytest.raises(ValueError):
        report.score("fuzzy")
    with pytest.raises(ValueError):
        report.score(level="type")
    with pytest.raises(ValueError):
        report.score(average="weighted")
    with pytest.raises(ValueError):
        evaluate(GOLD + GOLD[:1], PRED, I2B2)  # a name twice


def test_i2b2_2014_hipaa_flags_match_the_official_script():
    # kotfic/i2b2_evaluation_scripts README, "HIPAA-compliant PHI"
    assert I2B2.hipaa == {
        "PATIENT",
        "AGE",
        "CITY",
        "STREET",
        "ZIP",
        "ORGANIZATION",
        "DATE",
        "PHONE",
        "FAX",
        "EMAIL",
        "SSN",
        "MEDICALRECORD",
        "HEALTHPLAN",
        "ACCOUNT",
        "LICENSE",
        "VEHICLE",
        "DEVICE",
        "BIOID",
        "IDNUM",
    }


def test_to_json_round_trips(report):
    data = json.loads(report.to_json())
    assert data == report.to_dict()
    assert data["unmatched"] == ["z"]
    assert data["counts"] == {"documents": 4, "gold_spans": 10, "pred_spans": 8}
    for criterion in CRITERIA:
        for level in LEVELS:
            for subset, hipaa in (("all", False), ("hipaa", True)):
                for average in ("micro", "macro"):
                    assert data["scores"][criterion][level][subset][average] == pytest.approx(
                        report.score(criterion, level, average, hipaa).to_dict()
                    )
    assert data["scores"]["strict"]["subtype"]["all"]["micro"]["f1"] == pytest.approx(1 / 3)
    assert data["per_label"]["strict"]["category"]["all"]["LOCATION"]["tp"] == 1


def test_format_table_lists_categories_subtypes_and_totals(report):
    table = report.format_table()
    for label in (
        "NAME",
        "PATIENT",
        "DOCTOR",
        "LOCATION",
        "HOSPITAL",
        "ORGANIZATION",
        "CITY",
        "STATE",
        "AGE",
        "DATE",
        "CONTACT",
        "PHONE",
        "PROFESSION",
    ):
        assert label in table
    for row in ("micro", "macro", "HIPAA micro", "HIPAA macro"):
        assert any(line.startswith(row) for line in table.splitlines())
    assert "0.3333" in table  # strict micro F1


def test_evaluate_directories_reads_with_io(monkeypatch, tmp_path):
    import hybriddeid.io

    corpora = {tmp_path / "gold": GOLD, tmp_path / "pred": PRED}
    calls = []

    def fake_read_corpus(in_dir: Path, fmt: str = "auto", encoding: str = "utf-8"):
        calls.append((in_dir, fmt))
        return corpora[in_dir]

    monkeypatch.setattr(hybriddeid.io, "read_corpus", fake_read_corpus, raising=False)
    report = evaluate_directories(tmp_path / "gold", tmp_path / "pred", fmt="brat", taxonomy=I2B2)
    assert calls == [(tmp_path / "gold", "brat"), (tmp_path / "pred", "brat")]
    assert report.score("strict").f1 == pytest.approx(1 / 3)


def test_many_notes_counted_exactly():
    """250 notes of 20 spans, a third exact and the rest with a moved end: every count adds up.
    (Speed lives in benchmarks/, not in tests: a timing assertion fails on a busy machine.)"""
    text = "word " * 400
    spans = tuple(Span(k * 100, k * 100 + 9, ("DATE", "PATIENT")[k % 2]) for k in range(20))
    docs = [Document(f"n{i}", text, spans) for i in range(250)]
    moved = tuple(Span(s.start, s.end + (i % 3), s.label) for i, s in enumerate(spans))
    pred = [d.with_spans(moved) for d in docs]
    report = evaluate(docs, pred, I2B2)
    exact = sum(1 for i in range(20) if i % 3 == 0)
    strict = report.score("strict")
    assert (strict.tp, strict.fp, strict.fn) == (250 * exact, 250 * (20 - exact), 250 * (20 - exact))
    relaxed = report.score("relaxed")
    assert (relaxed.tp, relaxed.fp, relaxed.fn) == (250 * 20, 0, 0)
    assert report.to_dict()


def _read_brat_dir(folder: Path) -> list[Document]:
    """Tiny BRAT reader (text-bound T lines only), used only if hybriddeid.io is not ready."""
    docs = []
    for ann in sorted(folder.glob("*.ann")):
        spans = []
        for line in ann.read_text(encoding="utf-8").splitlines():
            if line.startswith("T"):
                label, start, end = line.split("\t")[1].split()
                spans.append(Span(int(start), int(end), label))
        docs.append(Document(ann.stem, ann.with_suffix(".txt").read_text(encoding="utf-8"), tuple(spans)))
    return docs


MEDDOCAN_DEV = SHARED / "corpora" / "meddocan" / "dev" / "brat"


@pytest.mark.skipif(not MEDDOCAN_DEV.is_dir(), reason="no shared corpora")
def test_meddocan_dev_against_itself_is_perfect():
    folder = MEDDOCAN_DEV
    try:
        from hybriddeid.io import read_corpus

        gold = read_corpus(folder)
    except ImportError:
        gold = _read_brat_dir(folder)
    report = evaluate(gold, gold)
    assert report.taxonomy.name == load_taxonomy("meddocan").name
    assert len(report.documents) == 250 and report.n_gold_spans > 5000
    for criterion in CRITERIA:
        for level in LEVELS:
            for hipaa in (False, True):
                for average in ("micro", "macro"):
                    prf = report.score(criterion, level, average, hipaa)
                    assert (prf.precision, prf.recall, prf.f1) == (1.0, 1.0, 1.0)
                assert all(p.f1 == 1.0 for p in report.per_label(criterion, level, hipaa).values())
