"""De-identification on Apache Spark: PHI spans and de-identified text for a DataFrame of notes.

Two stages of pandas functions over Arrow batches, both calling ``hybriddeid.runs.processing.process_notes``
as ``hybriddeid annotate`` and ``deid`` do:

1. *spans* (``mapInPandas``, any partitioning): each note's PHI spans from the model. The model is
   shipped with the job (``SparkContext.addFile``) and loaded once per executor Python process
   (``_PIPELINES``, keyed by the model reference), not once per row or batch.
2. *replacement*: in surrogate mode with patients, ``groupBy(patient).applyInPandas`` hands all of a
   patient's notes over at once, exactly as ``hybriddeid deid`` does, so name parts link across the
   patient's notes wherever the input put them. Tag and mask modes, and surrogates where every note
   is its own patient, depend on nothing outside the note and run per partition, without a shuffle.

Output is byte-identical to a single-machine run with the same model, key and options. A note that
cannot be processed gets null results and an error code (``ERROR_CODES``, plus the exception's type,
never its message, which may quote PHI); the job goes on. Everything is deterministic, so a re-run
over the same input gives the same rows.

``hybriddeid spark-deid`` (or ``python -m hybriddeid.integrations.spark_submit``) runs it over files,
e.g. with ``spark-submit``; see ``examples/spark/``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybriddeid.core.document import Document, Span
from hybriddeid.core.profiles import check_phi_set
from hybriddeid.io import TABLE_FORMATS, InputError, detect_table_format
from hybriddeid.runs.processing import NoteSettings, load_model, process_notes
from hybriddeid.surrogates import DeidOptions
from hybriddeid.surrogates.patients import PatientMap

if TYPE_CHECKING:  # pyspark and pandas come with the [spark] extra; imported where used
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# Error codes (the error column holds one, with ":<exception type>" for the *_failed ones).
NO_ID = "no_id"  # the note id is null or empty
DUPLICATE_ID = "duplicate_id"  # another row has the same note id: every such row gets it
NO_TEXT = "no_text"  # the text is null or empty
TOO_LONG = "too_long"  # over max_chars
NO_PATIENT = "no_patient"  # null patient id, or a note id that --patient-pattern does not match
NO_SPANS = "no_spans"  # model=None and the spans column is null
BAD_SPANS = "bad_spans"  # given spans that do not fit the text
PREDICT_FAILED = "predict_failed"
DEID_FAILED = "deid_failed"
PATIENT_INCOMPLETE = "patient_incomplete"  # surrogate mode: another note of the patient failed
ERROR_CODES = (
    NO_ID,
    DUPLICATE_ID,
    NO_TEXT,
    TOO_LONG,
    NO_PATIENT,
    NO_SPANS,
    BAD_SPANS,
    PREDICT_FAILED,
    DEID_FAILED,
    PATIENT_INCOMPLETE,
)

# The batch reader refuses files over 20 MB; a note longer than this is refused here (memory per task).
DEFAULT_MAX_CHARS = 20_000_000
SHIPPED_PREFIX = "sparkfiles:"  # model reference of a model shipped with addFile
TEXT_RECORD_SEPARATOR = "\x1e"  # --format text: notes keep their line breaks, so records end with RS
_PATIENT = "__hybriddeid_patient"  # internal column: the patient id each note is de-identified under
_ID_USES = "__hybriddeid_id_uses"  # internal column: how many rows hold each row's note id

SPAN_FIELDS = (("start", "int"), ("end", "int"), ("label", "string"), ("source", "string"), ("score", "double"))
AUDIT_FIELDS = (
    ("start", "int"),
    ("end", "int"),
    ("out_start", "int"),
    ("out_end", "int"),
    ("label", "string"),
    ("category", "string"),
    ("kind", "string"),
    ("method", "string"),
    ("source", "string"),
    ("score", "double"),
    ("replacement", "string"),
)


# -- the model, once per process ------------------------------------------------------------------
_PIPELINES: dict[str, Any] = {}  # model reference -> Pipeline, in this Python process
_STAGING: tempfile.TemporaryDirectory | None = None  # driver: copies of local models, named by content


def ship_model(spark: SparkSession, model: str | Path = "default") -> str:
    """Make ``model`` reachable from every executor; returns the reference executors load it by.

    A local model folder is copied to a folder named by a hash of its files and added with
    ``SparkContext.addFile`` (so two models called "model" never clash, and a retrained model is a
    new reference); a URI (``hdfs://``, ``s3a://``...) is added as it is; anything else is a bundled
    model's name ("default", "es"), loaded from the hybriddeid installed on the executors.
    """
    global _STAGING
    text = str(model)
    if "://" in text:
        _add_file(spark, text)
        return SHIPPED_PREFIX + text.rstrip("/").rsplit("/", 1)[-1]
    path = Path(text)
    if not (path / "config.toml").is_file():
        return text
    name = f"hybriddeid-model-{_tree_hash(path)}"
    if _STAGING is None:
        _STAGING = tempfile.TemporaryDirectory(prefix="hybriddeid-spark-")
    staged = Path(_STAGING.name) / name
    if not staged.exists():
        shutil.copytree(path, staged)
    _add_file(spark, str(staged))
    return SHIPPED_PREFIX + name


_ADDED: set[tuple[str, str]] = set()  # (application id, path) already given to addFile


def _add_file(spark: SparkSession, path: str) -> None:
    added = (spark.sparkContext.applicationId, path)
    if added not in _ADDED:  # Spark warns when a path is added twice
        spark.sparkContext.addFile(path, recursive=True)
        _ADDED.add(added)


def _tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(file.relative_to(folder).as_posix().encode("utf-8") + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def load_pipeline(model_ref: str) -> Any:
    """The pipeline behind a reference from ``ship_model``, loaded once per Python process."""
    pipeline = _PIPELINES.get(model_ref)
    if pipeline is None:
        path = model_ref
        if model_ref.startswith(SHIPPED_PREFIX):
            from pyspark import SparkFiles

            path = SparkFiles.get(model_ref[len(SHIPPED_PREFIX) :])
        pipeline = _PIPELINES[model_ref] = load_model(path)
    return pipeline


# -- stage 1: spans, per partition ----------------------------------------------------------------
@dataclass(frozen=True)
class SpanStage:
    """What the spans stage needs on the executors (pickled into the task)."""

    model_ref: str | None  # None: take the spans from ``spans_col``
    note_id_col: str
    text_col: str
    spans_col: str
    error_col: str
    max_chars: int = DEFAULT_MAX_CHARS
    patients: str | None = None  # None: no patient column; "column", "pattern" or "note"
    patient_pattern: str | None = None
    phi_set: str | None = None  # None: the model's setting, or every given span


def _is_null(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _span_records(spans: Iterable[Span]) -> list[dict[str, Any]]:
    return [span.record() for span in spans]


def _spans_from_records(records: Iterable[Mapping[str, Any]]) -> tuple[Span, ...]:
    return tuple(
        Span(int(r["start"]), int(r["end"]), str(r["label"]), str(r["source"]), float(r["score"])) for r in records
    )


def note_id_problem(note_id: object, uses: Any) -> str | None:
    """``NO_ID`` for a null or empty note id, ``DUPLICATE_ID`` when ``uses`` (the rows holding this id)
    is over one, else None: as ``hybriddeid deid`` refuses such rows of a folder or table, since
    outputs are known by their id (of two rows with one id, every one is refused: Spark's order
    cannot tell which was meant)."""
    if _is_null(note_id) or str(note_id) == "":
        return NO_ID
    return DUPLICATE_ID if not _is_null(uses) and int(uses) > 1 else None


def note_spans(
    pipeline: Any, note_id: str, text: object, given: Any, max_chars: int, phi_set: str | None = None
) -> tuple[list | None, str | None]:
    """(span records, None) for one note, or (None, error code); never raises. The spans are
    ``process_notes``'s: the model's, or (``pipeline`` None) the given ones; ``phi_set`` keeps only
    that PHI set's spans, as ``hybriddeid deid --phi-set`` does."""
    if not isinstance(text, str) or not text:
        return None, NO_TEXT
    if len(text) > max_chars:
        return None, TOO_LONG
    if pipeline is None:
        if _is_null(given):
            return None, NO_SPANS
        try:  # Document checks that every span lies inside the text
            doc = Document(note_id, text, _spans_from_records(given))
            return _span_records(process_notes(None, [doc], NoteSettings(phi_set=phi_set))[0].document.spans), None
        except Exception as exc:  # noqa: BLE001 - a bad row must not fail the job
            return None, f"{BAD_SPANS}:{type(exc).__name__}"
    try:
        doc = Document(note_id, text)
        return _span_records(process_notes(pipeline, [doc], NoteSettings(phi_set=phi_set))[0].document.spans), None
    except Exception as exc:  # noqa: BLE001 - only the type: the message may quote the note
        return None, f"{PREDICT_FAILED}:{type(exc).__name__}"


def note_patient(stage: SpanStage, note_id: str, patient: object) -> str | None:
    """The patient a note is de-identified under, as ``hybriddeid deid`` decides it; None if unknown."""
    if stage.patients == "column":
        return None if _is_null(patient) else str(patient)
    if stage.patients == "pattern":
        try:
            return PatientMap(pattern=stage.patient_pattern).patient(Path(note_id), Document(note_id, ""))
        except InputError:
            return None
    return note_id


def spans_frame(stage: SpanStage, frame: pd.DataFrame) -> pd.DataFrame:
    """One Arrow batch of notes with the spans and error columns (and the patient column) filled; a row
    whose id is missing or shared (``note_id_problem``, from the ``_ID_USES`` column ``deidentify`` adds)
    gets its error code and nothing else."""
    pipeline = load_pipeline(stage.model_ref) if stage.model_ref is not None else None
    ids = ["" if _is_null(v) else str(v) for v in frame[stage.note_id_col]]
    given = frame[stage.spans_col] if pipeline is None and stage.spans_col in frame else [None] * len(frame)
    previous = list(frame[stage.error_col]) if stage.error_col in frame else [None] * len(frame)
    if _ID_USES in frame:
        previous = [
            error if not _is_null(error) else note_id_problem(note_id, uses)
            for error, note_id, uses in zip(previous, frame[stage.note_id_col], frame[_ID_USES])
        ]
    patients = frame[_PATIENT] if _PATIENT in frame else [None] * len(frame)
    spans_out, errors, patients_out = [], [], []
    for note_id, text, spans, error, patient in zip(ids, frame[stage.text_col], given, previous, patients):
        records, error = (
            (None, error)
            if not _is_null(error)
            else note_spans(pipeline, note_id, text, spans, stage.max_chars, stage.phi_set)
        )
        patient = note_patient(stage, note_id, patient) if stage.patients else None
        if stage.patients and patient is None and error is None:
            records, error = None, NO_PATIENT
        spans_out.append(records)
        errors.append(error)
        patients_out.append(patient)
    frame = frame.copy()
    frame[stage.spans_col] = spans_out  # type: ignore[assignment]  # a column of lists: pandas takes one, its stubs not
    frame[stage.error_col] = errors
    if stage.patients:
        frame[_PATIENT] = patients_out
    return frame


def _spans_batches(
    stage: SpanStage, schema_names: list[str], batches: Iterator[pd.DataFrame]
) -> Iterator[pd.DataFrame]:
    for frame in batches:
        yield spans_frame(stage, frame)[schema_names]


# -- stage 2: replacement, per patient ------------------------------------------------------------
@dataclass(frozen=True)
class DeidStage:
    """What the replacement stage needs on the executors (the options hold the key)."""

    options: DeidOptions
    note_id_col: str
    text_col: str
    spans_col: str
    error_col: str
    deid_col: str
    audit_col: str | None = None
    model_ref: str | None = None  # the model that found the spans: its names are linked across a patient's notes


def deid_frame(stage: DeidStage, frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with the de-identified text (and audit) filled: each patient's notes together (their names
    linked across them, and in surrogate mode one surrogate per value), as ``hybriddeid deid`` does; in
    surrogate mode a patient with a failed note gets no output (its surrogates
    could change once that note is processed), as a failed unit in ``hybriddeid deid``."""
    n = len(frame)
    ids = ["" if _is_null(v) else str(v) for v in frame[stage.note_id_col]]
    texts, spans, errors = list(frame[stage.text_col]), list(frame[stage.spans_col]), list(frame[stage.error_col])
    patients = list(frame[_PATIENT])
    deid: list[str | None] = [None] * n
    audit: list[list | None] = [None] * n
    units: dict[object, list[int]] = {}
    for row in range(n):
        together = patients[row] is not None
        units.setdefault(("patient", patients[row]) if together else ("row", row), []).append(row)
    for rows in units.values():
        ok = [row for row in rows if _is_null(errors[row])]
        if len(ok) < len(rows) and stage.options.mode == "surrogate":
            for row in ok:
                errors[row] = PATIENT_INCOMPLETE
            continue
        if not ok:
            continue
        ok.sort(key=lambda row: ids[row])
        try:  # the spans were found (and kept within the PHI set) by the spans stage
            docs = [Document(ids[row], texts[row], _spans_from_records(spans[row])) for row in ok]
            if stage.model_ref is not None:  # as process_notes links a patient's notes in hybriddeid deid
                docs = load_pipeline(stage.model_ref).link_names(docs)
            notes = process_notes(None, docs, NoteSettings(deid=stage.options), patients[ok[0]] or ids[ok[0]])
        except Exception as exc:  # noqa: BLE001 - only the type: the message may quote the note
            for row in ok:
                errors[row] = f"{DEID_FAILED}:{type(exc).__name__}"
            continue
        for row, note in zip(ok, notes):
            assert note.deid is not None  # NoteSettings(deid=...) de-identifies every note
            deid[row] = note.deid.text
            audit[row] = [replacement.to_dict() for replacement in note.deid.replacements]
    frame = frame.copy()
    frame[stage.deid_col] = deid
    frame[stage.error_col] = [None if _is_null(e) else e for e in errors]
    if stage.audit_col:
        frame[stage.audit_col] = audit  # type: ignore[assignment]  # a column of lists: pandas takes one, its stubs not
    return frame


def _deid_batches(stage: DeidStage, schema_names: list[str], batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for frame in batches:
        yield deid_frame(stage, frame)[schema_names]


def _deid_group(stage, schema_names, frame):  # no hints: applyInPandas would try to evaluate "pd.DataFrame"
    return deid_frame(stage, frame)[schema_names]


# -- the DataFrame API ----------------------------------------------------------------------------
def _struct_array(fields: tuple[tuple[str, str], ...]):
    from pyspark.sql.types import ArrayType, DoubleType, IntegerType, StringType, StructField, StructType

    types = {"int": IntegerType(), "string": StringType(), "double": DoubleType()}
    return ArrayType(StructType([StructField(name, types[kind], True) for name, kind in fields]), True)


def _with_columns(schema: StructType, added: Mapping[str, Any]) -> StructType:
    """``schema`` with ``added`` (name -> type) replacing or appended to its fields."""
    from pyspark.sql.types import StructField, StructType

    kept = [field for field in schema.fields if field.name not in added]
    return StructType(kept + [StructField(name, kind, True) for name, kind in added.items()])


def _check_columns(df: DataFrame, *names: str | None) -> None:
    missing = [name for name in names if name and name not in df.columns]
    if missing:
        raise ValueError(
            f"the DataFrame has no column {', '.join(map(repr, missing))} (it has {', '.join(df.columns)})"
        )


def find_phi(
    df: DataFrame,
    model: str | Path = "default",
    *,
    note_id_col: str = "note_id",
    text_col: str = "text",
    spans_col: str = "phi_spans",
    error_col: str = "error",
    max_chars: int = DEFAULT_MAX_CHARS,
    phi_set: str | None = None,
) -> DataFrame:
    """``df`` with each note's PHI spans (array of start, end, label, source, score; the single-machine
    ``Pipeline.predict`` output, within ``phi_set``: default the model's) and an error column (null, or an
    error code when the note failed)."""
    from pyspark.sql.types import StringType

    _check_columns(df, note_id_col, text_col)
    phi_set = None if phi_set is None else check_phi_set(phi_set)
    stage = SpanStage(
        ship_model(df.sparkSession, model), note_id_col, text_col, spans_col, error_col, max_chars, phi_set=phi_set
    )
    schema = _with_columns(df.schema, {spans_col: _struct_array(SPAN_FIELDS), error_col: StringType()})
    return df.mapInPandas(partial(_spans_batches, stage, schema.names), schema)


def deidentify(
    df: DataFrame,
    options: DeidOptions,
    model: str | Path | None = "default",
    *,
    note_id_col: str = "note_id",
    text_col: str = "text",
    patient_col: str | None = None,
    patient_pattern: str | None = None,
    spans_col: str = "phi_spans",
    deid_col: str = "deid_text",
    audit_col: str | None = None,
    error_col: str = "error",
    max_chars: int = DEFAULT_MAX_CHARS,
    phi_set: str | None = None,
) -> DataFrame:
    """``df`` with the de-identified text of each note (``deid_col``), its spans and an error column.

    ``model=None`` replaces the spans already in ``spans_col`` (gold, or an earlier ``find_phi``)
    instead of running a model. Patients come from ``patient_col`` or ``patient_pattern`` (a regex over
    note ids, as ``hybriddeid deid --patient-pattern``); otherwise each note is its own patient.
    ``audit_col`` adds the replacements (offsets, label, kind, method, replacement; never the
    original). ``phi_set`` replaces only that PHI set's spans (default: the model's setting, or every
    given span). The original text stays in ``text_col``: drop it before writing the result anywhere.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    if patient_col and patient_pattern:
        raise ValueError("give patient_col or patient_pattern, not both")
    PatientMap(pattern=patient_pattern)  # checks the regex on the driver
    phi_set = None if phi_set is None else check_phi_set(phi_set)
    _check_columns(df, note_id_col, text_col, patient_col, None if model is not None else spans_col)
    patients = "column" if patient_col else ("pattern" if patient_pattern else "note")
    work = df.withColumn(_PATIENT, F.col(patient_col).cast("string") if patient_col else F.lit(None).cast("string"))
    work = work.withColumn(_ID_USES, F.count(F.lit(1)).over(Window.partitionBy(F.col(note_id_col).cast("string"))))
    model_ref = None if model is None else ship_model(df.sparkSession, model)
    spans_stage = SpanStage(
        model_ref, note_id_col, text_col, spans_col, error_col, max_chars, patients, patient_pattern, phi_set
    )
    spans_schema = _with_columns(
        work.schema, {spans_col: _struct_array(SPAN_FIELDS), error_col: StringType(), _PATIENT: StringType()}
    )
    with_spans = work.mapInPandas(partial(_spans_batches, spans_stage, spans_schema.names), spans_schema)

    deid_stage = DeidStage(options, note_id_col, text_col, spans_col, error_col, deid_col, audit_col, model_ref)
    added = {
        deid_col: StringType(),
        error_col: StringType(),
        **({audit_col: _struct_array(AUDIT_FIELDS)} if audit_col else {}),
    }
    schema = _with_columns(spans_schema, added)
    if patients != "note":  # a patient's notes together: one surrogate per value, names linked across them
        # A note without a patient is a group of its own; it only carries its error through.
        unit = F.coalesce(F.col(_PATIENT), F.concat(F.lit("\0"), F.col(note_id_col).cast("string")))
        out = with_spans.groupBy(unit).applyInPandas(partial(_deid_group, deid_stage, schema.names), schema)
    else:
        out = with_spans.mapInPandas(partial(_deid_batches, deid_stage, schema.names), schema)
    return out.drop(_PATIENT, _ID_USES)


# -- files in, files out (hybriddeid spark-deid) --------------------------------------------------
def local_session(master: str | None = None, app_name: str = "hybriddeid") -> SparkSession:
    """A SparkSession: ``spark-submit``'s when run under it, else ``master`` (default local[*]).

    In local mode the Python workers run this interpreter (which has hybriddeid installed) unless
    PYSPARK_PYTHON says otherwise; Spark's own logging is cut to warnings.
    """
    from pyspark.sql import SparkSession

    # Workers start as `python -m pyspark.daemon`, which would put the working directory first on
    # sys.path: run from a source checkout, they would import its hybriddeid instead of the installed one.
    builder = SparkSession.builder.appName(app_name).config("spark.executorEnv.PYTHONSAFEPATH", "1")
    if master:
        builder = builder.master(master)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this Python
    if master.startswith("local") if master else not under_submit:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines would pass as ours in the CLI
    return spark


def read_notes(
    spark: SparkSession, path: str, input_format: str = "auto", note_id_col: str = "note_id", text_col: str = "text"
) -> DataFrame:
    """Notes as a DataFrame: Parquet or JSON Lines tables, or a folder of ``.txt`` notes (one per file,
    its name without ``.txt`` as note id, as ``hybriddeid deid`` names them)."""
    from pyspark.sql import functions as F

    fmt = detect_table_format(path) if input_format == "auto" else input_format
    if fmt == "parquet":
        return spark.read.parquet(path)
    if fmt == "json":
        return spark.read.json(path)
    texts = spark.read.option("pathGlobFilter", "*.txt").option("recursiveFileLookup", True).text(path, wholetext=True)
    # a lambda: Spark 4 would try to read a pandas UDF type out of the function's hints
    note_id = F.udf(lambda file_name: note_id_from_file_name(file_name), "string")(F.col("_metadata.file_name"))
    return texts.select(note_id.alias(note_id_col), F.col("value").alias(text_col))


def note_id_from_file_name(file_name: str) -> str:
    """ "a%20b.txt" (Spark gives file names URL-encoded) -> "a b", the stem ``hybriddeid deid`` uses."""
    from urllib.parse import unquote

    return Path(unquote(file_name)).stem


def _error_counts(error_col: str):
    """Aggregates that count notes, failures and each error code, observed while the output is written."""
    from pyspark.sql import functions as F

    code = F.split(F.col(error_col), ":").getItem(0)
    return [
        F.count(F.lit(1)).alias("notes"),
        F.count(F.col(error_col)).alias("failed"),
        *(F.sum(F.when(code == name, 1).otherwise(0)).alias(name) for name in ERROR_CODES),
    ]


def run_job(
    spark: SparkSession,
    input_path: str,
    output_path: str,
    options: DeidOptions,
    model: str | None = "default",
    *,
    input_format: str = "auto",
    output_format: str = "parquet",
    note_id_col: str = "note_id",
    text_col: str = "text",
    patient_col: str | None = None,
    patient_pattern: str | None = None,
    with_spans: bool = False,
    with_audit: bool = False,
    partitions: int | None = None,
    overwrite: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
    phi_set: str | None = None,
) -> dict[str, int]:
    """Read notes, de-identify them and write note id, de-identified text and error (and, if asked,
    spans and audit) in ``output_format``; never the original text or other input columns. Returns
    counts of notes, failures and each error code (no note ids, no text)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if output_format not in TABLE_FORMATS:
        raise ValueError(f"output format must be one of {', '.join(TABLE_FORMATS)}")
    notes = read_notes(spark, input_path, input_format, note_id_col, text_col)
    if partitions:
        notes = notes.repartition(partitions)
    result = deidentify(
        notes,
        options,
        model,
        note_id_col=note_id_col,
        text_col=text_col,
        patient_col=patient_col,
        patient_pattern=patient_pattern,
        audit_col="audit" if with_audit else None,
        max_chars=max_chars,
        phi_set=phi_set,
    )
    columns = [
        note_id_col,
        "deid_text",
        "error",
        *(["phi_spans"] if with_spans else []),
        *(["audit"] if with_audit else []),
    ]
    observation = Observation("hybriddeid")
    out = result.select(*columns).sortWithinPartitions(note_id_col).observe(observation, *_error_counts("error"))
    mode = "overwrite" if overwrite else "errorifexists"
    if output_format == "text":  # de-identified notes only: "<note id>\t<text>" records ending in RS
        records = out.where(F.col("deid_text").isNotNull()).select(
            F.concat_ws("\t", note_id_col, "deid_text").alias("value")
        )
        records.write.mode(mode).option("lineSep", TEXT_RECORD_SEPARATOR).text(output_path)
    else:
        getattr(out.write.mode(mode), output_format)(output_path)
    return {name: int(value or 0) for name, value in observation.get.items()}
