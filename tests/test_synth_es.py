"""The Spanish generated notes (resources/languages/es/synth.toml) the bundled Spanish model learns
beside MEDDOCAN: exact offsets, MEDDOCAN's labels, and the contexts MEDDOCAN's case reports lack."""

from __future__ import annotations

import re

import pytest

from hybriddeid.core.document import Document
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.synth import check_offsets, generate_corpus, load_synth_resources

N = 200


@pytest.fixture(scope="module", params=["train", "test"])
def corpus(request) -> list[Document]:
    return list(generate_corpus(N, seed=5, mix=request.param, language="es"))


def _spans(corpus: list[Document], label: str) -> list[tuple[Document, int, int]]:
    return [(doc, s.start, s.end) for doc in corpus for s in doc.spans if s.label == label]


def test_spans_hold_their_values_and_speak_meddocan(corpus: list[Document]) -> None:
    labels = set(load_taxonomy("meddocan").labels)
    for doc in corpus:
        assert check_offsets(doc) == [], doc.name
        assert {s.label for s in doc.spans} <= labels, doc.name
        assert all(a.end <= b.start for a, b in zip(doc.spans, doc.spans[1:])), "spans never overlap"
    assert not any(re.search(r"\{|\}", doc.text) for doc in corpus), "every template field is filled"


@pytest.mark.parametrize(
    "label, title",
    [
        # "la Dra. Ortega", "el Dr. Sanz": a clinician
        ("NOMBRE_PERSONAL_SANITARIO", r"\bDra?\. $"),
        # "la Sra. Ortega", "al Sr. Sanz" in sentences: a patient
        ("NOMBRE_SUJETO_ASISTENCIA", r"\b(?:[Ee]l|[Ll]a|al|a la|del|de la) Sra?\. $"),
    ],
)
def test_a_surname_alone_after_a_title_is_the_span_and_the_title_is_not(
    corpus: list[Document], label: str, title: str
) -> None:
    titled = [
        doc.text[start:end]
        for doc, start, end in _spans(corpus, label)
        if re.search(title, doc.text[max(0, start - 10) : start])
    ]
    assert len(titled) > N // 4
    assert not any(re.match(r"(?:Dra?|Sra?)\.", value) for value in titled)


def test_relatives_are_named_in_the_narrative_beside_their_relation(corpus: list[Document]) -> None:
    """Family mentions: the relative's name and the relation word, each its own span, as MEDDOCAN
    labels them (FAMILIARES_SUJETO_ASISTENCIA), in sentences rather than header fields only."""
    relations = set(load_synth_resources("es").data["vocab"]["relation"])
    family = [doc.text[start:end] for doc, start, end in _spans(corpus, "FAMILIARES_SUJETO_ASISTENCIA")]
    assert {"hija", "esposo", "marido"} <= {value.lower() for value in family}
    names = [value for value in family if value.lower() not in relations]
    assert len(names) > N // 2 and all(value[0].isupper() for value in names)


def test_patients_and_towns_stand_in_headers_and_sentences(corpus: list[Document]) -> None:
    patients = _spans(corpus, "NOMBRE_SUJETO_ASISTENCIA")
    in_sentences = [
        1 for doc, start, _ in patients if not re.search(r":\s*$", doc.text[doc.text.rfind("\n", 0, start) + 1 : start])
    ]
    assert len(in_sentences) > N // 2
    towns = [doc.text[start:end] for doc, start, end in _spans(corpus, "TERRITORIO")]
    assert len(set(towns)) > N // 2  # the pack's towns and Faker's, not a handful
    with_province = sum(
        1
        for doc in corpus
        for m in re.finditer(r"\w \((\w[\w ]*)\)", doc.text)
        if any(s.label == "TERRITORIO" and s.start == m.start(1) for s in doc.spans)
    )
    assert with_province > N // 10


def test_names_come_from_many_origins() -> None:
    """The pack's own name lists and Faker locales of several countries ("dictionary" in the mix)."""
    docs = list(generate_corpus(N, seed=6, language="es"))
    names = {doc.span_text(s) for doc in docs for s in doc.spans if s.label == "NOMBRE_SUJETO_ASISTENCIA"}
    assert len(names) > N // 2
    assert any(not c.isascii() and c not in "áéíóúñüÁÉÍÓÚÑÜ" for name in names for c in name)


def test_same_seed_same_notes() -> None:
    a = [(d.text, d.spans) for d in generate_corpus(20, seed=3, language="es")]
    b = [(d.text, d.spans) for d in generate_corpus(20, seed=3, language="es")]
    assert a == b


def _line_before(doc: Document, start: int) -> str:
    return doc.text[doc.text.rfind("\n", 0, start) + 1 : start]


def test_streets_keep_number_floor_and_door_in_their_span(corpus: list[Document]) -> None:
    """ "C/ Mayor 12, 3º B" is one CALLE span, as MEDDOCAN marks it: no floor or door is left after it."""
    streets = _spans(corpus, "CALLE")
    with_floor = [doc.text[start:end] for doc, start, end in streets if re.search(r"\d+, \d+º", doc.text[start:end])]
    assert len(with_floor) > N // 10
    assert not any(re.match(r",? ?\d+º", doc.text[end : end + 6]) for doc, _, end in streets)


def test_addresses_stand_inside_sentences_with_their_postcode_and_town(corpus: list[Document]) -> None:
    """Residence, home visits and transfers name the street in running text, not only after "Domicilio:"."""
    in_sentences = [
        (doc, end) for doc, start, end in _spans(corpus, "CALLE") if not re.search(r":\s*$", _line_before(doc, start))
    ]
    assert len(in_sentences) > N // 4
    towns = {(doc.name, s.start) for doc in corpus for s in doc.spans if s.label == "TERRITORIO"}
    followed = [
        doc
        for doc, end in in_sentences
        if (m := re.match(r", (?:\d{5} )?", doc.text[end:])) and (doc.name, end + m.end()) in towns
    ]
    assert len(followed) > N // 8


# Words before a town that say where the patient was born, lives or comes from (issue 43).
_ORIGIN_CUES = {
    "natural de": r"natural de",
    "vecino/a de": r"vecin[oa](?:/a)? de",
    "residente en": r"residente en",
    "procedente de": r"procedente de",
    "trasladado/a desde": r"trasladad[oa](?:/a)? desde",
    "nacido/a en": r"nacid[oa](?:/a)? en",
    "con domicilio en": r"con domicilio en",
    "originario/a de": r"(?:originari|oriund)[oa] de",
}


def test_towns_follow_the_words_of_birth_residence_origin_and_transfer(corpus: list[Document]) -> None:
    """A town (TERRITORIO) right after each of these words, in sentences and fields, and towns written
    in lower case after a field label, as typed forms have them."""
    found = {name: 0 for name in _ORIGIN_CUES}
    lower_in_fields = 0
    for doc, start, end in _spans(corpus, "TERRITORIO"):
        before, value = doc.text[max(0, start - 40) : start], doc.text[start:end]
        for name, cue in _ORIGIN_CUES.items():
            found[name] += bool(re.search(rf"(?i)\b{cue}:?\s+$", before))
        lower_in_fields += value == value.lower() and bool(re.search(r":\s*$", before))
    assert all(found.values()), found
    assert sum(found.values()) > N // 5
    assert lower_in_fields > N // 40


def test_relatives_are_named_then_their_relation_after_a_comma_or_in_parentheses(corpus: list[Document]) -> None:
    """ "Acompañado por Ana, hija de la paciente", "se informa a Luis (hermano)", "Acompañante: Ana (hija)":
    the name and the relation word each their own span, the name first."""
    relations = set(load_synth_resources("es").data["vocab"]["relation"])
    after_a_cue = of_the_patient = in_a_field = 0
    for doc in corpus:
        family = [s for s in doc.spans if s.label == "FAMILIARES_SUJETO_ASISTENCIA"]
        for name, relation in zip(family, family[1:]):
            if doc.span_text(name).lower() in relations or doc.span_text(relation) not in relations:
                continue
            if doc.text[name.end : relation.start] not in (", ", " ("):
                continue
            line = _line_before(doc, name.start)
            after_a_cue += bool(re.search(r"(?i)(?:acompañad[oa]|se informa|se contacta|informamos)[^.]*$", line))
            in_a_field += bool(re.search(r"(?i)acompaña[^:]*:\s*$", line))
            of_the_patient += bool(re.match(r" (?:del|de la) paciente", doc.text[relation.end :]))
    assert after_a_cue > N // 8
    assert of_the_patient > N // 40
    assert in_a_field > N // 40
