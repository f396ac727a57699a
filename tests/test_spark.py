"""hybriddeid on Apache Spark (local[2]): spans and de-identified text equal the single-machine
pipeline's byte for byte, a patient's notes stay consistent across partitions, failing notes give
error codes (never a failed job, never PHI), re-runs are identical, the model loads once per process.

Skipped where PySpark (``pip install hybriddeid[spark]``) or Java is missing.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import shutil
import sys
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pd = pytest.importorskip("pandas")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java, which is not installed", allow_module_level=True)

from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.cli import main  # noqa: E402
from hybriddeid.core.document import Document, Span  # noqa: E402
from hybriddeid.integrations import spark as hspark  # noqa: E402
from hybriddeid.runs import processing  # noqa: E402
from hybriddeid.surrogates import DeidOptions, deidentify_document, deidentify_patient  # noqa: E402

KEY = bytes(range(32))
# pt01's second note names him only as "Z. Quagmire": its initial follows "Zebulon" from the first
# note only when both notes are de-identified together.
NOTES = {
    "pt01_a": "Nombre: Zebulon Quagmire.\nNHC: 4417920.\nFecha de ingreso: 11/03/2019.\nVive en Zaragoza.\n",
    "pt01_b": "Control del paciente Z. Quagmire, 47 años.\nFecha: 18/03/2019. Teléfono 976 123 456.\n",
    "pt01_c": "Sr. Quagmire acude a revisión el 02/04/2019 en el Hospital Miguel Servet.\n",
    "pt02_a": "Nombre: Ximena Urquidi.\nNHC: 5523011.\nDomicilio: Calle Mayor 12, Huesca.\nCorreo: xu@example.com\n",
    "pt02_b": "Paciente X. Urquidi, mujer de 63 años, ingresa el 05/05/2020.\n",
    "pt03_a": "Nombre: Bartolo Yáñez.\r\nFecha de nacimiento: 01/02/1950.\r\nNHC: 6634102.\r\n",
}
PHI_STRINGS = ["Zebulon", "Quagmire", "Ximena", "Urquidi", "4417920", "5523011", "Yáñez"]
GOLD = {  # (value, label) of each note, for runs on given spans
    "pt01_a": [
        ("Zebulon Quagmire", "NOMBRE_SUJETO_ASISTENCIA"),
        ("4417920", "ID_SUJETO_ASISTENCIA"),
        ("11/03/2019", "FECHAS"),
        ("Zaragoza", "TERRITORIO"),
    ],
    "pt01_b": [
        ("Z. Quagmire", "NOMBRE_SUJETO_ASISTENCIA"),
        ("47 años", "EDAD_SUJETO_ASISTENCIA"),
        ("18/03/2019", "FECHAS"),
        ("976 123 456", "NUMERO_TELEFONO"),
    ],
    "pt01_c": [
        ("Quagmire", "NOMBRE_SUJETO_ASISTENCIA"),
        ("02/04/2019", "FECHAS"),
        ("Hospital Miguel Servet", "HOSPITAL"),
    ],
    "pt02_a": [
        ("Ximena Urquidi", "NOMBRE_SUJETO_ASISTENCIA"),
        ("5523011", "ID_SUJETO_ASISTENCIA"),
        ("Calle Mayor 12", "CALLE"),
        ("Huesca", "TERRITORIO"),
        ("xu@example.com", "CORREO_ELECTRONICO"),
    ],
    "pt02_b": [
        ("X. Urquidi", "NOMBRE_SUJETO_ASISTENCIA"),
        ("63 años", "EDAD_SUJETO_ASISTENCIA"),
        ("05/05/2020", "FECHAS"),
    ],
    "pt03_a": [
        ("Bartolo Yáñez", "NOMBRE_SUJETO_ASISTENCIA"),
        ("01/02/1950", "FECHAS"),
        ("6634102", "ID_SUJETO_ASISTENCIA"),
    ],
}


def gold_doc(name: str) -> Document:
    text = NOTES[name]
    return Document(name, text, tuple(Span(text.index(v), text.index(v) + len(v), label) for v, label in GOLD[name]))


def span_records(spans) -> list[tuple]:
    return [(s.start, s.end, s.label, s.source, s.score) for s in spans]


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = hspark.local_session("local[2]", "hybriddeid tests")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The bundled Spanish model as a local folder, so it is shipped with addFile as a user's would be."""
    target = tmp_path_factory.mktemp("model") / "es"
    shutil.copytree(Path(str(resources.files("hybriddeid.models").joinpath("es"))), target)
    return target


@pytest.fixture(scope="module")
def pipeline(model_dir) -> Pipeline:
    return Pipeline.load(model_dir)


def one_note_per_partition(spark, rows: list[tuple], schema: str):
    """A DataFrame whose every row sits in its own input partition."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), schema)


def notes_frame(spark, with_gold: bool = False):
    rows = [
        (name, text, name.split("_")[0]) + ((span_records(gold_doc(name).spans),) if with_gold else ())
        for name, text in NOTES.items()
    ]
    schema = "note_id string, text string, patient string"
    if with_gold:
        schema += ", phi_spans array<struct<start:int,end:int,label:string,source:string,score:double>>"
    return one_note_per_partition(spark, rows, schema)


# -- equal to the single-machine pipeline ---------------------------------------------------------
def test_find_phi_gives_the_pipeline_spans_and_loads_the_model_once_per_process(spark, model_dir, pipeline):
    rows = {row.note_id: row for row in hspark.find_phi(notes_frame(spark), model_dir).collect()}
    assert set(rows) == set(NOTES)
    for name, text in NOTES.items():
        assert rows[name].error is None
        assert span_records(rows[name].phi_spans) == span_records(pipeline.predict(Document(name, text)))
    assert any(rows[name].phi_spans for name in NOTES)

    model_ref = hspark.ship_model(spark, model_dir)

    def probe(batches):  # which pipeline object each task of each Python worker gets
        for _ in batches:
            yield pd.DataFrame({"pid": [os.getpid()], "pipeline": [id(hspark.load_pipeline(model_ref))]})

    seen = spark.range(0, 8, numPartitions=8).mapInPandas(probe, "pid long, pipeline long").collect()
    by_process = {}
    for row in seen:
        by_process.setdefault(row.pid, set()).add(row.pipeline)
    assert len(seen) == 8 and all(len(ids) == 1 for ids in by_process.values())
    assert len(by_process) < 8  # workers are reused, so tasks share a loaded model


def test_a_patients_notes_in_different_partitions_get_the_surrogates_of_one_run(spark):
    from pyspark.sql import functions as F

    frame = notes_frame(spark, with_gold=True)
    partitions = {r.note_id: r.part for r in frame.select("note_id", F.spark_partition_id().alias("part")).collect()}
    assert len({partitions[name] for name in ("pt01_a", "pt01_b", "pt01_c")}) == 3
    options = DeidOptions(mode="surrogate", language="es", key=KEY)
    rows = {
        r.note_id: r
        for r in hspark.deidentify(frame, options, None, patient_col="patient", audit_col="audit").collect()
    }
    for patient in ("pt01", "pt02", "pt03"):
        names = sorted(name for name in NOTES if name.startswith(patient))
        expected = deidentify_patient([gold_doc(name) for name in names], options, patient)
        for name, result in zip(names, expected):
            assert rows[name].error is None
            assert rows[name].deid_text == result.text
            assert [r.asDict() for r in rows[name].audit] == [r.to_dict() for r in result.replacements]
    # the test can tell: alone, "Z. Quagmire" would not follow "Zebulon"
    assert rows["pt01_b"].deid_text != deidentify_document(gold_doc("pt01_b"), options, "pt01").text
    assert not any(value in rows[name].deid_text for name in NOTES for value in PHI_STRINGS)


def write_notes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in NOTES.items():
        (folder / f"{name}.txt").write_bytes(text.encode("utf-8"))
    return folder


def read_json_rows(folder: Path) -> dict[str, dict]:
    rows = [
        json.loads(line) for part in sorted(folder.glob("part-*.json")) for line in part.read_text("utf-8").splitlines()
    ]
    return {row["note_id"]: row for row in rows}


@pytest.mark.parametrize(
    "options",
    [
        ["--mode", "tag"],
        ["--mode", "mask"],
        ["--mode", "surrogate"],
        ["--mode", "surrogate", "--scope", "corpus", "--safe-harbor", "--date-shift-days", "30"],
    ],
)
def test_spark_deid_writes_what_the_batch_cli_writes(spark, model_dir, tmp_path, options):
    notes = write_notes(tmp_path / "notes")
    key = ["--key-file", str(tmp_path / "deid.key")] if "surrogate" in options else []
    common = ["--model", str(model_dir), *options, *key, "--patient-pattern", r"^(pt\d+)_"]
    assert main(["-q", "deid", str(notes), str(tmp_path / "batch"), *common, "--jobs", "2"]) == 0
    assert (
        main(
            [
                "-q",
                "spark-deid",
                "--input",
                str(notes),
                "--output",
                str(tmp_path / "spark"),
                "--format",
                "json",
                "--master",
                "local[2]",
                *common,
            ]
        )
        == 0
    )
    rows = read_json_rows(tmp_path / "spark")
    assert set(rows) == set(NOTES)
    for name in NOTES:
        assert set(rows[name]) == {"note_id", "deid_text"}  # null error left out by JSON; no original text
        assert rows[name]["deid_text"] == (tmp_path / "batch" / f"{name}.txt").read_bytes().decode("utf-8")


# -- failures -------------------------------------------------------------------------------------
def test_failing_notes_get_error_codes_and_the_job_goes_on(spark):
    text = NOTES["pt02_a"]
    bad = [{"start": 0, "end": len(text) + 5, "label": "FECHAS", "source": "gold", "score": 1.0}]
    rows = [(name, NOTES[name], name.split("_")[0], span_records(gold_doc(name).spans)) for name in NOTES]
    rows += [
        ("nulltext", None, "pt01", []),
        ("badspans", text, "pt09", bad),
        ("nopatient", text, None, []),
        ("nospans", text, "pt08", None),
    ]
    frame = one_note_per_partition(
        spark,
        rows,
        "note_id string, text string, patient string, "
        "phi_spans array<struct<start:int,end:int,label:string,source:string,score:double>>",
    )
    surrogate = DeidOptions(mode="surrogate", language="es", key=KEY)
    got = {r.note_id: r for r in hspark.deidentify(frame, surrogate, None, patient_col="patient").collect()}
    errors = {name: row.error for name, row in got.items()}
    assert errors == {
        "pt01_a": "patient_incomplete",
        "pt01_b": "patient_incomplete",
        "pt01_c": "patient_incomplete",
        "pt02_a": None,
        "pt02_b": None,
        "pt03_a": None,
        "nulltext": "no_text",
        "badspans": "bad_spans:ValueError",
        "nopatient": "no_patient",
        "nospans": "no_spans",
    }
    assert all(row.deid_text is None for row in got.values() if row.error)
    # tag mode links nothing across notes: only the failing notes themselves fail
    tagged = {
        r.note_id: r
        for r in hspark.deidentify(frame, DeidOptions(mode="tag", language="es"), None, patient_col="patient").collect()
    }
    assert tagged["pt01_a"].error is None and tagged["pt01_a"].deid_text.startswith("Nombre: [**")
    assert tagged["nulltext"].error == "no_text"

    too_long = hspark.find_phi(frame.where("note_id = 'pt03_a'"), "es", max_chars=10).collect()
    assert [(r.phi_spans, r.error) for r in too_long] == [(None, "too_long")]


class _Exploding:
    """A pipeline whose prediction fails with PHI in the message, as a buggy component might."""

    def predict(self, doc):
        raise RuntimeError(f"cannot tag {doc.text[:20]}")


def test_prediction_and_replacement_failures_name_the_exception_type_only(monkeypatch):
    monkeypatch.setitem(hspark._PIPELINES, "exploding", _Exploding())
    frame = pd.DataFrame({"note_id": ["pt01_a", "pt02_a"], "text": [NOTES["pt01_a"], NOTES["pt02_a"]]})
    stage = hspark.SpanStage("exploding", "note_id", "text", "phi_spans", "error")
    out = hspark.spans_frame(stage, frame)
    assert list(out["error"]) == ["predict_failed:RuntimeError"] * 2 and list(out["phi_spans"]) == [None, None]

    def leaky(*args, **kwargs):
        raise ValueError("Zebulon Quagmire")

    monkeypatch.setattr(processing, "deidentify_patient", leaky)
    frame = pd.DataFrame(
        {
            "note_id": ["pt01_a"],
            "text": [NOTES["pt01_a"]],
            "error": [None],
            "phi_spans": [span_records(gold_doc("pt01_a").spans)],
            hspark._PATIENT: ["pt01"],
        }
    )
    frame["phi_spans"] = [[dict(zip(("start", "end", "label", "source", "score"), s)) for s in frame["phi_spans"][0]]]
    stage = hspark.DeidStage(
        DeidOptions(mode="surrogate", language="es", key=KEY), "note_id", "text", "phi_spans", "error", "deid_text"
    )
    out = hspark.deid_frame(stage, frame)
    assert list(out["error"]) == ["deid_failed:ValueError"] and list(out["deid_text"]) == [None]


# -- re-runs, output formats, logs ----------------------------------------------------------------
def test_rerun_gives_identical_files_and_logs_hold_no_phi(spark, model_dir, tmp_path, caplog, capsys):
    notes = write_notes(tmp_path / "notes")
    (notes / "orphan.txt").write_text("Nombre: Zebulon Quagmire.\n", encoding="utf-8")
    args = [
        "spark-deid",
        "--model",
        str(model_dir),
        "--input",
        str(notes),
        "--format",
        "json",
        "--mode",
        "surrogate",
        "--key-file",
        str(tmp_path / "deid.key"),
        "--patient-pattern",
        r"^(pt\d+)_",
        "--audit",
        "--spans",
        "--master",
        "local[2]",
    ]
    with caplog.at_level(logging.INFO):
        assert main([*args, "--output", str(tmp_path / "run1")]) == 1  # orphan.txt matches no patient
        assert main([*args, "--output", str(tmp_path / "run2")]) == 1
        assert main([*args, "--output", str(tmp_path / "run2")]) == 2  # exists: refused without --overwrite
        assert main([*args, "--output", str(tmp_path / "run2"), "--overwrite"]) == 1

    def contents(folder: Path) -> list[bytes]:
        return sorted(part.read_bytes() for part in folder.glob("part-*"))

    assert contents(tmp_path / "run1") == contents(tmp_path / "run2") and contents(tmp_path / "run1")
    rows = read_json_rows(tmp_path / "run1")
    assert rows["orphan"]["error"] == "no_patient" and "deid_text" not in rows["orphan"]
    assert rows["pt01_b"]["audit"] and rows["pt01_b"]["phi_spans"]
    logged = caplog.text + "".join(capsys.readouterr())
    assert "7 notes, 6 de-identified, 1 failed (1 no_patient)" in logged
    assert not any(value in logged for value in PHI_STRINGS)


def test_text_and_parquet_outputs(spark, model_dir, tmp_path):
    notes = write_notes(tmp_path / "notes")
    common = [
        "-q",
        "spark-deid",
        "--model",
        str(model_dir),
        "--input",
        str(notes),
        "--mode",
        "mask",
        "--master",
        "local[2]",
    ]
    assert main([*common, "--output", str(tmp_path / "text"), "--format", "text"]) == 0
    records = "".join(p.read_bytes().decode("utf-8") for p in sorted((tmp_path / "text").glob("part-*")))
    by_id = dict(record.split("\t", 1) for record in records.split(hspark.TEXT_RECORD_SEPARATOR) if record)
    assert set(by_id) == set(NOTES) and by_id["pt03_a"].count("\r\n") == 3
    assert main([*common, "--output", str(tmp_path / "parquet")]) == 0
    table = spark.read.parquet(str(tmp_path / "parquet"))
    assert table.columns == ["note_id", "deid_text", "error"]
    assert {r.note_id: r.deid_text for r in table.collect()} == by_id
    # a table input (the parquet just written) with its own column names
    assert (
        main(
            [
                "-q",
                "spark-deid",
                "--model",
                str(model_dir),
                "--input",
                str(tmp_path / "parquet"),
                "--output",
                str(tmp_path / "again"),
                "--text-col",
                "deid_text",
                "--master",
                "local[2]",
            ]
        )
        == 0
    )


def test_spark_deid_without_pyspark_says_how_to_install_it(monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with caplog.at_level(logging.ERROR):
        assert main(["spark-deid", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    assert "pip install 'hybriddeid[spark]'" in caplog.text


def test_the_dataframe_example_runs(spark, capsys):
    example = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "spark" / "dataframe_example.py"))
    rows = {row.note_id: row for row in example["main"](spark).collect()}
    assert set(rows) == {"n1", "n2", "n3"} and not any(row.error for row in rows.values())
    first_line = {name: rows[name].deid_text.splitlines()[0] for name in rows}
    assert first_line["n1"] == first_line["n2"] != "Nombre: Lucía Ferrer Montalbán."  # one patient, one surrogate
    assert "Lucía" not in capsys.readouterr().out
