"""Batch runs (``annotate``, ``deid``) with a neural model: forked workers and torch's threads.

A worker forked from a process whose torch had started OpenMP's thread pool waits forever in its
first parallel operation (issue 25: ``annotate`` hung with ``num_threads`` 0 or 2). The model here
has an embedding large enough that loading it the old way ran a parallel copy in the parent.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hybriddeid import Pipeline  # noqa: E402
from hybriddeid.core.document import Document  # noqa: E402
from hybriddeid.io import read_corpus, write_document  # noqa: E402
from hybriddeid.pipeline.core import CONFIG_FILE  # noqa: E402
from hybriddeid.runs.batch import AnnotateProcessor, run_batch  # noqa: E402
from test_neural import DEVICES, TINY, make_corpus, spans_of  # noqa: E402

NOTES = 20
# 4000-dimensional word vectors: the embedding's copy at load is above torch's grain for running in
# parallel, which is what started OpenMP's pool in the parent before the workers were forked.
LARGE = {**TINY, "epochs": 2, "word_dim": 4000}
# Run from a temporary folder (cwd=tmp_path), so the installed package is imported, not ./hybriddeid.
CLI = [sys.executable, "-c", "import sys; from hybriddeid.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Pipeline]:
    """A neural-only model (saved) and a folder of 20 unannotated notes."""
    root = tmp_path_factory.mktemp("neural-runs")
    corpus = make_corpus()
    config = {
        "pipeline": {
            "language": "es",
            "components": ["neural"],
            "precedence": ["neural"],
            "min_score": {"neural": 0.0},
        },
        "neural": LARGE,
    }
    pipeline = Pipeline(config).fit(corpus[:6], n_jobs=1)
    pipeline.to_disk(root / "model")
    for i in range(NOTES):
        doc = corpus[i % len(corpus)]
        write_document(Document(f"note{i:02d}", doc.text), root / "notes", "text")
    return root / "model", root / "notes", pipeline


def with_threads(model: Path, threads: int, folder: Path) -> Path:
    """A copy of ``model`` whose config says ``num_threads = threads``."""
    copy = folder / f"model-{threads}"
    shutil.copytree(model, copy)
    config = copy / CONFIG_FILE
    config.write_text(
        config.read_text(encoding="utf-8").replace("num_threads = 1", f"num_threads = {threads}"), encoding="utf-8"
    )
    assert f"num_threads = {threads}" in config.read_text(encoding="utf-8")
    return copy


@pytest.mark.parametrize("command, threads", [("annotate", 0), ("annotate", 1), ("annotate", 2), ("deid", 2)])
def test_batch_runs_with_a_neural_model_and_two_workers_finish_in_seconds(trained, tmp_path, threads, command):
    model, notes, pipeline = trained
    copy = with_threads(model, threads, tmp_path)
    out = tmp_path / "out"
    extra = ["--mode", "tag"] if command == "deid" else []
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [*CLI, "-q", command, "--model", str(copy), "--jobs", "2", *extra, str(notes), str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command} with num_threads = {threads} and --jobs 2 did not finish in 120 s (a deadlock)")
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 60, f"{command} took {seconds:.1f} s for {NOTES} notes"
    written = sorted(out.glob("note*.txt"))
    assert len(written) == NOTES
    if command == "annotate":  # the workers' spans are the loaded model's, tagged in this process
        found = {doc.name: spans_of(sorted(doc.spans, key=lambda s: (s.start, s.end))) for doc in read_corpus(out)}
        for doc in read_corpus(notes):
            expected = sorted(pipeline.predict(doc), key=lambda s: (s.start, s.end))
            assert found[doc.name] == spans_of(expected)
        assert any(found.values())
    else:
        assert any("[**" in path.read_text(encoding="utf-8") for path in written)


@pytest.mark.parametrize("device", DEVICES)
def test_annotate_takes_the_device_at_load(trained, tmp_path, device):
    model, notes, _ = trained
    done = subprocess.run(
        [
            *CLI,
            "-q",
            "annotate",
            "--model",
            str(model),
            "--device",
            device,
            "--jobs",
            "2",
            str(notes),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "out").glob("note*.ann"))) == NOTES


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="needs a machine without CUDA")
def test_asking_for_cuda_on_a_cpu_only_machine_is_told_once_in_words(trained, tmp_path):
    model, notes, _ = trained
    done = subprocess.run(
        [*CLI, "annotate", "--model", str(model), "--device", "cuda", str(notes), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "device 'cuda' was asked for, but this machine has" in done.stderr
    assert "choose --device cpu or auto" in done.stderr


def test_a_tagging_failure_in_a_worker_is_told_in_words_without_note_text(trained, tmp_path):
    """torch's own words (here a shape mismatch) reach the run's report; the note's text does not."""
    model, notes, _ = trained
    pipeline = Pipeline.load(model)
    tagger = pipeline.components["neural"]
    tagger.model_.out = torch.nn.Linear(3, tagger.model_.num_tags)  # its input has another width
    processor = AnnotateProcessor(model, "brat", pipeline=pipeline)
    result = run_batch(notes, tmp_path / "out", processor, jobs=2, progress=False)
    assert len(result.failed) == NOTES and not result.written
    problems = {problem for _, problem in result.failed}
    assert len(problems) == 1
    problem = problems.pop()
    assert problem.startswith("ComponentError: the neural tagger failed on cpu: ") and "shapes" in problem
    texts = [doc.text for doc in read_corpus(notes)]
    assert not any(word in problem for text in texts for word in text.split() if len(word) > 3)


def test_a_failure_to_put_the_model_on_its_device_is_told_in_words(trained, tmp_path, monkeypatch):
    """What CUDA says when it cannot start in a worker (here a stand-in for the driver's words) reaches
    the report as a DeviceError, not as a bare "RuntimeError"."""
    model, notes, _ = trained
    pipeline = Pipeline.load(model)
    tagger = pipeline.components["neural"]

    def refuse(*args, **kwargs):
        raise RuntimeError("CUDA driver initialization failed, you might not have a CUDA gpu.\nmore")

    monkeypatch.setattr(tagger.model_, "to", refuse)
    result = run_batch(
        notes, tmp_path / "out", AnnotateProcessor(model, "brat", pipeline=pipeline), jobs=2, progress=False
    )
    assert len(result.failed) == NOTES and not result.written
    assert {problem for _, problem in result.failed} == {
        "DeviceError: the neural model could not be put on cpu: CUDA driver initialization failed, "
        "you might not have a CUDA gpu."
    }


def test_a_worker_lifts_its_address_space_cap_before_cuda_starts(tmp_path):
    """The CUDA driver reserves more address space than --memory-limit-mb's cap (4 GB by default) and
    fails to start under it (seen on an H200: every note of `annotate --device cuda` failed)."""
    script = (
        "import resource; from hybriddeid.runs.batch import limit_memory; "
        "from hybriddeid.backends.neural.tagger import lift_address_space_cap; "
        "limit_memory(4096); before = resource.getrlimit(resource.RLIMIT_AS); lift_address_space_cap(); "
        "print(4096 * 2**20 < before[0] != before[1], resource.getrlimit(resource.RLIMIT_AS)[0] == before[1])"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]


def test_the_service_warm_up_leaves_cuda_to_the_workers(trained):
    """`serve` warms its pipeline up before forking workers; a neural model loaded for CUDA must
    not start CUDA there (no forked worker could use it), so the warm-up note is tagged on the CPU."""
    import gc

    from hybriddeid.service.work import warm_up

    model, _, _ = trained
    pipeline = Pipeline.load(model)
    tagger = pipeline.components["neural"]
    tagger.device_ = torch.device("cuda")  # as `serve --device cuda` loads it on a GPU machine
    try:
        warm_up(pipeline)  # before: the model went to CUDA here (here, without CUDA: a DeviceError)
    finally:
        gc.unfreeze()
    assert tagger.device_ == torch.device("cuda") and tagger._ready_in is None
    assert next(tagger.model_.parameters()).device.type == "cpu"
