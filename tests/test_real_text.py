"""tools/real_text.py: the English dev halves relabelled into i2b2 2014 types for training the default."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from hybriddeid.core.document import Document, Span
from hybriddeid.core.taxonomy import load_taxonomy

TOOLS = Path(__file__).resolve().parents[1] / "tools"


@pytest.fixture(scope="module")
def real_text():
    spec = importlib.util.spec_from_file_location("real_text", TOOLS / "real_text.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_text"] = module
    spec.loader.exec_module(module)
    return module


def gold(text: str, *marked: tuple[str, str]) -> Document:
    spans = []
    for value, label in marked:
        start = text.index(value)
        spans.append(Span(start, start + len(value), label, "gold"))
    return Document("n", text, tuple(spans))


def labelled(doc: Document) -> list[tuple[str, str]]:
    return [(doc.span_text(s), s.label) for s in doc.spans]


def test_asq_titles_cut_places_split_and_ages_added(real_text):
    doc = gold(
        "Plan for a 70yo M, Dr. Anna S., seen at UCSF Med Ctr in Dallas, TX on Jan 8th, 2023 (MRN: 12345)?",
        ("Dr. Anna S.", "NAME"),
        ("UCSF Med Ctr in Dallas, TX", "GEOGRAPHIC_LOCATION"),
        ("Jan 8th, 2023", "DATE"),
        ("12345", "MEDICAL_RECORD_NUMBER"),
    )
    out = real_text.Relabeller.for_corpus("asq").relabel(doc)
    assert labelled(out) == [
        ("70", "AGE"),
        ("Anna S.", "DOCTOR"),
        ("UCSF Med Ctr", "HOSPITAL"),
        ("Dallas", "CITY"),
        ("TX", "STATE"),
        ("Jan 8th, 2023", "DATE"),
        ("12345", "MEDICALRECORD"),
    ]


def test_presidio_honorifics_and_nationalities_dropped_jobs_kept(real_text):
    doc = gold(
        "Mr. Ström, a Swedish technical writer, lives in Norway.",
        ("Mr.", "TITLE"),
        ("Ström", "PERSON"),
        ("Swedish", "NRP"),
        ("technical writer", "TITLE"),
        ("Norway", "GPE"),
    )
    out = real_text.Relabeller.for_corpus("presidio").relabel(doc)
    assert labelled(out) == [("Ström", "PATIENT"), ("technical writer", "PROFESSION"), ("Norway", "COUNTRY")]


def test_every_training_label_is_an_i2b2_2014_subtype(real_text):
    taxonomy = load_taxonomy("i2b2-2014")
    labels_file = real_text.LABELS_FILE.read_text("utf-8")
    import tomllib

    data = tomllib.loads(labels_file)
    for corpus in ("asq", "presidio"):
        assert set(data[corpus]["labels"].values()) <= set(taxonomy.labels), corpus


@pytest.mark.skipif(
    not (TOOLS.parents[1] / "shared" / "corpora" / "asq-phi" / "dev").is_dir(), reason="../shared/corpora not present"
)
def test_dev_halves_relabel_without_loss_of_names_and_with_flat_spans(real_text):
    for corpus in ("asq", "presidio"):
        docs = real_text.load_relabelled(corpus)
        assert docs and all(a.end <= b.start for doc in docs for a, b in zip(doc.spans, doc.spans[1:]))
        folds = real_text.folds(docs, 3, seed=0)
        assert sorted(doc.name for part in folds for doc in part) == sorted(doc.name for doc in docs)
        assert {len(part) for part in folds} <= {len(docs) // 3, len(docs) // 3 + 1}


def test_physionet_word_by_word_spans_joined_ages_added_and_edges_trimmed(real_text):
    doc = gold(
        "78 yo M at HOLY CROSS since nov. 2016, DR A. FORMAN seen x 15yrs; S. here",
        ("HOLY", "Location"),
        ("CROSS", "Location"),
        ("nov.", "Date"),
        ("2016", "DateYear"),
        ("A.", "HCPName"),
        ("FORMAN", "HCPName"),
        ("S. ", "PTNameInitial"),
    )
    out = real_text.Relabeller.for_corpus("physionet").relabel(doc)
    assert labelled(out) == [
        ("78", "AGE"),
        ("HOLY CROSS", "CITY"),
        ("nov. 2016", "DATE"),
        ("A. FORMAN", "DOCTOR"),
        ("S.", "PATIENT"),
    ]


@pytest.mark.skipif(
    not (TOOLS.parents[1] / "shared" / "corpora" / "physionet-deid" / "dev").is_dir(),
    reason="../shared/corpora not present",
)
def test_physionet_folds_keep_each_patient_in_one_fold(real_text):
    docs = real_text.load_relabelled("physionet")
    parts = real_text.folds(docs, 5, seed=0)
    fold_of = {}
    for i, part in enumerate(parts):
        for doc in part:
            assert fold_of.setdefault(real_text.group_of(doc), i) == i
    assert len(set(fold_of)) == 94 and all(doc.meta["not_in_lexicon"] for doc in docs)
