"""The identifier probes (benchmarks/probes.py, issue 43) on the bundled models: a fast subset of the
suite, the suite's own shape, and the rules for documented formats it checks (DNI, NIE, NIF, IBAN,
labelled MRNs, ages over 89 in words)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest
import regex

from hybriddeid import Pipeline
from hybriddeid.classifiers.rules import RuleClassifier
from hybriddeid.classifiers.validators import DNI_LETTERS, dni_letter, iban_check_digits, nie_number

REPO = Path(__file__).resolve().parents[1]


def _benchmark():
    spec = importlib.util.spec_from_file_location("probes", REPO / "benchmarks" / "probes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["probes"] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


probes = _benchmark()


@pytest.fixture(scope="module")
def pipelines() -> dict[str, Pipeline]:
    return {language: Pipeline.load(language) for language in ("en", "es")}


# ---- the suite ------------------------------------------------------------------------------------


# Lines of the generators worded as a probe context (three words or more, 80% of their words in the same order),
# written before test_no_generator_line_repeats_a_probe_context existed and learned by the bundled models as they
# are: the probes in these contexts measure what the generator wrote, not what the models generalised.
KNOWN_PROBE_ECHOES: dict[str, set[tuple[str, str]]] = {
    "en": {
        ("This is a {age} year old {{^gentleman}|{^man}} {referred by Dr. {docto", "This is a {v} year old widow."),
        ("Recently traveled to {location_other} in {month_year}.", "Recently traveled to {v}."),
        ("Recently traveled to {country} in {month_year}.", "Recently traveled to {v}."),
        ("No family history of {~diagnosis}.", "Family history of {w}."),
        ("Admitted to {department}, room {room}.", "Admitted to 7 North, room {v}."),
        ("Electronically signed by {doctor}, MD on {date}", "Electronically signed by {v}, MD on 3/4/2021"),
        ("Reported to the {county} Health Department on {date_short}.", "Reported to the {v} health department."),
        ("{patient_first} lives on a farm in rural {county}.", "Lives on a farm in {v}."),
    },
    "es": {
        ("{hospital}\nINFORME DE ALTA", "Informe de alta de {v}."),
        ("Vive en {city}{ ({province})|, {province}|} con su {relation}.", "Vive en {v} con su familia."),
        ("Vive en {city}{ ({province})|, {province}|} con su {relation}.", "Vive en {v} con su marido."),
        ("Dr {doctor_last} de acuerdo con {~plan}.", "Dr. {v}: de acuerdo con el plan."),
        (
            "NATURAL DE {city:upper}{ ({province:upper})|}. RESIDE EN {city2:upper}",
            "Natural de {v}, reside en Madrid desde 2010.",
        ),
        ("{patient} vive en {street}, {city}, con su {relation} {relative}.", "Vive en {v} con su familia."),
        ("{patient} vive en {street}, {city}, con su {relation} {relative}.", "Vive en {v} con su marido."),
    },
}


def _words(template: str) -> list[str]:
    """A template's or a context's own words, lower case, without its fields."""
    for _ in range(4):  # fields nest
        template = regex.sub(r"\{[^{}]*\}", " ", template)
    return regex.findall(r"[^\W\d_]+", template.lower())


@pytest.mark.parametrize("language", ["en", "es"])
def test_no_generator_line_repeats_a_probe_context(language: str) -> None:
    """A training line worded as a probe would make the probe measure the generator's memory: generator lines
    are written from how notes are laid out, never from the probes (a draft of issue 43's work-history lines echoed
    three probe contexts, and was rewritten before any model learned it)."""
    from difflib import SequenceMatcher

    from hybriddeid.synth import load_synth_resources
    from test_synth import _templates_of

    contexts = {probe.context for probe in probes.load_probes(language, per_context=1)}
    context_words = [(context, _words(context)) for context in contexts]
    echoes = {
        (template[:70], context)
        for template in _templates_of(load_synth_resources(language).data)
        if len(words := _words(template)) >= 3
        for context, theirs in context_words
        if len(theirs) >= 3 and SequenceMatcher(None, words, theirs).ratio() >= 0.8
    }
    assert echoes - KNOWN_PROBE_ECHOES[language] == set()
    assert KNOWN_PROBE_ECHOES[language] - echoes == set()  # reworded: drop it here


@pytest.mark.parametrize("language", ["en", "es"])
def test_every_kind_has_twenty_contexts_and_thirty_values(language: str) -> None:
    suite = probes.load_probes(language)
    contexts = Counter(kind for kind, _ in {(p.kind, p.context) for p in suite if not p.must_stay})
    values = Counter((p.kind, p.context) for p in suite)
    assert contexts and min(contexts.values()) >= 20
    assert min(values.values()) >= 30
    for probe in suite:  # the value sits where the probe says
        assert probe.text[probe.start : probe.end] == probe.value or probe.text[probe.start : probe.end] in (
            probe.value.upper(),
            probe.value.lower(),
        )


def test_generated_values_carry_valid_check_letters_and_digits() -> None:
    lists = probes.load_fillers()
    for value in probes.fillers_for("gen:dni", "dni", lists):
        digits, letter = value[:8], value[-1]
        assert dni_letter(int(digits)) == letter
    for value in probes.fillers_for("gen:nie", "nie", lists):
        compact = value.replace("-", "")
        assert dni_letter(nie_number(compact[0], compact[1:8])) == compact[8]
    for value in probes.fillers_for("gen:iban_es", "iban", lists):
        compact = value.replace(" ", "")
        assert len(compact) == 24 and iban_check_digits("ES", compact[4:]) == compact[2:4]


def test_names_redrawn_from_other_locales_replace_the_listed_names() -> None:
    listed = probes.load_fillers()
    drawn = probes.load_fillers(("fi_FI", "ja_JP"))
    assert drawn == probes.load_fillers(("fi_FI", "ja_JP"))  # seeded
    for key in ("first_names", "last_names"):
        assert len(set(drawn[key])) == len(drawn[key]) >= 30
        assert not set(drawn[key]) & set(listed[key])
    assert drawn["towns_es"] == listed["towns_es"]  # only names are redrawn
    suite = probes.load_probes("es", per_context=1, names_from=("fi_FI", "ja_JP"))
    names = {p.value for p in suite if p.kind == "nombre_paciente"}
    assert names and names <= set(drawn["full_names"]) | {n.lower() for n in drawn["full_names"]}


def test_coverage_counts_letters_and_digits_only() -> None:
    text = "IBAN: ES91 2100 0418"
    assert probes.covered(text, 6, 20, [(6, 10), (11, 20)])  # the blank between spans is no identifier
    assert not probes.covered(text, 6, 20, [(6, 10), (11, 19)])
    assert probes.touched(3, 6, [(5, 9)]) and not probes.touched(3, 6, [(6, 9)])


def test_an_opening_article_need_not_be_covered() -> None:
    text = "Born in the Philippines."
    start, end = text.index("the"), text.index(".")
    assert probes.covered(text, start, end, [(text.index("Phil"), end)])  # i2b2 marks the name alone
    assert not probes.covered(text, start, end, [(start, end - 1)])  # the name itself still counts


# ---- the bundled models on the fast subset ----------------------------------------------------------

# One value per context (each value in turn): 518 English and 394 Spanish identifier probes. The
# floors are a little under what the bundled models passed when these tests were written (issue 43;
# Spanish 0.967 since the model learns generated notes, 0.82 before);
# the kinds found by rules for documented formats, every probe.
SUBSET_FLOOR = {"en": 0.90, "es": 0.93}
# Kind -> the share of its probes that must pass: every one but narrative ages in words ("He is
# ninety and lives alone": no label, no "year old"), of which 0.95 passed.
RULE_KINDS = {
    "en": {"mrn": 0.99, "ssn": 0.99, "email": 0.99, "url": 0.99, "age_over_89_words": 0.9},
    "es": {"dni": 0.99, "nie": 0.99, "nif": 0.99, "iban": 0.99, "nss": 0.99, "correo": 0.99},
}


@pytest.mark.parametrize("language", ["en", "es"])
def test_identifier_subset_pass_rate(pipelines: dict[str, Pipeline], language: str) -> None:
    subset = [p for p in probes.load_probes(language, per_context=1) if not p.must_stay]
    outcome = probes.run_probes(pipelines[language], subset)
    counts = probes.tally(subset, outcome)
    assert counts["identifiers"].rate >= SUBSET_FLOOR[language], probes.report_lines(
        language, counts, list(RULE_KINDS[language])
    )
    for kind in RULE_KINDS[language]:
        assert counts["kinds"][kind].total >= 20 and counts["kinds"][kind].rate >= 0.9, kind


@pytest.mark.parametrize("language", ["en", "es"])
def test_rule_kinds_pass_with_every_value(pipelines: dict[str, Pipeline], language: str) -> None:
    """Every value of the rule-backed kinds in three contexts each (values of every written form)."""
    suite = [p for p in probes.load_probes(language) if p.kind in RULE_KINDS[language]]
    contexts = {
        pair
        for kind in RULE_KINDS[language]  # every fifth context of each kind, from its first
        for pair in list(dict.fromkeys((p.kind, p.context) for p in suite if p.kind == kind))[::5]
    }
    picked = [p for p in suite if (p.kind, p.context) in contexts]
    counts = probes.tally(picked, probes.run_probes(pipelines[language], picked))
    assert len(picked) > 100
    for kind, floor in RULE_KINDS[language].items():
        assert counts["kinds"][kind].total >= 90 and counts["kinds"][kind].rate >= floor, kind


# Names the Spanish model learns from its generated notes (resources/languages/es/synth.toml), not
# from MEDDOCAN, whose case reports name people almost only in their header. Every value in every
# context; before the generated notes (fc08806): 0.072, 0.407, 0.505, 0.567; with them 0.958, 0.895,
# 0.903, 0.916 (`python benchmarks/probes.py --languages es`).
LEARNT_KINDS = {"apellido_con_titulo": 0.9, "familiar": 0.85, "nombre_paciente": 0.85, "localidad": 0.85}


def test_spanish_names_and_towns_outside_the_header_are_found(pipelines: dict[str, Pipeline]) -> None:
    suite = [p for p in probes.load_probes("es") if p.kind in LEARNT_KINDS]
    counts = probes.tally(suite, probes.run_probes(pipelines["es"], suite))
    for kind, floor in LEARNT_KINDS.items():
        assert counts["kinds"][kind].total >= 600 and counts["kinds"][kind].rate >= floor, (
            kind,
            counts["kinds"][kind].rate,
        )


@pytest.mark.parametrize("language", ["en", "es"])
def test_untagged_words_stay_untagged(pipelines: dict[str, Pipeline], language: str) -> None:
    """Clinical words, drug names and vital signs: every word in every context."""
    suite = [p for p in probes.load_probes(language) if p.check == "untagged"]
    outcome = probes.run_probes(pipelines[language], suite)
    assert len(suite) >= 1800
    assert sum(outcome) / len(suite) >= 0.985


def test_spanish_relation_words_are_kept_in_surrogate_mode(pipelines: dict[str, Pipeline]) -> None:
    """ "Su hija, Marta": MEDDOCAN tags the relation word; surrogate mode must write it back as it was.
    Every relation word in every context: 0.958 when written, 0.293 before relation words were kept
    (the rest: the model tags "hija Teresa" after "Contacto de urgencia:" as an e-mail address).
    0.908 since the merger keeps what a rule leaves of a CRF span: the token CRF reads "hijo Rosa,
    612 345 678" after "Contacto:" as one street (CALLE); the phone rule took the number and the rest
    was dropped, the relation word kept and the name left in the output. Now "hijo Rosa" stays a
    street, and surrogate mode keeps the relation word a span of any label begins with, replacing
    only the rest: 1.000 (600/600; was 0.908, 545/600), `python benchmarks/probes.py --languages es`."""
    suite = [p for p in probes.load_probes("es") if p.check == "kept"]
    outcome = probes.run_probes(pipelines["es"], suite)
    assert len(suite) >= 600 and sum(outcome) / len(suite) >= 0.99


# ---- the cases ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("DNI 45123987Z en su cartera.", "45123987Z"),
        ("NIF: 45123987Z", "45123987Z"),
        ("DNI 45123987-Z", "45123987-Z"),
        ("DNI: 45123987Z.", "45123987Z"),
        ("D.N.I.: 45123987Z", "45123987Z"),
        ("Aporta el documento 45123987B sin etiqueta.", "45123987B"),
        ("NIE X1234567L, residente en Murcia.", "X1234567L"),
        ("Cuenta ES91 2100 0418 4502 0005 1332.", "ES91 2100 0418 4502 0005 1332"),
    ],
)
def test_spanish_identity_numbers_are_found_as_identifiers(
    pipelines: dict[str, Pipeline], text: str, value: str
) -> None:
    found = [
        (s.start, text[s.start : s.end])
        for s in pipelines["es"].predict(text)
        if s.label.startswith(("ID_", "OTRO_NUMERO"))
    ]
    assert found == [(text.index(value), value)]


@pytest.mark.parametrize(
    "context, label", [("Paciente: {v}, DNI 45123987Z.", "DNI"), ("Contacto: hijo {v}, 612 345 678.", None)]
)
def test_a_name_stays_found_when_a_rule_takes_the_number_after_it(
    pipelines: dict[str, Pipeline], context: str, label: str | None
) -> None:
    """The token CRF reads the name and the number as one span; the rule's number wins the overlap and
    the merger keeps the rest, less the field label at the cut (hybriddeid.core.merge). Before, the whole
    CRF span was dropped and the name left in the output: 3/38 and 0/38 names of these two probe
    contexts covered, 36/38 and 38/38 after."""
    text = context.format(v="Jordi Kowalczyk")
    spans = [(s.start, s.end) for s in pipelines["es"].predict(text)]
    start = text.index("Jordi")
    assert probes.covered(text, start, start + len("Jordi Kowalczyk"), spans)
    if label is not None:  # the field's name is no PHI
        at = text.index(label)
        assert not probes.touched(at, at + len(label), spans)
    suite = [p for p in probes.load_probes("es") if p.context == context and not p.must_stay]
    assert len(suite) >= 30 and sum(probes.run_probes(pipelines["es"], suite)) / len(suite) >= 0.9


def test_an_unvalidated_number_without_a_label_is_left() -> None:
    """Without a label the letter must be the number's check letter: a wrong one is not taken."""
    wrong = next(letter for letter in DNI_LETTERS if letter != dni_letter(45123987))
    rule = next(rule for rule in RuleClassifier("es").rules if rule.name == "dni_nie_validado")
    assert rule.spans(f"ref. 45123987{wrong} del lote") == []
    assert rule.spans(f"ref. 45123987{dni_letter(45123987)} del lote") != []


@pytest.mark.parametrize(
    "text, value, label",
    [
        ("She is a ninety-two year old woman.", "ninety-two", "AGE"),
        ("Age: ninety-three", "ninety-three", "AGE"),
        ("Patient: Walter Brennan, MRN 4431200.", "4431200", "MEDICALRECORD"),
        ("MRN#: 5523001", "5523001", "MEDICALRECORD"),
    ],
)
def test_english_ages_in_words_and_labelled_record_numbers(
    pipelines: dict[str, Pipeline], text: str, value: str, label: str
) -> None:
    spans = [(text[s.start : s.end], s.label) for s in pipelines["en"].predict(text)]
    assert (value, label) in spans


def test_dni_letters_follow_the_documented_table() -> None:
    # The Ministry of the Interior's worked example: 12345678 -> Z; a NIE's X/Y/Z count as 0/1/2.
    assert dni_letter(12345678) == "Z"
    assert dni_letter(nie_number("Y", "1234567")) == dni_letter(11234567)
    assert regex.fullmatch(r"[A-Z]{23}", DNI_LETTERS) and len(set(DNI_LETTERS)) == 23
