"""This checkout's code against another commit's, side by side: speed and byte-identical outputs.

The other commit (``--baseline-ref``, default ``main``) is exported with ``git archive`` (its ``hybriddeid``
and ``resources`` folders). ``hybriddeid annotate`` and ``hybriddeid deid --mode tag`` with the bundled
models run on each note set in a fresh process per run, the two codes alternating, best of ``--rounds``:
wall seconds, CPU seconds (user + system of the run, its worker included), the ratios baseline/this
(above 1: this checkout is faster) and whether both codes wrote the same bytes (every output and audit
file; ``audit/run.json`` and ``audit/summary.json`` hold the run's settings and timings and are left out).
Each code reads its own language packs (``HYBRIDDEID_LANGUAGE_PATH``): an editable install's bundled
resources are one folder for both.

Sets: ``en`` = 200 generated English test-mix notes (seed 2, as ``same_spans.py``), ``es`` = MEDDOCAN dev
(when ``../shared`` has it), ``long`` = one generated one-line note of ``--long-size`` characters
(``long_notes.py``'s ``words``; default 2,000,000: read in pieces). These machines are noisy: compare
the ratios of one run.

    python benchmarks/code_speed.py [--baseline-ref main] [--sets en es long] [--rounds 2]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from long_notes import make_note  # noqa: E402
from same_spans import ENGLISH_NOTES, ENGLISH_SEED, MEDDOCAN_DEV  # noqa: E402

CHILD = "import sys\nfrom hybriddeid.cli import main\nsys.exit(main(sys.argv[1:]))\n"
COMMANDS = {"annotate": ["annotate"], "deid": ["deid", "--mode", "tag"]}
LEFT_OUT = {"run.json", "summary.json"}


def write_sets(folder: Path, names: list[str], long_size: int) -> dict[str, tuple[str, Path, int, int]]:
    """Set name -> (model, input folder, notes, characters), the notes written as .txt files."""
    from hybriddeid.synth import generate_corpus

    texts: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    if "en" in names:
        texts["en"] = "en", [(doc.name, doc.text) for doc in generate_corpus(ENGLISH_NOTES, ENGLISH_SEED, "test")]
    if "es" in names and MEDDOCAN_DEV.is_dir():
        texts["es"] = (
            "es",
            [(path.stem, path.read_text(encoding="utf-8")) for path in sorted(MEDDOCAN_DEV.glob("*.txt"))],
        )
    if "long" in names:
        texts["long"] = "en", [("long", make_note("words", long_size))]
    sets = {}
    for name, (model, notes) in texts.items():
        inputs = folder / "in" / name
        inputs.mkdir(parents=True)
        for stem, text in notes:
            (inputs / f"{stem}.txt").write_text(text, encoding="utf-8")
        sets[name] = model, inputs, len(notes), sum(len(text) for _, text in notes)
    return sets


def export_ref(ref: str, folder: Path) -> str:
    """Commit ``ref``'s ``hybriddeid`` and ``resources`` folders written into ``folder`` (``git archive``);
    returns its short hash."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "hybriddeid", "resources"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return short_hash(ref)


def short_hash(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


def code_env(code: Path) -> dict[str, str]:
    """The environment of a process that runs ``code``'s hybriddeid with its own language packs. Start it
    in ``code`` (``cwd=code``): ``python -c`` and ``-m`` put their working folder before PYTHONPATH, so a
    child started in a checkout imports that checkout's code, whatever PYTHONPATH says."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])),
        "HYBRIDDEID_LANGUAGE_PATH": str(code / "resources" / "languages"),
    }


def run(code: Path, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one CLI run with ``code`` first on the path."""
    env = code_env(code)
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    errors = child.stderr.read() if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"a run failed ({code}, {' '.join(args[:1])}):\n{errors[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime


def same_bytes(one: Path, other: Path) -> bool:
    """Whether two output folders hold the same files with the same bytes (run records aside)."""
    files = lambda root: sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.name not in LEFT_OUT)  # noqa: E731
    names = files(one)
    return names == files(other) and all(filecmp.cmp(one / name, other / name, shallow=False) for name in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--sets", nargs="+", choices=("en", "es", "long"), default=["en", "es", "long"])
    parser.add_argument("--commands", nargs="+", choices=sorted(COMMANDS), default=sorted(COMMANDS))
    parser.add_argument("--long-size", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="code-speed-") as temp:
        folder = Path(temp)
        baseline = folder / "baseline"
        commit = export_ref(args.baseline_ref, baseline)
        head = short_hash("HEAD")
        print(
            f"baseline {args.baseline_ref} ({commit}) against this checkout ({head}, uncommitted changes included); "
            f"best of {args.rounds}, codes alternating; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        print(
            "| set | command | notes | characters | baseline s | this s | ratio | baseline CPU s | this CPU s | CPU ratio "
            "| same bytes |"
        )
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for name, (model, inputs, notes, characters) in write_sets(folder, args.sets, args.long_size).items():
            for command in args.commands:
                best = {"baseline": [float("inf")] * 2, "this": [float("inf")] * 2}
                for round_ in range(args.rounds):
                    for label, code in (("baseline", baseline), ("this", ROOT)):
                        out = folder / "out" / label / name / command / str(round_)
                        cli = [
                            *COMMANDS[command][:1],
                            str(inputs),
                            str(out),
                            "--model",
                            model,
                            *COMMANDS[command][1:],
                            "--max-file-mb",
                            "100",
                            "--progress",
                            "never",
                        ]
                        best[label] = [min(a, b) for a, b in zip(best[label], run(code, cli))]
                same = same_bytes(
                    folder / "out" / "baseline" / name / command / "0", folder / "out" / "this" / name / command / "0"
                )
                (base_s, base_cpu), (this_s, this_cpu) = best["baseline"], best["this"]
                print(
                    f"| {name} | {command} | {notes} | {characters:,} | {base_s:.1f} | {this_s:.1f} | {base_s / this_s:.2f} "
                    f"| {base_cpu:.1f} | {this_cpu:.1f} | {base_cpu / this_cpu:.2f} | {'yes' if same else 'NO'} |",
                    flush=True,
                )
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
