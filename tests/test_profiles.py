"""PHI sets (hybriddeid.core.profiles): the filter, the taxonomies' flags, the ASQ-PHI and Presidio
mappings, evaluation under a PHI set (don't-care regions), the pipeline setting and the CLI flags."""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.core.profiles import PHI_SETS, check_phi_set, filter_document, filter_spans, hipaa_age_rule, split_spans
from hybriddeid.core.taxonomy import BUNDLED_TAXONOMIES, guess_taxonomy, load_taxonomy
from hybriddeid.evaluation import evaluate
from hybriddeid.io import read_corpus, write_document
from hybriddeid.pipeline.core import ConfigError, build_config, load_config

I2B2 = load_taxonomy("i2b2-2014")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def spans_of(text: str, *marked: tuple[str, str]) -> list[Span]:
    """One span per (value, label), at the value's first occurrence in ``text``."""
    spans = []
    for value, label in marked:
        start = text.index(value)
        spans.append(Span(start, start + len(value), label))
    return spans


def kept_texts(text: str, spans: list[Span], phi_set: str, taxonomy=I2B2) -> list[str]:
    return [text[s.start : s.end] for s in filter_spans(spans, text, taxonomy, phi_set)]


# -- the filter -----------------------------------------------------------------------------------
NOTE = "Anna Lee, 45, teacher from Boston, MA; her father, 92, and an elderly aunt; ninety-two-year-old Bob."
NOTE_SPANS = spans_of(
    NOTE,
    ("Anna Lee", "PATIENT"),
    ("45", "AGE"),
    ("teacher", "PROFESSION"),
    ("Boston", "CITY"),
    ("MA", "STATE"),
    ("92", "AGE"),
    ("elderly", "AGE"),
    ("ninety-two", "AGE"),
    ("Bob", "PATIENT"),
)


def test_i2b2_2014_keeps_every_span():
    assert kept_texts(NOTE, NOTE_SPANS, "i2b2-2014") == [NOTE[s.start : s.end] for s in NOTE_SPANS]


def test_hipaa_keeps_ages_over_89_and_unreadable_ones_and_drops_professions_and_states():
    assert kept_texts(NOTE, NOTE_SPANS, "hipaa") == ["Anna Lee", "Boston", "92", "elderly", "ninety-two", "Bob"]


@pytest.mark.parametrize(
    "written, age",
    [
        ("45", 45),
        ("89", 89),
        ("90", 90),
        ("102", 102),
        ("92 y.o.", 92),
        ("in her 90s", 90),
        ("late 80s", 80),
        ("ninety-two", 92),
        ("Ninety three", 93),
        ("forty five", 45),
        ("one hundred and one", 101),
        ("nineties", 90),
        ("noventa y dos", 92),
        ("ochenta y nueve", 89),
        ("ciento dos", 102),
        ("elderly", None),
    ],
)
def test_stated_age(written, age):
    assert hipaa_age_rule().stated_age(written) == age


def test_age_threshold_comes_from_the_data_file():
    data = tomllib.loads(
        resources.files("hybriddeid.resources").joinpath("profiles", "phi_sets.toml").read_text("utf-8")
    )
    rule = hipaa_age_rule()
    assert rule.min_age == data["hipaa"]["min_age"] == 90
    assert rule.keeps("90") and not rule.keeps("89")


def test_labels_the_taxonomy_does_not_know_are_kept():
    text = "code XYZ"
    assert kept_texts(text, [Span(5, 8, "SOMETHING_NEW")], "hipaa") == ["XYZ"]


def test_unknown_phi_set_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="i2b2-2014, hipaa"):
        check_phi_set("safe-harbor")
    with pytest.raises(ValueError):
        filter_spans(NOTE_SPANS, NOTE, I2B2, "HIPAA")
    assert PHI_SETS == ("i2b2-2014", "hipaa")


def test_split_spans_returns_what_is_outside_too():
    inside, outside = split_spans(NOTE_SPANS, NOTE, I2B2, "hipaa")
    assert [NOTE[s.start : s.end] for s in outside] == ["45", "teacher", "MA"]
    assert len(inside) + len(outside) == len(NOTE_SPANS)


def test_filter_document_reads_labels_through_the_taxonomy_that_knows_them():
    text = "Mrs. Jane Doe of Acme Corp"
    doc = Document(
        "d", text, tuple(spans_of(text, ("Mrs.", "TITLE"), ("Jane Doe", "PERSON"), ("Acme Corp", "ORGANIZATION")))
    )
    assert [text[s.start : s.end] for s in filter_document(doc, "hipaa").spans] == ["Jane Doe"]  # Presidio flags
    assert filter_document(doc, "i2b2-2014") is doc


# -- the taxonomies' flags ------------------------------------------------------------------------
def _raw_subtypes(name: str) -> dict:
    text = resources.files("hybriddeid.resources").joinpath("taxonomy", f"{name}.toml").read_text("utf-8")
    return tomllib.loads(text)["subtypes"]


@pytest.mark.parametrize("name", BUNDLED_TAXONOMIES)
def test_every_bundled_subtype_says_whether_it_is_a_safe_harbor_identifier(name):
    for label, entry in _raw_subtypes(name).items():
        assert isinstance(entry.get("safe_harbor"), bool), (name, label)
        assert isinstance(entry.get("hipaa"), bool), (name, label)
        assert entry["category"] in {"NAME", "PROFESSION", "LOCATION", "AGE", "DATE", "CONTACT", "ID", "OTHER"}


def test_safe_harbor_flags_of_the_i2b2_2014_subtypes():
    # departments (named wards) are kept, erring towards privacy: real notes' gold standards count them
    assert set(I2B2.labels) - I2B2.safe_harbor == {"PROFESSION", "STATE", "COUNTRY", "ROOM"}
    assert I2B2.is_safe_harbor("HOSPITAL") and I2B2.is_safe_harbor("URL") and I2B2.is_safe_harbor("AGE")
    assert not I2B2.is_hipaa("URL")  # the i2b2 scripts' HIPAA subset is another thing
    assert I2B2.is_safe_harbor("NO_SUCH_LABEL") is None


def test_safe_harbor_flags_of_the_other_taxonomies():
    meddocan, presidio = load_taxonomy("meddocan"), load_taxonomy("presidio")
    assert not meddocan.is_safe_harbor("PAIS") and not meddocan.is_safe_harbor("PROFESION")
    assert meddocan.is_safe_harbor("TERRITORIO") and not meddocan.is_safe_harbor("SEXO_SUJETO_ASISTENCIA")
    assert set(load_taxonomy("asq-phi").labels) == load_taxonomy("asq-phi").safe_harbor
    assert set(load_taxonomy("i2b2-2006").labels) == load_taxonomy("i2b2-2006").safe_harbor
    assert set(presidio.labels) - presidio.safe_harbor == {"ORGANIZATION", "TITLE", "NRP", "NATIONALITY"}
    physionet = load_taxonomy("physionet")
    # the corpus counts every label it marks; a year alone is no Safe Harbor identifier (neutral under hipaa)
    assert set(physionet.labels) - physionet.safe_harbor == {"DateYear"}
    assert physionet.category("RelativeProxyName") == "NAME" and physionet.category("DateYear") == "DATE"


def test_hipaa_leaves_out_weekdays_alone_but_keeps_dates_and_holidays():
    text = "seen Monday, MONDAY night, on Tues., on Monday 3/4, over Christmas, in Mar; el lunes"
    marked = [
        ("Monday", "DATE"),
        ("MONDAY", "DATE"),
        ("Tues.", "DATE"),
        ("Monday 3/4", "DATE"),
        ("Christmas", "DATE"),
        ("Mar", "DATE"),
        ("lunes", "DATE"),
    ]
    spans = []
    for value, label in marked:  # each value after the previous one
        start = text.index(value, spans[-1].end if spans else 0)
        spans.append(Span(start, start + len(value), label))
    assert kept_texts(text, spans, "hipaa") == ["Monday 3/4", "Christmas", "Mar"]
    assert len(kept_texts(text, spans, "i2b2-2014")) == len(spans)


def test_hipaa_keeps_years_alone_except_a_birth_year_over_89_years_ago():
    """45 CFR 164.514(b)(2)(i)(C): "all elements of dates (except year)", and any year indicating an age
    over 89: a year alone is no identifier under hipaa, unless a birth word before it makes it one."""
    text = "CABG in 1998 (2004), MI in '84; seen 3/4/1998; born in 1920; DOB 1931; born 1990; nacida en 1925"
    marked = ["1998", "2004", "'84", "3/4/1998", "1920", "1931", "1990", "1925"]
    spans = []
    for value in marked:
        start = text.index(value, spans[-1].end if spans else 0)
        spans.append(Span(start, start + len(value), "DATE"))
    assert kept_texts(text, spans, "hipaa") == ["3/4/1998", "1920", "1931", "1925"]
    assert len(kept_texts(text, spans, "i2b2-2014")) == len(spans)


def _ann_labels(folder: Path) -> set[str]:
    return {
        line.split("\t")[1].split()[0]
        for ann in folder.glob("*.ann")
        for line in ann.read_text(encoding="utf-8").splitlines()
        if line.startswith("T")
    }


@pytest.mark.parametrize("corpus, taxonomy", [("asq-phi", "asq-phi"), ("presidio-synth", "presidio")])
def test_every_label_of_the_shared_dev_sets_is_known_to_its_taxonomy(corpus, taxonomy):
    folder = SHARED / corpus / "dev"
    if not folder.is_dir():
        pytest.skip(f"needs ../shared/corpora/{corpus}")
    labels = _ann_labels(folder)
    assert labels and all(load_taxonomy(taxonomy).knows(label) for label in labels), labels
    assert guess_taxonomy(labels).name == taxonomy


# -- evaluation under a PHI set -------------------------------------------------------------------
def test_dont_care_regions_leave_out_predictions_over_them():
    text = "Mrs. Jane Doe, 64, of Acme Corp."
    gold = [
        Document(
            "n",
            text,
            tuple(
                spans_of(
                    text, ("Mrs.", "PROFESSION"), ("Jane Doe", "PATIENT"), ("64", "AGE"), ("Acme Corp", "ORGANIZATION")
                )
            ),
        )
    ]
    # "Mrs. Jane" overlaps the don't-care title and the scored name: judged (strict FP); its token "Mrs" is left out
    pred = [gold[0].with_spans(spans_of(text, ("Mrs. Jane", "PATIENT"), ("64", "DATE"), ("Acme", "ORGANIZATION")))]
    report = evaluate(gold, pred, phi_set="hipaa")
    token = report.score("binary_token")
    assert (token.tp, token.fp, token.fn) == (2, 0, 2)  # Jane and Acme; "Mrs" and "64" left out; Doe, Corp missed
    strict = report.score("strict")
    assert (strict.tp, strict.fp, strict.fn) == (0, 2, 2)  # "Mrs. Jane" and "Acme" wrong; Jane Doe, Acme Corp missed
    everything = evaluate(gold, pred).score("binary_token")
    assert (everything.tp, everything.fp, everything.fn) == (4, 0, 2)


def test_a_prediction_over_a_dont_care_region_is_left_out_under_strict_and_relaxed():
    text = "Retired teacher."
    gold = [Document("n", text, (Span(8, 15, "PROFESSION"),))]
    pred = [gold[0].with_spans([Span(0, 15, "PATIENT")])]
    # the span overlaps the region; of its tokens only "teacher" lies in it, "Retired" is a false positive
    under_hipaa = {"strict": (0, 0, 0), "relaxed": (0, 0, 0), "token": (0, 1, 0), "binary_token": (0, 1, 0)}
    everything = {"strict": (0, 1, 1), "relaxed": (0, 1, 1), "token": (0, 2, 1), "binary_token": (1, 1, 0)}
    for phi_set, expected in (("hipaa", under_hipaa), (None, everything)):
        report = evaluate(gold, pred, phi_set=phi_set)
        for criterion, counts in expected.items():
            prf = report.score(criterion)
            assert (prf.tp, prf.fp, prf.fn) == counts, (phi_set, criterion)


def test_without_a_phi_set_nothing_changes():
    text = "Anna Lee, 45, teacher from Boston, MA."
    gold = [
        Document(
            "n",
            text,
            tuple(
                spans_of(
                    text,
                    ("Anna Lee", "PATIENT"),
                    ("45", "AGE"),
                    ("teacher", "PROFESSION"),
                    ("Boston", "CITY"),
                    ("MA", "STATE"),
                )
            ),
        )
    ]
    pred = [gold[0].with_spans(spans_of(text, ("Anna", "PATIENT"), ("45", "AGE"), ("MA", "CITY")))]
    default, named = evaluate(gold, pred), evaluate(gold, pred, phi_set="i2b2-2014")
    assert default.to_dict() == named.to_dict()
    assert default.to_dict()["phi_set"] == {"name": "i2b2-2014", "gold_spans_dont_care": 0, "pred_spans_dropped": 0}
    assert "PHI set i2b2-2014" in default.format_table()


def write_corpus(folder: Path, docs: list[Document]) -> Path:
    for doc in docs:
        write_document(doc, folder, "brat")
    return folder


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["-q", *args])
    return code, capsys.readouterr().out


def scores(report: dict, criterion: str, level: str = "category") -> tuple[int, int, int]:
    prf = report["scores"][criterion][level]["all"]["micro"]
    return prf["tp"], prf["fp"], prf["fn"]


def category_recall(report: dict, category: str) -> float:
    return report["per_label"]["token"]["category"]["all"][category]["recall"]


ASQ_1 = "Guidelines for Anna Smith, 45yo teacher, seen at Mercy Hospital in Boston on June 5th, 2024 (MRN: JH-876543)."
ASQ_2 = "Dr. Lee asked about metformin; call 555-123-4567 or fax 555-765-4321, diagnosed in 2019."


def asq_fixture(root: Path) -> tuple[Path, Path]:
    """Two queries with ASQ-PHI gold labels and predictions in i2b2 2014 labels."""
    gold = [
        Document(
            "q1",
            ASQ_1,
            tuple(
                spans_of(
                    ASQ_1,
                    ("Anna Smith", "NAME"),
                    ("Mercy Hospital", "GEOGRAPHIC_LOCATION"),
                    ("Boston", "GEOGRAPHIC_LOCATION"),
                    ("June 5th, 2024", "DATE"),
                    ("JH-876543", "MEDICAL_RECORD_NUMBER"),
                )
            ),
        ),
        Document(
            "q2",
            ASQ_2,
            tuple(spans_of(ASQ_2, ("Lee", "NAME"), ("555-123-4567", "PHONE_NUMBER"), ("555-765-4321", "FAX_NUMBER"))),
        ),
    ]
    pred = [
        gold[0].with_spans(
            spans_of(
                ASQ_1,
                ("Anna Smith", "PATIENT"),
                ("45", "AGE"),
                ("teacher", "PROFESSION"),
                ("Mercy Hospital", "HOSPITAL"),
                ("Boston", "CITY"),
                ("June 5th, 2024", "DATE"),
                ("JH-876543", "MEDICALRECORD"),
            )
        ),
        gold[1].with_spans(
            spans_of(ASQ_2, ("Lee", "DOCTOR"), ("555-123-4567", "PHONE"), ("555-765-4321", "PHONE"), ("2019", "DATE"))
        ),
    ]
    return write_corpus(root / "gold", gold), write_corpus(root / "pred", pred)


def test_cli_evaluate_asq_phi_gold_against_i2b2_predictions(tmp_path, capsys):
    gold, pred = asq_fixture(tmp_path)
    code, out = run_cli(capsys, "evaluate", str(gold), str(pred), "--json", "--phi-set", "hipaa")
    report = json.loads(out)
    assert code == 0
    assert (report["taxonomy"], report["pred_taxonomy"]) == ("asq-phi", "i2b2-2014")
    # 45yo, teacher and the year alone 2019 (Safe Harbor keeps years) are outside hipaa
    assert report["phi_set"] == {"name": "hipaa", "gold_spans_dont_care": 0, "pred_spans_dropped": 3}
    assert scores(report, "binary_token", "subtype") == (17, 0, 0)
    assert scores(report, "strict") == (8, 0, 0)
    assert scores(report, "strict", "subtype") == (1, 7, 7)  # label sets differ: only DATE is spelled alike
    assert category_recall(report, "NAME") == category_recall(report, "LOCATION") == 1.0

    code, out = run_cli(capsys, "evaluate", str(gold), str(pred), "--json")
    report = json.loads(out)
    assert report["phi_set"]["name"] == "i2b2-2014"
    assert scores(report, "binary_token", "subtype") == (17, 3, 0)
    assert scores(report, "strict") == (8, 3, 0)


PRESIDIO_1 = "Mrs. Jane Doe, 64, works at Acme Corp in Oslo, Norway; she is Norwegian. Born on 3 May 1959."
PRESIDIO_2 = "Contact John at john@example.com or 212-555-0199; he is 93 years old. Ms. Ruiz is a nurse."


def presidio_fixture(root: Path) -> tuple[Path, Path]:
    """Two sentences with Presidio gold labels (some outside the hipaa set) and i2b2 2014 predictions."""
    gold = [
        Document(
            "s1",
            PRESIDIO_1,
            tuple(
                spans_of(
                    PRESIDIO_1,
                    ("Mrs.", "TITLE"),
                    ("Jane Doe", "PERSON"),
                    ("64", "AGE"),
                    ("Acme Corp", "ORGANIZATION"),
                    ("Oslo", "GPE"),
                    ("Norway", "GPE"),
                    ("Norwegian", "NRP"),
                    ("3 May 1959", "DATE_TIME"),
                )
            ),
        ),
        Document(
            "s2",
            PRESIDIO_2,
            tuple(
                spans_of(
                    PRESIDIO_2,
                    ("John", "PERSON"),
                    ("john@example.com", "EMAIL_ADDRESS"),
                    ("212-555-0199", "PHONE_NUMBER"),
                    ("93", "AGE"),
                    ("Ms.", "TITLE"),
                    ("Ruiz", "PERSON"),
                    ("nurse", "TITLE"),
                )
            ),
        ),
    ]
    pred = [
        gold[0].with_spans(
            spans_of(
                PRESIDIO_1,
                ("Jane Doe", "PATIENT"),
                ("64", "AGE"),
                ("Acme Corp", "ORGANIZATION"),
                ("Oslo", "CITY"),
                ("Norway", "COUNTRY"),
                ("3 May 1959", "DATE"),
            )
        ),
        gold[1].with_spans(
            spans_of(
                PRESIDIO_2,
                ("John", "PATIENT"),
                ("john@example.com", "EMAIL"),
                ("212-555-0199", "PHONE"),
                ("93", "AGE"),
                ("Ms. Ruiz", "DOCTOR"),
                ("nurse", "PROFESSION"),
            )
        ),
    ]
    return write_corpus(root / "gold", gold), write_corpus(root / "pred", pred)


def test_cli_evaluate_presidio_gold_with_dont_care_regions(tmp_path, capsys):
    gold, pred = presidio_fixture(tmp_path)
    code, out = run_cli(capsys, "evaluate", str(gold), str(pred), "--json", "--phi-set", "hipaa")
    report = json.loads(out)
    assert code == 0 and (report["taxonomy"], report["pred_taxonomy"]) == ("presidio", "i2b2-2014")
    # don't care: Mrs., 64, Acme Corp, Norwegian, Ms., nurse; dropped: AGE 64, COUNTRY Norway, PROFESSION nurse
    assert report["phi_set"] == {"name": "hipaa", "gold_spans_dont_care": 6, "pred_spans_dropped": 3}
    # the ORGANIZATION prediction over Acme Corp and the token "Ms" are left out; Norway (GPE) is missed
    assert scores(report, "binary_token", "subtype") == (15, 0, 1)
    assert scores(report, "strict") == (7, 1, 2)  # "Ms. Ruiz" touches the scored "Ruiz": judged, wrong start
    assert category_recall(report, "NAME") == 1.0 and category_recall(report, "LOCATION") == 0.5

    code, out = run_cli(capsys, "evaluate", str(gold), str(pred), "--json")
    report = json.loads(out)
    assert scores(report, "binary_token", "subtype") == (21, 0, 2)  # Mrs and Norwegian missed

    code, out = run_cli(capsys, "evaluate", str(gold), str(pred), "--phi-set", "hipaa")
    assert "PHI set hipaa" in out and "6 gold spans (don't care), 3 predicted spans (dropped)" in out
    assert "Jane" not in out  # no note text in the report


def test_cli_rejects_an_unknown_phi_set(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", str(tmp_path), str(tmp_path), "--phi-set", "gdpr"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# -- the pipeline ---------------------------------------------------------------------------------
TEXT = "Mr. John Smith, a 92 year old retired teacher from Boston, MA, seen on 03/14/2024 at Mass General."


@pytest.fixture(scope="module")
def english() -> Pipeline:
    return Pipeline.load()


def test_bundled_models_default_to_i2b2_2014(english):
    assert english.phi_set == "i2b2-2014" and english.taxonomy.name == "i2b2-2014"
    assert Pipeline.load("es").taxonomy.name == "meddocan"


def test_pipeline_filters_its_merged_spans_per_call(english):
    doc = Document("n", TEXT)
    everything = english.combine(
        doc,
        {
            "rule": spans_of(
                TEXT,
                ("John Smith", "PATIENT"),
                ("92", "AGE"),
                ("teacher", "PROFESSION"),
                ("MA", "STATE"),
                ("03/14/2024", "DATE"),
            )
        },
    )
    assert [TEXT[s.start : s.end] for s in everything] == ["John Smith", "92", "teacher", "MA", "03/14/2024"]
    by_source = {"rule": everything}
    assert [TEXT[s.start : s.end] for s in english.combine(doc, by_source, phi_set="hipaa")] == [
        "John Smith",
        "92",
        "03/14/2024",
    ]
    full, safe_harbor = english.predict(TEXT), english.predict(TEXT, phi_set="hipaa")
    assert "STATE" in {s.label for s in full} and "STATE" not in {s.label for s in safe_harbor}
    assert set(safe_harbor) <= set(full)
    assert english.annotate(doc, phi_set="hipaa").spans == tuple(sorted(safe_harbor))
    assert ", MA," in english.deidentify(TEXT, phi_set="hipaa").text
    assert ", MA," not in english.deidentify(TEXT).text
    with pytest.raises(ValueError, match="unknown PHI set"):
        english.predict(TEXT, phi_set="Safe Harbor")


def test_phi_set_config_round_trips_through_disk(english, tmp_path):
    # a model saved before PHI sets existed has none in its config and loads as i2b2-2014
    import shutil

    shutil.copytree(Path(str(resources.files("hybriddeid.models").joinpath("es"))), tmp_path / "old")
    config = tmp_path / "old" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8").replace('phi_set = "i2b2-2014"\n', ""), encoding="utf-8")
    assert "phi_set" not in config.read_text(encoding="utf-8")
    assert Pipeline.load(tmp_path / "old").phi_set == "i2b2-2014"
    english.config["pipeline"]["phi_set"] = "hipaa"
    try:
        english.to_disk(tmp_path / "model")
    finally:
        english.config["pipeline"]["phi_set"] = "i2b2-2014"
    assert load_config(tmp_path / "model" / "config.toml")["pipeline"]["phi_set"] == "hipaa"
    reloaded = Pipeline.load(tmp_path / "model")
    assert reloaded.phi_set == "hipaa"
    assert reloaded.predict(TEXT) == english.predict(TEXT, phi_set="hipaa")
    assert reloaded.predict(TEXT, phi_set="i2b2-2014") == english.predict(TEXT)


def test_unknown_phi_set_in_a_config_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="phi_set must be one of i2b2-2014, hipaa"):
        build_config({"pipeline": {"phi_set": "safe_harbor"}})
    (tmp_path / "config.toml").write_text('[pipeline]\nphi_set = "HIPAA"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="config.toml: phi_set"):
        load_config(tmp_path / "config.toml")
    assert build_config()["pipeline"]["phi_set"] == "i2b2-2014"


# -- annotate and deid ----------------------------------------------------------------------------
def test_cli_annotate_and_deid_with_phi_set(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "n1.txt").write_text(TEXT, encoding="utf-8")
    assert main(["-q", "annotate", str(notes), str(tmp_path / "all")]) == 0
    assert main(["-q", "annotate", str(notes), str(tmp_path / "hipaa"), "--phi-set", "hipaa"]) == 0
    labels = {name: {s.label for s in read_corpus(tmp_path / name)[0].spans} for name in ("all", "hipaa")}
    assert "STATE" in labels["all"] and "STATE" not in labels["hipaa"] and "AGE" in labels["hipaa"]

    assert main(["-q", "deid", str(notes), str(tmp_path / "deid"), "--phi-set", "hipaa"]) == 0
    written = (tmp_path / "deid" / "n1.txt").read_text(encoding="utf-8")
    assert ", MA," in written and "John" not in written
    assert json.loads((tmp_path / "deid" / "audit" / "run.json").read_text())["phi_set"] == "hipaa"


def test_deid_use_annotations_filters_the_inputs_own_spans(tmp_path):
    gold, _ = presidio_fixture(tmp_path)
    assert (
        main(
            [
                "-q",
                "deid",
                str(gold),
                str(tmp_path / "out"),
                "--use-annotations",
                "--language",
                "en",
                "--phi-set",
                "hipaa",
            ]
        )
        == 0
    )
    written = (tmp_path / "out" / "s1.txt").read_text(encoding="utf-8")
    assert written.startswith(
        "Mrs. [**NAME**], 64, works at Acme Corp in [**LOCATION**], [**LOCATION**]; she is Norwegian."
    )


def test_spark_note_spans_apply_the_phi_set_without_spark(english):
    from hybriddeid.integrations.spark import note_spans

    given = [
        {"start": s.start, "end": s.end, "label": s.label, "source": "gold", "score": 1.0}
        for s in spans_of(TEXT, ("John Smith", "PATIENT"), ("teacher", "PROFESSION"), ("MA", "STATE"))
    ]
    records, error = note_spans(None, "n1", TEXT, given, 10_000, "hipaa")
    assert error is None and [r["label"] for r in records] == ["PATIENT"]
    records, error = note_spans(english, "n1", TEXT, None, 10_000, "hipaa")
    assert error is None and "STATE" not in {r["label"] for r in records}
    assert [r["label"] for r in note_spans(None, "n1", TEXT, given, 10_000)[0]] == ["PATIENT", "PROFESSION", "STATE"]
