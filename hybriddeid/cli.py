"""The ``hybriddeid`` command line: train, annotate, evaluate, deid, spark-deid, serve, synth, resources.

Exit codes: 0 success, 1 some inputs failed (the others were processed), 2 nothing could be done.
Messages name files and problems only; note text never reaches the terminal or the logs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybriddeid.core.document import Document
    from hybriddeid.core.taxonomy import Taxonomy
    from hybriddeid.io.sql import SqlSink
    from hybriddeid.io.tables import Columns
    from hybriddeid.pipeline.core import Pipeline
    from hybriddeid.runs.batch import BatchResult
    from hybriddeid.runs.tables import FolderSink, TableInputs, TableProcessor
    from hybriddeid.surrogates import DeidOptions

log = logging.getLogger("hybriddeid")


def _train(args: argparse.Namespace) -> int:
    from hybriddeid.evaluation import evaluate
    from hybriddeid.io import read_corpus
    from hybriddeid.pipeline.core import Pipeline
    from hybriddeid.pipeline.recipes import training_config

    train = read_corpus(args.train, args.input_format, encoding=args.encoding)
    if not train:
        log.error("%s: no documents found", args.train)
        return 2
    try:
        train = _known_labels(args, train, "training")
        config = training_config(
            [doc.text for doc in train],
            recipe=args.recipe,
            config_path=args.config,
            language=args.language,
            cluster_folders=[args.train, *args.cluster_text],
        )
    except ValueError as exc:  # unknown recipe or language, a bad config: names only
        log.error("%s", exc)
        return 2
    log.info("training on %d documents from %s", len(train), args.train)
    started = time.perf_counter()
    pipeline = Pipeline(config).fit(train, n_jobs=args.jobs, corpus_name=Path(args.train).name)
    log.info("trained in %.1f s", time.perf_counter() - started)
    if args.dev:
        try:
            dev = _known_labels(args, read_corpus(args.dev, args.input_format, encoding=args.encoding), "dev")
        except ValueError as exc:
            log.error("%s", exc)
            return 2
        report = evaluate(dev, [pipeline.annotate(doc) for doc in dev], phi_set=pipeline.phi_set)
        strict = report.score("strict")
        pipeline.meta["dev_metrics"] = {"documents": len(dev), "scores": report.to_dict()["scores"]}
        log.info("dev strict micro P %.4f R %.4f F1 %.4f", strict.precision, strict.recall, strict.f1)
    pipeline.to_disk(args.out)
    log.info("model written to %s", args.out)
    return 0


def _operating_point(args: argparse.Namespace) -> tuple[float | None, Pipeline | None]:
    """The P(O) threshold of ``annotate``/``deid`` as ``Pipeline.predict`` takes it: ``--threshold``,
    or the one a saved sweep (``--sweep-file``) gives for ``--recall-target`` (0: none); None: the
    model's own config. A ValueError when unusable. With a sweep file the model (``--model``) is
    loaded to check that the sweep measured it, and returned so that the run does not load it again;
    else no model is loaded (None)."""
    from hybriddeid.pipeline.operating_point import NO_THRESHOLD, check_threshold, shown_probability
    from hybriddeid.pipeline.sweep import Sweep
    from hybriddeid.runs.processing import load_model

    if (args.recall_target is None) != (args.sweep_file is None):
        raise ValueError("--recall-target and --sweep-file go together")
    if args.threshold is not None:
        return NO_THRESHOLD if args.threshold == NO_THRESHOLD else check_threshold(args.threshold, "--threshold"), None
    if args.recall_target is None:
        return None, None
    sweep = Sweep.load(args.sweep_file)
    pipeline = load_model(args.model, args.engine, args.device)
    sweep.check_model(pipeline, args.model)
    threshold = sweep.threshold_for(args.recall_target)  # warns when the point costs too much precision
    log.info(
        "recall target %s: threshold %s, from %s",
        shown_probability(args.recall_target),
        shown_probability(threshold) if threshold != NO_THRESHOLD else "none (the model reaches it without one)",
        args.sweep_file,
    )
    return threshold, pipeline


def _annotate(args: argparse.Namespace) -> int:
    from hybriddeid.io import ANNOTATION_FORMATS, InputError
    from hybriddeid.pipeline.core import model_folder
    from hybriddeid.runs.batch import AnnotateProcessor, run_batch
    from hybriddeid.runs.processing import NoteSettings

    model_folder(args.model)  # a missing model is told now, before any input is read
    table = _is_table_run(args)
    try:
        given = [] if table else _table_options_given(args, TABLE_ONLY_OPTIONS)
        if given:
            raise ValueError(
                f"{', '.join(given)}: only for a table or database input (a .csv, .tsv, .parquet or "
                ".jsonl file, or a URL)"
            )
        if table and args.recursive:
            raise ValueError("--recursive: only for a folder of notes")
        if args.format is not None and (args.format in ANNOTATION_FORMATS) == table:
            raise ValueError(
                f"--format {args.format}: a {'table' if table else 'folder'} run writes "
                f"{'a table (csv, tsv, parquet, jsonl-table)' if table else 'annotations'}"
            )
        threshold, pipeline = _operating_point(args)
        settings = NoteSettings(phi_set=args.phi_set, threshold=threshold)
        # The model is loaded once: by this process (jobs 1) or by each worker, unless loaded above already.
        processor = AnnotateProcessor(
            args.model, args.format or "brat", settings, pipeline, engine=args.engine, device=args.device
        )
        if table:
            from hybriddeid.runs.tables import TableAnnotateProcessor

            inputs, sink = _table_io(args, lambda columns: columns.output(spans=True, text=False))
            return _run_table(args, inputs, TableAnnotateProcessor(processor, inputs.columns, sink))
    except (InputError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    args.in_dir, args.out_dir = Path(args.in_dir), Path(args.out_dir)
    result = run_batch(
        args.in_dir,
        args.out_dir,
        processor,
        in_format=args.input_format,
        overwrite=args.overwrite,
        progress=_progress(args),
        jobs=args.jobs,
        limits=args.limits,
        encoding=args.encoding,
        follow_symlinks=args.follow_symlinks,
        recursive=args.recursive,
    )
    _tell_tally(args.out_dir, result)
    return result.exit_code


def _tell_tally(out_dir: Path, result: BatchResult) -> None:
    """The run's tally; an error line (shown even with -q) when a file of the run's own could not be
    written, since the tally on the terminal is then all there is."""
    log.log(logging.ERROR if result.problems else logging.INFO, "%s: %s", out_dir, result.summary())


SWEEP_OPTIONS = ("model", "thresholds", "plot", "recall_target", "sweep_out")


def _evaluate(args: argparse.Namespace) -> int:
    from hybriddeid.core.taxonomy import guess_taxonomy
    from hybriddeid.evaluation import evaluate
    from hybriddeid.io import read_corpus

    if args.sweep:
        if args.pred_dir is not None:
            log.error("evaluate --sweep runs the model over GOLD_DIR itself: leave out PRED_DIR")
            return 2
        return _sweep(args)
    given = [f"--{name.replace('_', '-')}" for name in SWEEP_OPTIONS if getattr(args, name) is not None]
    if given:
        log.error("%s only go with --sweep", ", ".join(given))
        return 2
    if args.pred_dir is None:
        log.error("evaluate needs PRED_DIR, the predictions to score (or --sweep to run a model over GOLD_DIR)")
        return 2
    try:
        gold = _read_gold(args)
        pred = _known_labels(
            args,
            read_corpus(args.pred_dir, args.input_format, encoding=args.encoding),
            "predicted",
            prefer=guess_taxonomy({span.label for doc in gold for span in doc.spans}),
        )
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    report = evaluate(gold, pred, phi_set=args.phi_set)
    print(report.to_json() if args.json else report.format_table())
    return 0


def _read_gold(args: argparse.Namespace) -> list[Document]:
    """``evaluate``'s gold notes (labels checked, ``_known_labels``); a ValueError when none holds a span
    (plain .txt notes): scores against no gold would be zeros that look like a result."""
    from hybriddeid.io import read_corpus

    gold = _known_labels(args, read_corpus(args.gold_dir, args.input_format, encoding=args.encoding), "gold")
    if not any(doc.spans for doc in gold):
        raise ValueError(
            f"{args.gold_dir}: no gold annotations in its {len(gold)} notes, so there is nothing to "
            "score against; GOLD_DIR must hold annotated notes (BRAT .txt with .ann, i2b2 XML, JSONL "
            "with spans)"
        )
    return gold


def _known_labels(
    args: argparse.Namespace, docs: list[Document], side: str, prefer: Taxonomy | None = None
) -> list[Document]:
    """``docs`` with ``--label-map`` applied; a ValueError naming every label (with its count) that no
    bundled taxonomy knows, unless ``--allow-unknown-labels`` (then a warning): an unknown label would
    otherwise be scored, or learnt, as a category of its own without a word."""
    from hybriddeid.core.taxonomy import describe_unknown, guess_taxonomy, read_label_map, relabel, unknown_labels

    if args.label_map is not None:
        docs = relabel(docs, read_label_map(args.label_map))
    taxonomy = guess_taxonomy({span.label for doc in docs for span in doc.spans}, prefer=prefer)
    unknown = unknown_labels(docs, taxonomy)
    if unknown and not args.allow_unknown_labels:
        raise ValueError(
            f"{describe_unknown(side, unknown, taxonomy)}; map them with --label-map FILE (TOML lines "
            f'such as {next(iter(unknown))} = "PATIENT") or score and learn them as their own '
            "categories with --allow-unknown-labels"
        )
    if unknown:
        log.warning("%s (kept: --allow-unknown-labels)", describe_unknown(side, unknown, taxonomy))
    return docs


def _sweep(args: argparse.Namespace) -> int:
    import json

    from hybriddeid.pipeline.operating_point import check_threshold, shown_probability
    from hybriddeid.pipeline.sweep import DEFAULT_THRESHOLDS, parse_thresholds, run_sweep
    from hybriddeid.runs.processing import load_model

    try:
        thresholds = parse_thresholds(args.thresholds) if args.thresholds is not None else DEFAULT_THRESHOLDS
        if args.recall_target is not None:
            check_threshold(args.recall_target, "--recall-target")
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        gold = _read_gold(args)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if not gold:
        log.error("%s: no documents found", args.gold_dir)
        return 2
    model = args.model or "default"
    sweep = run_sweep(
        load_model(model, device=args.device),
        gold,
        thresholds,
        model=model,
        progress=_progress(args),
        phi_set=args.phi_set,
    )
    log.info(
        "read %d notes in %.1f s, applied %d thresholds in %.1f s",
        sweep.documents,
        sweep.read_seconds,
        len(sweep.points) - 1,
        sweep.apply_seconds,
    )
    chosen = sweep.pick(args.recall_target) if args.recall_target is not None else None  # warns at a high cost
    if args.sweep_out is not None:
        sweep.save(args.sweep_out)
        log.info("sweep written to %s", args.sweep_out)
    if args.plot is not None:
        try:
            sweep.plot(args.plot, chosen)
        except ImportError as exc:
            log.error("%s", exc)
            return 2
        log.info("curve drawn in %s", args.plot)
    if args.json:
        out = sweep.to_dict()
        if args.recall_target is not None:
            out.update(recall_target=args.recall_target, chosen=chosen.to_dict() if chosen is not None else None)
        print(json.dumps(out, indent=2))
        return 0
    print(sweep.format_table())
    if args.recall_target is not None:
        target = shown_probability(args.recall_target)
        if chosen is None:
            print(f"recall target {target}: no threshold in the sweep reaches it")
        else:
            print(
                f"recall target {target}: threshold "
                f"{'unset (no threshold)' if chosen.threshold is None else shown_probability(chosen.threshold)}, "
                f"binary token P {chosen.binary_token.precision:.4f} R {chosen.binary_token.recall:.4f}"
            )
    return 0


def _deid_key(args: argparse.Namespace, folders: Sequence[Path], needed: bool | None = None) -> bytes | None:
    """The key for surrogate mode and for ``--rename hash``: read from --key-file, or created there when
    the file does not exist; None when neither needs one (``needed``, when given, decides instead)."""
    from hybriddeid.surrogates import create_key_file, read_key

    rename = getattr(args, "rename", "none")  # deid only
    if needed is None:
        needed = args.mode == "surrogate" or rename != "none"
    if not needed:
        return None
    if args.key_file is None:
        needs = "surrogate mode" if args.mode == "surrogate" else f"--rename {rename}"
        raise ValueError(
            f"{needs} needs --key-file F (a new random key is written to F if it does not "
            "exist; keep it secret and apart from the output)"
        )
    key_path = args.key_file.resolve()
    for folder in folders:
        if key_path.is_relative_to(Path(folder).resolve()):
            raise ValueError(f"{args.key_file}: the key must not lie inside the input or output folder")
    if key_path.exists():
        return read_key(key_path)
    try:
        key = create_key_file(key_path)
    except OSError as exc:
        raise ValueError(
            f"{args.key_file}: cannot create the key file ({exc.strerror or type(exc).__name__})"
        ) from None
    log.info(
        "%s: created a new random key; keep it secret and apart from the output (it is needed to "
        "de-identify more notes consistently)",
        args.key_file,
    )
    return key


def _deid_options(args: argparse.Namespace, key: bytes | None) -> DeidOptions:
    """The de-identification options of ``deid`` and ``spark-deid`` (the language defaults to the model's,
    read from its config alone: the model itself is loaded where it runs); ``key`` is ``_deid_key``'s."""
    from hybriddeid.pipeline.core import model_language
    from hybriddeid.surrogates import DeidOptions

    if getattr(args, "use_annotations", False) and args.language is None:
        raise ValueError("--use-annotations needs --language (en or es): there is no model to take it from")
    if args.language is None:
        args.language = model_language(args.model)
    return DeidOptions(
        mode=args.mode,
        language=args.language,
        key=key if args.mode == "surrogate" else None,
        scope=args.scope,
        date_shift_days=args.date_shift_days,
        keep_years=args.keep_years,
        cap_ages=args.cap_ages or args.safe_harbor,
        truncate_zips=args.truncate_zips or args.safe_harbor,
        tag_level=args.tag_level,
        mask_char=args.mask_char,
        unsupported_script=args.unsupported_script,
    )


def _is_table_run(args: argparse.Namespace) -> bool:
    """Whether ``deid``'s or ``annotate``'s input is a table (a file, or a database URL) rather than a folder
    of notes."""
    from hybriddeid.io.sql import is_database_url
    from hybriddeid.io.tables import TABLE_FILE_FORMATS

    return (
        args.input_format in TABLE_FILE_FORMATS
        or is_database_url(args.in_dir)
        or is_database_url(args.out_dir)
        or Path(args.in_dir).is_file()
    )


TABLE_ONLY_OPTIONS = (
    "query",
    "table",
    "output_table",
    "password_file",
    "patient_col",
    "keep_cols",
    "delimiter",
    "part_rows",
)


def _table_options_given(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The flags among ``names`` (table and database options) given to a folder run."""
    return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]


def _deid(args: argparse.Namespace) -> int:
    from hybriddeid.io import FHIR_FORMAT
    from hybriddeid.runs.deid import DeidProcessor, run_deid
    from hybriddeid.runs.renaming import Renamer
    from hybriddeid.surrogates.audit import format_summary
    from hybriddeid.surrogates.patients import PatientMap

    if _is_table_run(args):
        if args.input_format == FHIR_FORMAT:
            log.error(
                "--input-format %s reads a folder of FHIR Bundle and NDJSON files and writes a folder: "
                "not a single file or a database",
                FHIR_FORMAT,
            )
            return 2
        return _deid_table(args)
    given = _table_options_given(args, (*TABLE_ONLY_OPTIONS, "format"))
    given += [flag for flag, on in (("--spans", args.spans), ("--audit", args.audit)) if on]
    if given:
        log.error(
            "%s: only for a table or database input (a .csv, .tsv, .parquet or .jsonl file, or a URL)", ", ".join(given)
        )
        return 2
    args.in_dir, args.out_dir = Path(args.in_dir), Path(args.out_dir)
    try:
        key = _deid_key(args, (args.in_dir, args.out_dir))
        options = _deid_options(args, key)
        renamer = None
        if args.rename != "none":
            assert key is not None  # _deid_key returns a key whenever --rename asks for one
            renamer = Renamer(key, args.key_file if args.rename == "hash" else None)
        patients = (
            PatientMap.from_file(args.patient_map) if args.patient_map else PatientMap(pattern=args.patient_pattern)
        )
        threshold = pipeline = None
        if args.use_annotations and (args.threshold is not None or args.recall_target is not None):
            raise ValueError("--threshold and --recall-target choose how a model finds PHI: not with --use-annotations")
        if not args.use_annotations:
            # The model is loaded once: here only to check a sweep file, else by this process (jobs 1) or each worker.
            threshold, pipeline = _operating_point(args)
        processor_class = DeidProcessor
        if args.input_format == FHIR_FORMAT:  # FHIR resources in, the same resources out
            from hybriddeid.runs.fhir import FhirDeidProcessor

            processor_class = FhirDeidProcessor
        processor = processor_class(
            options,
            patients,
            None if args.use_annotations else args.model,
            args.audit_format,
            args.mapping_dir,
            phi_set=args.phi_set,
            threshold=threshold,
            pipeline=pipeline,
            engine=args.engine,
            device=args.device,
            renamer=renamer,
        )
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    result, summary = run_deid(
        args.in_dir,
        args.out_dir,
        processor,
        args.input_format,
        overwrite=args.overwrite,
        progress=_progress(args),
        jobs=args.jobs,
        limits=args.limits,
        encoding=args.encoding,
        follow_symlinks=args.follow_symlinks,
        recursive=args.recursive,
    )
    _tell_tally(args.out_dir, result)
    log.info("%s", format_summary(summary))
    return result.exit_code


def _deid_table(args: argparse.Namespace) -> int:
    """``deid`` over a table file or a database (``hybriddeid.runs.tables``): the same notes, model and
    options as a folder run, the output a table."""
    from hybriddeid.io import InputError
    from hybriddeid.io.sql import is_database_url
    from hybriddeid.runs.deid import DeidProcessor
    from hybriddeid.runs.tables import TableDeidProcessor
    from hybriddeid.surrogates.patients import PatientMap

    refused = [
        flag
        for flag, on in (
            ("--use-annotations", args.use_annotations),
            ("--rename", args.rename != "none"),
            ("--mapping-dir", args.mapping_dir is not None),
            ("--recursive", args.recursive),
        )
        if on
    ]
    try:
        if refused:
            raise ValueError(f"{', '.join(refused)}: not for a table run")
        inputs, sink = _table_io(args, lambda columns: columns.output(args.spans, args.audit))
        folders = [Path(p) for p in (args.in_dir, args.out_dir) if not is_database_url(p)]
        key = _deid_key(args, folders)
        options = _deid_options(args, key)
        patients = (
            PatientMap.from_file(args.patient_map) if args.patient_map else PatientMap(pattern=args.patient_pattern)
        )
        threshold, pipeline = _operating_point(args)
    except (InputError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    processor = TableDeidProcessor(
        DeidProcessor(
            options,
            patients,
            args.model,
            phi_set=args.phi_set,
            threshold=threshold,
            pipeline=pipeline,
            engine=args.engine,
            device=args.device,
        ),
        inputs.columns,
        sink,
        spans=args.spans,
        audit=args.audit,
    )
    return _run_table(args, inputs, processor)


def _table_io(
    args: argparse.Namespace, out_columns: Callable[[Columns], list[str]]
) -> tuple[TableInputs, FolderSink | SqlSink]:
    """The table a ``deid`` or ``annotate`` run reads (a file, or a database's ``--table`` or ``--query``)
    and where its rows go (a folder of parts, or a database's ``--output-table``) with the columns
    ``out_columns`` gives; a ValueError or ``InputError`` naming what is unusable."""
    from hybriddeid.io.sql import Database, SqlSink, SqlTable, is_database_url
    from hybriddeid.io.tables import Columns, TableSource, detect_table_file_format, open_table
    from hybriddeid.runs.tables import FolderSink, TableInputs

    from_db, to_db = is_database_url(args.in_dir), is_database_url(args.out_dir)
    refused = [
        flag
        for flag, on in (
            ("--query/--table", not from_db and (args.query or args.table)),
            ("--output-table", not to_db and args.output_table),
        )
        if on
    ]
    if refused:
        raise ValueError(
            f"{', '.join(refused)}: not for this run (--query and --table read a database, --output-table writes one)"
        )
    if to_db and not args.output_table:
        raise ValueError("a database output needs --output-table NAME")
    keep = tuple(name.strip() for name in (args.keep_cols or "").split(",") if name.strip())
    columns = Columns(args.id_col, args.text_col, args.patient_col, keep)
    part_rows = args.part_rows or 1000
    if part_rows < 1:
        raise ValueError("--part-rows must be at least 1")
    if from_db:
        source: TableSource = SqlTable(
            Database(args.in_dir, args.password_file), columns, part_rows, args.query, args.table
        )
        fmt = args.format or "csv"
    else:
        fmt_in = args.input_format if args.input_format != "auto" else detect_table_file_format(Path(args.in_dir))
        source = open_table(Path(args.in_dir), fmt_in, columns, part_rows, args.encoding, args.delimiter)
        fmt = args.format or fmt_in
    if to_db:
        if from_db and args.in_dir == args.out_dir and args.table == args.output_table:
            raise ValueError("--output-table is the input table; choose another")
        sink: FolderSink | SqlSink = SqlSink(
            Database(args.out_dir, args.password_file), args.output_table, out_columns(columns), columns.id
        )
    else:
        schema = getattr(source, "schema", None) if fmt == "parquet" else None
        sink = FolderSink(
            Path(args.out_dir),
            fmt,
            out_columns(columns),
            schema,
            args.delimiter if fmt == getattr(source, "format", None) else None,
        )
    return TableInputs(source, columns), sink


def _run_table(args: argparse.Namespace, inputs: TableInputs, processor: TableProcessor) -> int:
    """Run a table's ``deid`` or ``annotate`` and tell its tally."""
    from hybriddeid.runs.tables import run_table

    result = run_table(
        inputs, processor, overwrite=args.overwrite, progress=_progress(args), jobs=args.jobs, limits=args.limits
    )
    log.log(logging.ERROR if result.batch.problems else logging.INFO, "%s: %s", processor.sink.name, result.summary())
    return result.exit_code


def _spark_deid(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401 - only to say early that it is missing
        from pyspark.errors import AnalysisException

        from hybriddeid.integrations.spark import ERROR_CODES, local_session, run_job
    except ImportError as exc:
        log.error("spark-deid needs PySpark: pip install 'hybriddeid[spark]' (%s missing)", exc.name)
        return 2
    try:
        options = _deid_options(args, _deid_key(args, (Path(args.input), Path(args.output))))
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    started = time.perf_counter()
    try:
        spark = local_session(args.master, "hybriddeid spark-deid")
    except Exception as exc:  # noqa: BLE001 - e.g. no Java: PySpark says so in its own words
        log.error("cannot start Spark (%s): %s", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return 2
    try:
        counts = run_job(
            spark,
            args.input,
            args.output,
            options,
            None if args.use_annotations else args.model,
            input_format=args.input_format,
            output_format=args.format,
            note_id_col=args.id_col,
            text_col=args.text_col,
            patient_col=args.patient_col,
            patient_pattern=args.patient_pattern,
            with_spans=args.spans,
            with_audit=args.audit,
            partitions=args.partitions,
            overwrite=args.overwrite,
            phi_set=args.phi_set,
        )
    except ValueError as exc:  # our own checks: a missing column, an unknown input format
        log.error("%s", exc)
        return 2
    except AnalysisException as exc:  # Spark's: no such input, output exists; they name paths and columns
        log.error("%s", str(exc).splitlines()[0])
        return 2
    failed = ", ".join(f"{counts[code]} {code}" for code in ERROR_CODES if counts.get(code))
    log.info(
        "%s: %d notes, %d de-identified, %d failed%s in %.1f s",
        args.output,
        counts["notes"],
        counts["notes"] - counts["failed"],
        counts["failed"],
        f" ({failed})" if failed else "",
        time.perf_counter() - started,
    )
    if counts["failed"] and args.format == "text":
        log.info("failed notes are left out of text output; parquet and json list them with their error code")
    return 2 if not counts["notes"] or counts["failed"] == counts["notes"] else int(bool(counts["failed"]))


def _serve(args: argparse.Namespace) -> int:
    """``hybriddeid serve``: the model behind an HTTP API (hybriddeid.service), or ``serve keys ...``."""
    if args.serve_action == "keys":
        return _serve_keys(args)
    import dataclasses

    try:
        from hybriddeid.service.app import Service, create_app, model_info
        from hybriddeid.service.pool import WorkerPool, check_sizes
        from hybriddeid.service.server import run_server
        from hybriddeid.service.work import WorkSettings, warm_up
    except ImportError as exc:
        log.error(
            "serve needs FastAPI, uvicorn and prometheus_client: pip install 'hybriddeid[service]' (%s missing)",
            exc.name,
        )
        return 2
    from hybriddeid.pipeline.core import model_folder
    from hybriddeid.runs.processing import load_model
    from hybriddeid.service.app import check_docs_assets
    from hybriddeid.service.keys import KeyStore
    from hybriddeid.service.limits import ServiceLimits, fit_open_files

    try:
        keys = KeyStore(_api_keys_file(args))
        bulk_over = int(args.bulk_over_mb * 2**20)
        check_sizes(args.workers, args.bulk_workers, bulk_over)
        if min(args.max_notes, args.max_note_chars, args.max_waiting) < 1:
            raise ValueError("--max-notes, --max-note-chars and --max-waiting must be at least 1")
        if args.docs_assets is not None:
            check_docs_assets(args.docs_assets)
        connections, lowered = fit_open_files(args.max_connections, args.workers + args.bulk_workers)
        limits = ServiceLimits(
            max_body_bytes=int(args.max_body_mb * 2**20),
            request_timeout=args.request_timeout,
            rate_limit=args.rate_limit,
            burst=args.burst,
            keep_alive=args.keep_alive_timeout,
            header_timeout=args.header_timeout,
            max_connections=connections,
        )
        model_folder(args.model)  # a missing model is told before the key is made
        key = _deid_key(args, (), needed=args.mode == "surrogate" or args.key_file is not None)
        options = dataclasses.replace(_deid_options(args, key), key=key)  # per request: only in surrogate mode
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    if lowered:
        log.warning("%s", lowered)
    if key is not None and args.share_batch_key:
        log.warning(
            "--share-batch-key: every client's surrogates and date shifts are those of batch runs with %s; "
            "a client can learn them by sending made-up notes",
            args.key_file,
        )
    if not len(keys):
        log.warning(
            "%s: no live API keys, so every /v1 request is refused; add one with: hybriddeid serve keys "
            "add NAME --api-keys %s",
            keys.path,
            keys.path,
        )
    pipeline = load_model(args.model, args.engine, args.device)  # once: the workers are forked from this process
    warm_up(pipeline)
    settings = WorkSettings(args.max_note_chars, args.max_notes, options, share_batch_key=args.share_batch_key)
    pool = WorkerPool(
        pipeline, settings, args.workers, args.memory_limit_mb or None, args.max_waiting, args.bulk_workers, bulk_over
    )
    modes = ["tag", "mask", *(["surrogate"] if key is not None else [])]
    app = create_app(
        Service(
            pool,
            keys,
            limits,
            model_info(pipeline, str(args.model), modes),
            public=frozenset(args.public_route or ()),
            docs_assets=args.docs_assets,
        )
    )
    scheme = "https" if args.ssl_certfile else "http"
    log.info(
        "serving model %s on %s://%s:%d with %d workers, and %d more for requests over %g MB (API document at "
        "/openapi.json%s)",
        args.model,
        scheme,
        args.host,
        args.port,
        args.workers,
        args.bulk_workers,
        args.bulk_over_mb,
        ", its page at /docs" if args.docs_assets else "",
    )
    return run_server(
        app,
        args.host,
        args.port,
        args.ssl_certfile,
        args.ssl_keyfile,
        graceful_timeout=args.request_timeout + 5,
        limits=limits,
    )


API_KEYS_ENV = "HYBRIDDEID_API_KEYS"


def _api_keys_file(args: argparse.Namespace) -> Path:
    """The API keys file: --api-keys, else $HYBRIDDEID_API_KEYS; a ValueError when neither is set."""
    path = args.api_keys or os.environ.get(API_KEYS_ENV)
    if not path:
        raise ValueError(
            f"serve needs --api-keys FILE (or ${API_KEYS_ENV}): the API keys file that "
            "`hybriddeid serve keys add NAME --api-keys FILE` writes"
        )
    return Path(path)


def _serve_keys(args: argparse.Namespace) -> int:
    """``serve keys add NAME`` (prints the key once), ``list``, ``revoke NAME_OR_ID``."""
    from hybriddeid.service.keys import add_key, read_keys, revoke_key

    try:
        path = _api_keys_file(args)
        if args.keys_action == "add":
            record, key = add_key(path, args.name, args.key_rate_limit)
            log.info(
                "%s: added key %s (id %s); it is shown once, here, and stored only as a salted hash",
                path,
                record.name,
                record.id,
            )
            print(key)
        elif args.keys_action == "revoke":
            for record in revoke_key(path, args.name):
                log.info(
                    "%s: revoked key %s (id %s); a running server refuses it within a second",
                    path,
                    record.name,
                    record.id,
                )
        else:
            for record in read_keys(path):
                state = f"revoked {record.revoked}" if record.revoked else "live"
                rate = "server's rate" if record.rate_limit is None else f"{record.rate_limit:g}/min"
                print(f"{record.name}\t{record.id}\tcreated {record.created}\t{rate}\t{state}")
    except (ValueError, OSError) as exc:
        log.error("%s", exc if isinstance(exc, ValueError) else f"{exc.filename}: {exc.strerror}")
        return 2
    return 0


def _resources_clusters(args: argparse.Namespace) -> int:
    from hybriddeid.knowledge.build import build_clusters, note_sequences, read_texts

    try:
        ks = [int(k) for k in args.w2v_k.split(",") if k.strip()] if args.w2v_k else []
    except ValueError:
        log.error("--w2v-k: expected comma-separated integers such as 50,200,1000")
        return 2
    texts = read_texts(args.text, args.input_format)
    if not texts:
        log.error("no notes found in %s", ", ".join(map(str, args.text)))
        return 2
    started = time.perf_counter()
    try:
        clusters = build_clusters(
            note_sequences(texts),
            args.language,
            min_count=args.min_count,
            brown_clusters=args.brown_clusters,
            w2v_ks=ks,
            progress=_progress(args),
        )
    except (ImportError, ValueError) as exc:  # numpy or gensim missing; a bad size
        log.error("%s", exc)
        return 2
    clusters.meta["corpus"]["documents"] = len(texts)
    clusters.to_disk(args.out)
    log.info(
        "clusters of %d notes (%d tokens) written to %s in %.1f s",
        len(texts),
        clusters.meta["corpus"]["tokens"],
        args.out,
        time.perf_counter() - started,
    )
    return 0


def _key(args: argparse.Namespace) -> int:
    """``hybriddeid key check|upgrade FILE``: a key file's fingerprint (as audits record it), or the old
    format rewritten with a checksum."""
    from hybriddeid.surrogates.keys import Keyed, read_key, upgrade_key_file

    try:
        key = upgrade_key_file(args.file) if args.action == "upgrade" else read_key(args.file)
    except (ValueError, OSError) as exc:
        log.error("%s", exc if isinstance(exc, ValueError) else f"{args.file}: {exc.strerror}")
        return 2
    if args.action == "upgrade":
        log.info("%s: rewritten with a checksum (same key)", args.file)
    print(f"{args.file}: fingerprint {Keyed(key).fingerprint()}")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from hybriddeid.io import write_documents
    from hybriddeid.synth import generate_corpus

    if args.n < 1:
        log.error("--n must be at least 1")
        return 2
    try:
        docs = list(generate_corpus(args.n, args.seed, args.mix, args.language))
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    write_documents(docs, args.out, args.format)
    log.info(
        "%d synthetic %s notes (%s mix, seed %d, %d PHI spans) written to %s",
        len(docs),
        args.language,
        args.mix,
        args.seed,
        sum(len(doc.spans) for doc in docs),
        args.out,
    )
    return 0


def _risk(args: argparse.Namespace) -> int:
    from hybriddeid.evaluation.risk import plot_reliability
    from hybriddeid.io import atomic_write_text
    from hybriddeid.review.folders import folder_risk, read_folder, reviewed_sample
    from hybriddeid.runs.processing import NoteSettings, load_model

    settings = NoteSettings(phi_set=args.phi_set)
    pipeline = load_model(args.model, device=args.device)
    notes, _, failed = read_folder(pipeline, args.notes_dir, settings, args.encoding)
    if not notes:
        log.error("%s: no notes could be read", args.notes_dir)
        return 2
    reviewed, reviewed_texts = (
        reviewed_sample(pipeline, args.reviewed, settings, args.encoding) if args.reviewed else (None, {})
    )
    if reviewed is not None and not reviewed.notes:
        log.error("%s: no reviewed notes could be read", args.reviewed)
        return 2
    # A note of the folder that was reviewed (same name, same text) is released as corrected.
    corrected = {note.name for note in notes if reviewed_texts.get(note.name) == note.doc.text}
    result = folder_risk(notes, reviewed, args.calibration, corrected)
    report = result.to_dict()
    report["corrected_notes"] = len(corrected)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        if reviewed is not None:
            report["reliability_png"] = str(plot_reliability(reviewed, args.calibration, args.out / "reliability.png"))
        atomic_write_text(args.out / "risk.json", json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        calibrated = (
            "uncalibrated: raw marginals (give --reviewed to calibrate)"
            if reviewed is None
            else f"uncalibrated: {result.uncalibrated_because}"
            if result.uncalibrated_because
            else f"calibrated ({result.calibration['method']}) on {result.reviewed_notes} reviewed notes"
        )
        among = f" ({len(corrected)} of them reviewed: counted as corrected, nothing missed)" if corrected else ""
        print(f"{len(notes)} notes{among}, {result.tokens} tokens; {calibrated}")
        print(
            f"expected missed PHI tokens: {result.expected_missed:.1f} "
            f"({result.low:.1f}-{result.high:.1f}, {round(100 * report['interval_level'])}% interval); "
            f"{result.per_1000():.2f} per 1,000 tokens ({result.per_1000(result.low):.2f}-{result.per_1000(result.high):.2f})"
        )
        for label, value in list(report["per_type"].items())[:10]:
            print(f"  {label:<16} {value:8.2f}")
        if args.out:
            print(
                f"written: {args.out / 'risk.json'}"
                + (f", {report['reliability_png']}" if reviewed is not None else "")
            )
    return 1 if failed else 0


def _review(args: argparse.Namespace) -> int:
    from hybriddeid.review.folders import Corrections, read_folder
    from hybriddeid.review.server import ReviewServer, build_state, serve
    from hybriddeid.runs.processing import NoteSettings, load_model

    if args.next is not None and args.next < 1:
        log.error("--next must be at least 1")
        return 2
    corrections_dir = args.corrections or args.notes_dir.with_name(args.notes_dir.name + "-corrections")
    corrections = Corrections(corrections_dir, args.notes_dir)
    pipeline = load_model(args.model, device=args.device)
    notes, _, failed = read_folder(pipeline, args.notes_dir, NoteSettings(phi_set=args.phi_set), args.encoding)
    if not notes:
        log.error("%s: no notes could be read", args.notes_dir)
        return 2
    state = build_state(pipeline, notes, corrections, args.calibration, args.next)
    try:
        server = ReviewServer(state, args.port)
    except OSError as exc:
        log.error("cannot listen on 127.0.0.1:%d (%s)", args.port, exc.strerror or type(exc).__name__)
        return 2
    log.info("%d notes read (%d files could not be); corrections go to %s", len(notes), failed, corrections_dir)
    print(f"Review page (this address holds its one-time token): {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        serve(server)
    return 0


def _report(args: argparse.Namespace) -> int:
    from hybriddeid.runs.report import write_report

    target = write_report(args.out_dir, args.out, args.risk)
    log.info("report written to %s", target)
    return 0


def _add_phi_set(parser: argparse.ArgumentParser, help_text: str) -> None:
    from hybriddeid.core.profiles import PHI_SETS

    parser.add_argument("--phi-set", choices=PHI_SETS, help=help_text)


def _add_deid_options(parser: argparse.ArgumentParser) -> None:
    """The options ``deid`` and ``spark-deid`` share: where the spans come from and how they are replaced."""
    parser.add_argument(
        "--model", default="default", help='model folder, or a bundled model: "en" (the default) or "es"'
    )
    _add_phi_set(
        parser,
        "replace only this PHI set's spans: i2b2-2014 (all) or hipaa (Safe Harbor identifiers; "
        "ages only over 89); default: the model's setting, all input annotations with --use-annotations",
    )
    parser.add_argument(
        "--use-annotations",
        action="store_true",
        help="replace the inputs' own annotations (deid: BRAT, i2b2, JSONL spans; spark-deid: "
        "the phi_spans column) instead of running a model",
    )
    _add_replacement_options(parser)


def _add_replacement_options(parser: argparse.ArgumentParser) -> None:
    """How spans are replaced (``deid``, ``spark-deid`` and ``serve``'s defaults): mode, key, surrogates."""
    from hybriddeid.core.languages import available_languages

    parser.add_argument("--mode", choices=("tag", "mask", "surrogate"), default="tag")
    parser.add_argument(
        "--key-file",
        type=Path,
        help="secret key for surrogates and deid --rename hash (created if missing; keep it apart from the output)",
    )
    parser.add_argument(
        "--scope",
        choices=("patient", "corpus"),
        default="patient",
        help="where one value keeps one surrogate and one date offset (default: patient)",
    )
    parser.add_argument(
        "--language", choices=available_languages(), help="language of the surrogates (default: the model's)"
    )
    parser.add_argument(
        "--date-shift-days",
        type=int,
        default=365,
        help="dates move by up to this many days, each patient's by one offset that changes weekday and month "
        "(default 365: 32-333 days either way)",
    )
    parser.add_argument("--keep-years", action="store_true", help="Safe Harbor: keep years, shift only day and month")
    parser.add_argument(
        "--cap-ages",
        action="store_true",
        help="accepted for old scripts: ages over 89 (and dates telling them) are always aggregated",
    )
    parser.add_argument(
        "--truncate-zips", action="store_true", help='Safe Harbor: ZIPs keep 3 digits ("000" if restricted)'
    )
    parser.add_argument(
        "--safe-harbor", action="store_true", help="--truncate-zips (ages over 89 are always aggregated)"
    )
    parser.add_argument(
        "--tag-level", choices=("category", "label"), default="category", help="tag mode: [**NAME**] or [**PATIENT**]"
    )
    parser.add_argument("--mask-char", default="*", help="mask mode: the character written (default *)")
    parser.add_argument(
        "--unsupported-script",
        choices=("keep", "mask"),
        default="keep",
        help="text in scripts the model does not read (other alphabets, emoji): keep it as it is "
        "(default; counted in the summary, with a warning) or mask it",
    )


def _add_api_keys(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--api-keys", type=Path, default=default, metavar="FILE", help=f"the API keys file (default: ${API_KEYS_ENV})"
    )


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    """``serve``'s options: the model, where to listen, the workers, the limits, the defaults of deid."""
    from hybriddeid.runs.batch import DEFAULT_MEMORY_MB
    from hybriddeid.service.limits import (
        DEFAULT_BULK_OVER_MB,
        DEFAULT_BULK_WORKERS,
        DEFAULT_BURST,
        DEFAULT_HEADER_TIMEOUT,
        DEFAULT_KEEP_ALIVE,
        DEFAULT_MAX_BODY_MB,
        DEFAULT_MAX_CONNECTIONS,
        DEFAULT_MAX_NOTE_CHARS,
        DEFAULT_MAX_NOTES,
        DEFAULT_MAX_WAITING,
        DEFAULT_RATE_LIMIT,
        DEFAULT_REQUEST_TIMEOUT,
    )

    parser.add_argument(
        "--model", default="default", help='model folder, or a bundled model: "en" (the default) or "es"'
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; put a reverse proxy in front for others)",
    )
    parser.add_argument("--port", type=int, default=8000, help="default 8000")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="worker processes, forked once the model is loaded; each answers one request at a time (default 2)",
    )
    parser.add_argument(
        "--bulk-workers",
        type=int,
        default=DEFAULT_BULK_WORKERS,
        metavar="N",
        help="more workers, at a lower CPU priority, for requests over --bulk-over-mb, so that a long "
        f"note never holds a worker small requests wait for (default {DEFAULT_BULK_WORKERS}; 0: "
        "every request shares --workers)",
    )
    parser.add_argument(
        "--bulk-over-mb",
        type=float,
        default=DEFAULT_BULK_OVER_MB,
        metavar="MB",
        help=f"request bodies larger than this go to the bulk workers (default {DEFAULT_BULK_OVER_MB:g})",
    )
    _add_api_keys(parser, None)
    parser.add_argument(
        "--max-body-mb",
        type=float,
        default=DEFAULT_MAX_BODY_MB,
        metavar="MB",
        help=f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_MB:g})",
    )
    parser.add_argument(
        "--max-note-chars",
        type=int,
        default=DEFAULT_MAX_NOTE_CHARS,
        metavar="N",
        help=f"a longer note gets 413 (default {DEFAULT_MAX_NOTE_CHARS:,})",
    )
    parser.add_argument(
        "--max-notes",
        type=int,
        default=DEFAULT_MAX_NOTES,
        metavar="N",
        help=f"more notes in one request get 413 (default {DEFAULT_MAX_NOTES})",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="SECONDS",
        help="a request not answered in this time, waiting for a worker included, gets 504 and its "
        f"worker is replaced (default {DEFAULT_REQUEST_TIMEOUT:g})",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=DEFAULT_RATE_LIMIT,
        metavar="PER_MINUTE",
        help=f"requests a minute per API key; more get 429 with Retry-After (default "
        f"{DEFAULT_RATE_LIMIT}; 0: no limit)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=DEFAULT_BURST,
        help=f"requests a key may send at once within its rate (default {DEFAULT_BURST})",
    )
    parser.add_argument(
        "--max-waiting",
        type=int,
        default=DEFAULT_MAX_WAITING,
        metavar="N",
        help=f"requests beyond this many waiting for a worker get 503 with Retry-After (default {DEFAULT_MAX_WAITING})",
    )
    parser.add_argument(
        "--memory-limit-mb",
        type=int,
        default=DEFAULT_MEMORY_MB,
        metavar="MB",
        help=f"address space each worker may take beyond what it holds when forked (the model, the "
        f"libraries); a request that needs more gets 500 and the worker is replaced (default "
        f"{DEFAULT_MEMORY_MB}; 0: no limit)",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=DEFAULT_KEEP_ALIVE,
        metavar="SECONDS",
        help=f"an idle connection is closed this long after its last answer (default {DEFAULT_KEEP_ALIVE:g})",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="a connection that has not sent a request's headers this long after opening or after its "
        f"last answer is closed (default {DEFAULT_HEADER_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="open connections at most; past it a new one closes the one idle longest, or gets 503 "
        f"(default {DEFAULT_MAX_CONNECTIONS}, fewer if the open-file limit allows fewer)",
    )
    parser.add_argument(
        "--share-batch-key",
        action="store_true",
        help="surrogates and date shifts from --key-file itself, the same as batch runs with it; "
        "any client can then learn a released patient's (default: each API key's own, drawn "
        "from --key-file and the key's name)",
    )
    parser.add_argument(
        "--public-route",
        action="append",
        choices=("/docs", "/openapi.json", "/metrics"),
        help="serve this route without an API key (repeat for each; default: each needs one)",
    )
    parser.add_argument(
        "--docs-assets",
        type=Path,
        metavar="DIR",
        help="serve the interactive API page at /docs with Swagger UI's files from DIR "
        "(swagger-ui-bundle.js and swagger-ui.css of the swagger-ui-dist package; default: no "
        "/docs page)",
    )
    parser.add_argument("--ssl-certfile", type=Path, help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", type=Path, help="the certificate's private key (PEM)")
    parser.add_argument("--engine", choices=("fast", "crfsuite"), help="how the CRFs tag (default: the model's config)")
    _add_device(parser)
    _add_replacement_options(parser)


def _add_operating_point_options(parser: argparse.ArgumentParser) -> None:
    """``annotate``'s and ``deid``'s choice of a P(O) threshold (hybriddeid.pipeline.operating_point), and
    of the engine the model's CRFs tag with."""
    parser.add_argument(
        "--engine",
        choices=("fast", "crfsuite"),
        help="how the CRFs tag: fast (weights as arrays, compiled decoding) or crfsuite (its own "
        "tagger); both give the same spans; default: the model's config (fast unless set)",
    )
    point = parser.add_mutually_exclusive_group()
    point.add_argument(
        "--threshold",
        type=float,
        help="P(O) threshold in (0, 1]: CRF tokens and characters whose probability of not being "
        "PHI is below it are PHI too (higher: more recall; see evaluate --sweep); 0: none, "
        "even if the model's config sets one",
    )
    point.add_argument(
        "--recall-target",
        type=float,
        help="use the threshold a saved sweep (--sweep-file) gives the best precision at this "
        "binary token recall or more (a warning tells the cost of a target near 1 or of a "
        "threshold that loses more than half the precision)",
    )
    parser.add_argument("--sweep-file", type=Path, help="sweep JSON of this model (evaluate --sweep --sweep-out)")
    _add_device(parser)


def _device(value: str) -> str:
    from hybriddeid.backends.neural.settings import check_device

    try:
        return check_device(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_device(parser: argparse.ArgumentParser) -> None:
    """Where a model's neural components tag (``Pipeline.load(device=...)``), for commands that tag."""
    parser.add_argument(
        "--device",
        type=_device,
        metavar="auto|cpu|cuda[:N]",
        help="where the model's neural components tag: auto (CUDA when present), cpu, cuda or "
        "cuda:N (an error if this machine lacks it); default: the model's config, which "
        "keeps where it was trained, on the CPU where that CUDA device is missing. "
        "CRF-only models ignore it",
    )


def _add_encoding(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--encoding",
        default="utf-8",
        help="encoding of the input files, e.g. cp1252 or latin-1 for some hospital exports "
        "(default utf-8; a UTF-8 byte-order mark is kept and counted by offsets); outputs are UTF-8",
    )


def _add_batch_options(parser: argparse.ArgumentParser) -> None:
    """What ``annotate`` and ``deid`` share about reading a folder and running its notes in workers."""
    from hybriddeid.runs.batch import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_PER_NOTE

    _add_encoding(parser)
    parser.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read symbolic links that lead out of the input folder (refused by default)",
    )
    parser.add_argument(
        "--recursive",
        action="store_true",
        help="read the folders below IN too, each written into the same folder below OUT (by "
        "default they are not read, and are named as not taken)",
    )
    parser.add_argument(
        "--timeout-per-note",
        type=float,
        default=DEFAULT_TIMEOUT_PER_NOTE,
        metavar="SECONDS",
        help="a worker taking longer than this per note of its unit is killed and those notes "
        f"fail (default {DEFAULT_TIMEOUT_PER_NOTE:g}; 0: no limit)",
    )
    parser.add_argument(
        "--memory-limit-mb",
        type=int,
        default=DEFAULT_MEMORY_MB,
        metavar="MB",
        help="address space each worker process may take beyond what it holds when forked (the "
        f"model, the libraries); a unit that needs more fails alone (default {DEFAULT_MEMORY_MB}; "
        "0: no limit)",
    )


def _add_in_out(parser: argparse.ArgumentParser) -> None:
    """``deid``'s and ``annotate``'s input and output: folders, table files or database URLs."""
    parser.add_argument(
        "in_dir",
        metavar="IN",
        help="a folder of notes (deid: or of FHIR resources, --input-format "
        "fhir), a table file (.csv, .tsv, .parquet, .jsonl with --id-col/"
        "--text-col) or a database URL (with --query or --table)",
    )
    parser.add_argument("out_dir", metavar="OUT", help="a folder, or a database URL (with --output-table)")


def _add_input_format(parser: argparse.ArgumentParser, fhir: bool) -> None:
    """``--input-format`` of ``deid`` (with ``fhir``) and ``annotate``: note formats and table file formats."""
    from hybriddeid.io import FHIR_FORMAT, FORMATS, INPUT_FORMATS
    from hybriddeid.io.tables import TABLE_FILE_FORMATS

    fhir_help = (
        (
            f"; {FHIR_FORMAT}: a folder of FHIR R4 Bundles (.json) and Bulk Data NDJSON (.ndjson) of "
            "DocumentReference and DiagnosticReport resources, written back as resources "
            "(pip install 'hybriddeid[fhir]')"
        )
        if fhir
        else ""
    )
    parser.add_argument(
        "--input-format",
        choices=(*INPUT_FORMATS, *TABLE_FILE_FORMATS, *([FHIR_FORMAT] if fhir else [])),
        default="auto",
        help=f"auto (default): a folder's note format from its files, a table file's from its extension. "
        f"Notes: {', '.join(FORMATS)}; table files: {', '.join(TABLE_FILE_FORMATS)}{fhir_help}",
    )


def _add_table_options(
    parser: argparse.ArgumentParser, patient: argparse._ActionsContainer | None = None
) -> argparse._ArgumentGroup:
    """The options ``deid`` and ``annotate`` share for tables and databases (``--patient-col`` goes into
    ``patient`` when given: deid's group of ways to find a note's patient); returns the group, for a
    command's own."""
    from hybriddeid.io.sql import PASSWORD_ENV

    table = parser.add_argument_group("tables and databases")
    (patient or table).add_argument("--patient-col", help="tables: the column holding each note's patient id")
    table.add_argument("--id-col", default="note_id", help="note id column (default note_id)")
    table.add_argument("--text-col", default="text", help="note text column (default text)")
    table.add_argument(
        "--keep-cols",
        help="comma-separated columns copied to the output as they are (other columns are left out: they may hold PHI)",
    )
    table.add_argument("--delimiter", help="csv/tsv: the field delimiter (default , for csv, tab for tsv)")
    table.add_argument(
        "--part-rows", type=int, help="rows per part: the unit of output files and of resuming (default 1000)"
    )
    source = table.add_mutually_exclusive_group()
    source.add_argument("--query", help="database input: the SELECT giving the notes")
    source.add_argument("--table", help="database input: the table holding the notes")
    table.add_argument("--output-table", help="database output: the table to write (created if missing)")
    table.add_argument(
        "--password-file",
        type=Path,
        help=f"database password: first line of this file (else ${PASSWORD_ENV}, or libpq's own)",
    )
    return table


def build_parser() -> argparse.ArgumentParser:
    from hybriddeid import __version__
    from hybriddeid.core.languages import available_languages
    from hybriddeid.evaluation.risk import AUTO, CALIBRATIONS
    from hybriddeid.io import ANNOTATION_FORMATS, INPUT_FORMATS, TABLE_FORMATS
    from hybriddeid.io.tables import TABLE_FILE_FORMATS
    from hybriddeid.pipeline.sweep import DEFAULT_THRESHOLDS
    from hybriddeid.runs.renaming import RENAME_MODES
    from hybriddeid.surrogates.audit import AUDIT_FORMATS

    parser = argparse.ArgumentParser(prog="hybriddeid", description="Find and remove PHI in clinical notes.")
    parser.add_argument("--version", action="version", version=f"hybriddeid {__version__}")
    _add_console_options(parser, False)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a pipeline on annotated notes")
    train.add_argument("--train", type=Path, required=True, help="folder of annotated notes (BRAT, i2b2 XML, JSONL)")
    train.add_argument("--dev", type=Path, help="folder of annotated notes to score the trained model on")
    train.add_argument(
        "--config",
        type=Path,
        help="pipeline config TOML (the recipe, else the defaults, fill "
        "what it leaves out; its keys win over the recipe's)",
    )
    train.add_argument(
        "--recipe",
        help="a tuned config shipped with hybriddeid: meddocan (Spanish), en-default "
        "(English); word clusters it names are built from the training text into the cache folder",
    )
    train.add_argument(
        "--language",
        help="language pack code (default: the config's or recipe's, else detected from the training text)",
    )
    train.add_argument(
        "--cluster-text",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="more notes (labels unused) whose text also builds a recipe's word clusters; repeatable",
    )
    train.add_argument("--out", type=Path, required=True, help="folder to write the model to")
    train.add_argument("--jobs", type=int, default=2, help="processes for training the two CRFs (default 2)")
    train.add_argument("--input-format", choices=INPUT_FORMATS, default="auto")
    _add_encoding(train)
    train.set_defaults(run=_train)

    annotate = sub.add_parser(
        "annotate",
        help="find PHI spans and write them as annotations (or, for a table or database, as a phi_spans column)",
    )
    _add_in_out(annotate)
    annotate.add_argument(
        "--model", default="default", help='model folder, or a bundled model: "en" (the default) or "es"'
    )
    annotate.add_argument(
        "--format",
        choices=(*ANNOTATION_FORMATS, *TABLE_FILE_FORMATS),
        help=f"output format: a folder's annotations {', '.join(ANNOTATION_FORMATS)} (default brat); "
        f"a table's {', '.join(TABLE_FILE_FORMATS)} (default: the input's; csv for a database)",
    )
    _add_input_format(annotate, fhir=False)
    annotate.add_argument("--overwrite", action="store_true", help="redo inputs whose outputs exist")
    annotate.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    _add_batch_options(annotate)
    _add_table_options(annotate)
    _add_phi_set(
        annotate,
        "write only this PHI set's spans: i2b2-2014 (all) or hipaa (Safe Harbor identifiers; "
        "ages only over 89); default: the model's setting",
    )
    _add_operating_point_options(annotate)
    annotate.set_defaults(run=_annotate)

    evaluate = sub.add_parser(
        "evaluate",
        help="score predictions against gold (i2b2 2014 criteria), or sweep "
        "a model's P(O) threshold over gold notes (--sweep)",
    )
    evaluate.add_argument("gold_dir", type=Path)
    evaluate.add_argument("pred_dir", type=Path, nargs="?", help="predictions to score (not with --sweep)")
    evaluate.add_argument("--json", action="store_true", help="print the full report (or the sweep) as JSON")
    evaluate.add_argument("--input-format", choices=INPUT_FORMATS, default="auto")
    _add_encoding(evaluate)
    _add_phi_set(
        evaluate,
        "score only this PHI set: predictions outside it are dropped, gold spans outside it "
        "are don't-care regions (default: i2b2-2014, every span)",
    )
    evaluate.add_argument(
        "--sweep",
        action="store_true",
        help="run --model over GOLD_DIR once and print binary token and strict P/R/F1 at a grid of P(O) thresholds",
    )
    evaluate.add_argument("--model", help='--sweep: model folder, or a bundled model: "en" (the default) or "es"')
    _add_device(evaluate)
    evaluate.add_argument(
        "--thresholds", help=f"--sweep: comma-separated grid (default {','.join(f'{t:g}' for t in DEFAULT_THRESHOLDS)})"
    )
    evaluate.add_argument(
        "--plot",
        type=Path,
        help="--sweep: draw the precision/recall curve into this PNG (pip install 'hybriddeid[plot]')",
    )
    evaluate.add_argument(
        "--recall-target",
        type=float,
        help="--sweep: print the threshold with the best precision at this binary token recall or more",
    )
    evaluate.add_argument(
        "--sweep-out",
        type=Path,
        help="--sweep: write the sweep as JSON here (for annotate/deid --recall-target --sweep-file)",
    )
    evaluate.set_defaults(run=_evaluate)

    deid = sub.add_parser("deid", help="write de-identified notes (tags, masks or consistent surrogates) and an audit")
    _add_in_out(deid)
    _add_deid_options(deid)
    patients = deid.add_mutually_exclusive_group()
    patients.add_argument("--patient-map", type=Path, help="CSV (note, patient) or JSON {note: patient}")
    patients.add_argument("--patient-pattern", help="regex over note names; group 'patient' (or 1) is the patient id")
    table = _add_table_options(deid, patients)
    table.add_argument(
        "--format",
        choices=TABLE_FILE_FORMATS,
        help="output table format (default: the input's; csv for a database input)",
    )
    table.add_argument("--spans", action="store_true", help="also write each note's PHI spans (JSON, input offsets)")
    table.add_argument(
        "--audit", action="store_true", help="also write each note's replacements (JSON, no original values)"
    )
    deid.add_argument("--audit-format", choices=AUDIT_FORMATS, default="jsonl")
    deid.add_argument(
        "--mapping-dir",
        type=Path,
        help="also write original -> replacement files here (PHI! owner-only, outside OUT_DIR)",
    )
    deid.add_argument(
        "--rename",
        choices=RENAME_MODES,
        default="none",
        help="none (default): outputs, audits and messages keep each input's file name; hash: "
        "they use a keyed hash of it instead (needs --key-file), and hashed -> original names "
        "are kept in an owner-only file beside the key (KEY.names.json); hash-only: the same "
        "without that file",
    )
    deid.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    _add_batch_options(deid)
    _add_input_format(deid, fhir=True)
    deid.add_argument("--overwrite", action="store_true", help="redo notes whose outputs exist")
    _add_operating_point_options(deid)
    deid.set_defaults(run=_deid)

    spark = sub.add_parser(
        "spark-deid", help="de-identify a table or folder of notes on Apache Spark (pip install hybriddeid[spark])"
    )
    spark.add_argument(
        "--input",
        required=True,
        help="Parquet or JSON Lines table (columns --id-col, --text-col), or a folder of .txt notes",
    )
    spark.add_argument("--output", required=True, help="where to write note id, de-identified text and error code")
    spark.add_argument(
        "--format",
        choices=TABLE_FORMATS,
        default="parquet",
        help="output format (text: de-identified notes only, 'id<TAB>text' records ending in \\x1e)",
    )
    spark.add_argument("--input-format", choices=("auto", *TABLE_FORMATS), default="auto")
    _add_deid_options(spark)
    spark_patients = spark.add_mutually_exclusive_group()
    spark_patients.add_argument("--patient-col", help="column holding each note's patient id")
    spark_patients.add_argument(
        "--patient-pattern", help="regex over note ids; group 'patient' (or 1) is the patient id"
    )
    spark.add_argument("--id-col", default="note_id", help="note id column (default note_id)")
    spark.add_argument("--text-col", default="text", help="note text column (default text)")
    spark.add_argument("--spans", action="store_true", help="also write the PHI spans (input offsets)")
    spark.add_argument("--audit", action="store_true", help="also write each note's replacements (no original values)")
    spark.add_argument("--partitions", type=int, help="repartition the input into this many partitions first")
    spark.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    spark.add_argument("--overwrite", action="store_true", help="replace an existing output")
    spark.set_defaults(run=_spark_deid)

    serve = sub.add_parser(
        "serve",
        help="serve annotate and deid over HTTP with API keys (pip install "
        "'hybriddeid[service]'); serve keys add|list|revoke manages the keys",
    )
    _add_serve_options(serve)
    serve_sub = serve.add_subparsers(dest="serve_action")
    keys = serve_sub.add_parser("keys", help="add, list or revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_action", required=True)
    keys_add = keys_sub.add_parser("add", help="make a key named NAME: printed once, stored as a salted hash")
    keys_add.add_argument("name")
    keys_add.add_argument(
        "--rate-limit",
        dest="key_rate_limit",
        type=float,
        metavar="PER_MINUTE",
        help="this key's own requests a minute (default: the server's --rate-limit; 0: no limit)",
    )
    keys_sub.add_parser("list", help="names, ids, dates and states of the keys (never the keys)")
    keys_revoke = keys_sub.add_parser("revoke", help="revoke the live key named NAME (or with that id)")
    keys_revoke.add_argument("name", metavar="NAME_OR_ID")
    for command in (keys, *keys_sub.choices.values()):
        _add_api_keys(command, argparse.SUPPRESS)  # given before or after the subcommand
    serve.set_defaults(run=_serve)

    synth = sub.add_parser("synth", help="write synthetic annotated notes (training data without real notes)")
    synth.add_argument("--n", type=int, required=True, help="number of notes")
    synth.add_argument("--out", type=Path, required=True, help="folder to write the notes to")
    synth.add_argument("--seed", type=int, default=0, help="random seed (same seed and mix, same notes)")
    synth.add_argument(
        "--mix",
        choices=("train", "test"),
        default="train",
        help="note types and layouts: test holds out some that train never uses (default train)",
    )
    synth.add_argument(
        "--language",
        choices=available_languages(),
        default="en",
        help="a language whose pack has synth.toml (default en)",
    )
    synth.add_argument("--format", choices=ANNOTATION_FORMATS, default="i2b2", help="default: i2b2 2014 XML")
    synth.set_defaults(run=_synth)

    risk = sub.add_parser(
        "risk",
        help="estimate the PHI a model left in notes (expected missed PHI tokens per 1,000), "
        "calibrated on reviewed notes",
    )
    risk.add_argument("notes_dir", type=Path)
    risk.add_argument("--model", default="default", help='model folder, or a bundled model: "en" (the default) or "es"')
    risk.add_argument(
        "--reviewed",
        type=Path,
        help="annotated notes (a review's corrections folder, or gold) to calibrate the model's P(PHI) on",
    )
    risk.add_argument(
        "--calibration",
        choices=(AUTO, *CALIBRATIONS),
        default=AUTO,
        help="isotonic regression or Platt scaling of P(PHI) against the reviewed spans, or auto (the "
        "default): the one whose counts, fitted on four fifths of the reviewed notes, better "
        "predict the other fifth's",
    )
    risk.add_argument("--out", type=Path, help="write risk.json (and with --reviewed reliability.png) here")
    risk.add_argument("--json", action="store_true", help="print the estimate as JSON")
    _add_phi_set(risk, "count only this PHI set's spans as found (default: the model's setting)")
    _add_encoding(risk)
    _add_device(risk)
    risk.set_defaults(run=_risk)

    review = sub.add_parser(
        "review",
        help="review and correct a model's spans in a local web page (corrections saved as BRAT for train --train)",
    )
    review.add_argument("notes_dir", type=Path)
    review.add_argument(
        "--model", default="default", help='model folder, or a bundled model: "en" (the default) or "es"'
    )
    review.add_argument(
        "--corrections",
        type=Path,
        help="folder for the corrected notes, BRAT (default: NOTES_DIR-corrections beside it); "
        "never the notes' own folder; reopening it resumes",
    )
    review.add_argument("--port", type=int, default=8790, help="port on 127.0.0.1 (default 8790; 0: any free one)")
    review.add_argument(
        "--next",
        type=int,
        metavar="N",
        help="list only the N unreviewed notes whose review would teach the model most "
        "(uncertainty sampling) instead of all notes by risk",
    )
    review.add_argument(
        "--calibration",
        choices=(AUTO, *CALIBRATIONS),
        default=AUTO,
        help="how reviewed notes calibrate the risk estimate (default auto: see risk --calibration)",
    )
    _add_phi_set(review, "show only this PHI set's spans (default: the model's setting)")
    _add_encoding(review)
    _add_device(review)
    review.set_defaults(run=_review)

    report = sub.add_parser("report", help="write one static HTML file summarising a deid or annotate run")
    report.add_argument("out_dir", type=Path, help="the run's output folder")
    report.add_argument("--out", type=Path, help="HTML file to write (default OUT_DIR/report.html)")
    report.add_argument(
        "--risk", type=Path, help="risk.json of hybriddeid risk --out (default: OUT_DIR/risk.json if there)"
    )
    report.set_defaults(run=_report)

    key = sub.add_parser("key", help="check a surrogate key file (its fingerprint) or upgrade an old one")
    key.add_argument(
        "action",
        choices=("check", "upgrade"),
        help="check: read it and print its fingerprint; upgrade: rewrite an old-format key with a checksum",
    )
    key.add_argument("file", type=Path)
    key.set_defaults(run=_key)

    resources = sub.add_parser("resources", help="build knowledge resources for the CRF features")
    resource_sub = resources.add_subparsers(dest="resource", required=True)
    clusters = resource_sub.add_parser("clusters", help="Brown and word2vec clusters from unlabelled notes")
    clusters.add_argument(
        "--text",
        type=Path,
        nargs="+",
        required=True,
        help="folders of notes (.txt; BRAT, i2b2 XML or JSONL are read for their text only)",
    )
    clusters.add_argument("--out", type=Path, required=True, help="folder to write the clusters to")
    clusters.add_argument(
        "--language", choices=available_languages(), default="en", help="language of the notes (default en)"
    )
    clusters.add_argument("--min-count", type=int, default=2, help="words seen fewer times get no cluster (default 2)")
    clusters.add_argument(
        "--brown-clusters",
        type=int,
        default=1000,
        help="Brown clusters C: leaves of the path tree (default 1000; 0 skips Brown)",
    )
    clusters.add_argument(
        "--w2v-k",
        default="50,200,1000",
        help='k-means sizes over the word2vec vectors (default 50,200,1000; "" skips word2vec)',
    )
    clusters.add_argument("--input-format", choices=INPUT_FORMATS, default="auto")
    clusters.set_defaults(run=_resources_clusters)
    for command in (train, annotate, evaluate, deid):
        _add_max_file_mb(command)
    for command in (train, evaluate):
        command.add_argument(
            "--label-map",
            type=Path,
            metavar="FILE",
            help='rename gold labels first (TOML lines FROM = "TO", or JSON, or CSV from,to)',
        )
        command.add_argument(
            "--allow-unknown-labels",
            action="store_true",
            help="score and learn labels no bundled taxonomy knows as their own categories "
            "(default: name them and stop)",
        )
    for command in sub.choices.values():
        _add_console_options(command, argparse.SUPPRESS)
    for command in resource_sub.choices.values():
        _add_console_options(command, argparse.SUPPRESS)
    return parser


def _add_console_options(parser: argparse.ArgumentParser, default: object) -> None:
    """``-q``, ``-v`` and ``--progress``, accepted before and after the subcommand: the subcommand's
    copies default to SUPPRESS so that they never undo what was given before it."""
    parser.add_argument("-q", "--quiet", action="store_true", default=default, help="errors only, no progress bar")
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="debug messages too")
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto" if default is False else default,
        help="progress bar: auto (only when stderr is a terminal; default), always or never",
    )


def _progress(args: argparse.Namespace) -> bool:
    """Whether to draw progress bars: never with -q, else as --progress says (auto: on a terminal only,
    so that logs and pipes get no carriage-return-joined bars)."""
    if args.quiet or args.progress == "never":
        return False
    return args.progress == "always" or sys.stderr.isatty()


def _check_run_options(args: argparse.Namespace) -> None:
    """Turn ``--encoding``, ``--jobs`` and the worker limits into checked values (a ValueError if unusable)."""
    from hybriddeid.io import check_encoding
    from hybriddeid.runs.batch import Limits

    if getattr(args, "encoding", None) is not None:
        args.encoding = check_encoding(args.encoding)
    if args.command in ("annotate", "deid"):
        if args.jobs < 1:
            raise ValueError("--jobs must be at least 1")
        args.limits = Limits(args.timeout_per_note or None, args.memory_limit_mb or None)


def _add_max_file_mb(parser: argparse.ArgumentParser) -> None:
    """The per-file size limit of the readers (``hybriddeid.io``), for commands that read note files."""
    parser.add_argument(
        "--max-file-mb",
        type=float,
        metavar="MB",
        help="refuse input files larger than this many megabytes (default 20); notes of any length "
        "are read in bounded memory, so the limit only guards against stray huge files",
    )


def _apply_max_file_mb(args: argparse.Namespace) -> None:
    """Make ``--max-file-mb`` the readers' limit in this process and the worker processes it starts."""
    from hybriddeid.io._common import MAX_FILE_MB_ENV

    if getattr(args, "max_file_mb", None) is not None:
        if not args.max_file_mb > 0:
            raise ValueError("--max-file-mb must be above 0")
        os.environ[MAX_FILE_MB_ENV] = repr(args.max_file_mb)


def main(argv: Sequence[str] | None = None) -> int:
    from hybriddeid.io import InputError
    from hybriddeid.pipeline.core import ConfigError
    from hybriddeid.runs.batch import Interrupted, SetupError, describe_error

    args = build_parser().parse_args(argv)
    level = logging.ERROR if args.quiet else logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="hybriddeid: %(message)s")
    try:
        _check_run_options(args)
        _apply_max_file_mb(args)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        return args.run(args)
    except (InputError, ConfigError, FileNotFoundError, SetupError) as exc:
        log.error("%s", exc)
        return 2
    except Interrupted as stop:
        done = f" ({stop.result.summary()})" if stop.result is not None else ""
        log.error("%s%s; the same command resumes the run", stop, done)
        return stop.exit_code
    except BrokenPipeError:  # `hybriddeid evaluate ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 141  # as a shell reports a process ended by SIGPIPE
    except OSError as exc:  # a full disk, a read-only or vanished folder: the path and the cause, no traceback
        log.error("%s", describe_error(exc))
        return 2


if __name__ == "__main__":
    sys.exit(main())
