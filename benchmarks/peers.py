"""hybriddeid's English default model side by side with Philter and Presidio, on the same notes, in one run.

The notes are generated English notes of the held-out "test" mix (note types, layouts, date formats
and name locales the bundled model never saw in training; seed 3, which neither training nor the
model's own test set used). Each tool runs in its own process (the peers in the venvs that
``benchmarks/setup_peers.sh`` makes), which reports its spans, load and processing times and peak
memory. Scores are binary token precision and recall (PHI or not, labels ignored: the tools'
label sets differ), overall, on the HIPAA subtypes of the gold (taxonomy flags) and per i2b2 category.

    bash benchmarks/setup_peers.sh            # once: venvs under /tmp/hybriddeid-peers
    python benchmarks/peers.py [--n 200] [--seed 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from hybriddeid.core.document import Document, Span
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.evaluation import evaluate
from hybriddeid.synth import generate_corpus

HERE = Path(__file__).resolve().parent
WORKER = HERE / "peer_worker.py"
TOOLS = ("hybriddeid", "philter", "presidio")


def run_tool(tool: str, python: Path, notes: Path, model: str, timeout: int, note_timeout: float = 0.0) -> dict:
    """Run the worker for ``tool``; its JSON result, or {"error": ...} when it could not run.
    ``note_timeout``: seconds the worker gives each note (0: no limit; see peer_worker.py)."""
    if not python.exists():
        return {"error": f"{python} not found (run benchmarks/setup_peers.sh)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = (
            [str(python), str(WORKER), tool, str(notes), str(out)]
            + (["--model", model] if model else [])
            + (["--note-timeout", str(note_timeout)] if note_timeout > 0 else [])
        )
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        wall = time.perf_counter() - started
        if result.returncode != 0:
            return {
                "error": result.stderr.strip().splitlines()[-1]
                if result.stderr.strip()
                else f"exit {result.returncode}"
            }
        data = json.loads(out.read_text(encoding="utf-8"))
    data["wall_seconds"] = wall
    return data


def peer_pythons(peers_dir: Path) -> dict[str, Path]:
    """The interpreter each tool runs under: ours for hybriddeid, the venvs of setup_peers.sh for the peers."""
    return {"hybriddeid": Path(sys.executable)} | {
        t: peers_dir / t / "bin" / "python" for t in TOOLS if t != "hybriddeid"
    }


def run_tools(
    docs: Sequence[Document], tools: Sequence[str], peers_dir: Path, model: str, timeout: int, note_timeout: float = 0.0
) -> dict[str, dict]:
    """Run each of ``tools`` over ``docs`` in its own process: the worker's result (``spans`` per note
    as [start, end, label or None], load and run seconds, peak MB, ``timed_out`` notes) with notes/s,
    MB/s and chars/s added, or {"error": ...} for a tool that could not run. ``model`` goes to
    hybriddeid only; ``note_timeout`` (seconds per note, 0: none) to the peers only: a note that
    passes it gets no spans and is listed in ``timed_out``."""
    size_mb = sum(len(doc.text.encode("utf-8")) for doc in docs) / 1e6
    chars = sum(len(doc.text) for doc in docs)
    pythons = peer_pythons(peers_dir)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        notes = Path(tmp) / "notes.jsonl"
        notes.write_text("".join(json.dumps({"name": d.name, "text": d.text}) + "\n" for d in docs), encoding="utf-8")
        for tool in tools:
            print(f"running {tool} on {len(docs)} notes ({size_mb:.2f} MB)...", file=sys.stderr)
            data = run_tool(
                tool,
                pythons[tool],
                notes,
                model if tool == "hybriddeid" else "",
                timeout,
                0.0 if tool == "hybriddeid" else note_timeout,
            )
            if "error" not in data:
                data["notes_per_second"] = len(docs) / data["run_seconds"]
                data["mb_per_second"] = size_mb / data["run_seconds"]
                data["chars_per_second"] = chars / data["run_seconds"]
            results[tool] = data
    return results


def scores(gold: list[Document], spans: dict[str, list[list]]) -> dict:
    """Binary token P/R/F1 overall, and binary token recall per i2b2 category of the gold spans."""
    pred = [doc.with_spans(Span(s, e, "PHI", "peer") for s, e, *_ in spans.get(doc.name, [])) for doc in gold]
    overall = evaluate(gold, pred).score("binary_token")
    taxonomy = load_taxonomy("i2b2-2014")

    def recall_of(keep) -> float:
        return (
            evaluate([doc.with_spans(s for s in doc.spans if keep(s.label)) for doc in gold], pred)
            .score("binary_token")
            .recall
        )

    recall = {
        category: recall_of(lambda label, c=category: taxonomy.category(label) == c)
        for category in dict.fromkeys(taxonomy.category(label) for label in taxonomy.labels)
        if any(taxonomy.category(s.label) == category for doc in gold for s in doc.spans)
    }
    return {
        "precision": overall.precision,
        "recall": overall.recall,
        "f1": overall.f1,
        "hipaa_recall": recall_of(taxonomy.is_hipaa),
        "recall_by_category": recall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="notes (default 200)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--peers-dir", type=Path, default=Path("/tmp/hybriddeid-peers"))
    parser.add_argument("--model", default="en", help="hybriddeid model (default: the bundled English one)")
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()

    gold = list(generate_corpus(args.n, args.seed, "test"))
    size_mb = sum(len(doc.text.encode("utf-8")) for doc in gold) / 1e6
    results = run_tools(gold, args.tools, args.peers_dir, args.model, args.timeout)
    for data in results.values():
        if "error" not in data:
            data.update(scores(gold, data.pop("spans")))

    print(f"\n{len(gold)} held-out generated English notes ({size_mb:.2f} MB), one process per tool\n")
    base = results.get("hybriddeid", {})
    print("| tool | notes/s | MB/s | load s | peak MB | token P | token R | HIPAA token R | hybriddeid speed ÷ tool |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tool, data in results.items():
        if "error" in data:
            print(f"| {tool} | could not run: {data['error']} | | | | | | | |")
            continue
        ratio = base["notes_per_second"] / data["notes_per_second"] if "notes_per_second" in base else float("nan")
        print(
            f"| {tool} | {data['notes_per_second']:.1f} | {data['mb_per_second']:.3f} | {data['load_seconds']:.1f} | "
            f"{data['peak_rss_mb']:.0f} | {data['precision']:.4f} | {data['recall']:.4f} | {data['hipaa_recall']:.4f} | {ratio:.2f} |"
        )
    categories = list(next((d["recall_by_category"] for d in results.values() if "recall_by_category" in d), {}))
    if categories:
        print("\nbinary token recall by gold category\n")
        print("| tool | " + " | ".join(categories) + " |")
        print("| --- |" + " ---: |" * len(categories))
        for tool, data in results.items():
            if "recall_by_category" in data:
                print(f"| {tool} | " + " | ".join(f"{data['recall_by_category'][c]:.3f}" for c in categories) + " |")
    if args.json:
        args.json.write_text(
            json.dumps({"notes": len(gold), "megabytes": size_mb, "seed": args.seed, "results": results}, indent=2)
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
