"""The regex rule classifier: bundled rule packs, rule-file validation, timeouts, fit, persistence."""

from __future__ import annotations

import dataclasses
import logging
import time
import tomllib
from pathlib import Path

import pytest
import regex

from hybriddeid.classifiers.base import Classifier
from hybriddeid.classifiers.rules import (
    RuleClassifier,
    RuleFileError,
    bundled_languages,
    bundled_rules_text,
    map_rule_labels,
    measure_rules,
    parse_rule_file,
)
from hybriddeid.classifiers.validators import get_validator, register_validator, validator_names
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus
from hybriddeid.synth import generate_corpus

# Invented notes in the MEDDOCAN and i2b2 styles (no corpus text).
NOTE_ES = """Datos del paciente.
Nombre:  Lucía.
Apellidos: Ferrán Quintero.
NHC: 4455667.
NASS: 28 12345678 90.
Domicilio: Calle del Olmo 12, 3º izq.
Localidad/ Provincia: Toledo.
CP: 45001.
Fecha de nacimiento: 14/02/1951.
País: España.
Edad: 73 años Sexo: M.
Fecha de Ingreso: 02/05/2024.
Médico: Andrés Villar Soto NºCol: 45 45 12345.
Informe clínico del paciente: Mujer de 73 años que en marzo de 2019 presentó disnea.
Remitido por: Dra. Elena Prieto Lago C/ Mayor 3, 45002 Toledo, España. E-mail: eprieto@correo.es
"""
NOTE_EN = """Record date: 2094-03-12
MRN: 7788123
Mr. Doe is a 92 year old man seen on 3/4/2094. Call (617) 555-0142 or fax 617-555-0199.
SSN 123-45-6789, email jdoe@example.org, host 10.1.2.3.
"""


def bundled_rules():
    for language in bundled_languages():
        for rule in RuleClassifier(language).rules:
            yield pytest.param(rule, id=f"{language}:{rule.name}")


def write(tmp_path: Path, text: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- the bundled packs ---------------------------------------------------------------------------


def test_bundled_languages() -> None:
    assert {"en", "es"} <= set(bundled_languages())


@pytest.mark.parametrize("rule", list(bundled_rules()))
def test_rule_examples_and_counter_examples(rule) -> None:
    assert rule.examples and rule.counter_examples, "every bundled rule documents what it matches"
    assert rule.example_problems() == []


# Rule examples the bundled pipeline drops on purpose, with the reason: a post-merge check that the example's
# shape shares with readings. A record number written as a short ascending range ("12-345") is read as a range of
# measurements ("FS 178-224", validators.measurement_piece), wherever it stands.
DROPPED_BY_DESIGN = {("es", "historia_clinica_numero", "Número de historia 12-345.")}


@pytest.mark.parametrize("language", ["en", "es"])
def test_every_rule_example_survives_the_whole_bundled_pipeline(language: str) -> None:
    """A rule's examples test the rule alone; the pipeline's checks after the merge may still drop its spans (an
    ISO date before its time, "2024-03-14T14:35", was read as a number with a unit). Each example's PHI must be
    covered by the bundled model's output, every letter and digit of it."""
    from hybriddeid import Pipeline

    pipeline = Pipeline.load(language)
    enabled = set(pipeline.components["rule"].enabled_)
    missed = []
    for rule in RuleClassifier(language).rules:
        if rule.name not in enabled:
            continue
        for example in rule.examples:
            if (language, rule.name, example.text) in DROPPED_BY_DESIGN:
                continue
            spans = pipeline.predict(example.text)
            start = 0
            for phi in example.phi:
                at = example.text.find(phi, start)
                if at < 0:  # the example's PHI is written with its blanks normalised
                    continue
                start = at + len(phi)
                needed = [i for i in range(at, at + len(phi)) if example.text[i].isalnum()]
                if not all(any(span.start <= i < span.end for span in spans) for i in needed):
                    missed.append((rule.name, example.text, phi))
    assert missed == []


def test_unknown_language_names_the_bundled_ones() -> None:
    with pytest.raises(ValueError, match="'xx'; available: en, es"):
        _ = RuleClassifier("xx").rules


@pytest.mark.parametrize(
    ("language", "note", "expected"),
    [
        (
            "es",
            NOTE_ES,
            {
                ("Lucía", "NOMBRE_SUJETO_ASISTENCIA"),
                ("Ferrán Quintero", "NOMBRE_SUJETO_ASISTENCIA"),
                ("4455667", "ID_SUJETO_ASISTENCIA"),
                ("28 12345678 90", "ID_ASEGURAMIENTO"),
                ("Calle del Olmo 12, 3º izq", "CALLE"),
                ("Toledo", "TERRITORIO"),
                ("45001", "TERRITORIO"),
                ("14/02/1951", "FECHAS"),
                ("España", "PAIS"),
                ("73 años", "EDAD_SUJETO_ASISTENCIA"),
                ("M", "SEXO_SUJETO_ASISTENCIA"),
                ("Andrés Villar Soto", "NOMBRE_PERSONAL_SANITARIO"),
                ("45 45 12345", "ID_TITULACION_PERSONAL_SANITARIO"),
                ("Mujer", "SEXO_SUJETO_ASISTENCIA"),
                ("marzo de 2019", "FECHAS"),
                ("Elena Prieto Lago", "NOMBRE_PERSONAL_SANITARIO"),
                ("45002", "TERRITORIO"),
                ("eprieto@correo.es", "CORREO_ELECTRONICO"),
            },
        ),
        (
            "en",
            NOTE_EN,
            {
                ("2094-03-12", "DATE"),
                ("7788123", "MEDICALRECORD"),
                ("92", "AGE"),
                ("3/4/2094", "DATE"),
                ("(617) 555-0142", "PHONE"),
                ("617-555-0199", "FAX"),
                ("123-45-6789", "SSN"),
                ("jdoe@example.org", "EMAIL"),
                ("10.1.2.3", "IPADDR"),
                ("Doe", "PATIENT"),
            },
        ),
    ],
)
def test_pack_on_a_note(language: str, note: str, expected: set[tuple[str, str]]) -> None:
    spans = RuleClassifier(language).predict(Document("note", note))
    found = {(note[s.start : s.end], s.label) for s in spans}
    assert expected <= found
    assert all(s.source in ("rule", "rule+fallback") for s in spans)


# Hand-written Spanish header and signature lines (issue 23, item 7): each line's rule spans, exactly.
PATIENT, CLINICIAN, LICENCE = (
    "NOMBRE_SUJETO_ASISTENCIA",
    "NOMBRE_PERSONAL_SANITARIO",
    "ID_TITULACION_PERSONAL_SANITARIO",
)
SPANISH_FIELDS = {
    # An address ends at the next field label (phone, mail, NHC words) or the line end, not at a
    # street word that is also a label ("Calle Correo") nor at a house number's "nº".
    "address-then-telefono-correo": (
        "Domicilio: Calle Páez 265, 3º B. Teléfono 612 429 083. Correo: lucia.ferrando@gmail.com",
        {
            ("Calle Páez 265, 3º B", "CALLE"),
            ("612 429 083", "NUMERO_TELEFONO"),
            ("lucia.ferrando@gmail.com", "CORREO_ELECTRONICO"),
        },
    ),
    "address-then-tfno-email": (
        "Domicilio: C/ Mayor 12, 2º izq Tfno: 976 123 456 E-mail: lf@correo.es",
        {("C/ Mayor 12, 2º izq", "CALLE"), ("976 123 456", "NUMERO_TELEFONO"), ("lf@correo.es", "CORREO_ELECTRONICO")},
    ),
    "address-then-correo-electronico": (
        "Domicilio: Avda. de Goya 3 - Correo electrónico: a.gil@salud.es",
        {("Avda. de Goya 3", "CALLE"), ("a.gil@salud.es", "CORREO_ELECTRONICO")},
    ),
    "address-ends-at-line-end": (
        "Domicilio: Calle Sol 4, bajo\nTeléfono: 612 000 111",
        {("Calle Sol 4, bajo", "CALLE"), ("612 000 111", "NUMERO_TELEFONO")},
    ),
    "address-then-nhc": (
        "Domicilio: Plaza Mayor nº 3 NHC: 445566",
        {("Plaza Mayor nº 3", "CALLE"), ("445566", "ID_SUJETO_ASISTENCIA")},
    ),
    "address-then-postal-code": (
        "Domicilio: C/ Grecia 27, 50006 Zaragoza.",
        {("C/ Grecia 27", "CALLE"), ("50006", "TERRITORIO"), ("Zaragoza", "TERRITORIO")},
    ),
    "street-named-correo": ("Domicilio: Calle Correo 29, 5º 1ª.", {("Calle Correo 29, 5º 1ª", "CALLE")}),
    # A clinician's licence number in its usual forms.
    "licence-nº-colegiado": (
        "Médico: Andrés Reyes Soto nº colegiado 50/12345.",
        {("Andrés Reyes Soto", CLINICIAN), ("50/12345", LICENCE)},
    ),
    "licence-glued-NºCol": (
        "Médico: Begoña IzaNºCol: 28 28 52001.",
        {("Begoña Iza", CLINICIAN), ("28 28 52001", LICENCE)},
    ),
    "licence-Nº-Col.": ("Firmado: Dra. Marta Gil (Nº Col. 50/5012345)", {("50/5012345", LICENCE)}),
    "licence-colegiado-nº": ("Colegiado nº 28/28/12345", {("28/28/12345", LICENCE)}),
    "licence-numero-de-colegiado": ("Número de colegiado: 282812345", {("282812345", LICENCE)}),
    "licence-Col.-nº": ("Col. nº 46-12345", {("46-12345", LICENCE)}),
    # The name after "Nombre:" is the patient's, wherever the field sits on its line.
    "patient-header": (
        "Nombre: Lucía. Apellidos: Ferrando Ledesma. NHC: 123456.",
        {("Lucía", PATIENT), ("Ferrando Ledesma", PATIENT), ("123456", "ID_SUJETO_ASISTENCIA")},
    ),
    "patient-after-another-field": (
        "Datos del paciente: Nombre: María José García López",
        {("María José García López", PATIENT)},
    ),
    "patient-title-then-edad": (
        "Nombre y apellidos: Sra. Lucía Ferrando Ledesma Edad: 45 años",
        {("Lucía Ferrando Ledesma", PATIENT), ("45 años", "EDAD_SUJETO_ASISTENCIA")},
    ),
    "patient-nombre-del-paciente": (
        "Nombre del paciente: Juan Pérez Gil, DNI 12345678Z",
        {("Juan Pérez Gil", PATIENT), ("12345678Z", "ID_SUJETO_ASISTENCIA")},
    ),
    "patient-after-byte-order-mark": ("\ufeffNombre: Eliseo.\n", {("Eliseo", PATIENT)}),
    "clinician-block-is-no-patient": ("Datos del médico: Nombre: Pedro Gil Soto", set()),
    "doctor-is-no-patient": ("Nombre: Dr. Pedro Gil", set()),
}


@pytest.mark.parametrize(("line", "expected"), list(SPANISH_FIELDS.values()), ids=list(SPANISH_FIELDS))
def test_spanish_fields_end_at_the_next_label_and_keep_their_type(line: str, expected: set[tuple[str, str]]) -> None:
    spans = RuleClassifier("es").predict(Document("line", line))
    assert {(line[s.start : s.end], s.label) for s in spans} == expected


@pytest.mark.parametrize(("language", "note"), [("es", NOTE_ES), ("en", NOTE_EN)])
def test_output_spans_never_overlap(language: str, note: str) -> None:
    spans = RuleClassifier(language).predict(Document("note", note * 3))
    assert spans == sorted(spans)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


# Inputs that make a badly written pattern backtrack (nested or overlapping repeats): long runs of
# digits, separators, dots, spaces and half-formed dates, phones, mails and titles.
BACKTRACKING_BAIT = [
    "1" * 20000,
    "1-" * 10000,
    "a." * 10000,
    " " * 20000,
    "Dr. " * 5000,
    "A" * 20000,
    "(" * 20000,
    "1/1/" * 5000,
    "@a." * 7000,
    "+34 " * 5000,
]


@pytest.mark.parametrize(("language", "note"), [("es", NOTE_ES), ("en", NOTE_EN)])
def test_no_rule_backtracks_catastrophically(language: str, note: str) -> None:
    """Every rule finishes on 20,000 characters of bait; a catastrophic pattern would take minutes.

    The bound (2 s per rule and input, against ~30 ms for the slowest rule today on a shared
    machine) only catches runaway backtracking, not ordinary slowness: tests check behaviour."""
    runaway = {}
    for rule in RuleClassifier(language).rules:
        for bait in [*BACKTRACKING_BAIT, note * 10]:
            seconds = _timed(rule.spans, bait)
            if seconds > 2.0:
                runaway[(rule.name, bait[:8])] = round(seconds, 1)
    assert runaway == {}, f"seconds per rule and input: {runaway}"


def _timed(func, *args) -> float:
    started = time.perf_counter()
    func(*args)
    return time.perf_counter() - started


def test_satisfies_the_classifier_protocol() -> None:
    clf = RuleClassifier("es")
    assert isinstance(clf, Classifier)
    assert "FECHAS" in clf.labels and "PHONE" not in clf.labels


# ---- overlap resolution and user rules -----------------------------------------------------------

OVERLAP_RULES = """
taxonomy = "i2b2-2014"
[[rule]]
name = "short"
label = "IDNUM"
pattern = '\\d{3}'
[[rule]]
name = "long"
label = "PHONE"
pattern = '\\d{3}-\\d{4}'
[[rule]]
name = "same_as_long"
label = "FAX"
pattern = '\\d{3}-\\d{4}'
"""


def test_overlaps_resolved_longest_first_then_rule_order(tmp_path: Path) -> None:
    clf = RuleClassifier(None, [write(tmp_path, OVERLAP_RULES)])
    text = "555-1234 and 999"
    spans = clf.predict(Document("d", text))
    assert [(text[s.start : s.end], s.label) for s in spans] == [("555-1234", "PHONE"), ("999", "IDNUM")]


def test_repeated_phi_group_gives_one_span_per_capture(tmp_path: Path) -> None:
    rules = """taxonomy = "meddocan"
[[rule]]
name = "cp_town"
label = "TERRITORIO"
pattern = '(?P<phi>\\d{5}) (?P<phi>[A-Z][a-z]+)'
"""
    clf = RuleClassifier(None, [write(tmp_path, rules)])
    text = "en 28001 Madrid"
    assert [text[s.start : s.end] for s in clf.predict(Document("d", text))] == ["28001", "Madrid"]


def test_context_words_must_precede_within_the_window(tmp_path: Path) -> None:
    rules = """taxonomy = "i2b2-2014"
[[rule]]
name = "pager"
label = "PHONE"
pattern = '\\d{4}'
context = ["pager"]
context_window = 10
"""
    clf = RuleClassifier(None, [write(tmp_path, rules)])
    text = "pager 1234; room 5678 on the floor, PAGER: 4321"
    assert [text[s.start : s.end] for s in clf.predict(Document("d", text))] == ["1234", "4321"]


def test_rule_name_clash_between_files(tmp_path: Path) -> None:
    rules = 'taxonomy = "meddocan"\n[[rule]]\nname = "nhc"\nlabel = "FECHAS"\npattern = "x"\n'
    path = write(tmp_path, rules, "mine.toml")
    message = r"mine\.toml: rule 'nhc': the name is already used in regex/es\.toml"
    with pytest.raises(RuleFileError, match=message):
        _ = RuleClassifier("es", [path]).rules


# ---- validation on load -------------------------------------------------------------------------

TAX = 'taxonomy = "meddocan"\n'
GOOD = '[[rule]]\nname = "r1"\nlabel = "FECHAS"\npattern = \'\\d+\'\n'
BAD_FILES = {  # id: (file text, expected message)
    "unknown-key": (TAX + GOOD + 'colour = "red"\n', r"bad\.toml: rule 'r1': unknown key\(s\) \['colour'\]"),
    "unknown-top-key": (TAX + 'author = "me"\n' + GOOD, r"bad\.toml: unknown top-level key\(s\) \['author'\]"),
    "bad-regex": (TAX + GOOD.replace("\\d+", "(\\d+"), r"bad\.toml: rule 'r1': pattern does not compile"),
    "unknown-label": (
        TAX + GOOD.replace("FECHAS", "PHONE"),
        r"bad\.toml: rule 'r1': label 'PHONE' is not in the meddocan taxonomy",
    ),
    "unknown-validator": (
        TAX + GOOD + 'validator = "checksum"\n',
        r"bad\.toml: rule 'r1': unknown validator 'checksum'",
    ),
    "unknown-flag": (
        TAX + GOOD + 'flags = ["IGNORECAS"]\n',
        r"bad\.toml: rule 'r1': unknown flag\(s\) \['IGNORECAS'\]",
    ),
    "no-taxonomy": (GOOD, r"bad\.toml: the header must name its label taxonomy"),
    "unknown-taxonomy": ('taxonomy = "klingon"\n' + GOOD, r"bad\.toml: unknown taxonomy 'klingon'"),
    "duplicate-name": (TAX + GOOD + GOOD, r"bad\.toml: rule 'r1': the name is used twice"),
    "window-without-context": (
        TAX + GOOD + "context_window = 5\n",
        r"bad\.toml: rule 'r1': context_window is set but context is empty",
    ),
    "bad-example": (TAX + GOOD + 'examples = [{ txt = "1" }]\n', r"bad\.toml: rule 'r1': each example must be"),
    "no-name": (TAX + GOOD.replace('name = "r1"\n', ""), r"bad\.toml: rule #1: needs a name"),
    "bad-toml": (TAX + "[[rule]\n", r"bad\.toml: not valid TOML"),
    "define-not-a-table": (TAX + 'define = "x"\n' + GOOD, r"bad\.toml: \[define\] must be a table"),
    "define-bad-regex": (TAX + '[define]\nd = "(a"\n' + GOOD, r"bad\.toml: \[define\] 'd': pattern does not compile"),
    "define-named-phi": (TAX + '[define]\nphi = "a"\n' + GOOD, r"bad\.toml: \[define\] 'phi': a name is"),
    "define-with-group": (TAX + '[define]\nd = "(?P<x>a)"\n' + GOOD, r"bad\.toml: \[define\] 'd': holds a named group"),
    "define-cycle": (
        TAX + '[define]\nd = "a(?&e)"\ne = "(?&d)"\n' + GOOD,
        r"bad\.toml: \[define\] 'd': the definition 'd' uses itself",
    ),
    "define-clash": (
        TAX + '[define]\nd = "a"\n' + GOOD.replace("\\d+", "(?P<d>b)(?&d)"),
        r"bad\.toml: rule 'r1': defines its own group 'd', which the file's \[define\] also names",
    ),
    "lookup-without-language": (
        TAX + GOOD.replace("\\d+", "(?P<w>\\w+)") + 'lookup = { w = "first_names" }\n',
        r"bad\.toml: rule 'r1': lookup needs the file's language",
    ),
    "lookup-unknown-group": (
        TAX + 'language = "es"\n' + GOOD + 'lookup = { w = "first_names" }\n',
        r"bad\.toml: rule 'r1': lookup names group 'w', which the pattern does not have",
    ),
    "lookup-unknown-kind": (
        TAX + 'language = "es"\n' + GOOD.replace("\\d+", "(?P<w>\\w+)") + 'lookup = { w = "planets" }\n',
        r"bad\.toml: rule 'r1': lookup kind\(s\) \['planets'\] are not dictionaries of 'es'",
    ),
    "needs-lookahead": (
        TAX + GOOD + "needs = '(?=\\d)'\n",
        r"bad\.toml: rule 'r1': needs must not hold lookarounds or anchors",
    ),
    "needs-boundary": (TAX + GOOD + "needs = '\\bx'\n", r"bad\.toml: rule 'r1': needs must not hold lookarounds"),
    "needs-empty": (TAX + GOOD + "needs = ''\n", r"bad\.toml: rule 'r1': needs must be a non-empty string pattern"),
    "needs-bad-regex": (TAX + GOOD + "needs = '(x'\n", r"bad\.toml: rule 'r1': pattern does not compile"),
    "needs-not-strings": (
        TAX + GOOD + "needs = ['x', 3]\n",
        r"bad\.toml: rule 'r1': needs must be a non-empty string pattern or a list",
    ),
    "needs-empty-list": (
        TAX + GOOD + "needs = []\n",
        r"bad\.toml: rule 'r1': needs must be a non-empty string pattern or a list",
    ),
}


@pytest.mark.parametrize(("text", "message"), list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_bad_rule_files_are_rejected_naming_file_and_rule(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text, "bad.toml")
    with pytest.raises(RuleFileError, match=message):
        _ = RuleClassifier(None, [path]).rules


def test_parse_rule_file_reads_flags_context_and_examples() -> None:
    text = """taxonomy = "i2b2-2014"
language = "en"
[[rule]]
name = "mrn"
label = "MEDICALRECORD"
pattern = 'mrn:\\s*(?P<phi>\\d+)'
flags = ["IGNORECASE"]
examples = [{ text = "MRN: 12", phi = "12" }, "nothing to see"]
"""
    parsed = parse_rule_file(text, "inline.toml")
    (rule,) = parsed.rules
    assert (parsed.taxonomy, parsed.language, rule.flags) == ("i2b2-2014", "en", ("IGNORECASE",))
    # The second example expects the whole text as PHI, so it is reported.
    assert rule.example_problems() == ["mrn: example 'nothing to see' gave (), expected ('nothing to see',)"]


def test_define_is_inlined_verbose_under_the_rules_flags_and_may_use_other_definitions() -> None:
    text = """taxonomy = "meddocan"
[define]
label = \'\'\'
  (?: tel[eé]fono | (?&mail) )   # verbose: spaces and comments are not text
\'\'\'
mail = 'e-?mail'
[[rule]]
name = "street"
label = "CALLE"
pattern = 'Calle[ ](?P<phi>[^\\n]*?\\S)[ ]*(?=$|(?&label))'
flags = ["IGNORECASE", "MULTILINE"]
[[rule]]
name = "own_group"
label = "CALLE"
pattern = '(?(DEFINE)(?P<x>\\d))(?P<phi>(?&x)+)'
"""
    street, own = parse_rule_file(text, "inline.toml").rules
    note = "calle Mayor 3 TELÉFONO 612\ncalle Sol 1 E-mail a@b.es\ncalle Luna 2"
    assert [note[s:e] for s, e in street.spans(note)] == ["Mayor 3", "Sol 1", "Luna 2"]
    assert "(?&" not in street.pattern  # inlined: regex runs group calls several times slower
    assert [("a12b"[s:e]) for s, e in own.spans("a12b")] == ["12"]  # a rule's own calls are left alone


LOOKUP_RULES = """taxonomy = "i2b2-2014"
language = "en"
[[rule]]
name = "named"
label = "PATIENT"
pattern = '(?i:son|daughter)[ ](?P<phi>(?P<first>\\w+)(?:[ ](?P<last>\\w+))?)'
lookup = { first = "first_names", last = "last_names?" }
[[rule]]
name = "town"
label = "CITY"
pattern = '(?i:lives in)[ ](?P<phi>(?P<town>\\w+))'
lookup = { town = "cities,!states" }
[[rule]]
name = "town_of_words"
label = "CITY"
pattern = '(?i:resides in)[ ](?P<phi>(?P<town>\\w+(?:[ -]\\w+){0,3}))'
lookup = { town = "cities,towns,!states<" }
"""


def test_lookup_groups_must_be_dictionary_entries_any_case() -> None:
    named, town, _ = parse_rule_file(LOOKUP_RULES, "inline.toml").rules
    found = lambda rule, text: [text[s:e] for s, e in rule.spans(text)]  # noqa: E731
    assert found(named, "daughter PEGGY SMITH called") == ["PEGGY SMITH"]
    assert found(named, "son called today") == []  # "called" is no first name: the hit is dropped
    # An optional group that is no entry ends the PHI before it: the surname is left out.
    assert found(named, "daughter mary visited") == ["mary"]
    assert found(named, "lives in rome; lives in California") == []  # the rule is another one
    assert found(town, "lives in rome; lives in California") == ["rome"]  # "California" is a state
    assert found(town, "lives in bed") == []


def test_a_hyphenated_name_passes_a_name_lookup_when_each_part_does() -> None:
    named, town, _ = parse_rule_file(LOOKUP_RULES.replace("\\w+", "[\\w-]+"), "inline.toml").rules
    found = lambda rule, text: [text[s:e] for s, e in rule.spans(text)]  # noqa: E731
    assert found(named, "daughter Anne-Marie Smith-Jones called") == ["Anne-Marie Smith-Jones"]
    assert found(named, "son Mary-called") == []  # "called" is no first name
    assert found(named, "daughter Anne- visited") == []  # an empty part is none either
    assert found(town, "lives in Boston-Denver") == []  # places are not read part by part


def test_a_leading_lookup_keeps_the_longest_run_of_leading_words_that_passes() -> None:
    *_, town = parse_rule_file(LOOKUP_RULES, "inline.toml").rules
    found = lambda text: [text[s:e] for s, e in town.spans(text)]  # noqa: E731
    assert found("resides in Medicine Hat with her son") == ["Medicine Hat"]  # the towns list, two words
    assert found("resides in Southend-on-Sea now") == ["Southend-on-Sea"]  # hyphens split words too
    assert found("RESIDES IN BOSTON WITH DAUGHTER") == ["BOSTON"]  # the longest that is a town
    assert found("resides in New York City") == ["New York City"]
    assert found("resides in California with son") == []  # a state: no run passes, the hit is dropped
    assert found("resides in house with wife") == []


def test_fallback_rules_spans_carry_the_fallback_source(tmp_path: Path) -> None:
    text = LOOKUP_RULES.replace(
        'lookup = { first = "first_names", last = "last_names?" }',
        'lookup = { first = "first_names", last = "last_names?" }\nfallback = true',
    )
    clf = RuleClassifier(None, [write(tmp_path, text)])
    spans = clf.predict(Document("n", "daughter Mary came; lives in rome"))
    assert [(sp.label, sp.source) for sp in spans] == [("PATIENT", "rule+fallback"), ("CITY", "rule")]


# ---- timeouts -----------------------------------------------------------------------------------

CATASTROPHIC = """taxonomy = "i2b2-2014"
[[rule]]
name = "catastrophic"
label = "IDNUM"
pattern = '(a|aa)+$'
[[rule]]
name = "digits"
label = "IDNUM"
pattern = '\\d{4}'
"""


def test_timeout_skips_the_rule_for_that_document_and_warns(tmp_path: Path, caplog, monkeypatch) -> None:
    # the one-scan prefilter (rule_prefilter) already knows the pattern cannot match this text and
    # skips its search: without it, the search runs into the timeout
    monkeypatch.setenv("HYBRIDDEID_RULE_PREFILTER", "0")
    clf = RuleClassifier(None, [write(tmp_path, CATASTROPHIC)], timeout=0.02)
    text = "id 1234 " + "a" * 60 + "b"
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="hybriddeid.classifiers.rules"):
        spans = clf.predict(Document("note-17", text))
    assert time.perf_counter() - started < 5
    assert [text[s.start : s.end] for s in spans] == ["1234"]  # the other rule still ran
    (record,) = caplog.records
    assert "'catastrophic'" in record.getMessage() and "'note-17'" in record.getMessage()
    assert "aaaa" not in caplog.text and "1234" not in caplog.text  # no note text in logs


# ---- fit ----------------------------------------------------------------------------------------

FIT_RULES = """taxonomy = "i2b2-2014"
[[rule]]
name = "labelled_mrn"
label = "MEDICALRECORD"
pattern = 'MRN (?P<phi>\\d+)'
[[rule]]
name = "any_number"
label = "MEDICALRECORD"
pattern = '\\b\\d+\\b'
[[rule]]
name = "never_fires"
label = "SSN"
pattern = 'SSN#\\d{9}'
"""


def gold_docs() -> list[Document]:
    return [
        Document("d0", "MRN 1234 seen 3 times", (Span(4, 8, "MEDICALRECORD"),)),
        Document("d1", "MRN 998877, took 2 pills 4 days", (Span(4, 10, "MEDICALRECORD"),)),
    ]


def test_fit_measures_rules_and_disables_imprecise_ones(tmp_path: Path) -> None:
    # map_labels off: the silent SSN rule's label is not the corpus's, which "auto" would switch off
    clf = RuleClassifier(None, [write(tmp_path, FIT_RULES)], min_precision=0.9, map_labels="off").fit(gold_docs())
    stats = clf.rule_stats_
    assert vars(stats["labelled_mrn"]) == {"hits": 2, "correct": 2, "gold": 2}
    assert vars(stats["any_number"]) == {"hits": 5, "correct": 2, "gold": 2}
    assert stats["never_fires"].hits == 0
    assert clf.enabled_ == ("labelled_mrn", "never_fires")  # no evidence against a silent rule
    text = "MRN 42 and 7"
    assert [text[s.start : s.end] for s in clf.predict(Document("x", text))] == ["42"]
    assert clf.labels == ("MEDICALRECORD", "SSN")


def test_fit_with_default_min_precision_keeps_everything_the_corpus_can_label(tmp_path: Path) -> None:
    clf = RuleClassifier(None, [write(tmp_path, FIT_RULES)], map_labels="off").fit(gold_docs())
    assert clf.enabled_ == ("labelled_mrn", "any_number", "never_fires")
    # by default a rule whose label (SSN) the corpus lacks and which never fires cannot be mapped: off
    clf = RuleClassifier(None, [write(tmp_path, FIT_RULES)]).fit(gold_docs())
    assert clf.enabled_ == ("labelled_mrn", "any_number") and clf.unmapped_ == ("never_fires",)
    assert clf.label_map_ == {}


# ---- label mapping --------------------------------------------------------------------------------

MAP_RULES = """taxonomy = "i2b2-2014"
[[rule]]
name = "user_email"
label = "EMAIL"
pattern = '[a-z]+@[a-z]+\\.es'
[[rule]]
name = "user_date"
label = "DATE"
pattern = '\\d\\d/\\d\\d/\\d{4}'
[[rule]]
name = "number_word"
label = "AGE"
pattern = 'cinco'
"""


def spanish_corpus() -> list[Document]:
    """Notes labelled with MEDDOCAN's names: the rules above say EMAIL and DATE."""
    docs = []
    for i, user in enumerate(["ana", "pedro", "marta", "luis"]):
        text = f"Correo: {user}@hospital.es. Ingreso el 1{i}/02/2019; cinco dosis."
        spans = []
        for value, label in ((f"{user}@hospital.es", "CORREO_ELECTRONICO"), (f"1{i}/02/2019", "FECHAS")):
            spans.append(Span(text.index(value), text.index(value) + len(value), label))
        docs.append(Document(f"n{i}", text, tuple(spans)))
    return docs


def test_fit_maps_rule_labels_onto_the_corpus_labels_and_drops_rules_that_match_none(tmp_path: Path) -> None:
    clf = RuleClassifier(None, [write(tmp_path, MAP_RULES)]).fit(spanish_corpus())
    assert clf.label_map_ == {"user_email": "CORREO_ELECTRONICO", "user_date": "FECHAS"}
    assert clf.unmapped_ == ("number_word",) and clf.enabled_ == ("user_email", "user_date")  # 4 hits, no gold overlap
    assert clf.labels == ("CORREO_ELECTRONICO", "FECHAS")
    text = "Escribir a eva@clinica.es el 03/04/2020, cinco veces."
    assert [(text[s.start : s.end], s.label) for s in clf.predict(Document("x", text))] == [
        ("eva@clinica.es", "CORREO_ELECTRONICO"),
        ("03/04/2020", "FECHAS"),
    ]
    assert vars(clf.rule_stats_["user_email"]) == {"hits": 4, "correct": 4, "gold": 4}  # measured under the new label
    assert clf.fit_report() == {"map_labels": "auto", "label_map": clf.label_map_, "unmapped": ["number_word"]}


def test_label_mapping_needs_support(tmp_path: Path) -> None:
    label_map, unmapped = map_rule_labels(
        RuleClassifier(None, [write(tmp_path, MAP_RULES)]).rules, spanish_corpus()[:2]
    )  # two hits each: below MAP_MIN_HITS
    assert label_map == {} and unmapped == ("user_email", "user_date", "number_word")
    label_map, _ = map_rule_labels(
        RuleClassifier(None, [write(tmp_path, MAP_RULES)]).rules, spanish_corpus()[:2], min_hits=2
    )
    assert label_map == {"user_email": "CORREO_ELECTRONICO", "user_date": "FECHAS"}


def test_label_mapping_off_keeps_the_rules_labels(tmp_path: Path) -> None:
    clf = RuleClassifier(None, [write(tmp_path, MAP_RULES)], map_labels="off").fit(spanish_corpus())
    assert clf.labels == ("EMAIL", "DATE", "AGE") and clf.label_map_ == {}
    with pytest.raises(ValueError, match="map_labels must be one of auto, off"):
        RuleClassifier(None, map_labels="yes")


def test_a_saved_mapping_relabels_identically_after_loading(tmp_path: Path) -> None:
    clf = RuleClassifier("es", [write(tmp_path, MAP_RULES)]).fit(spanish_corpus())
    clf.to_disk(tmp_path / "model")
    state = tomllib.loads((tmp_path / "model" / "rules.toml").read_text(encoding="utf-8"))
    assert state["format"] == 3 and state["label_map"] == {"user_email": "CORREO_ELECTRONICO", "user_date": "FECHAS"}
    # the loaded classifier uses the saved mapping whatever its own setting
    loaded = RuleClassifier.from_disk(tmp_path / "model", {"language": "es", "map_labels": "off"})
    docs = [Document("a", NOTE_ES), Document("b", "Escribir a eva@clinica.es el 03/04/2020.")]
    assert [loaded.predict(d) for d in docs] == [clf.predict(d) for d in docs]
    assert any(s.label == "CORREO_ELECTRONICO" for s in loaded.predict(docs[1]))
    assert loaded.labels == clf.labels


def test_a_format_2_state_without_mapping_loads_as_before(tmp_path: Path) -> None:
    RuleClassifier("en").to_disk(tmp_path)
    state = tmp_path / "rules.toml"
    state.write_text(state.read_text(encoding="utf-8").replace("format = 3", "format = 2"), encoding="utf-8")
    loaded = RuleClassifier.from_disk(tmp_path, {"language": "en", "map_labels": "auto"})
    text = "Seen 03/04/2020, email jo@example.com"
    assert loaded.predict(Document("x", text)) == RuleClassifier("en").predict(Document("x", text))


def test_measure_rules_counts_exact_matches_only() -> None:
    rules = RuleClassifier("es").rules
    text = "NHC: 1234567."
    doc = Document("d", text, (Span(5, 11, "ID_SUJETO_ASISTENCIA"),))  # one digit short
    assert measure_rules(rules, [doc])["nhc"].correct == 0


# ---- persistence --------------------------------------------------------------------------------


def test_to_disk_from_disk_round_trip(tmp_path: Path) -> None:
    user = write(tmp_path, FIT_RULES, "user_rules.toml")
    clf = RuleClassifier("es", [user], min_precision=0.9).fit(gold_docs())
    clf.to_disk(tmp_path / "model")
    user.unlink()  # the saved state carries its own copy of the user rules
    loaded = RuleClassifier.from_disk(tmp_path / "model", {"language": "es", "min_precision": 0.9})
    settings = ("language", "min_precision", "source", "timeout")
    assert [getattr(loaded, key) for key in settings] == [getattr(clf, key) for key in settings]
    assert loaded.language == "es" and loaded.min_precision == 0.9
    assert loaded.enabled_ == clf.enabled_ and "any_number" not in loaded.enabled_
    assert loaded.rule_stats_ == clf.rule_stats_
    docs = [Document("a", NOTE_ES), Document("b", "MRN 55 and 66")]
    assert [loaded.predict(d) for d in docs] == [clf.predict(d) for d in docs]
    assert loaded.labels == clf.labels


def test_unfitted_classifier_saves_all_rules(tmp_path: Path) -> None:
    RuleClassifier("en").to_disk(tmp_path)
    loaded = RuleClassifier.from_disk(tmp_path, {"language": "en"})
    assert loaded.enabled_ == tuple(rule.name for rule in RuleClassifier("en").rules)


def test_from_disk_refuses_unknown_rules(tmp_path: Path) -> None:
    RuleClassifier("en").to_disk(tmp_path)
    state = tmp_path / "rules.toml"
    state.write_text(state.read_text(encoding="utf-8").replace('"ssn"', '"no_such_rule"'), encoding="utf-8")
    with pytest.raises(ValueError, match=r"\['no_such_rule'\] are not in the current rule packs"):
        RuleClassifier.from_disk(tmp_path, {"language": "en"})


def test_from_disk_rejects_a_foreign_file(tmp_path: Path) -> None:
    (tmp_path / "rules.toml").write_text('format = 1\nlanguage = "en"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a saved rule classifier"):
        RuleClassifier.from_disk(tmp_path, {"language": "en"})


# ---- validators ---------------------------------------------------------------------------------


def _match(pattern: str, text: str):
    return regex.fullmatch(pattern, text)


DATE = r"(?P<day>\d{1,2})/(?P<month>\d{1,2})/(?P<year>\d{2}|\d{4})"


@pytest.mark.parametrize(
    ("name", "pattern", "text", "ok"),
    [
        ("date", DATE, "29/02/2016", True),
        ("date", DATE, "29/02/2017", False),
        ("date", DATE, "31/04/2020", False),
        ("date", DATE, "1/12/99", True),
        ("date", DATE, "10/10/1850", False),
        ("date_4digit_year", DATE, "1/12/99", False),
        ("luhn", r"[\d ]+", "4539 1488 0343 6467", True),
        ("luhn", r"[\d ]+", "4539 1488 0343 6468", False),
        ("ipv4", r"[\d.]+", "192.168.0.255", True),
        ("ipv4", r"[\d.]+", "192.168.0.256", False),
        ("ipv4", r"[\d.]+", "01.2.3.4", False),
        ("us_ssn", r"[\d-]+", "078-05-1120", True),
        ("us_ssn", r"[\d-]+", "900-05-1120", False),
        ("age_over_89", r"(?P<phi>\d+) years", "93 years", True),
        ("age_over_89", r"(?P<phi>\d+) years", "89 years", False),
    ],
)
def test_validators(name: str, pattern: str, text: str, ok: bool) -> None:
    assert get_validator(name)(_match(pattern, text)) is ok


def test_validator_registry(monkeypatch) -> None:
    from hybriddeid.classifiers import validators

    monkeypatch.setattr(validators, "_VALIDATORS", dict(validators._VALIDATORS))

    @register_validator("test_even_length")
    def even(match) -> bool:
        return len(match.group()) % 2 == 0

    assert "test_even_length" in validator_names()
    with pytest.raises(ValueError, match="already registered"):
        register_validator("test_even_length")(even)


@pytest.mark.parametrize("language", ["en", "es"])
@pytest.mark.parametrize("flatten", [False, True])
def test_long_notes_are_searched_in_windows_with_the_whole_texts_hits(language, flatten, monkeypatch) -> None:
    """Windows (here 3,000 characters, 200 read past each) find exactly what one search of the whole
    text finds, on many notes joined, with their line breaks or flattened to one line."""
    from hybriddeid.classifiers import rules
    from hybriddeid.synth import generate_corpus

    examples = [example.text for rule in RuleClassifier(language).rules for example in rule.examples]
    notes = list(generate_corpus(60, 4, "test")) if language == "en" else []
    text = "\n".join([*examples, *(doc.text for doc in notes)] * (1 if notes else 20))
    text = text.replace("\n", " ") if flatten else text
    assert len(text) > 30_000
    classifier = RuleClassifier(language)
    whole = {rule.name: rule.spans(text) for rule in classifier.rules}
    monkeypatch.setattr(rules, "SEARCH_WINDOW", 3_000)
    monkeypatch.setattr(rules, "SEARCH_OVERLAP", 200)
    windowed = {rule.name: rule.spans(text) for rule in classifier.rules}
    assert sum(map(len, whole.values())) > 100
    assert windowed == whole


# ---- the needs hint -----------------------------------------------------------------------------

NEEDS_RULE = """taxonomy = "i2b2-2014"
[[rule]]
name = "mrn"
label = "MEDICALRECORD"
pattern = '(?i:mrn)[: ]*(?P<phi>\\d+)'
needs = '(?i:mrn)'
examples = [{ text = "MRN: 12", phi = "12" }]
"""


def test_needs_is_trusted_so_an_example_without_it_is_reported() -> None:
    (rule,) = parse_rule_file(NEEDS_RULE.replace("needs = '(?i:mrn)'", "needs = 'x'"), "inline.toml").rules
    assert rule.spans("MRN: 12") == []  # a text where needs does not match is not searched
    (listed,) = parse_rule_file(
        NEEDS_RULE.replace("needs = '(?i:mrn)'", "needs = ['x', '(?i)mrn']"), "inline.toml"
    ).rules
    assert listed.spans("MRN: 12") == [(5, 7)] and listed.spans("no: 12") == []  # one of the list is enough
    assert rule.example_problems() == [
        "mrn: example 'MRN: 12' holds no match of needs ['x']",
        "mrn: example 'MRN: 12' gave (), expected ('12',)",
    ]


def test_needs_skips_the_windows_of_a_long_note_without_it(monkeypatch) -> None:
    """A window is searched only when its reading (the window and the overlap after it) holds a match
    of needs: a hint that is wrong on purpose (digits need "mrn") shows which windows were read."""
    from hybriddeid.classifiers import rules

    (rule,) = parse_rule_file(NEEDS_RULE.replace("(?i:mrn)[: ]*(?P<phi>\\d+)", "\\d"), "inline.toml").rules
    plain = dataclasses.replace(rule, needs=())
    monkeypatch.setattr(rules, "SEARCH_WINDOW", 1_000)
    monkeypatch.setattr(rules, "SEARCH_OVERLAP", 50)
    text = list("." * 5_000)
    for at, char in {10: "5", 1200: "7", 2100: "8", 3500: "9", 4500: "6"}.items():
        text[at] = char
    for at in (1500, 3020):  # one inside window 1, one in the overlap read after window 2
        text[at : at + 3] = "mrn"
    text = "".join(text)
    assert [text[s] for s, _ in plain.spans(text)] == ["5", "7", "8", "9", "6"]
    assert [text[s] for s, _ in rule.spans(text)] == ["7", "8", "9"]


def test_bundled_needs_hints_change_no_rule_hit() -> None:
    """Each bundled rule finds the same hits with and without its needs hint, on the rules' examples
    and counter-examples and on generated notes, note by note and joined into one long note."""
    from hybriddeid.synth import generate_corpus

    for language in bundled_languages():
        classifier = RuleClassifier(language)
        texts = [example.text for rule in classifier.rules for example in rule.examples]
        texts += [text for rule in classifier.rules for text in rule.counter_examples]
        if language == "en":
            texts += [doc.text for doc in generate_corpus(100, 5, "test")]
        texts.append("\n".join(texts * 3))
        hinted = [rule for rule in classifier.rules if rule.needs]
        hits = dict.fromkeys((rule.name for rule in hinted), 0)
        for rule in hinted:
            plain = dataclasses.replace(rule, needs=())
            for text in texts:
                found = rule.spans(text)
                assert found == plain.spans(text), f"{language}:{rule.name}"
                hits[rule.name] += len(found)
        assert [name for name, n in hits.items() if not n] == []  # each hint was tried where its rule hits
        assert language != "en" or sum(hits.values()) > 1_000  # and on the generated notes


def test_rules_sharing_a_needs_pattern_look_for_it_once_per_window_with_the_same_hits(monkeypatch) -> None:
    """The first match of a needs pattern in a window is kept for the next rule with that pattern; a
    rule whose search there starts later (after a hit that crossed into the window) looks again."""
    from hybriddeid.classifiers import rules
    from hybriddeid.synth import generate_corpus

    (rule,) = parse_rule_file(NEEDS_RULE.replace("needs = '(?i:mrn)'", "needs = '\\d'"), "inline.toml").rules
    seen: dict = {}
    assert rule._may_match("1" + "." * 9 + "2" + "." * 9, 0, 5, 20, None, seen) and seen == {
        ("\\d", rule._needs[0].flags, 0, 20): 0
    }
    assert not rule._may_match("1" + "." * 19, 0, 5, 20, None, {})
    seen[("\\d", rule._needs[0].flags, 0, 20)] = 3  # where an earlier rule found it in this window
    assert rule._may_match("." * 20, 0, 2, 20, None, seen)  # kept, so not looked for again
    classifier = RuleClassifier("en")
    plain = RuleClassifier("en")
    plain._rules = tuple(dataclasses.replace(r, needs=()) for r in plain.rules)
    doc = Document("long", "\n".join(doc.text for doc in generate_corpus(60, 4, "test")))
    monkeypatch.setattr(rules, "SEARCH_WINDOW", 3_000)
    monkeypatch.setattr(rules, "SEARCH_OVERLAP", 200)
    assert len(doc.text) > 30_000 and sum(1 for rule in classifier.rules if rule.needs == ("\\d",)) > 10
    found = classifier.predict(doc)
    assert len(found) > 300 and found == plain.predict(doc)


@pytest.mark.parametrize(
    "text, possible",
    [
        ("40/1000/15", False),
        ("70-84", False),
        ("41-53", False),
        ("40/17-24", False),
        ("178-224", False),
        ("10/3", True),
        ("2/31", True),
        ("12/93", True),
        ("7/81", True),
        ("15.4", False),
        ("2030", True),
        ("'84", True),
        ("1970-84", True),
        ("14/14/2014", True),
        ("16/018/1961", True),
        ("Mar 40-50", True),
        ("29.3", False),
        ("07-1530", False),
        ("1000-1200", False),
        ("3.15", True),
        ("15.4.2019", True),
        ("2019-2020", True),
        ("5/3.27/928", False),
        ("7.36/42/100", False),
        ("8/1-8/3", True),
        ("03.12.19", True),
        ("24/06/12/18", False),
        ("10-12-14-16", True),
    ],
)
def test_numeric_date_possible_rejects_only_numbers_no_date_writing_reads(text, possible):
    from hybriddeid.classifiers.validators import numeric_date_possible

    assert numeric_date_possible(text) is possible


def test_the_pipeline_drops_dates_no_calendar_reads_whoever_found_them():
    """A vent setting read as a date is dropped from every output path (with and without a
    threshold); ``drop_impossible_dates = false`` keeps it."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document, Span

    pipeline = Pipeline.load("en")
    text = "VENT SETTINGS 40/1000/15 A/C, extubated 10/3."
    doc = Document("vent", text)
    found = [Span(14, 24, "DATE", "token"), Span(40, 44, "DATE", "token")]
    assert [text[s.start : s.end] for s in pipeline.within_phi_set(doc, found)] == ["10/3"]
    pipeline.config["pipeline"]["drop_impossible_dates"] = False
    assert [text[s.start : s.end] for s in pipeline.within_phi_set(doc, found)] == ["40/1000/15", "10/3"]


def test_the_pipeline_drops_an_ip_address_with_no_address_shape():
    """A pH read as an IP address is dropped (surrogate mode would change the value); a real one stays."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document, Span

    pipeline = Pipeline.load("en")
    text = "ABG pH 7.45, from 10.0.12.7 and fe80::1:2"
    doc = Document("ip", text)
    found = [Span(7, 11, "IPADDR", "token"), Span(18, 27, "IPADDR", "token"), Span(32, 41, "IPADDR", "token")]
    assert [text[s.start : s.end] for s in pipeline.within_phi_set(doc, found)] == ["10.0.12.7", "fe80::1:2"]
    pipeline.config["pipeline"]["drop_impossible_dates"] = False
    assert len(pipeline.within_phi_set(doc, found)) == 3


def spans_in_order(text: str, surfaces: list[tuple[str, str]]) -> list:
    """Token-CRF spans of ``surfaces`` (surface, label), each found in ``text`` after the one before."""
    from hybriddeid.core.document import Span

    found: list[Span] = []
    for surface, label in surfaces:
        start = text.index(surface, found[-1].end if found else 0)
        found.append(Span(start, start + len(surface), label, "token"))
    return found


def test_the_pipeline_drops_identifiers_that_are_pieces_of_measurement_series():
    """Nursing notes' blood gases and pressures read as IDs or addresses are dropped (surrogate mode
    would rewrite the values); identifiers beside a slash or a word, and descending pairs, stay."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document, Span

    pipeline = Pipeline.load("en")
    text = "FS 178-224. abg 80/48/7.45.34.7. BP 114-17-49/52-67. MRN 1234567/ACCT 12345678/99 ref 224-178"
    spans = {}
    for surface, label in (
        ("178-224", "ACCOUNT"),
        ("7.45.34.7", "IPADDR"),
        ("114-17-49", "MEDICALRECORD"),
        ("1234567", "MEDICALRECORD"),
        ("12345678", "ACCOUNT"),
        ("224-178", "IDNUM"),
    ):
        start = text.index(surface)
        spans[surface] = Span(start, start + len(surface), label, "token")
    kept = [text[s.start : s.end] for s in pipeline.within_phi_set(Document("vitals", text), list(spans.values()))]
    assert kept == ["1234567", "12345678", "224-178"]
    pipeline.config["pipeline"]["drop_impossible_dates"] = False
    assert len(pipeline.within_phi_set(Document("vitals", text), list(spans.values()))) == 6


def test_the_pipeline_drops_dates_that_are_readings_or_pieces_of_a_reading_series():
    """ "PEEP 5/12" and the "45/80" of "7.35/45/80" are readings, not dates (surrogate mode would change the
    values); a date after an ordinary word, or a short date cut from its year, stays."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document

    pipeline = Pipeline.load("en")
    text = "PEEP 5/12, HR: 9-11, ABG 7.35/45/80, vent 10/5/40. Admitted 5/12, seen 3/4/95, on 6/7."
    found = spans_in_order(
        text, [(surface, "DATE") for surface in ("5/12", "9-11", "45/80", "10/5", "5/12", "3/4", "6/7")]
    )
    kept = [text[s.start : s.end] for s in pipeline.within_phi_set(Document("vent", text), found)]
    assert kept == ["5/12", "3/4", "6/7"]
    assert [s.start for s in pipeline.within_phi_set(Document("vent", text), found)][0] > text.index("Admitted")


@pytest.mark.parametrize(
    ("language", "text", "scores", "dates"),
    [
        (
            "en",
            "Pain: 7/10 at rest. 5/10 abdominal pain. Chest pain (8/10). Strength 4/5 in LUE. Pain since 3/10."
            " Seen on 6/10 for pain. Admitted 2/10.",
            ["7/10", "5/10", "8/10", "4/5"],
            ["3/10", "6/10", "2/10"],
        ),
        (
            "es",
            "Dolor EVA 7/10. Fuerza 4/5 en MSI. Acude el 6/10 por dolor. Alta 2/5.",
            ["7/10", "4/5"],
            ["6/10", "2/5"],
        ),
    ],
)
def test_the_pipeline_drops_dates_that_are_scores_on_a_rating_scale(language, text, scores, dates):
    """A number out of 10 or 5 beside a rating word ("Pain: 7/10", "Strength 4/5") is a pain or strength
    score, not a date (surrogate mode would shift it); after "on", "since" or "el", or with no rating word
    near, it stays a date."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document

    pipeline = Pipeline.load(language)
    label = "DATE" if language == "en" else "FECHAS"
    order = sorted(scores + dates, key=text.index)
    found = spans_in_order(text, [(surface, label) for surface in order])
    kept = [text[s.start : s.end] for s in pipeline.within_phi_set(Document("pain", text), found)]
    assert kept == dates


def test_a_plain_word_needs_is_found_by_str_find_wherever_its_regex_search_finds_it() -> None:
    """A needs pattern that is a plain word is looked for without a regex search; ignoring case it
    must still see every text a regex search ignoring case matches (the Kelvin sign, the long s, the
    dotted capital I, accents around it), so the hint never hides a hit."""
    from hybriddeid.classifiers.rules import _literal_found, _literal_needs

    assert _literal_needs("(?i)hosp", ()) == ("hosp", True)
    assert _literal_needs("Dr", ()) == ("Dr", False)
    assert _literal_needs("M\\.D\\.", ()) == ("M.D.", False)
    assert _literal_needs("x", ("IGNORECASE",)) == ("x", True)
    assert _literal_needs("\\d", ()) is None and _literal_needs("(?i)to[ \\t]+see", ()) is None
    assert _literal_needs("(?i)icu", ("V1",)) is None  # full case folding: left to the regex
    texts = [
        "the \u212aey MICU",
        "Ho\u017fpital day",
        "m\u0130cu bed",
        "Dr. Ávila",
        "dr ávila",
        "MD",
        "m.d.",
        "www.X.org",
        "nothing here",
        "\u00df\u1e9e icu",
        "ICU\u0307",
    ]
    for needs, flags in (
        ("(?i)key", ()),
        ("(?i)micu", ()),
        ("(?i)hos", ()),
        ("(?i)icu", ()),
        ("Dr", ()),
        ("(?i)www\\.", ()),
        ("M\\.D\\.", ()),
        ("dr", ("IGNORECASE",)),
        ("(?i)ss", ()),
    ):
        literal = _literal_needs(needs, flags)
        assert literal is not None, needs
        pattern = regex.compile(needs, regex.IGNORECASE if flags else 0)
        for text in texts:
            if pattern.search(text):
                assert _literal_found(literal, text), (needs, text)
            elif not literal[1]:
                assert not _literal_found(literal, text), (needs, text)
    assert not _literal_found(("hosp", True), "no such word")


def test_the_pipeline_drops_numbers_with_a_unit_and_impossible_ages():
    """ "10/5/50%" (a ventilator setting) and "1000-2000cc" (a fluid balance) are readings, not a date or an
    age: a unit is glued to them; an age above 125 is none. A date before a blank and a real age stay."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document

    pipeline = Pipeline.load("en")
    text = "on 10/5/50% FIO2, 1000-2000cc out, 5/12PEEP. Born 10/5/50, a 92yo, age 131, on the 3rd, 1990s."
    found = spans_in_order(
        text,
        [
            ("10/5/50", "DATE"),
            ("1000-2000", "AGE"),
            ("5/12", "DATE"),
            ("10/5/50", "DATE"),
            ("92", "AGE"),
            ("131", "AGE"),
            ("3", "DATE"),
            ("1990", "DATE"),
        ],
    )
    kept = [
        (text[s.start : s.end], s.start > text.index("Born"))
        for s in pipeline.within_phi_set(Document("u", text), found)
    ]
    assert kept == [("10/5/50", True), ("92", True), ("3", True), ("1990", True)]


def test_an_iso_date_before_its_time_is_kept_in_both_languages():
    """ISO 8601 writes a date and its time with a "T" between them ("2024-03-14T14:35"): a date, not a
    reading whose unit is "T" (the check that drops "5/12PEEP" dropped it after every source found it)."""
    from hybriddeid import Pipeline

    for language, text in (
        ("en", "Imaging at 2023-03-02T10:15 showed no change."),
        ("es", "Extracción: 2023-03-02T10:15:00"),
    ):
        found = [text[s.start : s.end] for s in Pipeline.load(language).predict(text)]
        assert "2023-03-02" in found, language


def test_the_pipeline_drops_a_street_that_is_a_number_glued_to_a_word():
    """ "sats 99% on 2lnc.Lungsounds" (2 litres by nasal cannula) read as a street: an address writes its
    number apart from the street's name, so one run of a number glued to a word is none, and surrogate
    mode must not rewrite the oxygen flow. Addresses with blanks, a number alone and "221B" stay."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document

    pipeline = Pipeline.load("en")
    text = "sats 99% on 2lnc.Lungsounds clear. Lives at 12 Main St, flat 221B, 45600 Elm."
    found = spans_in_order(
        text, [("2lnc.Lungsounds", "STREET"), ("12 Main St", "STREET"), ("221B", "STREET"), ("45600", "STREET")]
    )
    kept = [text[s.start : s.end] for s in pipeline.within_phi_set(Document("u", text), found)]
    assert kept == ["12 Main St", "221B", "45600"]


def test_the_pipeline_drops_dates_cut_from_a_decimal_and_names_without_letters():
    """ "11/31/7" of a blood gas "11/31/7.45" runs on into a decimal and "10-10" of "10-10:30" into a time,
    which no date does, unless it holds a year ("3/4/2021.5 days", a typo); "24/06/12/18" has four numbers,
    a date three at most; a name tagged on "811" or "8" of "8GM" has no letter and could not be an age
    either (a mislabelled age, "Hale, 92," or "93yo", is kept)."""
    from hybriddeid import Pipeline
    from hybriddeid.core.document import Document

    pipeline = Pipeline.load("en")
    text = (
        "abg 11/31/7.45, seen 3/4/2021.5 days ago; peak 811, CACL 8GM; Dr O'Brien 2nd; 4/5/1.2; off by 10-10:30 PM;"
        " insulin 24/06/12/18; seen 3/4: well. Mrs. Hale, 92, a 93yo widow."
    )
    found = spans_in_order(
        text,
        [
            ("11/31/7", "DATE"),
            ("3/4/2021", "DATE"),
            ("811", "PATIENT"),
            ("8", "DOCTOR"),
            ("O'Brien 2nd", "DOCTOR"),
            ("4/5/1", "DATE"),
            ("10-10", "DATE"),
            ("24/06/12/18", "DATE"),
            ("3/4", "DATE"),
            ("92", "PATIENT"),
            ("93", "PATIENT"),
        ],
    )
    kept = [text[s.start : s.end] for s in pipeline.within_phi_set(Document("gas", text), found)]
    assert kept == ["3/4/2021", "O'Brien 2nd", "3/4", "92", "93"]  # digits read as a name may be an age
    pipeline.config["pipeline"]["drop_impossible_dates"] = False
    assert len(pipeline.within_phi_set(Document("gas", text), found)) == 11


ONE_LINE_TEXT = (
    'Correo: ana.ruiz@hospital.es\nsin correo en esta línea\n"ana ruiz"@clinica.org y x@y.com\n'
    "@sola al principio\nfin: ultimo@correo.net"
)


@pytest.mark.parametrize("language", ["en", "es"])
def test_a_one_line_rule_searches_only_the_lines_holding_its_needs_and_finds_what_a_whole_search_does(
    language: str,
) -> None:
    """The e-mail rules say ``one_line``: only lines holding an "@" are searched (each with its line
    break, which the look-ahead reads), and the hits are those of a search of the whole text."""
    (rule,) = [rule for rule in parse_rule_file(bundled_rules_text(language), "bundled").rules if rule.name == "email"]
    whole = dataclasses.replace(rule, one_line=False)
    assert rule.one_line and rule._needle_lines(ONE_LINE_TEXT) == [(0, 29), (54, 87), (87, 106), (106, 128)]
    texts = [ONE_LINE_TEXT, ONE_LINE_TEXT.replace("\n", "\r\n"), "no address here", "a@b", ONE_LINE_TEXT + "\n"]
    texts += [note.text for note in _meddocan_notes()]
    assert [rule.spans(text) for text in texts] == [whole.spans(text) for text in texts]
    assert [ONE_LINE_TEXT[start:end] for start, end in rule.spans(ONE_LINE_TEXT)] == [
        "ana.ruiz@hospital.es",
        '"ana ruiz"@clinica.org',
        "x@y.com",
        "ultimo@correo.net",
    ]


def _meddocan_notes() -> list[Document]:
    folder = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
    return read_corpus(folder)[:100] if folder.is_dir() else []


def test_one_line_is_checked_when_a_rule_file_is_read() -> None:
    head = 'taxonomy = "meddocan"\n[[rule]]\nname = "r"\nlabel = "FECHAS"\npattern = "x@y"\n'
    with pytest.raises(RuleFileError, match="one_line must be true or false"):
        parse_rule_file(head + "needs = '@'\none_line = 'yes'\n", "mine.toml")
    with pytest.raises(RuleFileError, match="one_line needs needs"):
        parse_rule_file(head + "one_line = true\n", "mine.toml")
    (rule,) = parse_rule_file(head + "needs = '@'\none_line = true\n", "mine.toml").rules
    assert rule.spans("a\nx@y\nb") == [(2, 5)]


def test_a_one_line_rule_finds_its_lines_by_needs_that_ignore_case_or_are_patterns() -> None:
    """Needs that are no plain word matching case are searched as patterns: the lines they match in are
    searched, a run of lines one match spans as one stretch (each hit found once)."""
    head = 'taxonomy = "meddocan"\n[[rule]]\nname = "r"\nlabel = "FECHAS"\npattern = "(?i)x@y"\none_line = true\n'
    (rule,) = parse_rule_file(head + "needs = '(?i)x@'\n", "mine.toml").rules
    assert rule.spans("a\nX@Y\nb x@y\nc") == [(2, 5), (8, 11)]
    assert rule._needle_lines("a\nX@Y\nb x@y\nc") == [(2, 6), (6, 12)]
    # case-folding "Straße" and "İ" changes the text's length before the line: the line is still found
    folded = "Straße İ\nno\nsee X@Y\n"
    assert rule._needle_lines(folded) == [(12, 20)] and rule.spans(folded) == [(16, 19)]
    (rule,) = parse_rule_file(head + "needs = 'b\\s+x'\n", "mine.toml").rules
    assert rule._needle_lines("a\nb\nx@y x@y\nb x@y") == [(2, 12), (12, 17)]
    assert rule.spans("a\nb\nx@y x@y\nb x@y") == [(4, 7), (8, 11), (14, 17)]


def _english_notes() -> list[Document]:
    folder = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "physionet-deid" / "dev"
    generated = list(generate_corpus(60, 7, "test"))
    return generated + (read_corpus(folder)[:150] if folder.is_dir() else [])


@pytest.mark.parametrize("language", ["en", "es"])
def test_every_bundled_one_line_rule_finds_what_a_search_of_the_whole_text_finds(language: str) -> None:
    """``one_line`` is the rule writer's claim that no match crosses a line break: checked on each such
    rule's examples and counter-examples, generated notes and real ones (the PhysioNet dev half's first
    notes, MEDDOCAN dev's), each also with Windows line breaks and run together on one line."""
    rules = [rule for rule in parse_rule_file(bundled_rules_text(language), "bundled").rules if rule.one_line]
    assert rules
    notes = _english_notes() if language == "en" else _meddocan_notes() + list(generate_corpus(60, 7, "test", "es"))
    texts = [note.text for note in notes]
    texts += [text.replace("\n", "\r\n") for text in texts[:40]] + [text.replace("\n", " ") for text in texts[:40]]
    for rule in rules:
        whole = dataclasses.replace(rule, one_line=False)
        own = [example.text for example in rule.examples] + list(rule.counter_examples)
        for text in own + texts:
            assert rule.spans(text) == whole.spans(text), (rule.name, text[:40])


def test_labels_follow_the_enabled_rules_and_the_label_map_when_they_change():
    # the labels are kept between calls (asked once per note); a fit or load that changes what is enabled or how
    # rules are labelled gives new ones
    clf = RuleClassifier("en")
    every = clf.labels
    assert clf.labels is every and len(every) > 3
    first = clf.rules[0]
    clf.enabled_ = (first.name,)
    assert clf.labels == (first.label,)
    clf.label_map_ = {first.name: "SOMETHING_ELSE"}
    assert clf.labels == ("SOMETHING_ELSE",)
