"""``annotate`` and ``deid`` read each input file once and load the model once per run (workers are forked
from the process that loaded it)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.io import iter_documents, write_document
from hybriddeid.pipeline.core import model_language
from hybriddeid.pipeline.sweep import Sweep

NOTES = {
    "pt01_a": (
        "Nombre: Zebulon Quagmire.\nNHC: 4417920.\nFecha de ingreso: 11/03/2019.\n",
        [("Zebulon Quagmire", "NOMBRE_SUJETO_ASISTENCIA"), ("11/03/2019", "FECHAS")],
    ),
    "pt01_b": ("Control del paciente Z. Quagmire, 47 años.\n", [("Z. Quagmire", "NOMBRE_SUJETO_ASISTENCIA")]),
    "pt02_a": (
        "Paciente X. Urquidi, mujer de 63 años, ingresa el 05/05/2020.\n",
        [("X. Urquidi", "NOMBRE_SUJETO_ASISTENCIA"), ("05/05/2020", "FECHAS")],
    ),
}


def write_notes(folder: Path, fmt: str) -> Path:
    for name, (text, gold) in NOTES.items():
        spans = tuple(Span(text.index(v), text.index(v) + len(v), label) for v, label in gold)
        write_document(Document(name, text, spans if fmt != "text" else ()), folder, fmt)
    return folder


@pytest.fixture
def opened(monkeypatch, tmp_path):
    """Counts every opening of a file, in this process and in forked workers: ``counts(folder)`` gives
    the number of openings per file under ``folder``."""
    log = tmp_path / "opened.log"
    original = io.open

    def counting(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            with original(log, "a", encoding="utf-8") as out:  # one short append per line: safe across processes
                out.write(f"{os.path.abspath(file)}\n")
        return original(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counting)  # what Path.open, read_bytes and read_text call
    original_os_open = os.open

    def counting_os_open(file, flags, *args, **kwargs):  # what the readers call (hybriddeid.io.read_regular_file)
        if isinstance(file, (str, os.PathLike)) and not flags & (os.O_WRONLY | os.O_RDWR):  # readings only
            with original(log, "a", encoding="utf-8") as out:
                out.write(f"{os.path.abspath(file)}\n")
        return original_os_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_os_open)

    def counts(folder: Path) -> dict[str, int]:
        root = str(folder.resolve()) + os.sep
        found: dict[str, int] = {}
        for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else ():
            if line.startswith(root):
                found[Path(line).name] = found.get(Path(line).name, 0) + 1
        return found

    return counts


@pytest.fixture
def loads(monkeypatch, tmp_path):
    """Counts ``Pipeline.load`` calls by process id, in this process and in forked workers."""
    log = tmp_path / "loads.log"
    original = Pipeline.load.__func__

    def counting(cls, path_or_name="default", engine=None, device=None):
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
        return original(cls, path_or_name, engine, device)

    monkeypatch.setattr(Pipeline, "load", classmethod(counting))

    def by_process() -> dict[int, int]:
        pids = [int(line) for line in log.read_text(encoding="utf-8").split()] if log.exists() else []
        return {pid: pids.count(pid) for pid in pids}

    return by_process


RUNS = {
    "annotate": ["annotate", "--model", "es"],
    "deid": ["deid", "--model", "es", "--mode", "surrogate", "--patient-pattern", r"^(pt\d+)_"],
    "deid-annotations": ["deid", "--use-annotations", "--language", "es", "--mode", "tag"],
}


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("fmt", ["text", "brat", "i2b2"])
@pytest.mark.parametrize("run", list(RUNS))
def test_each_input_is_read_once(run, fmt, jobs, tmp_path, opened):
    if run == "deid-annotations" and fmt == "text":
        pytest.skip("plain text has no annotations to replace")
    notes = write_notes(tmp_path / "in", fmt)
    key = ["--key-file", str(tmp_path / "deid.key")] if run == "deid" else []
    out = tmp_path / "out"
    assert main(["-q", *RUNS[run], str(notes), str(out), "--jobs", str(jobs), *key]) == 0
    names = sorted(p.name for p in notes.iterdir())
    assert len(names) == (6 if fmt == "brat" else 3)
    assert opened(notes) == {name: 1 for name in names}
    assert len([doc for _, doc in iter_documents(out)]) == 3


@pytest.mark.parametrize("jobs", [1, 2])
def test_past_the_held_text_budget_files_are_read_again_and_outputs_are_the_same(jobs, tmp_path, opened, monkeypatch):
    """A run keeps at most ``batch.HELD_CHARACTERS`` of note text from planning: with a budget of one
    note, the first file is read once and the others twice, and the outputs do not change."""
    from hybriddeid.runs import batch

    notes = write_notes(tmp_path / "in", "i2b2")
    key = ["--key-file", str(tmp_path / "deid.key")]
    assert main(["-q", *RUNS["deid"], str(notes), str(tmp_path / "held"), "--jobs", str(jobs), *key]) == 0
    monkeypatch.setattr(batch, "HELD_CHARACTERS", len(NOTES["pt01_a"][0]))  # files are planned in name order
    before = opened(notes)
    assert main(["-q", *RUNS["deid"], str(notes), str(tmp_path / "reread"), "--jobs", str(jobs), *key]) == 0
    after = {name: count - before.get(name, 0) for name, count in opened(notes).items()}
    assert after == {"pt01_a.xml": 1, "pt01_b.xml": 2, "pt02_a.xml": 2}
    outputs = sorted((tmp_path / "held").rglob("*.xml"))
    assert len(outputs) == 3
    for path in outputs:
        assert path.read_bytes() == (tmp_path / "reread" / path.relative_to(tmp_path / "held")).read_bytes()


def test_the_read_count_sees_a_second_reading(tmp_path, opened):
    """The counter works: reading the folder twice counts two openings of every file."""
    notes = write_notes(tmp_path / "in", "i2b2")
    for _ in range(2):
        list(iter_documents(notes))
    assert opened(notes) == {f"{name}.xml": 2 for name in NOTES}


@pytest.mark.parametrize("run", ["annotate", "deid"])
def test_the_model_is_loaded_once_per_process(run, tmp_path, loads):
    notes = write_notes(tmp_path / "in", "text")
    key = ["--key-file", str(tmp_path / "deid.key")] if run == "deid" else []
    assert main(["-q", *RUNS[run], str(notes), str(tmp_path / "one"), "--jobs", "1", *key]) == 0
    assert loads() == {os.getpid(): 1}

    # with workers too: they are forked from this process after it loaded the model, and share it
    (tmp_path / "loads.log").unlink()
    assert main(["-q", *RUNS[run], str(notes), str(tmp_path / "two"), "--jobs", "2", *key]) == 0
    assert loads() == {os.getpid(): 1}


def test_a_model_loaded_to_check_a_sweep_file_is_not_loaded_again(tmp_path, loads):
    gold = write_notes(tmp_path / "gold", "brat")
    sweep_file = tmp_path / "sweep.json"
    assert (
        main(
            [
                "-q",
                "evaluate",
                str(gold),
                "--sweep",
                "--model",
                "es",
                "--thresholds",
                "0.5",
                "--sweep-out",
                str(sweep_file),
            ]
        )
        == 0
    )
    target = str(Sweep.load(sweep_file).points[-1].binary_token.recall)
    (tmp_path / "loads.log").unlink()
    for run in ("annotate", "deid"):
        key = ["--key-file", str(tmp_path / "deid.key")] if run == "deid" else []
        assert (
            main(
                [
                    "-q",
                    *RUNS[run],
                    str(gold),
                    str(tmp_path / run),
                    "--recall-target",
                    target,
                    "--sweep-file",
                    str(sweep_file),
                    *key,
                ]
            )
            == 0
        )
    assert loads() == {os.getpid(): 2}  # once for each run


def test_model_language_reads_the_config_alone(tmp_path, loads):
    assert model_language("es") == "es" and model_language() == model_language("en") == "en"
    assert loads() == {}
    with pytest.raises(FileNotFoundError):
        model_language(tmp_path)
