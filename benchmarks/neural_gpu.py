"""Issue 25's GPU figures in one run: MEDDOCAN train -> dev for the bi-GRU and CEDI on a GPU.

For each run of ``--runs`` (ARCHITECTURE:BATCHING, the architecture a table of
``benchmarks/neural_meddocan.toml``; BATCHING "notes2" = 2 notes per batch as on the CPU, "tokensN"
= N padded tokens per batch, "+steps" after it = the CRF's log Z by steps instead of the tree), it trains on the GPU within ``--train-minutes``, then prints: seconds per epoch and the held-out F1
of each epoch; notes/s through tagging's CPU-side steps alone (analysis, tokens, ids); tagging notes/s on the GPU in float32 and bfloat16 and on the CPU
(``--cpu-notes`` notes, ``--cpu-threads`` threads); how many notes get the same spans on the GPU
(float32, and bfloat16) as on the CPU; MEDDOCAN dev strict F1; peak GPU memory; tagging notes/s of
``--feed-copies`` copies of the dev notes in one process and fed by each ``--feed-workers`` count of
preparing worker processes (``predict_many(workers=W)``, issue 45), with how many notes got the same
spans (offsets and labels) as in one process. Then
``hybriddeid annotate --model M --device DEVICE --jobs J`` over the dev notes, timed, for each
``--jobs``. Everything also goes to OUT/neural_gpu.json. Run by ``benchmarks/neural_gpu.sh``;
``--device cpu`` with a few notes rehearses it on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from hybriddeid.backends.neural.crf_layer import CRF
from hybriddeid.backends.neural.encoding import note_tokens, prepare_note
from hybriddeid.backends.neural.feeding import fed_predictions
from hybriddeid.backends.neural.models import Batch
from hybriddeid.backends.neural.tagger import NeuralTagger, bucketed
from hybriddeid.core.document import Document, Span
from hybriddeid.evaluation import evaluate
from hybriddeid.features.analysis import analyse
from hybriddeid.io import read_corpus, write_document
from neural_meddocan import save_tagger  # noqa: E402 - beside this script

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "corpora" / "meddocan"


def strict_f1(gold: list[Document], spans: list[list[Span]]) -> float:
    return round(evaluate(gold, [doc.with_spans(found) for doc, found in zip(gold, spans)]).score("strict").f1, 4)


def keys(spans: list[list[Span]]) -> list[list[tuple[int, int, str]]]:
    return [[(s.start, s.end, s.label) for s in found] for found in spans]


def timed_tagging(tagger: NeuralTagger, docs: list[Document]) -> tuple[list[list[Span]], float]:
    """Spans of ``docs`` and notes per second (after a warm-up batch; the device synchronised)."""
    tagger.predict_many(docs[:8])
    if tagger.device_.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    spans = tagger.predict_many(docs)
    if tagger.device_.type == "cuda":
        torch.cuda.synchronize()
    return spans, round(len(docs) / (time.perf_counter() - started), 1)


def preparation_rate(tagger: NeuralTagger, docs: list[Document]) -> float:
    """Notes per second through the CPU-side steps of tagging alone (analysis, tokens, ids): the
    ceiling one process puts on GPU tagging however fast the device is."""
    started = time.perf_counter()
    for doc in docs:
        tagger.vocabularies_.encode(note_tokens(analyse(doc, tagger.language)))
    return round(len(docs) / (time.perf_counter() - started), 1)


def tagging_phases(tagger: NeuralTagger, many: list[Document], budget: int) -> dict:
    """Milliseconds per note of each step of tagging prepared notes in batches of ``budget`` padded
    tokens (the device synchronised after each): padding and copying, the network's emissions, the
    CRF's best paths, its marginals, the copy back and span decoding."""
    prepared = [prepare_note(tagger.vocabularies_, tagger.language, doc) for doc in many]
    device, model = tagger._ready(), tagger.model_
    spent: dict[str, float] = dict.fromkeys(("pad", "emissions", "best_paths", "marginals", "to_host", "spans"), 0.0)
    widths = []

    def lap(name: str, since: float) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        spent[name] += now - since
        return now

    with torch.no_grad():
        for indices in bucketed([note.length for note in prepared], 16, max_tokens=budget):
            notes = [prepared[i] for i in indices]
            started = time.perf_counter()
            batch = Batch.padded(notes, device)
            widths.append(int(batch.mask.shape[1]))
            started = lap("pad", started)
            emissions = model.emissions(batch)
            started = lap("emissions", started)
            paths = torch.from_numpy(model.crf.best_paths(emissions, batch.mask)).to(device)
            started = lap("best_paths", started)
            probabilities = model.crf.marginals(emissions, batch.mask)
            started = lap("marginals", started)
            chosen = probabilities.gather(2, paths.unsqueeze(2)).squeeze(2).cpu().numpy()
            host_paths = paths.cpu().numpy()
            started = lap("to_host", started)
            for row, note in enumerate(notes):
                tagger._spans(note, host_paths[row], chosen[row])
            lap("spans", started)
    return {
        "batch_tokens": budget,
        "batches": len(widths),
        "mean_width": round(sum(widths) / len(widths)),
        "ms_per_note": {name: round(seconds * 1000 / len(many), 3) for name, seconds in spent.items()},
    }


class LastMessage(logging.Handler):
    """Keeps the last message of a logger (the feeding's seconds starting workers and tagging)."""

    last = ""

    def emit(self, record: logging.LogRecord) -> None:
        LastMessage.last = record.getMessage()


FEED_LOG = LastMessage()


def preparation_only(tagger: NeuralTagger, many: list[Document], workers: int) -> float:
    """Notes/s through the feeding with tagging left out: what ``workers`` preparing processes supply."""
    started = time.perf_counter()
    fed_predictions(
        many, tagger.vocabularies_, tagger.language, lambda prepared: [[] for _ in prepared], workers, 1 << 18
    )
    return round(len(many) / (time.perf_counter() - started), 1)


def fed_rates(
    tagger: NeuralTagger, docs: list[Document], copies: int, workers: list[int], budgets: list[int]
) -> tuple[dict, list[list[Span]]]:
    """Notes/s over ``copies`` copies of ``docs`` tagged in one process, then fed by each count of
    preparing workers (with each of ``budgets`` padded tokens per batch, on the most workers); a
    feeding that hangs is stopped after 120 s (SIGALRM) and reported. Also the spans tagged in one process."""
    many = [Document(f"{doc.name}-{k}", doc.text) for k in range(copies) for doc in docs]
    started = time.perf_counter()
    alone = tagger.predict_many(many)
    if tagger.device_.type == "cuda":
        torch.cuda.synchronize()
    rates: dict = {"notes": len(many), "one_process_notes_per_s": round(len(many) / (time.perf_counter() - started), 1)}

    def stop(*_: object) -> None:
        raise TimeoutError("fed tagging took over 120 s")

    signal.signal(signal.SIGALRM, stop)
    if tagger.model_.crf is not None:
        rates["phases"] = [tagging_phases(tagger, many, budget) for budget in budgets]
        print(f"  phases: {rates['phases']}", flush=True)
    default_budget = tagger.settings.predict_batch_tokens
    runs = [(count, 0) for count in workers] + [(max(workers), budget) for budget in budgets if workers]
    for count in workers:
        rates[f"prepare_only_workers_{count}_notes_per_s"] = preparation_only(tagger, many, count)
        print(f"  prepare only, {count} workers: {rates[f'prepare_only_workers_{count}_notes_per_s']}", flush=True)
    for count, budget in runs:
        name = f"workers_{count}" + (f"_tokens_{budget}" if budget else "")
        signal.alarm(120)
        try:
            tagger.settings = replace(tagger.settings, predict_batch_tokens=budget or default_budget)
            started = time.perf_counter()
            fed = tagger.predict_many(many, workers=count)
            if tagger.device_.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            rates[name] = {
                "notes_per_s": round(len(many) / seconds, 1),
                "same_spans": sum(a == b for a, b in zip(keys(fed), keys(alone))),
                "split": FEED_LOG.last,
            }
        except (TimeoutError, RuntimeError) as exc:
            rates[name] = {"error": str(exc)[:200]}
        finally:
            signal.alarm(0)
            tagger.settings = replace(tagger.settings, predict_batch_tokens=default_budget)
        print(f"  {name}: {rates[name]}", flush=True)
    return rates, alone


def viterbi_rates(device: str, modes: list[str], tags: int = 45) -> dict:
    """Milliseconds per batch of the CRF's best paths in each Viterbi mode (``CRF.viterbi``) on
    random emissions of tagging-batch shapes (notes x width, 131,072 padded tokens or fewer), the
    device synchronised, mean of 5 after a warm-up; and whether every mode gave the first mode's paths."""
    torch.manual_seed(0)
    crf = CRF(tags).to(device)
    with torch.no_grad():
        crf.transitions.normal_(0, 3)
    rates: dict = {}
    for notes, width in ((187, 700), (1024, 128), (60, 2000), (2600, 50)):
        emissions = torch.randn(notes, width, tags, device=device) * 8
        lengths = torch.randint(width // 2, width + 1, (notes,), device=device)
        mask = torch.arange(width, device=device).unsqueeze(0) < lengths.unsqueeze(1)
        shape, paths = f"{notes}x{width}", {}
        for mode in modes:
            crf.viterbi = mode
            try:
                crf.best_paths(emissions, mask)
                synchronise(device)
                started = time.perf_counter()
                for _ in range(5):
                    paths[mode] = crf.best_paths(emissions, mask)
                synchronise(device)
                rates[f"{shape}_{mode}_ms"] = round((time.perf_counter() - started) * 200, 2)
            except Exception as exc:  # noqa: BLE001 - a mode that fails is reported, the others still run
                rates[f"{shape}_{mode}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rates[f"{shape}_same_paths"] = all(
            np.array_equal(np.where(mask.cpu().numpy(), found, 0), np.where(mask.cpu().numpy(), paths[modes[0]], 0))
            for found in paths.values()
        )
        print(f"  viterbi {shape}: { ({k: v for k, v in rates.items() if k.startswith(shape)}) }", flush=True)
    return rates


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def batching(name: str) -> dict:
    """The settings a BATCHING of ``--runs`` stands for."""
    name, _, scan = name.partition("+")
    chosen = {"crf_scan": scan} if scan else {}
    if name.startswith("notes"):
        return {**chosen, "batch_size": int(name[5:]), "batch_tokens": 0}
    if name.startswith("tokens"):
        return {**chosen, "batch_tokens": int(name[6:])}
    raise SystemExit(f"--runs: {name!r} is neither notesN nor tokensN")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED, help="MEDDOCAN: train/brat and dev/brat inside")
    parser.add_argument("--clusters", type=Path, help="word clusters to embed (the tables name meddocan-clusters)")
    parser.add_argument("--neural-config", type=Path, default=HERE / "neural_meddocan.toml")
    parser.add_argument(
        "--runs", default="bigru:notes2,bigru:tokens8192,cedi:notes2,cedi:tokens8192,bigru:notes2+steps"
    )
    parser.add_argument("--train-minutes", type=float, default=1.0, help="cap per training (no epoch starts past it)")
    parser.add_argument("--train-notes", type=int, default=0, help="0: all")
    parser.add_argument("--dev-notes", type=int, default=0, help="0: all")
    parser.add_argument("--cpu-notes", type=int, default=50, help="dev notes also tagged on the CPU")
    parser.add_argument("--cpu-threads", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--jobs", default="1,4", help="annotate --jobs values to time")
    parser.add_argument("--feed-workers", default="4,8,14", help="preparing worker counts to time (empty: none)")
    parser.add_argument("--feed-copies", type=int, default=8, help="copies of the dev notes tagged fed")
    parser.add_argument(
        "--feed-batch-tokens", default="", help="padded tokens per batch to also time, fed and by phase (empty: none)"
    )
    parser.add_argument(
        "--viterbi",
        default="steps",
        help="CRF Viterbi modes (steps, graph) to time: random batches, then tagging by phase and fed, per mode; "
        "training always steps",
    )
    parser.add_argument("--out", type=Path, required=True, help="neural_gpu.json goes here")
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/neural-gpu-work"), help="saved models, annotate outputs"
    )
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    feeding = logging.getLogger("hybriddeid.backends.neural.feeding")
    feeding.setLevel(logging.DEBUG)
    feeding.addHandler(FEED_LOG)
    feeding.propagate = False
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    tables = tomllib.loads(args.neural_config.read_text(encoding="utf-8"))
    train = sorted(read_corpus(args.data / "train" / "brat"), key=lambda doc: doc.name)
    dev = sorted(read_corpus(args.data / "dev" / "brat"), key=lambda doc: doc.name)
    train, dev = train[: args.train_notes or None], dev[: args.dev_notes or None]
    cpu_docs = dev[: args.cpu_notes]
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "none"
    print(
        f"torch {torch.__version__}, device {args.device} ({gpu}); train {len(train)} notes, dev {len(dev)}; "
        f"clusters {'yes' if args.clusters else 'no'}",
        flush=True,
    )
    report: dict = {
        "torch": torch.__version__,
        "gpu": gpu,
        "train_notes": len(train),
        "dev_notes": len(dev),
        "cpus": os.cpu_count(),
        "runs": [],
    }
    modes = [mode for mode in args.viterbi.split(",") if mode]
    report["viterbi"] = viterbi_rates(args.device, modes)
    (args.out / "neural_gpu.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    best: dict[str, tuple[Path, float]] = {}
    for spec in [spec for spec in args.runs.split(",") if spec]:
        architecture, _, name = spec.partition(":")
        settings = {
            **tables[architecture],
            "device": args.device,
            "num_threads": args.cpu_threads,
            "verbose": True,
            "max_train_minutes": args.train_minutes,
            "epochs": 40,
            "patience": 4,
            "crf_viterbi": "steps",
            **batching(name),
        }
        settings.pop("clusters", None)
        if args.clusters:
            settings["clusters"] = str(args.clusters)
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        tagger = NeuralTagger(language="es", **settings).fit(train)
        cumulative = [record["seconds"] for record in tagger.history_]
        epochs = [round(b - a, 2) for a, b in zip([0.0, *cumulative], cumulative)]
        memory = round(torch.cuda.max_memory_allocated() / 2**20) if args.device.startswith("cuda") else 0
        spans, rate = timed_tagging(tagger, dev)
        folder = args.work / f"model-{architecture}-{name.replace('+', '-')}"
        save_tagger(tagger, folder)
        half = NeuralTagger.from_disk(
            folder / "neural", {**tagger.get_params(), "tag_mixed_precision": True}, device=args.device
        )
        half_spans, half_rate = timed_tagging(half, dev)
        cpu = NeuralTagger.from_disk(folder / "neural", tagger.get_params(), device="cpu")
        cpu_spans, cpu_rate = timed_tagging(cpu, cpu_docs)
        run = {
            "architecture": architecture,
            "batching": name,
            "epochs": len(epochs),
            "epoch_seconds": epochs,
            "mean_epoch_seconds": round(sum(epochs) / len(epochs), 2),
            "held_out_f1": [record.get("dev_f1") for record in tagger.history_],
            "dev_strict_f1": strict_f1(dev, spans),
            "dev_strict_f1_bf16": strict_f1(dev, half_spans),
            "prepare_notes_per_s": preparation_rate(tagger, dev),
            "tag_notes_per_s_fp32": rate,
            "tag_notes_per_s_bf16": half_rate,
            "tag_notes_per_s_cpu": cpu_rate,
            "cpu_threads": args.cpu_threads,
            "cpu_notes": len(cpu_docs),
            "same_spans_fp32_vs_cpu": sum(a == b for a, b in zip(keys(spans), keys(cpu_spans))),
            "same_spans_bf16_vs_cpu": sum(a == b for a, b in zip(keys(half_spans), keys(cpu_spans))),
            "spans_differing_fp32_vs_cpu": sum(len(set(a) ^ set(b)) for a, b in zip(keys(spans), keys(cpu_spans))),
            "spans_differing_bf16_vs_fp32": sum(len(set(a) ^ set(b)) for a, b in zip(keys(half_spans), keys(spans))),
            "peak_gpu_mb": memory,
            "fed": {},
        }
        fed_spans = {}
        for mode in modes if tagger.model_.crf is not None else ["steps"]:
            if tagger.model_.crf is not None:
                tagger.model_.crf.viterbi = mode
            print(f"  fed, viterbi {mode}", flush=True)
            run["fed"][mode], fed_spans[mode] = fed_rates(
                tagger,
                dev,
                args.feed_copies,
                [int(w) for w in args.feed_workers.split(",") if w],
                [int(b) for b in args.feed_batch_tokens.split(",") if b],
            )
        first = keys(fed_spans[modes[0]]) if modes[0] in fed_spans else []
        run["fed_same_spans_as_first_mode"] = {
            mode: sum(a == b for a, b in zip(keys(found), first)) for mode, found in fed_spans.items()
        }
        report["runs"].append(run)
        print(json.dumps(run), flush=True)
        if architecture not in best or run["dev_strict_f1"] > best[architecture][1]:
            best[architecture] = (folder, run["dev_strict_f1"])
        del tagger, half, cpu
        (args.out / "neural_gpu.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    # annotate over the dev notes with each architecture's best model, on the device, timed.
    notes = args.work / "annotate-in"
    shutil.rmtree(notes, ignore_errors=True)
    for doc in dev:
        write_document(Document(doc.name, doc.text), notes, "text")
    report["annotate"] = []
    for architecture, (folder, _) in best.items():
        for jobs in [int(j) for j in args.jobs.split(",") if j]:
            out = args.work / f"annotate-{architecture}-{jobs}"
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hybriddeid.cli",
                    "-q",
                    "annotate",
                    "--model",
                    str(folder),
                    "--device",
                    args.device,
                    "--jobs",
                    str(jobs),
                    str(notes),
                    str(out),
                ],
                capture_output=True,
                text=True,
                cwd=args.work,
            )  # not the source tree's package
            seconds = round(time.perf_counter() - started, 1)
            written = len(list(out.glob("*.ann"))) if out.is_dir() else 0
            row = {
                "architecture": architecture,
                "jobs": jobs,
                "exit": done.returncode,
                "notes_written": written,
                "seconds": seconds,
                "notes_per_s": round(written / seconds, 1),
                "stderr_tail": done.stderr[-400:],
            }
            report["annotate"].append(row)
            print(json.dumps(row), flush=True)
    (args.out / "neural_gpu.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
