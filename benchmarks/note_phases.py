"""Where the time of one small note goes inside a ``hybriddeid serve`` worker, this checkout against another
commit, side by side.

    python benchmarks/note_phases.py [--baseline-ref REF] [--notes 400] [--chars 1000] [--rounds 2] [--model en]

Each code runs in a fresh process of its own (the other commit exported by ``git archive``, as
``code_speed.py`` does), the codes alternating, best of ``--rounds``: the model loaded and warmed up
as the server does (``service.work.warm_up``) and given 20 notes, then ``--notes`` other generated notes of
about ``--chars`` characters (``service.py``'s 1 kB notes), each new to the process (a note seen before finds
what caches keep of it), passed to ``service.work.handle`` as a request body, one after another. It prints the wall and CPU ms per note of ``handle`` (what a worker does for one
request) and the wall ms per note inside each phase, timed by wrappers around the pipeline's methods:
analysis (tokens, lines), the token CRF (the focuser: features, emissions, decoding, marginals), the
character CRF (its finish step, trimming and typing spans, apart), the rules, ``combine`` (merge,
propagation, safe-list, PHI set) and name linking; "rest" is ``handle`` less them (parsing the body,
checks, writing the answer). Ratios are baseline/this (above 1: this checkout is faster).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from code_speed import code_env, export_ref, short_hash  # noqa: E402

PHASES = (  # (label, component or None for the pipeline, method)
    ("analysis (tokens, lines)", None, "analyse"),
    ("token CRF (focuser)", "token", "predict_with_focus"),
    ("character CRF", "char", "predict"),
    ("  of it: finish (trim, type)", "char", "finish"),
    ("rules", "rule", "predict"),
    ("combine (merge, propagate, safe-list)", None, "combine"),
    ("link names", None, "link_names"),
)


def child(model: str, count: int, chars: int) -> dict[str, float]:
    """In this code's process: ms per note of ``handle`` (wall, CPU) and of each phase (wall)."""
    from hybriddeid.runs.processing import load_model
    from hybriddeid.service.work import WorkSettings, handle, warm_up
    from hybriddeid.surrogates import DeidOptions
    from service import make_notes

    pipeline = load_model(model)
    spent: dict[str, float] = {}
    for label, component, method in PHASES:
        owner = pipeline if component is None else pipeline.components[component]
        original = getattr(owner, method)

        @functools.wraps(original)
        def timed(*args, _original=original, _label=label, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - started

        setattr(owner, method, timed)
    warm_up(pipeline)
    # every measured note is new to the worker, as a service's requests are: a note seen before would
    # find what caches keep of it
    bodies = [json.dumps({"text": text}).encode() for text in make_notes(count + 20, chars, 1)]
    settings = WorkSettings(20_000_000, 1000, DeidOptions(mode="tag"))
    for body in bodies[:20]:  # the first notes' caches: not measured
        handle("annotate", body, pipeline, settings, "warm")
    spent.clear()
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        handle("annotate", bodies[20 + i], pipeline, settings, str(i))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    found = {label: spent.get(label, 0.0) / count * 1000 for label, _, _ in PHASES}
    inside = sum(value for label, value in found.items() if not label.startswith(" "))
    return {
        "handle wall": wall / count * 1000,
        "handle CPU": cpu / count * 1000,
        **found,
        "rest": wall / count * 1000 - inside,
    }


def run(code: Path, args: argparse.Namespace) -> dict[str, float]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--model",
            args.model,
            "--notes",
            str(args.notes),
            "--chars",
            str(args.chars),
        ],
        env=code_env(code),
        cwd=code,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"a child run failed ({code}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-ref", help="another commit, run side by side (default: this checkout alone)")
    parser.add_argument("--notes", type=int, default=400)
    parser.add_argument("--chars", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="en")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.notes, args.chars)))
        return 0
    with tempfile.TemporaryDirectory(prefix="note-phases-") as temp:
        codes = {"this": ROOT}
        title = f"this checkout ({short_hash('HEAD')}, uncommitted changes included)"
        if args.baseline_ref:
            codes = {"baseline": Path(temp) / "baseline", **codes}
            title = (
                f"baseline {args.baseline_ref} ({export_ref(args.baseline_ref, codes['baseline'])}) against " + title
            )
        best: dict[str, dict[str, float]] = {}
        load = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for name, code in codes.items():
                got = run(code, args)
                kept = best.setdefault(name, got)
                if got["handle wall"] < kept["handle wall"]:
                    best[name] = got
        load.append(os.getloadavg()[0])
    print(
        f"{title}; {args.notes} notes of ~{args.chars} characters, model {args.model}, one request body at a time "
        f"through service.work.handle; best of {args.rounds} (by handle wall), codes alternating; load average "
        f"{load[0]:.2f} -> {load[1]:.2f}"
    )
    names = list(codes)
    print("| ms per note | " + " | ".join(names) + (" | ratio |" if len(names) > 1 else " |"))
    print("| --- | " + " | ".join("---:" for _ in names) + (" | ---: |" if len(names) > 1 else " |"))
    for label in best["this"]:
        values = [best[name][label] for name in names]
        ratio = (
            f" | {values[0] / values[1]:.2f}" if len(names) > 1 and values[1] > 0 else (" | " if len(names) > 1 else "")
        )
        print(f"| {label} | " + " | ".join(f"{value:.2f}" for value in values) + ratio + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
