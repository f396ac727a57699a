"""Tagging speed of the fast engine against crfsuite's tagger, measured side by side in one run.

For each note set, the same bundled model is loaded twice, once per engine (``engine = "crfsuite"``
hands feature strings to crfsuite's tagger, as every release before the fast engine did;
``"fast"`` is the default), and:

1. every note is tagged by both and the notes whose spans differ are counted (offsets, labels,
   sources, scores to 1e-9): this must print 0;
2. both tag all notes in alternating rounds in this process (one core, feature extraction
   included, caches warm as in a long batch; best round of each): characters per second, the
   ratio, and each component's milliseconds per note;
3. ``hybriddeid annotate`` runs as a whole process per engine (model loading and writing
   included; alternating, best of ``--process-rounds``): seconds, characters per second, the
   ratio, and the peak resident memory of the run's processes;
4. on MEDDOCAN, a plain token CRF (word, shape, affixes, words in [-2, 2]; trained here on
   MEDDOCAN train in about a minute) tags the same notes in the same rounds, for scale.

Sets: ``en`` = the bundled English model on 200 generated test-mix notes (seed 2, as
benchmarks/same_spans.py), ``es`` = the bundled Spanish model on MEDDOCAN dev (250 notes).
These machines are noisy: compare ratios from one run, not absolute times across runs.

    python benchmarks/speed.py [--set en --set es] [--rounds 3] [--process-rounds 2] [--no-plain]

With ``--model`` (repeat), it compares saved models instead, as it did before the fast engine:
each model tags the same notes (``--notes``, default MEDDOCAN dev; ``--limit`` of them) in
alternating rounds, speeds as ratios to the first model's.

    python benchmarks/speed.py --model es --model /tmp/new-model [--notes DIR] [--limit 100]

With ``--yardstick`` (issue 45's measure), ``hybriddeid annotate --format jsonl`` runs as a whole process on
each set beside the speed yardstick, ``../shared/yardsticks/plain_crf.py predict`` (a plain token CRF
trained once on MEDDOCAN train, ``--yardstick-model``: trained there when the file is missing), the
runs alternating, best of ``--rounds``: wall and CPU seconds (the children's user + system time) and
the ratios to the yardstick, Python's byte code cached as an installed package has it. ``--baseline-tree DIR`` also runs another checkout's code (a git
worktree of an earlier commit) in the same rounds, for a before/after. Sets: ``en``, ``es`` and
``physionet`` (PhysioNet's dev half, 1,236 English nursing notes).

    python benchmarks/speed.py --yardstick [--set en --set es --set physionet] [--rounds 3] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hybriddeid.classifiers.crf import ENGINES
from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.io import read_corpus, write_document
from hybriddeid.pipeline.core import Pipeline
from hybriddeid.synth import generate_corpus

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan"
PHYSIONET = SHARED.parent / "physionet-deid" / "dev"
YARDSTICK = SHARED.parents[1] / "yardsticks" / "plain_crf.py"
ENGLISH_NOTES, ENGLISH_SEED = 200, 2
BASELINE, CANDIDATE = "crfsuite", "fast"
PLAIN_FEATURES = ["words", "affixes", "shapes"]

# Runs a command and prints the peak RSS (KB) of it and every process it waited for.
_PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)
# Runs hybriddeid's CLI from the checkout in the working directory, not the installed one: the editable
# install's finder is dropped and the checkout's resources/ folder is what hybriddeid.resources names
# (setup.cfg's package_dir), as an installed package has it.
_CLI_HERE = """
import importlib.util, os, sys
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]
sys.path.insert(0, os.getcwd())
spec = importlib.util.spec_from_file_location(
    'hybriddeid.resources', os.path.join('resources', '__init__.py'), submodule_search_locations=['resources'])
sys.modules['hybriddeid.resources'] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from hybriddeid.cli import main
sys.exit(main())
"""


def span_rows(spans: list[Span]) -> list[tuple]:
    return [(s.start, s.end, s.label, s.source, round(float(s.score), 9)) for s in spans]


def note_sets(chosen: list[str], folder: Path) -> dict[str, tuple[str, list[Document], Path]]:
    """Set name -> (bundled model, notes, a folder holding them for ``annotate``)."""
    sets = {}
    if "en" in chosen:
        docs = list(generate_corpus(ENGLISH_NOTES, ENGLISH_SEED, "test"))
        notes = folder / "en-notes"
        notes.mkdir()
        for doc in docs:
            write_document(Document(doc.name, doc.text), notes, "text")
        sets["en"] = ("en", docs, notes)
    if "es" in chosen:
        if (SHARED / "dev" / "brat").is_dir():
            sets["es"] = ("es", read_corpus(SHARED / "dev" / "brat"), SHARED / "dev" / "brat")
        else:
            print(f"es: skipped, no MEDDOCAN at {SHARED}")
    return sets


def plain_token_crf() -> TokenCRF:
    """A plain token CRF on MEDDOCAN train (no lexicon, dictionaries, clusters or context bags)."""
    crf = TokenCRF(features=PLAIN_FEATURES, window=2, language="es", lexicon=False, engine=BASELINE)
    return crf.fit(read_corpus(SHARED / "train" / "brat"))


def differing_notes(pipelines: dict[str, Pipeline], docs: list[Document]) -> int:
    return sum(
        1 for doc in docs if span_rows(pipelines[BASELINE].predict(doc)) != span_rows(pipelines[CANDIDATE].predict(doc))
    )


def in_process(taggers: dict, docs: list[Document], rounds: int) -> dict[str, float]:
    """Best seconds per tagger over ``rounds`` alternating passes over ``docs``."""
    best = dict.fromkeys(taggers, float("inf"))
    for _ in range(rounds):
        for name, tag in taggers.items():
            started = time.perf_counter()
            for doc in docs:
                tag(doc)
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def whole_process(model: str, notes: Path, folder: Path, rounds: int) -> dict[str, tuple[float, float]]:
    """Per engine: best wall seconds of ``hybriddeid annotate`` and the largest peak RSS (MB)."""
    results = {engine: (float("inf"), 0.0) for engine in (BASELINE, CANDIDATE)}
    for round_number in range(rounds):
        for engine in results:
            out = folder / f"out-{model}-{engine}-{round_number}"
            command = [
                sys.executable,
                "-c",
                _PEAK_RSS,
                sys.executable,
                "-c",
                "import sys; from hybriddeid.cli import main; sys.exit(main())",
                "annotate",
                "--model",
                model,
                str(notes),
                str(out),
                "--engine",
                engine,
                "--format",
                "jsonl",
            ]
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"annotate --engine {engine} failed (exit {done.returncode})")
            peak_mb = int(done.stdout.split()[-1]) / 1024
            best, peak = results[engine]
            results[engine] = (min(best, seconds), max(peak, peak_mb))
    return results


def timed_run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the command's processes) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{Path(command[1]).name if len(command) > 1 else command[0]} failed (exit {done.returncode})")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def against_yardstick(chosen: list[str], rounds: int, yardstick_model: Path | None, baseline_tree: Path | None) -> int:
    """Whole-process ``annotate`` (this code, and ``baseline_tree``'s) beside the yardstick, per set."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_file = yardstick_model or folder / "plain_crf.model"
        if not model_file.is_file():
            print(f"training the yardstick on MEDDOCAN train into {model_file} ...", flush=True)
            subprocess.run(
                [sys.executable, str(YARDSTICK), "train", str(SHARED / "train" / "brat"), str(model_file)], check=True
            )
        sets = {
            name: (model, notes)
            for name, (model, _, notes) in note_sets([c for c in chosen if c != "physionet"], folder).items()
        }
        if "physionet" in chosen and PHYSIONET.is_dir():
            sets["physionet"] = ("en", PHYSIONET)
        here = Path(__file__).resolve().parents[1]
        trees = {"this code": here} | ({"baseline": baseline_tree.resolve()} if baseline_tree else {})
        # Byte code as an installed package has it (pip compiles it at install): written in the first
        # round, read after, even where the environment says PYTHONDONTWRITEBYTECODE.
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        load = [os.getloadavg()[0]]
        best: dict[tuple[str, str], tuple[float, float]] = {}
        for round_number in range(rounds):
            for set_name, (model, notes) in sets.items():
                runs: dict[str, tuple[list[str], Path]] = {
                    name: (
                        [
                            sys.executable,
                            "-c",
                            _CLI_HERE,
                            "annotate",
                            "--model",
                            model,
                            str(notes),
                            str(folder / f"out-{set_name}-{round_number}-{i}"),
                            "--format",
                            "jsonl",
                        ],
                        tree,
                    )
                    for i, (name, tree) in enumerate(trees.items())
                }
                runs["yardstick"] = (
                    [
                        sys.executable,
                        str(YARDSTICK),
                        "predict",
                        str(model_file),
                        str(notes),
                        str(folder / f"yard-{set_name}-{round_number}"),
                    ],
                    folder,
                )
                order = list(runs) if round_number % 2 == 0 else list(reversed(runs))
                for name in order:
                    wall, cpu = timed_run(*runs[name], env=env)
                    old = best.get((set_name, name), (float("inf"), float("inf")))
                    best[(set_name, name)] = (min(wall, old[0]), min(cpu, old[1]))
        load.append(os.getloadavg()[0])
        print(
            f"best of {rounds} alternating rounds; load average {load[0]:.2f} -> {load[1]:.2f} on {os.cpu_count()} cores"
        )
        print("| set | run | wall s | CPU s | wall / yardstick | CPU / yardstick |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for set_name in sets:
            yard_wall, yard_cpu = best[(set_name, "yardstick")]
            for name in [*trees, "yardstick"]:
                wall, cpu = best[(set_name, name)]
                print(
                    f"| {set_name} | {name} | {wall:.2f} | {cpu:.2f} | {wall / yard_wall:.2f} | {cpu / yard_cpu:.2f} |"
                )
    return 0


def compare_models(models: list[str], notes: Path, limit: int, rounds: int) -> int:
    """Saved models side by side on the same notes (default engine): notes/s and ratios."""
    docs = read_corpus(notes)[:limit]
    pipelines = {name: Pipeline.load(name) for name in models}
    for pipeline in pipelines.values():  # warm caches and lazy loads before timing
        for doc in docs[:10]:
            pipeline.predict(doc)
    best = in_process({name: pipeline.predict for name, pipeline in pipelines.items()}, docs, rounds)
    print(f"{len(docs)} notes from {notes}, best of {rounds} rounds, one process")
    for name in models:
        print(f"{name:40s} {len(docs) / best[name]:8.1f} notes/s {best[models[0]] / best[name]:8.3f} x the first")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--set", action="append", choices=("en", "es", "physionet"), help="note set (repeat; default en and es)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--process-rounds", type=int, default=2)
    parser.add_argument("--no-plain", action="store_true", help="leave out the plain token CRF on MEDDOCAN")
    parser.add_argument("--model", action="append", help="compare these saved models instead (repeat)")
    parser.add_argument("--notes", type=Path, default=SHARED / "dev" / "brat", help="with --model: the notes")
    parser.add_argument("--limit", type=int, default=100, help="with --model: notes per round")
    parser.add_argument(
        "--yardstick", action="store_true", help="whole-process annotate beside the plain CRF yardstick"
    )
    parser.add_argument(
        "--yardstick-model", type=Path, help="with --yardstick: the trained yardstick (trained if missing)"
    )
    parser.add_argument("--baseline-tree", type=Path, help="with --yardstick: another checkout run in the same rounds")
    args = parser.parse_args()
    assert ENGINES == (CANDIDATE, BASELINE)
    if args.yardstick:
        return against_yardstick(
            args.set or ["en", "es", "physionet"], args.rounds, args.yardstick_model, args.baseline_tree
        )
    if args.model:
        return compare_models(args.model, args.notes, args.limit, args.rounds)

    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for set_name, (model, docs, notes) in note_sets(
            [c for c in args.set or ["en", "es"] if c != "physionet"], folder
        ).items():
            characters = sum(len(doc.text) for doc in docs)
            pipelines = {engine: Pipeline.load(model, engine=engine) for engine in (BASELINE, CANDIDATE)}
            differing = differing_notes(pipelines, docs)  # also the warm-up pass of both
            failed = failed or differing > 0
            taggers = {engine: pipeline.predict for engine, pipeline in pipelines.items()}
            if set_name == "es" and not args.no_plain:
                plain = plain_token_crf()
                taggers["plain token CRF"] = plain.predict
                for doc in docs[:20]:
                    plain.predict(doc)
            best = in_process(taggers, docs, args.rounds)
            components = {
                engine: in_process(
                    {name: component.predict for name, component in pipeline.components.items()}, docs, 1
                )
                for engine, pipeline in pipelines.items()
            }
            processes = whole_process(model, notes, folder, args.process_rounds)

            print(f"\n== {set_name}: bundled model {model!r}, {len(docs)} notes, {characters:,} characters ==")
            print(f"notes whose spans differ between the engines: {differing}")
            print(f"in this process, best of {args.rounds} alternating rounds (one core):")
            print(f"  {'tagger':18s} {'chars/s':>10s} {'ms/note':>8s} {'x crfsuite':>10s}  per component ms/note")
            for name, seconds in best.items():
                parts = ", ".join(f"{c} {s / len(docs) * 1000:.2f}" for c, s in components.get(name, {}).items())
                print(
                    f"  {name:18s} {characters / seconds:10,.0f} {seconds / len(docs) * 1000:8.2f} "
                    f"{best[BASELINE] / seconds:10.2f}  {parts}"
                )
            if "plain token CRF" in best:
                print(f"  fast engine vs plain token CRF: {best['plain token CRF'] / best[CANDIDATE]:.2f}x its speed")
            print(
                f"hybriddeid annotate as a whole process (model load and writing included; best of "
                f"{args.process_rounds}; peak RSS of its processes):"
            )
            for engine, (seconds, peak) in processes.items():
                print(
                    f"  {engine:18s} {seconds:6.2f} s {characters / seconds:10,.0f} chars/s "
                    f"{processes[BASELINE][0] / seconds:6.2f}x  peak RSS {peak:6.0f} MB "
                    f"({peak / processes[BASELINE][1] - 1:+.0%})"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
