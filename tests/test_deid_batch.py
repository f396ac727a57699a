"""``hybriddeid deid`` over folders: modes, key handling, patients, audit, resume, parallel runs,
and that no PHI reaches logs, errors or progress output."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus, write_document
from hybriddeid.runs.deid import DeidProcessor, PatientMap, run_deid
from hybriddeid.surrogates import DeidOptions, read_key
from hybriddeid.surrogates.audit import read_audit

# Distinctive PHI values: any of them in a log line or an error is a leak.
PATIENTS = {
    "pt01": ("Zebulon Quagmire", "4417920"),
    "pt02": ("Ximena Urquidi", "5523011"),
    "pt03": ("Bartolo Yáñez", "6634102"),
}
PHI_STRINGS = [name for name, _ in PATIENTS.values()] + [
    "Zebulon",
    "Quagmire",
    "Ximena",
    "4417920",
    "5523011",
    "12/03/2019",
]


def make_notes() -> list[Document]:
    """Two or three notes per patient; file names carry the patient id ("pt01_visit2")."""
    docs = []
    for patient, (name, nhc) in PATIENTS.items():
        for visit in range(1, 3 if patient != "pt03" else 4):
            date = f"{10 + visit}/03/2019"
            text = (
                f"Nombre: {name}.\nNHC: {nhc}.\nFecha de ingreso: {date}.\n"
                f"Paciente de 47 años con fiebre. Vive en Calle Mayor 12, Zaragoza.\n"
            )
            phi = [
                (name, "NOMBRE_SUJETO_ASISTENCIA"),
                (nhc, "ID_SUJETO_ASISTENCIA"),
                (date, "FECHAS"),
                ("47 años", "EDAD_SUJETO_ASISTENCIA"),
                ("Calle Mayor 12", "CALLE"),
                ("Zaragoza", "TERRITORIO"),
            ]
            spans = [Span(text.index(v), text.index(v) + len(v), label) for v, label in phi]
            docs.append(Document(f"{patient}_visit{visit}", text, tuple(spans)))
    return docs


@pytest.fixture()
def brat_dir(tmp_path) -> Path:
    for doc in make_notes():
        write_document(doc, tmp_path / "in", "brat")
    return tmp_path / "in"


def deid(*args: str) -> int:
    return main(["-q", "deid", *args])


def outputs(out_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(out_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode", ["tag", "mask", "surrogate"])
def test_deid_writes_each_note_with_its_audit_and_a_summary(brat_dir, tmp_path, mode):
    out = tmp_path / "out"
    extra = ["--key-file", str(tmp_path / "key")] if mode == "surrogate" else []
    assert deid(str(brat_dir), str(out), "--use-annotations", "--language", "es", "--mode", mode, *extra) == 0
    inputs = {doc.name: doc for doc in read_corpus(brat_dir)}
    results = {doc.name: doc for doc in read_corpus(out)}  # the BRAT outputs: text + spans at output offsets
    assert set(results) == set(inputs)
    for name, doc in inputs.items():
        rows = read_audit(out / "audit" / f"{name}.jsonl")
        assert len(rows) == len(doc.spans) == len(results[name].spans)
        for row, span in zip(rows, doc.spans):
            assert doc.span_text(span) not in json.dumps(row, ensure_ascii=False)  # never the original value
            assert results[name].text[row["out_start"] : row["out_end"]] == row["replacement"]
            assert row["method"] in ({mode} if mode != "surrogate" else {"surrogate", "date-shift", "shape"})
        for value in PHI_STRINGS[:3]:
            assert value not in results[name].text
    summary = json.loads((out / "audit" / "summary.json").read_text())
    assert summary["notes"] == 7 and summary["spans"] == 42 and summary["by_category"]["NAME"] == 7
    if mode == "mask":
        assert all(len(results[n].text) == len(inputs[n].text) for n in inputs)


def test_surrogates_are_consistent_per_patient_and_differ_between_patients(brat_dir, tmp_path):
    out = tmp_path / "out"
    assert (
        deid(
            str(brat_dir),
            str(out),
            "--use-annotations",
            "--language",
            "es",
            "--mode",
            "surrogate",
            "--key-file",
            str(tmp_path / "key"),
            "--patient-pattern",
            r"^(pt\d+)_",
        )
        == 0
    )
    by_patient: dict[str, set[str]] = {}
    for doc in read_corpus(out):
        rows = read_audit(out / "audit" / f"{doc.name}.jsonl")
        name = next(r["replacement"] for r in rows if r["kind"] == "person")
        by_patient.setdefault(doc.name[:4], set()).add(name)
    assert all(len(names) == 1 for names in by_patient.values())  # one surrogate name per patient
    assert len({next(iter(names)) for names in by_patient.values()}) == 3
    # visits one day apart stay one day apart after shifting
    dates = {
        doc.name: next(r["replacement"] for r in read_audit(out / "audit" / f"{doc.name}.jsonl") if r["kind"] == "date")
        for doc in read_corpus(out)
    }
    from datetime import datetime

    parse = lambda s: datetime.strptime(s, "%d/%m/%Y")  # noqa: E731
    assert (parse(dates["pt03_visit3"]) - parse(dates["pt03_visit1"])).days == 2


def test_patient_map_groups_notes(brat_dir, tmp_path):
    mapping = tmp_path / "patients.csv"
    mapping.write_text("note,patient\n" + "".join(f"{d.name},{d.name[:4]}\n" for d in make_notes()), encoding="utf-8")
    out_map, out_pattern = tmp_path / "a", tmp_path / "b"
    common = ["--use-annotations", "--language", "es", "--mode", "surrogate", "--key-file", str(tmp_path / "key")]
    assert deid(str(brat_dir), str(out_map), *common, "--patient-map", str(mapping)) == 0
    assert deid(str(brat_dir), str(out_pattern), *common, "--patient-pattern", r"^(?P<patient>pt\d+)") == 0
    texts = lambda d: {k: v for k, v in outputs(d).items() if k.endswith(".txt")}  # noqa: E731
    assert texts(out_map) == texts(out_pattern)
    # a note missing from the map fails alone, by name
    mapping.write_text("pt01_visit1,pt01\n", encoding="utf-8")
    assert deid(str(brat_dir), str(tmp_path / "c"), *common, "--patient-map", str(mapping)) == 1


def test_key_file_is_created_private_reused_and_kept_out_of_the_folders(brat_dir, tmp_path):
    common = [str(brat_dir), "--use-annotations", "--language", "es", "--mode", "surrogate"]
    assert deid(*common[:1], str(tmp_path / "o0"), *common[1:]) == 2  # surrogate mode without a key
    key = tmp_path / "secret" / "deid.key"
    key.parent.mkdir()
    assert deid(*common[:1], str(tmp_path / "o1"), *common[1:], "--key-file", str(key)) == 0
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert deid(*common[:1], str(tmp_path / "o2"), *common[1:], "--key-file", str(key)) == 0
    assert outputs(tmp_path / "o1") == outputs(tmp_path / "o2")  # same key, same output
    assert deid(*common[:1], str(tmp_path / "o3"), *common[1:], "--key-file", str(tmp_path / "o3" / "k")) == 2
    assert not (tmp_path / "o3" / "k").exists()


def test_rerun_with_other_settings_into_the_same_folder_is_refused(brat_dir, tmp_path):
    out = tmp_path / "out"
    common = [str(brat_dir), str(out), "--use-annotations", "--language", "es"]
    assert deid(*common, "--mode", "tag") == 0
    assert deid(*common, "--mode", "mask") == 2
    assert deid(*common, "--mode", "mask", "--overwrite") == 0
    assert "*" in (out / "pt01_visit1.txt").read_text()


def test_surrogate_output_of_the_earlier_date_offset_rule_is_not_joined(brat_dir, tmp_path, caplog):
    """A run records its date-offset rule: output shifted by the rule before it (its run.json had none)
    is refused, since the same key gave other offsets then and a patient's intervals would break."""
    out = tmp_path / "out"
    common = [
        str(brat_dir),
        str(out),
        "--use-annotations",
        "--language",
        "es",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "k.key"),
    ]
    assert deid(*common) == 0
    manifest = out / "audit" / "run.json"
    settings = json.loads(manifest.read_text())
    assert settings["date_offsets"] == "weekday-and-month"
    del settings["date_offsets"]  # as the version before the rule wrote it
    manifest.write_text(json.dumps(settings))
    assert deid(*common) == 2
    assert "holds output made with other settings (date_offsets)" in caplog.text
    assert deid(*common, "--overwrite") == 0
    tagged = tmp_path / "tagged"
    assert deid(str(brat_dir), str(tagged), "--use-annotations", "--language", "es", "--mode", "tag") == 0
    assert "date_offsets" not in json.loads((tagged / "audit" / "run.json").read_text())  # no dates shifted


def test_resume_redoes_only_unfinished_or_damaged_notes(brat_dir, tmp_path):
    common = [
        "--use-annotations",
        "--language",
        "es",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "key"),
        "--patient-pattern",
        r"^(pt\d+)_",
    ]
    clean, out = tmp_path / "clean", tmp_path / "out"
    assert deid(str(brat_dir), str(clean), *common) == 0
    assert deid(str(brat_dir), str(out), *common) == 0
    # an interrupted run: one note's audit written but not its output, another output damaged
    (out / "pt02_visit1.txt").unlink()
    (out / "pt02_visit1.ann").unlink()
    damaged = out / "pt03_visit2.txt"
    damaged.write_text(damaged.read_text()[:20], encoding="utf-8")
    before = {p: p.stat().st_mtime_ns for p in out.glob("pt01_*")}
    options = DeidOptions(mode="surrogate", language="es", key=read_key(tmp_path / "key"))
    processor = DeidProcessor(options, PatientMap(pattern=r"^(pt\d+)_"), model=None)
    result, summary = run_deid(brat_dir, out, processor, progress=False)
    assert sorted(p.stem for p in result.written) == [
        "pt02_visit1",
        "pt02_visit2",
        "pt03_visit1",
        "pt03_visit2",
        "pt03_visit3",
    ]
    assert sorted(p.stem for p in result.skipped) == ["pt01_visit1", "pt01_visit2"]
    assert {p: p.stat().st_mtime_ns for p in out.glob("pt01_*")} == before  # finished notes untouched
    run_files = lambda d: {k: v for k, v in outputs(d).items() if not k.endswith("summary.json")}  # noqa: E731
    assert run_files(out) == run_files(clean)  # and the result is what an uninterrupted run gives
    assert summary["notes"] == 7


def test_parallel_batch_equals_serial_batch(brat_dir, tmp_path):
    common = [
        "--use-annotations",
        "--language",
        "es",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "key"),
        "--patient-pattern",
        r"^(pt\d+)_",
    ]
    assert deid(str(brat_dir), str(tmp_path / "serial"), *common, "--jobs", "1") == 0
    assert deid(str(brat_dir), str(tmp_path / "parallel"), *common, "--jobs", "3") == 0
    assert outputs(tmp_path / "serial") == outputs(tmp_path / "parallel")


def test_parallel_model_run_equals_serial(tmp_path):
    """Workers load the (bundled Spanish) model once each and produce what one process does."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for doc in make_notes()[:4]:
        (notes / f"{doc.name}.txt").write_text(doc.text, encoding="utf-8")
    common = [
        "--model",
        "es",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "key"),
        "--patient-pattern",
        r"^(pt\d+)_",
    ]
    assert deid(str(notes), str(tmp_path / "serial"), *common) == 0
    assert deid(str(notes), str(tmp_path / "parallel"), *common, "--jobs", "2") == 0
    assert outputs(tmp_path / "serial") == outputs(tmp_path / "parallel")
    text = (tmp_path / "serial" / "pt01_visit1.txt").read_text()
    assert "Quagmire" not in text and "4417920" not in text and text.startswith("Nombre: ")


def test_plain_text_with_use_annotations_is_refused(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("Nombre: Zebulon Quagmire.", encoding="utf-8")
    assert deid(str(tmp_path / "in"), str(tmp_path / "out"), "--use-annotations", "--language", "es") == 2
    assert not (tmp_path / "out" / "a.txt").exists()


def test_mapping_files_are_private_and_kept_out_of_the_output(brat_dir, tmp_path):
    common = [
        str(brat_dir),
        str(tmp_path / "out"),
        "--use-annotations",
        "--language",
        "es",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "key"),
    ]
    assert deid(*common, "--mapping-dir", str(tmp_path / "out" / "map")) == 2
    assert deid(*common, "--mapping-dir", str(tmp_path / "map")) == 0
    mapping = tmp_path / "map" / "pt01_visit1.jsonl"
    assert stat.S_IMODE(mapping.stat().st_mode) == 0o600
    rows = [json.loads(line) for line in mapping.read_text().splitlines()]
    assert rows[0]["original"] == "Zebulon Quagmire" and rows[0]["replacement"] != "Zebulon Quagmire"
    assert not any("Zebulon" in p.read_text() for p in (tmp_path / "out").rglob("*.jsonl"))


def test_csv_audit(brat_dir, tmp_path):
    assert (
        deid(str(brat_dir), str(tmp_path / "out"), "--use-annotations", "--language", "es", "--audit-format", "csv")
        == 0
    )
    rows = read_audit(tmp_path / "out" / "audit" / "pt01_visit1.csv")
    assert [r["replacement"] for r in rows][:2] == ["[**NAME**]", "[**ID**]"] and rows[0]["out_start"] == 8


def test_no_phi_in_logs_errors_or_progress(brat_dir, tmp_path, capsys, caplog, monkeypatch):
    """A failing note (its error quoting PHI) and an unreadable file: one line each, names only."""
    bad = brat_dir / "pt09_visit1.txt"
    bad.write_bytes("Nombre: Zebulon Quagmire \xff".encode("latin-1"))
    (brat_dir / "pt09_visit1.ann").write_text("", encoding="utf-8")

    from hybriddeid.surrogates import generator

    original = generator.Surrogates._person

    def leaky(self, value):
        if value == "Ximena Urquidi":
            raise ValueError(f"cannot replace {value} (NHC 5523011)")  # a message full of PHI
        return original(self, value)

    monkeypatch.setattr(generator.Surrogates, "_person", leaky)
    caplog.set_level(logging.DEBUG)
    for jobs in ("1", "2"):
        code = main(
            [
                "deid",
                str(brat_dir),
                str(tmp_path / f"out{jobs}"),
                "--use-annotations",
                "--language",
                "es",
                "--mode",
                "surrogate",
                "--key-file",
                str(tmp_path / "key"),
                "--patient-pattern",
                r"^(pt\d+)_",
                "--jobs",
                jobs,
            ]
        )
        assert code == 1
    captured = capsys.readouterr()
    streams = captured.out + captured.err + caplog.text
    for value in PHI_STRINGS:
        assert value not in streams
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert sorted(errors) == sorted(
        2
        * [
            "pt02_visit1.txt: ValueError",
            "pt02_visit2.txt: ValueError",
            "pt09_visit1.txt: not valid UTF-8 (byte offset 25); name its encoding with --encoding (e.g. cp1252)",
        ]
    )
    assert (tmp_path / "out1" / "pt01_visit1.txt").is_file()  # the others were done


def test_inputs_are_never_overwritten(brat_dir):
    before = outputs(brat_dir)
    assert deid(str(brat_dir), str(brat_dir), "--use-annotations", "--language", "es") == 2
    assert outputs(brat_dir) == before


def test_pipeline_deidentify_api():
    from hybriddeid import Pipeline

    pipeline = Pipeline.load("es")
    text = "Nombre: Zebulon Quagmire. NHC: 4417920. Fecha de ingreso: 14/03/2019."
    tagged = pipeline.deidentify(text)
    assert tagged.text == "Nombre: [**NAME**]. NHC: [**ID**]. Fecha de ingreso: [**DATE**]."
    first = pipeline.deidentify(text, patient_id="p1", mode="surrogate", key=bytes(32))
    again = pipeline.deidentify(text, patient_id="p1", mode="surrogate", key=bytes(32))
    assert first.text == again.text and "Quagmire" not in first.text
    assert [r.source for r in first.replacements] and all(
        r.source in {"rule", "char", "token"} for r in first.replacements
    )
    with pytest.raises(ValueError, match="key"):
        pipeline.deidentify(text, mode="surrogate")


@pytest.mark.parametrize("audit_format", ["jsonl", "csv"])
def test_text_no_model_reads_is_kept_or_masked_counted_and_resumed(tmp_path, caplog, audit_format):
    notes = tmp_path / "in"
    notes.mkdir()
    (notes / "a.txt").write_text("Patient John Smith said مرحبا بكم 😀 ok.\n", encoding="utf-8")
    (notes / "b.txt").write_text("Plain note, nothing foreign.\n", encoding="utf-8")
    run = ["deid", str(notes), "--mode", "tag", "--audit-format", audit_format]
    with caplog.at_level(logging.WARNING):
        assert main([*run, str(tmp_path / "kept")]) == 0
    assert "1 notes hold 11 characters in scripts the en models do not read" in caplog.text
    assert "مرحبا" not in caplog.text  # the warning counts, never quotes
    assert (tmp_path / "kept" / "a.txt").read_text(encoding="utf-8") == "Patient [**NAME**] said مرحبا بكم 😀 ok.\n"
    summary = json.loads((tmp_path / "kept" / "audit" / "summary.json").read_text())
    assert (summary["unread_characters"], summary["notes_with_unread_text"]) == (11, 1)
    assert main([*run, str(tmp_path / "masked"), "--unsupported-script", "mask"]) == 0
    assert (tmp_path / "masked" / "a.txt").read_text(encoding="utf-8") == "Patient [**NAME**] said ***** *** * ok.\n"
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert main([*run, str(tmp_path / "masked"), "--unsupported-script", "mask"]) == 0  # resumes: nothing redone
    assert "0 written, 2 already done" in caplog.text
