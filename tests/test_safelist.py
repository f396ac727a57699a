"""The clinical safe-list: which merged spans it drops, which it must never drop, and its wiring."""

from __future__ import annotations

import pytest

from hybriddeid.classifiers.safelist import SafeList, load_safelist
from hybriddeid.core.document import Span
from hybriddeid.pipeline.core import ConfigError, build_config
from hybriddeid.synth import load_synth_resources


def spans_of(text: str, *surfaces: str) -> list[Span]:
    out = []
    for surface in surfaces:
        start = text.index(surface)
        out.append(Span(start, start + len(surface), "PATIENT", "token"))
    return out


@pytest.mark.parametrize(
    ("language", "text", "surface"),
    [
        ("en", "Foley catheter removed.", "Foley"),
        ("en", "History of Parkinson's disease.", "Parkinson's"),
        ("en", "Babinski downgoing bilaterally.", "Babinski"),
        ("en", "Apgar scores 8 and 9.", "Apgar"),
        ("en", "positive Murphy sign", "Murphy"),
        ("en", "Bell's palsy on the left", "Bell"),
        ("en", "Continue Lasix and Coumadin.", "Lasix"),
        ("en", "GCS 15 per Glasgow Coma Scale", "Glasgow"),
        ("es", "En tratamiento con Sintrom.", "Sintrom"),
        ("es", "SEGURIL 40 MG CADA 24 H", "SEGURIL"),
        ("es", "Demencia tipo Alzheimer avanzada.", "Alzheimer"),
        ("es", "Índice de Barthel 60.", "Barthel"),
        ("es", "escala de Glasgow de 15 puntos", "Glasgow"),
        ("es", "Antecedente de enfermedad de Graves.", "Graves"),
        ("en", "Reed-Sternberg cells are seen.", "Reed-Sternberg"),  # a hyphenated eponym is one word
        ("en", "PMH: TIA NG", "TIA NG"),  # two safe words in capitals: abbreviations, not a name in mixed case
        ("en", "Passy Muir valve tolerated.", "Passy Muir"),  # a two-name eponym is listed as a phrase
    ],
)
def test_safe_spans_are_dropped(language: str, text: str, surface: str) -> None:
    kept, dropped = load_safelist(language).split(text, spans_of(text, surface))
    assert kept == [] and [text[s.start : s.end] for s in dropped] == [surface]


@pytest.mark.parametrize(
    ("language", "text", "surfaces"),
    [
        ("en", "Seen by Dr. Foley today.", ("Foley",)),  # a title makes it a name
        ("en", "Mr. Parkinson is 62.", ("Parkinson",)),
        ("en", "FOLEY, JOHN", ("FOLEY", "JOHN")),  # touching another span
        ("en", "Patient Murphy was seen.", ("Murphy",)),  # Murphy is safe only inside "Murphy sign"
        ("en", "Lives in Glasgow.", ("Glasgow",)),  # Glasgow is safe only in "Glasgow Coma Scale"
        ("en", "John Foley was admitted.", ("John Foley",)),  # a span with a non-safe word
        ("en", "Foley 2", ("Foley 2",)),  # a span with a digit
        ("es", "Le atiende la Dra. Graves.", ("Graves",)),  # Graves is safe only in "enfermedad de Graves"
        ("es", "Paciente: Eva Turner.", ("Eva Turner",)),  # a given name, and Turner only in "síndrome de Turner"
        ("es", "Vive en Glasgow desde 2010.", ("Glasgow",)),
        ("es", "síndrome de Down", ("síndrome de Down",)),  # MEDDOCAN marks it (OTROS_SUJETO_ASISTENCIA)
        ("en", "Patient: Tia Ng", ("Tia Ng",)),  # a name of safe words: two capitalised words in mixed case
        ("en", "Attending: Peg Cushing, MD", ("Peg Cushing",)),
        ("es", "Paciente: Tia Foley.", ("Tia Foley",)),
    ],
)
def test_names_are_never_dropped(language: str, text: str, surfaces: tuple[str, ...]) -> None:
    spans = spans_of(text, *surfaces)
    assert load_safelist(language).split(text, spans) == (spans, [])


@pytest.mark.parametrize("language", ["en", "es"])
def test_names_that_are_common_words_are_not_safe(language: str) -> None:
    names = load_synth_resources(language).data["names"]
    safe = load_safelist(language)
    for name in names["common_word_first"] + names["common_word_last"]:
        assert not safe.is_safe_text(name), name


def test_from_entries_splits_words_and_phrases() -> None:
    safe = SafeList.from_entries(["Foley", "Wells score"], frozenset({"dr"}))
    assert safe.words == frozenset({"foley"})
    assert safe.is_safe_text("FOLEY") and not safe.is_safe_text("Wells")
    text = "Wells score 2; Wells was seen"
    kept, dropped = safe.split(text, [Span(0, 5, "PATIENT"), Span(15, 20, "PATIENT")])
    assert [text[s.start : s.end] for s in dropped] == ["Wells"] and kept == [Span(15, 20, "PATIENT")]


def test_pipeline_config_checks_the_safelist() -> None:
    assert build_config({"pipeline": {"safelist": "en"}})["pipeline"]["safelist"] == "en"
    with pytest.raises(ConfigError, match="safelist"):
        build_config({"pipeline": {"safelist": "xx"}})


@pytest.mark.parametrize("language", ["en", "es"])
def test_a_note_is_searched_only_for_the_phrases_whose_first_word_it_holds(language: str) -> None:
    import random

    from hybriddeid.synth import generate_corpus

    safelist = load_safelist(language)
    assert safelist.phrases is not None and len(safelist.phrase_list) > 50
    rng = random.Random(3)
    texts = [doc.text for doc in generate_corpus(60, 4, "test", language)]
    for phrase in safelist.phrase_list:  # in any case, with the Kelvin sign, the long s and a Turkish dotted
        mixed = "".join(c.upper() if rng.random() < 0.5 else c for c in phrase)  # capital I, glued and not
        odd = phrase.upper().replace("K", "\u212a").replace("S", "\u017f")
        dotted = phrase.upper().replace("I", "\u0130")
        texts.append(f"pt with {mixed}. and {odd} noted; x{phrase}y, {phrase}, {dotted}\n")
    found = 0
    for text in texts:
        expected = [match.span() for match in safelist.phrases.finditer(text)]
        assert safelist.phrase_ranges(text) == expected
        found += len(expected)
    assert found > 2 * len(safelist.phrase_list)
    assert safelist.phrase_ranges("Blood pressure stable.") == []  # no phrase's first word: no search
    assert not safelist._always  # accented first words ("síndrome", "índice") are looked for too
