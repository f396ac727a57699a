"""Readers and writers: exact offsets, lossless round trips, and clear PHI-free errors on bad input."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from hybriddeid.core.document import Document, Span
from hybriddeid.io import (
    FORMATS,
    InputError,
    atomic_write_text,
    detect_format,
    iter_documents,
    read_corpus,
    read_document,
    write_document,
    write_documents,
)

FIXTURES = Path(__file__).parent / "fixtures" / "io"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURE_DIRS = {"text": "text", "brat": "brat", "i2b2": "i2b2", "i2b2-2006": "i2b2_2006", "jsonl": "jsonl"}
SUFFIX = {"text": ".txt", "brat": ".ann", "i2b2": ".xml", "i2b2-2006": ".xml", "jsonl": ".jsonl"}
# Every PHI string the fixtures and the bad inputs below hold; no error message may contain one.
PHI = (
    "Brígida",
    "Núñez",
    "Ortega",
    "4471-B",
    "12/03/2019",
    "Peñalara",
    "Segovia",
    "921 555 013",
    "Renée",
    "Zürich",
    "Iñigo",
    "Sáenz",
    "555-0199",
    "Óscar",
    "Pardo",
)
NOTE = (
    "Paciente: Brígida Núñez Ortega\r\nNHC: 4471-B. Fecha: 12/03/2019\r\n"
    "Dirección: C/ Peñalara 3, 2º izq., Segovia\r\nTeléfono: 921 555 013\r\n"
)
NOTE_SPANS = [
    (10, 30, "NOMBRE_SUJETO_ASISTENCIA"),
    (37, 43, "ID_SUJETO_ASISTENCIA"),
    (52, 62, "FECHAS"),
    (75, 88, "CALLE"),
    (90, 97, "CALLE"),
    (99, 106, "TERRITORIO"),
    (118, 129, "NUMERO_TELEFONO"),
]


def content(doc: Document) -> tuple:
    """What a round trip must keep: all but the file's path and, for JSONL, its line (blank lines vanish)."""
    return doc.name, doc.text, doc.spans, {k: v for k, v in doc.meta.items() if k not in ("path", "line")}


def assert_clean(exc: InputError, filename: str) -> None:
    message = str(exc)
    assert filename in message
    assert message == f"{exc.path}: {exc.problem}"
    leaked = [phi for phi in PHI if phi in message]
    assert not leaked, f"PHI in error message: {leaked}"


# --- reading the fixtures --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_detect_format(fmt):
    assert detect_format(FIXTURES / FIXTURE_DIRS[fmt]) == fmt


@pytest.mark.parametrize("fmt", ["text", "brat", "i2b2", "jsonl"])
def test_same_note_same_document_in_every_format(fmt):
    doc = read_corpus(FIXTURES / FIXTURE_DIRS[fmt])[0]
    assert doc.name == "nota-1"
    assert doc.text == NOTE  # \r\n and accents kept, offsets count them
    assert doc.meta["format"] == fmt
    expected = () if fmt == "text" else tuple(Span(s, e, label) for s, e, label in NOTE_SPANS)
    assert doc.spans == expected


def test_brat_discontinuous_entity_becomes_one_span_per_fragment():
    doc = read_document(FIXTURES / "brat" / "nota-1.ann")[0]
    street = [doc.span_text(s) for s in doc.spans if s.label == "CALLE"]
    assert street == ["C/ Peñalara 3", "2º izq."]


def test_i2b2_2006_records_become_named_documents():
    docs = read_document(FIXTURES / "i2b2_2006" / "records.xml")
    assert [d.name for d in docs] == ["records-101", "records-102"]
    assert [d.meta["record"] for d in docs] == ["101", "102"]
    assert all(d.meta["file"] == "records" and d.meta["xml_root"] == "ROOT" for d in docs)
    first = docs[0]
    assert first.text == "\r\nAdmitted 03/14/2011 to St. Ana & José.\r\nPatient Renée Zürich, 67 y/o.\r\n"
    assert [(first.span_text(s), s.label) for s in first.spans] == [
        ("03/14/2011", "DATE"),
        ("St. Ana & José", "HOSPITAL"),
        ("Renée Zürich", "PATIENT"),
        ("67", "AGE"),
    ]


def test_jsonl_keeps_sources_scores_meta_and_unicode_line_separators():
    first, second = read_document(FIXTURES / "jsonl" / "notas.jsonl")
    assert first.meta["site"] == "test" and first.meta["line"] == 1 and second.meta["line"] == 3
    assert "\u2028" in second.text  # not a line end for JSONL
    assert {(s.source, s.score) for s in second.spans} == {("rule", 0.75), ("char_crf", 0.5), ("rule", 0.9)}


def test_bom_is_kept_as_a_character_because_offsets_count_it(tmp_path):
    # MEDDOCAN's BRAT and XML offsets both count a leading BOM; dropping it would shift every span.
    (tmp_path / "a.txt").write_bytes("\ufeffNombre: Pardo\n".encode())
    (tmp_path / "a.ann").write_text("T1\tNOMBRE_SUJETO_ASISTENCIA 9 14\tPardo\n", encoding="utf-8")
    doc = read_document(tmp_path / "a.txt")[0]
    assert doc.text.startswith("\ufeff") and doc.span_text(doc.spans[0]) == "Pardo"
    write_document(doc, tmp_path / "out", "brat")
    assert (tmp_path / "out" / "a.txt").read_bytes() == (tmp_path / "a.txt").read_bytes()


def test_bom_before_xml_declaration_is_dropped(tmp_path):
    source = (FIXTURES / "i2b2" / "nota-1.xml").read_bytes()
    (tmp_path / "nota-1.xml").write_bytes(b"\xef\xbb\xbf" + source)
    assert content(read_document(tmp_path / "nota-1.xml")[0]) == content(
        read_document(FIXTURES / "i2b2" / "nota-1.xml")[0]
    )


# --- writing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_read_write_read_is_identical(fmt, tmp_path):
    docs = read_corpus(FIXTURES / FIXTURE_DIRS[fmt], fmt)
    write_documents(docs, tmp_path, fmt)
    again = read_corpus(tmp_path, fmt)
    assert [content(d) for d in again] == [content(d) for d in docs]
    assert detect_format(tmp_path) == fmt


@pytest.mark.parametrize("fmt", ["text", "brat"])
def test_text_files_are_written_byte_for_byte(fmt, tmp_path):
    paths = write_documents(read_corpus(FIXTURES / FIXTURE_DIRS[fmt]), tmp_path, fmt)
    assert paths == [tmp_path / f"nota-1{SUFFIX[fmt]}"]
    assert (tmp_path / "nota-1.txt").read_bytes() == (FIXTURES / FIXTURE_DIRS[fmt] / "nota-1.txt").read_bytes()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_converts_to_every_other(fmt, tmp_path):
    doc = read_corpus(FIXTURES / "brat")[0]
    path = write_document(doc, tmp_path, fmt)
    assert path == tmp_path / f"nota-1{SUFFIX[fmt]}"
    back = read_document(path, fmt)
    assert back[0].text == doc.text
    if fmt != "text":
        assert back[0].spans == doc.spans


def test_i2b2_writer_uses_taxonomy_categories_and_keeps_root(tmp_path):
    doc = read_corpus(FIXTURES / "brat")[0]
    xml = write_document(doc, tmp_path, "i2b2").read_text(encoding="utf-8")
    assert "<deIdi2b2>" in xml and '<NAME id="T1"' in xml and 'TYPE="NUMERO_TELEFONO"' in xml
    xml = write_document(read_corpus(FIXTURES / "i2b2")[0], tmp_path / "m", "i2b2").read_text(encoding="utf-8")
    assert xml.startswith("<?xml") and "<MEDDOCAN>" in xml and "<CONTACT id=" in xml


def test_i2b2_writer_survives_cdata_end_and_markup_in_text(tmp_path):
    doc = Document("tricky", "a ]]> b\r<c> & 'd' \"e\"\r\n", (Span(2, 5, "ID"), Span(8, 11, "DATE")))
    for fmt in ("i2b2", "i2b2-2006"):
        back = read_document(write_document(doc, tmp_path / fmt, fmt), fmt)[0]
        assert (back.text, back.spans) == (doc.text, doc.spans)


def test_multi_document_formats_write_one_document_per_file_by_name(tmp_path):
    first = read_document(FIXTURES / "jsonl" / "notas.jsonl")[0]
    path = write_document(first, tmp_path, "jsonl")
    assert path == tmp_path / "nota-1.jsonl"
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1
    record = read_document(FIXTURES / "i2b2_2006" / "records.xml")[1]
    assert write_document(record, tmp_path, "i2b2-2006") == tmp_path / "records-102.xml"


def test_writer_refuses_to_overwrite_its_own_input(tmp_path):
    for fmt in FORMATS:
        shutil.copytree(FIXTURES / FIXTURE_DIRS[fmt], tmp_path / fmt)
        before = {p: p.read_bytes() for p in (tmp_path / fmt).iterdir()}
        docs = read_corpus(tmp_path / fmt)
        with pytest.raises(InputError, match="refusing to overwrite"):
            write_documents(docs, tmp_path / fmt, fmt)
        assert {p: p.read_bytes() for p in (tmp_path / fmt).iterdir()} == before


def test_writer_rejects_unsafe_names_and_overlaps_it_cannot_express(tmp_path):
    with pytest.raises(ValueError):
        write_document(Document("../escape", "x"), tmp_path, "text")
    overlapping = Document("o", "abcdef", (Span(0, 3, "ID"), Span(2, 5, "ID", source="rule")))
    with pytest.raises(ValueError, match="overlapping"):
        write_document(overlapping, tmp_path, "i2b2-2006")
    assert read_document(write_document(overlapping, tmp_path, "jsonl"))[0].spans == overlapping.spans


def test_atomic_write_text_keeps_newlines_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    atomic_write_text(target, "ñ\r\nº\n")
    assert target.read_bytes() == "ñ\r\nº\n".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


# --- bad input -------------------------------------------------------------------------------------

GOOD_XML = "<deIdi2b2><TEXT><![CDATA[Nombre: Pardo]]></TEXT><TAGS>{}</TAGS></deIdi2b2>"
RECORD = '<ROOT><RECORD ID="1"><TEXT>{}</TEXT></RECORD></ROOT>'
BAD_INPUTS = {
    # case: ({file name: content}, file to read, format, words the problem must contain)
    "empty": ({"a.txt": b""}, "a.txt", "text", "empty"),
    "binary": ({"a.txt": b"Pardo\x00\x01"}, "a.txt", "text", "NUL byte at byte offset 5"),
    "latin-1": ({"a.txt": "Brígida".encode("latin-1")}, "a.txt", "text", "not valid UTF-8 (byte offset 2)"),
    "utf-16": ({"a.txt": "Brígida".encode("utf-16")}, "a.txt", "text", "UTF-16"),
    "too big": ({"a.txt": b"Pardo " * 10}, "a.txt", "text", "over the limit of 50"),
    "xml malformed": (
        {"a.xml": b"<deIdi2b2>\n<TEXT>Pardo</TEX>\n</deIdi2b2>"},
        "a.xml",
        "i2b2",
        "malformed XML at line 2, column",
    ),
    "xml latin-1 declared": (
        {"a.xml": b"<?xml version='1.0' encoding='ISO-8859-1'?><a/>"},
        "a.xml",
        "i2b2",
        "name it with --encoding",
    ),
    "xml no TEXT": ({"a.xml": RECORD.format("Pardo").encode()}, "a.xml", "i2b2", "no <TEXT>"),
    "xml out of range": (
        {"a.xml": GOOD_XML.format('<NAME id="T7" start="8" end="99" text="Pardo" TYPE="DOCTOR"/>').encode()},
        "a.xml",
        "i2b2",
        "span T7 [8, 99) is out of range",
    ),
    "xml text differs": (
        {"a.xml": GOOD_XML.format('<NAME id="T7" start="7" end="12" text="Pardo" TYPE="DOCTOR"/>').encode()},
        "a.xml",
        "i2b2",
        "span T7 [7, 12): recorded text differs",
    ),
    "xml bad offset": (
        {"a.xml": GOOD_XML.format('<NAME id="T7" start="x" end="12" TYPE="DOCTOR"/>').encode()},
        "a.xml",
        "i2b2",
        "span T7: offsets are not",
    ),
    "2006 nested": (
        {"a.xml": RECORD.format('<PHI TYPE="DOCTOR"><PHI TYPE="X">Pardo</PHI></PHI>').encode()},
        "a.xml",
        "i2b2-2006",
        "only flat <PHI>",
    ),
    "2006 empty PHI": (
        {"a.xml": RECORD.format('Dr. <PHI TYPE="DOCTOR"></PHI>').encode()},
        "a.xml",
        "i2b2-2006",
        "[4, 4) is empty",
    ),
    "2006 no TYPE": (
        {"a.xml": RECORD.format("Dr. <PHI>Pardo</PHI>").encode()},
        "a.xml",
        "i2b2-2006",
        "missing or malformed label",
    ),
    "2006 duplicate ID": (
        {"a.xml": b'<ROOT><RECORD ID="1"><TEXT>a</TEXT></RECORD><RECORD ID="1"><TEXT>b</TEXT></RECORD></ROOT>'},
        "a.xml",
        "i2b2-2006",
        "duplicate record ID",
    ),
    "brat malformed line": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T1\tDOCTOR 8 13\tPardo\nT2 Pardo\n"},
        "a.ann",
        "brat",
        "line 2: malformed annotation",
    ),
    "brat malformed offsets": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T1\tDOCTOR 8 13;\tPardo\n"},
        "a.ann",
        "brat",
        "line 1: malformed offsets for T1",
    ),
    "brat out of range": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T3\tDOCTOR 8 14\tPardo\n"},
        "a.ann",
        "brat",
        "span T3 [8, 14) is out of range",
    ),
    "brat text differs": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T3\tDOCTOR 7 12\tPardo\n"},
        "a.ann",
        "brat",
        "span T3 [7, 12): recorded text differs",
    ),
    "brat discontinuous text differs": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T3\tDOCTOR 0 2;8 13\tPardo\n"},
        "a.ann",
        "brat",
        "span T3 [0, 13): recorded text differs",
    ),
    "brat duplicate id": (
        {"a.txt": b"Nombre: Pardo", "a.ann": b"T1\tDOCTOR 8 13\tPardo\nT1\tX 0 6\tNombre\n"},
        "a.ann",
        "brat",
        "duplicate annotation id T1",
    ),
    "brat missing ann": ({"a.txt": b"Nombre: Pardo"}, "a.txt", "brat", "no .ann file beside it"),
    "brat missing txt": ({"a.ann": b"T1\tDOCTOR 8 13\tPardo\n"}, "a.ann", "brat", "no .txt file beside it"),
    "jsonl invalid": (
        {"a.jsonl": b'{"text": "Pardo"}\n{"text": "Pardo"\n'},
        "a.jsonl",
        "jsonl",
        "line 2: invalid JSON",
    ),
    "jsonl no text": ({"a.jsonl": b'{"name": "x", "spans": []}\n'}, "a.jsonl", "jsonl", "'text' is missing"),
    "jsonl out of range": (
        {"a.jsonl": b'{"text": "Pardo", "spans": [{"start": 0, "end": 9, "label": "X"}]}\n'},
        "a.jsonl",
        "jsonl",
        "span #0 (line 1) [0, 9) is out of range",
    ),
    "jsonl duplicate name": (
        {"a.jsonl": b'{"name": "n", "text": "a"}\n{"name": "n", "text": "b"}\n'},
        "a.jsonl",
        "jsonl",
        "line 2: document name 'n' is used twice",
    ),
    "jsonl unsafe name": ({"a.jsonl": b'{"name": "../x", "text": "a"}\n'}, "a.jsonl", "jsonl", "'name' is not"),
    "jsonl lone surrogate": ({"a.jsonl": b'{"text": "a\\ud800"}\n'}, "a.jsonl", "jsonl", "lone surrogate"),
}


def test_input_error_pickles_with_its_fields():
    error = pickle.loads(pickle.dumps(InputError(Path("a.txt"), "file is empty")))
    assert (error.path, error.problem, str(error)) == (Path("a.txt"), "file is empty", "a.txt: file is empty")


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_clear_input_error_without_phi(case, tmp_path):
    files, target, fmt, problem = BAD_INPUTS[case]
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    max_bytes = 50 if case == "too big" else 20_000_000
    with pytest.raises(InputError) as caught:
        read_document(tmp_path / target, fmt, max_bytes=max_bytes)
    assert_clean(caught.value, target)
    assert problem in caught.value.problem


def test_non_entity_brat_lines_and_blank_lines_are_ignored(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"Nombre: Pardo")
    (tmp_path / "a.ann").write_bytes(
        b"\xef\xbb\xbf#1\tAnnotatorNotes T1\tnote\r\n\r\nT1\tDOCTOR 8 13\r\nA1\tNeg T1\r\n"
        b"R1\tRel Arg1:T1 Arg2:T1\r\nE1\tEv:T1\r\nN1\tRef T1 W:1\tx\r\n"
    )
    assert read_document(tmp_path / "a.txt")[0].spans == (Span(8, 13, "DOCTOR"),)


def test_iter_documents_carries_on_past_bad_files(tmp_path):
    (tmp_path / "a.txt").write_text("uno", encoding="utf-8")
    (tmp_path / "b.txt").write_bytes(b"")
    (tmp_path / "c.txt").write_bytes(b"\xff")
    (tmp_path / "d.txt").write_text("cuatro", encoding="utf-8")
    items = list(iter_documents(tmp_path))
    assert [p.name for p, _ in items] == ["a.txt", "b.txt", "c.txt", "d.txt"]
    assert [type(item).__name__ for _, item in items] == ["Document", "InputError", "InputError", "Document"]
    with pytest.raises(InputError, match="b.txt"):
        read_corpus(tmp_path)


def test_detect_format_refuses_empty_and_mixed_folders(tmp_path):
    with pytest.raises(InputError, match="no input files"):
        detect_format(tmp_path)
    shutil.copy(FIXTURES / "text" / "nota-1.txt", tmp_path)
    shutil.copy(FIXTURES / "jsonl" / "notas.jsonl", tmp_path)
    with pytest.raises(InputError, match="several formats"):
        detect_format(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        list(iter_documents(tmp_path / "missing"))
    with pytest.raises(ValueError, match="unknown format"):
        read_document(tmp_path / "nota-1.txt", "conll")


# --- the real corpus -------------------------------------------------------------------------------


def test_meddocan_brat_and_xml_agree_and_round_trip(tmp_path):
    corpus = SHARED / "corpora" / "meddocan"
    if not corpus.is_dir():
        pytest.skip(f"{corpus} not present")
    for split in ("train", "dev"):
        brat = {d.name: d for d in read_corpus(corpus / split / "brat", "brat")}
        xml = {d.name: d for d in read_corpus(corpus / split / "xml", "i2b2")}
        assert brat and brat.keys() == xml.keys()
        differ = [name for name in brat if (brat[name].text, brat[name].spans) != (xml[name].text, xml[name].spans)]
        assert not differ, f"{split}: brat and xml disagree on {differ[:10]}"
    for fmt, docs in (("brat", brat), ("i2b2", xml)):  # dev split: writers are lossless on real notes
        write_documents(docs.values(), tmp_path / fmt, fmt)
        again = {d.name: content(d) for d in read_corpus(tmp_path / fmt, fmt)}
        assert again == {name: content(d) for name, d in docs.items()}


OVERLAPPING_GOLD = {
    "xml": (
        "a.xml",
        GOOD_XML.format(
            '<NAME id="T1" start="8" end="13" TYPE="DOCTOR"/><NAME id="T2" start="10" end="12" TYPE="DOCTOR"/>'
        ).encode(),
        None,
        "spans T1 [8, 13) and T2 [10, 12) overlap; kept T1",
    ),
    "brat": (
        "a.txt",
        b"Nombre: Pardo",
        b"T1\tDOCTOR 8 13\tPardo\nT2\tX 0 9\tNombre: P\n",
        "spans T2 [0, 9) and T1 [8, 13) overlap; kept T2",
    ),
    "jsonl": (
        "a.jsonl",
        json.dumps(
            {"text": "Pardo", "spans": [{"start": 0, "end": 3, "label": "X"}, {"start": 2, "end": 5, "label": "Y"}]}
        ).encode(),
        None,
        "spans #0 (line 1) [0, 3) and #1 (line 1) [2, 5) overlap; kept #0",
    ),
}


@pytest.mark.parametrize("case", sorted(OVERLAPPING_GOLD))
def test_overlapping_gold_spans_keep_the_longer_with_a_warning(case, tmp_path, caplog):
    name, content, ann, message = OVERLAPPING_GOLD[case]
    (tmp_path / name).write_bytes(content)
    if ann is not None:
        (tmp_path / "a.ann").write_bytes(ann)
    with caplog.at_level("WARNING", logger="hybriddeid.io"):
        [doc] = read_corpus(tmp_path)
    assert len(doc.spans) == 1
    assert (doc.spans[0].start, doc.spans[0].end) == {"xml": (8, 13), "brat": (0, 9), "jsonl": (0, 3)}[case]
    assert message in caplog.text and "Pardo" not in caplog.text


def test_i2b2_xml_escaping_matches_the_standard_library():
    """io.i2b2 escapes XML itself (saxutils imports urllib.request at every start): the same output."""
    import random
    from xml.sax.saxutils import escape as standard

    from hybriddeid.io.i2b2 import _ATTR_ESCAPES, escape

    rng = random.Random(3)
    for _ in range(500):
        text = "".join(rng.choice("a&<>\"'\n\r\t ;#x&amp;") for _ in range(rng.randint(0, 30)))
        assert escape(text) == standard(text)
        assert escape(text, _ATTR_ESCAPES) == standard(text, _ATTR_ESCAPES)
