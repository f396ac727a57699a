"""The synthetic-note generator: exact offsets, determinism, held-out mixes, i2b2 XML round trip, CLI."""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.io import read_corpus, write_documents
from hybriddeid.synth import check_offsets, generate_corpus, load_synth_resources
from hybriddeid.synth.generator import generate_note
from hybriddeid.synth.template import NoteWriter, TemplateError, alternative_fields, render

N = 250


@pytest.fixture(scope="module", params=["train", "test"])
def corpus(request) -> list[Document]:
    return list(generate_corpus(N, seed=11, mix=request.param))


def test_every_span_holds_exactly_the_value_written(corpus: list[Document]) -> None:
    # one-line queries and general sentences hold a few spans; full notes are dense with PHI
    short_types = {"query", "query_free", "general"}
    full_notes = [doc for doc in corpus if doc.meta["note_type"] not in short_types]
    assert sum(len(doc.spans) for doc in full_notes) > 20 * len(full_notes)
    for doc in corpus:
        assert check_offsets(doc) == [], doc.name
        assert all(doc.span_text(s) == doc.span_text(s).strip() and doc.span_text(s) for s in doc.spans)
        assert all(a.end <= b.start for a, b in zip(doc.spans, doc.spans[1:])), "spans never overlap"


def test_layout_variants_are_all_exercised(corpus: list[Document]) -> None:
    """Wrapped lines, upper-case notes, CRLF notes and PHI-free notes all occur, offsets exact in each."""
    assert any("\r\n" in doc.text for doc in corpus)
    assert any(doc.text == doc.text.upper() and doc.spans for doc in corpus)
    assert any(not doc.spans for doc in corpus)
    assert len({doc.text for doc in corpus}) == N


def test_training_notes_come_flattened_too_and_the_test_mix_is_drawn_as_before(corpus: list[Document]) -> None:
    """The train mix writes some multi-line notes on one line (flatten_rate), offsets exact; the test
    mix has no flatten_rate and so keeps its notes, line breaks and all."""
    flat = [doc for doc in corpus if "\n" not in doc.text and len(doc.text) > 400]
    if corpus[0].meta["mix"] == "train":
        assert len(flat) >= 0.05 * N
        assert all(check_offsets(doc) == [] and "\r" not in doc.text for doc in flat)
    else:
        assert flat == []


def test_every_i2b2_category_occurs(corpus: list[Document]) -> None:
    taxonomy = load_taxonomy("i2b2-2014")
    categories = Counter(taxonomy.category(s.label) for doc in corpus for s in doc.spans)
    assert set(categories) == {"NAME", "PROFESSION", "LOCATION", "AGE", "DATE", "CONTACT", "ID"}
    labels = {s.label for doc in corpus for s in doc.spans}
    assert {
        "PATIENT",
        "DOCTOR",
        "HOSPITAL",
        "STREET",
        "CITY",
        "ZIP",
        "PHONE",
        "FAX",
        "EMAIL",
        "SSN",
        "MEDICALRECORD",
        "HEALTHPLAN",
        "ACCOUNT",
        "DEVICE",
        "VEHICLE",
        "IDNUM",
    } <= labels


def test_check_offsets_reports_a_wrong_span() -> None:
    doc = next(generate_corpus(1, seed=3))
    broken = Document(doc.name, doc.text, (Span(0, 3, "DATE"), *doc.spans[1:]), doc.meta)
    assert check_offsets(broken) != []


def test_same_seed_same_notes_other_seed_other_notes() -> None:
    first = [doc.text for doc in generate_corpus(20, seed=5)]
    assert first == [doc.text for doc in generate_corpus(20, seed=5)]
    assert not set(first) & {doc.text for doc in generate_corpus(20, seed=6)}
    assert not set(first) & {doc.text for doc in generate_corpus(20, seed=5, mix="test")}


def test_the_test_mix_holds_out_note_types_layouts_and_name_locales() -> None:
    res = load_synth_resources("en")
    train, test = res.mix("train"), res.mix("test")
    for key in ("note_types", "label_styles", "header_styles", "date_formats", "name_locales"):
        assert set(test[key]) - set(train[key]), f"the test mix holds nothing out in {key}"
    held_out = set(test["note_types"]) - set(train["note_types"])
    seen = Counter(doc.meta["note_type"] for doc in generate_corpus(300, seed=1, mix="train"))
    assert not held_out & set(seen)
    assert held_out <= {doc.meta["note_type"] for doc in generate_corpus(300, seed=1, mix="test")}


def test_names_of_locales_written_in_another_script_come_romanized() -> None:
    from hybriddeid.surrogates.generator import faker_for, name_word

    latin = re.compile(r"[A-Za-z][A-Za-z' -]*")
    for locale in ("ja_JP", "zh_CN"):
        faker = faker_for(locale)
        faker.seed_instance(7)
        words = [name_word(faker, kind, sex) for kind in ("first", "last") for sex in ("female", "male")]
        assert all(latin.fullmatch(word) for word in words), words
    faker = faker_for("en_US")
    faker.seed_instance(7)
    assert (
        name_word(faker, "first", "female") in faker_for("en_US").provider("faker.providers.person").first_names_female
    )


def test_i2b2_xml_round_trip_keeps_text_and_spans(tmp_path: Path) -> None:
    docs = list(generate_corpus(40, seed=9, mix="test"))
    write_documents(docs, tmp_path, "i2b2")
    back = {doc.name: doc for doc in read_corpus(tmp_path)}
    for doc in docs:
        assert back[doc.name].text == doc.text
        assert [(s.start, s.end, s.label) for s in back[doc.name].spans] == [
            (s.start, s.end, s.label) for s in doc.spans
        ]


def test_cli_writes_n_notes(tmp_path: Path) -> None:
    assert main(["-q", "synth", "--n", "7", "--out", str(tmp_path / "out"), "--seed", "4", "--mix", "test"]) == 0
    docs = read_corpus(tmp_path / "out")
    assert len(docs) == 7 and all(doc.name.startswith("synth-test-4-") for doc in docs)
    assert main(["-q", "synth", "--n", "0", "--out", str(tmp_path / "none")]) == 2


class _Context:
    def choose(self, options: list[str]) -> str:
        return options[-1]

    def slot(self, name: str) -> tuple[str, str]:
        if name != "patient":
            raise TemplateError(f"unknown PHI slot {name!r}")
        return "Ann Lee", "PATIENT"

    def vocab(self, name: str) -> str:
        return "aspirin"

    def gendered(self, word: str) -> str:
        return "she"

    def field_label(self, label: str) -> str:
        return f"{label}: "


def test_template_fields_nest_and_record_their_spans() -> None:
    out = NoteWriter()
    render("{@Name|Patient}{patient}; {^he} takes {~drug}{| daily with {patient}}.", _Context(), out)
    text = out.getvalue()
    assert text == "Patient: Ann Lee; she takes aspirin daily with Ann Lee."
    assert [text[s.start : s.end] for s in out.spans] == ["Ann Lee", "Ann Lee"] == out.values
    with pytest.raises(TemplateError, match="unknown PHI slot 'nobody'"):
        render("{nobody}", _Context(), NoteWriter())
    with pytest.raises(TemplateError, match="unbalanced"):
        render("{patient", _Context(), NoteWriter())


def test_slot_case_modifiers_recase_the_value_and_its_span() -> None:
    """``{slot:case}`` writes the cast's value in another case (real notes write names and places in
    capitals or lower case), the span still on exactly the value; an unknown case is an error."""
    out = NoteWriter()
    render("{patient:upper} / {patient:lower} / {patient:any} / {patient:title}", _Context(), out)
    text = out.getvalue()
    assert text == "ANN LEE / ann lee / Ann Lee / Ann Lee"  # _Context.choose takes the last: "title"
    assert [text[s.start : s.end] for s in out.spans] == ["ANN LEE", "ann lee", "Ann Lee", "Ann Lee"] == out.values
    with pytest.raises(TemplateError, match="unknown case 'shout'"):
        render("{patient:shout}", _Context(), NoteWriter())


def test_the_icu_nursing_option_writes_places_in_any_case_and_slash_series_as_no_phi() -> None:
    """With the "nursing_icu" note type and the "us_facilities" templates switched on (both off in the
    shipped mixes, which draw as before), notes name hospitals and cities in lower case and capitals
    too, and carry ventilator and lab slash series ("12/5", "7.38/42/98/24") that are not PHI."""
    res = load_synth_resources("en")
    assert res.mix("train")["note_types"]["nursing_icu"] == 0 and not res.mix("train")["extra_templates"]
    mix = {**res.mix("train"), "note_types": {"nursing_icu": 1}, "extra_templates": ["us_facilities"]}
    on = replace(res, data={**res.data, "mix": {**res.data["mix"], "icu": mix}})
    notes = [generate_note(on, "icu", random.Random(i), f"icu-{i}") for i in range(120)]
    assert all(check_offsets(doc) == [] for doc in notes)
    places = [doc.span_text(s) for doc in notes for s in doc.spans if s.label in ("HOSPITAL", "CITY")]
    assert any(p.islower() for p in places) and any(p.isupper() for p in places)
    assert any(p.endswith(("Adventist Hospital", "Nursing Home", "Manor", "Hospice", " Rehab")) for p in places)
    series = [
        (doc, m.start()) for doc in notes for m in re.finditer(r"\b\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?){2,}", doc.text)
    ]
    assert series and not any(s.start <= at < s.end for doc, at in series for s in doc.spans)


def test_short_texts_and_terse_notes_carry_their_phenomena() -> None:
    """The train mix holds one-line queries with first names and initials, and lower-case nursing
    notes whose vital-sign ranges are not PHI while lower-case names are."""
    notes = list(generate_corpus(200, seed=5, mix="train"))
    by_type = Counter(doc.meta["note_type"] for doc in notes)
    assert by_type["query"] and by_type["nursing_terse"] and by_type["general"]
    queries = [doc for doc in notes if doc.meta["note_type"] == "query"]
    assert all(len(doc.text) < 400 and doc.spans for doc in queries)
    terse = [doc for doc in notes if doc.meta["note_type"] == "nursing_terse"]
    lower_names = [doc.span_text(s) for doc in terse for s in doc.spans if s.label in ("PATIENT", "DOCTOR")]
    assert any(name.islower() for name in lower_names)
    ranges = [(doc, m.start()) for doc in terse for m in re.finditer(r"\b\d{2,3}-\d{2,3}\b", doc.text)]
    assert ranges and not any(s.start <= at < s.end for doc, at in ranges for s in doc.spans)


def _templates_of(data: object) -> list[str]:
    """Every string of a parsed synth.toml that holds a template field."""
    if isinstance(data, str):
        return [data] if "{" in data else []
    if isinstance(data, dict):
        return [t for value in data.values() for t in _templates_of(value)]
    if isinstance(data, list):
        return [t for value in data for t in _templates_of(value)]
    return []


# Slips the bundled models learned, kept until a retraining fixes them (fixing one redraws every note after it).
# The last, "traveled to {location_other|country}", was fixed with issue 43's work-history lines.
KNOWN_SLOT_SLIPS: dict[str, list[tuple[str, str]]] = {
    "en": [],
    "es": [],
}


@pytest.mark.parametrize("language", ["en", "es"])
def test_no_alternative_is_a_bare_slot_name(language: str) -> None:
    """``{city|country}`` writes the words "city" or "country", not a place: an alternative that is a
    slot's name must be written ``{{city}|{country}}``. Such a slip taught the model that a word after
    "traveled to" is not PHI."""
    from hybriddeid.synth.generator import Note

    res = load_synth_resources(language)
    slots = set(Note(res, res.mix("train"), random.Random(0)).slots)
    slips = [
        (template, option)
        for template in _templates_of(res.data)
        for alternatives in alternative_fields(template)
        for option in alternatives
        if option.partition(":")[0] in slots
    ]
    assert len(slots) > 30
    assert [slip for slip in slips if slip not in KNOWN_SLOT_SLIPS[language]] == []
    assert [slip for slip in KNOWN_SLOT_SLIPS[language] if slip not in slips] == []  # fixed: drop it here
