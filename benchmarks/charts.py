"""The documentation's charts, drawn from the benchmarks' own outputs, never from typed numbers.

Two steps. ``run`` runs a benchmark and keeps its machine-readable output in
``docs/images/data/<chart>.json`` together with the exact command and the commit it ran at;
``draw`` draws every chart whose data file exists into ``docs/images/<chart>.png``, writing that
command and commit at the foot of the figure, so a reader can rerun what they see, and writes
``docs/images/data/<chart>.md``: the caption (command and commit) and the figures as a table,
which the pages include (``--8<--``), so no page holds a number typed from the chart.

    python benchmarks/charts.py run operating-point   # 200 held-out generated notes: evaluate --sweep (~15 s)
    python benchmarks/charts.py run per-type          # benchmarks/en_synthetic.py --json (~1-2 min)
    python benchmarks/charts.py run peers             # benchmarks/peers.py --json (needs bash benchmarks/setup_peers.sh)
    python benchmarks/charts.py run spark-scaling     # benchmarks/spark_scaling.py --json (needs the spark extra, Java; ~10 min)
    python benchmarks/charts.py draw                  # every chart with data (needs matplotlib)

Charts: ``operating-point`` (binary token precision and recall of the bundled English model against
the P(O) threshold, and precision against recall), ``per-type`` (the bundled English model's token
recall per i2b2 2014 category, held-out test mix), ``peers`` (hybriddeid, Philter and Presidio on
the same notes: binary token recall per category and notes/s), ``spark-scaling`` (``spark-deid``'s job
in local[1] and local[2] on the same notes: notes/s and CPU seconds per run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
DATA = IMAGES / "data"
CODE_PATHS = ("hybriddeid", "resources", "benchmarks", "tools")  # what a figure's numbers depend on


def commit() -> str:
    """The commit the benchmark runs at; "+changes" when the code it runs differs from it."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", *CODE_PATHS], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"{head}+changes" if changed else head


def _run(command: list[str]) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def run_operating_point(work: Path) -> tuple[str, Any]:
    notes, sweep = work / "gold", work / "sweep.json"
    _run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "synth",
            "--n",
            "200",
            "--seed",
            "3",
            "--mix",
            "test",
            "--out",
            str(notes),
            "-q",
        ]
    )
    _run(
        [
            sys.executable,
            "-m",
            "hybriddeid.cli",
            "evaluate",
            str(notes),
            "--sweep",
            "--model",
            "en",
            "--sweep-out",
            str(sweep),
            "-q",
        ]
    )
    command = (
        "hybriddeid synth --n 200 --seed 3 --mix test --out gold && "
        "hybriddeid evaluate gold --sweep --model en --sweep-out sweep.json"
    )
    return command, json.loads(sweep.read_text(encoding="utf-8"))


def run_per_type(work: Path) -> tuple[str, Any]:
    out = work / "en_synthetic.json"
    _run([sys.executable, "benchmarks/en_synthetic.py", "--json", str(out)])
    return "python benchmarks/en_synthetic.py --json OUT", json.loads(out.read_text(encoding="utf-8"))


def run_peers(work: Path) -> tuple[str, Any]:
    out = work / "peers.json"
    _run([sys.executable, "benchmarks/peers.py", "--json", str(out)])
    return "bash benchmarks/setup_peers.sh && python benchmarks/peers.py --json OUT", json.loads(
        out.read_text(encoding="utf-8")
    )


def run_spark_scaling(work: Path) -> tuple[str, Any]:
    out = work / "spark_scaling.json"
    _run([sys.executable, "benchmarks/spark_scaling.py", "--json", str(out), "--work", str(work / "spark")])
    return "python benchmarks/spark_scaling.py --json OUT", json.loads(out.read_text(encoding="utf-8"))


RUNS: dict[str, Callable[[Path], tuple[str, Any]]] = {
    "operating-point": run_operating_point,
    "per-type": run_per_type,
    "peers": run_peers,
    "spark-scaling": run_spark_scaling,
}


def run(chart: str) -> Path:
    """Run the chart's benchmark and keep its output with the command and commit."""
    sys.path.insert(0, str(ROOT / "tools"))
    from docs_reference import check_checkout

    check_checkout()  # the commit recorded must be the code that ran
    at = commit()
    with tempfile.TemporaryDirectory(prefix="hybriddeid-chart-") as work:
        command, result = RUNS[chart](Path(work))
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{chart}.json"
    path.write_text(
        json.dumps({"chart": chart, "command": command, "commit": at, "result": result}, indent=1) + "\n",
        encoding="utf-8",
    )
    print(f"wrote {path.relative_to(ROOT)}")
    return path


def _footer(fig: Any, data: dict[str, Any]) -> None:
    fig.text(
        0.01,
        0.01,
        f"{data['command']}  (at {data['commit']})",
        fontsize=6.5,
        color="0.35",
        ha="left",
        va="bottom",
        wrap=True,
    )


def draw_operating_point(data: dict[str, Any], plt: Any) -> Any:
    points = data["result"]["points"]
    thresholded = [p for p in points if p["threshold"] is not None]
    unset = next((p for p in points if p["threshold"] is None), None)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    xs = [p["threshold"] for p in thresholded]
    for key, style in (("precision", "o-"), ("recall", "s-")):
        left.plot(xs, [p["binary_token"][key] for p in thresholded], style, markersize=3, label=f"binary token {key}")
    left.set_xscale("logit")
    left.set_xlabel("P(O) threshold (logit scale)")
    left.set_ylabel("score")
    left.set_title("Precision and recall against the threshold")
    left.grid(alpha=0.3)
    left.legend(loc="lower left")
    right.plot(
        [p["binary_token"]["recall"] for p in thresholded],
        [p["binary_token"]["precision"] for p in thresholded],
        "o-",
        markersize=3,
        label="thresholds",
    )
    if unset:
        right.plot(
            [unset["binary_token"]["recall"]],
            [unset["binary_token"]["precision"]],
            "r*",
            markersize=10,
            label="no threshold (default)",
        )
    for p in thresholded:
        right.annotate(
            f"{p['threshold']:g}",
            (p["binary_token"]["recall"], p["binary_token"]["precision"]),
            fontsize=6,
            xytext=(3, 2),
            textcoords="offset points",
        )
    right.set_xlabel("binary token recall")
    right.set_ylabel("binary token precision")
    right.set_title(f"Model {data['result']['model']}, {data['result']['documents']} held-out generated notes")
    right.grid(alpha=0.3)
    right.legend(loc="lower left")
    return fig


CATEGORIES = ("NAME", "PROFESSION", "LOCATION", "AGE", "DATE", "CONTACT", "ID")


def draw_per_type(data: dict[str, Any], plt: Any) -> Any:
    rows = data["result"]["per_category"]
    names = [c for c in CATEGORIES if c in rows] + sorted(c for c in rows if c not in CATEGORIES)
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.4
    for offset, (kind, label) in enumerate((("token", "token recall"), ("strict", "strict recall"))):
        values = [rows[c][kind]["recall"] for c in names]
        bars = ax.bar([i + (offset - 0.5) * width for i in range(len(names))], values, width, label=label)
        ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], fontsize=6, padding=1)
    ax.set_xticks(range(len(names)), names)
    low = min(min(rows[c]["token"]["recall"], rows[c]["strict"]["recall"]) for c in names)
    ax.set_ylim(max(0.0, low - 0.05), 1.005)
    ax.set_ylabel("recall")
    ax.set_title(
        f"Recall per i2b2 2014 category: model {data['result'].get('model', 'en')}, "
        f"{data['result'].get('notes', '?')} held-out generated notes"
    )
    ax.legend(loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    return fig


def draw_peers(data: dict[str, Any], plt: Any) -> Any:
    tools = {name: row for name, row in data["result"]["results"].items() if "recall_by_category" in row}
    names = list(tools)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        recall = tools[name]["recall_by_category"]
        left.bar(
            [j + (i - (len(names) - 1) / 2) * width for j in range(len(CATEGORIES))],
            [recall.get(c, 0.0) for c in CATEGORIES],
            width,
            label=name,
        )
    left.set_xticks(range(len(CATEGORIES)), CATEGORIES)
    left.set_ylabel("binary token recall")
    left.set_title("Recall per category, same notes")
    left.legend(loc="lower left", fontsize=8)
    right.bar(names, [tools[n]["notes_per_second"] for n in names], color=[f"C{i}" for i in range(len(names))])
    right.set_ylabel("notes/s")
    right.set_title("notes/s, same run")
    return fig


def draw_spark_scaling(data: dict[str, Any], plt: Any) -> Any:
    result = data["result"]
    runs = result["runs"]
    cores = sorted({r["cores"] for r in runs})
    median = [result["median_notes_per_s"][f"local[{c}]"] for c in cores]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(cores, median, width=0.5, color="C0", label="median of the rounds")
    left.plot([r["cores"] for r in runs], [r["notes_per_s"] for r in runs], "ko", markersize=4, label="each run")
    left.plot(cores, [median[0] * c for c in cores], "--", color="C1", label="linear from local[1]")
    left.set_xticks(cores, [f"local[{c}]" for c in cores])
    left.set_ylabel("notes/s (job, start-up excluded)")
    left.set_title(f"spark-deid: {result['notes']:,} notes, local[2] {result['speedup']:.2f}x local[1]")
    left.legend(loc="upper left", fontsize=8)
    left.grid(axis="y", alpha=0.3)
    labels = [f"local[{r['cores']}]\nround {r['round']}" for r in runs]
    right.bar(range(len(runs)), [r["cpu_s"] for r in runs], color=[f"C{r['cores'] - 1}" for r in runs])
    right.set_xticks(range(len(runs)), labels, fontsize=8)
    right.set_ylabel("CPU s (JVM and Python workers)")
    right.set_title(f"The same work's CPU seconds ({result['cpus']}-CPU machine)")
    right.grid(axis="y", alpha=0.3)
    return fig


def caption(data: dict[str, Any]) -> str:
    """Where a chart's numbers come from, for the page that shows it."""
    return (
        f"Drawn by `python benchmarks/charts.py run {data['chart']}` and `draw` from `{data['command']}`, "
        f"run at commit {data['commit']}."
    )


def table_operating_point(data: dict[str, Any]) -> list[str]:
    result = data["result"]
    points = result["points"]
    names = ["unset" if p["threshold"] is None else f"{p['threshold']:g}" for p in points]
    lines = [
        f"The bundled model `{result['model']}` on {result['documents']} held-out generated notes "
        f"({result['gold_spans']:,} gold spans), binary token precision and recall per P(O) threshold:",
        "",
        "| threshold | " + " | ".join(names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for key in ("precision", "recall"):
        lines.append(
            f"| binary token {key[0].upper()} | " + " | ".join(f"{p['binary_token'][key]:.4f}" for p in points) + " |"
        )
    return lines


def table_per_type(data: dict[str, Any]) -> list[str]:
    result = data["result"]
    rows = result["per_category"]
    lines = [
        f"The bundled model `{result.get('model', 'en')}` on {result['notes']} generated notes of the held-out "
        f"{result['mix']} mix (seed {result['seed']}), i2b2 2014 categories:",
        "",
        "| category | strict P | strict R | strict F1 | token P | token R | token F1 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in [c for c in CATEGORIES if c in rows] + sorted(c for c in rows if c not in CATEGORIES):
        s, t = rows[name]["strict"], rows[name]["token"]
        lines.append(
            f"| {name} | {s['precision']:.4f} | {s['recall']:.4f} | {s['f1']:.4f} | "
            f"{t['precision']:.4f} | {t['recall']:.4f} | {t['f1']:.4f} |"
        )
    for name, score in result["scores"].items():
        lines.append(
            f"| **all, {name} micro** | {score['precision']:.4f} | {score['recall']:.4f} | {score['f1']:.4f} | | | |"
        )
    safelist = result.get("safelist")
    if safelist:
        before, after = safelist["binary_token_before"], safelist["binary_token_after"]
        lines += [
            "",
            f"The clinical safe-list removed {safelist['removed']} merged spans of these notes, "
            f"{safelist['false_positives_removed']} of them false positives (no gold overlap): binary token "
            f"precision {before['precision']:.4f} -> {after['precision']:.4f}, recall {before['recall']:.4f} -> "
            f"{after['recall']:.4f}.",
        ]
    return lines


def table_peers(data: dict[str, Any]) -> list[str]:
    result = data["result"]
    tools = {name: row for name, row in result["results"].items() if "recall_by_category" in row}
    base = tools.get("hybriddeid", {}).get("notes_per_second")
    lines = [
        f"{result['notes']} held-out generated English notes ({result['megabytes']:.2f} MB, test mix, seed "
        f"{result['seed']}), one process per tool; binary token scores:",
        "",
        "| tool | notes/s | load s | peak MB | token P | token R | HIPAA token R | hybriddeid speed / tool | "
        + " | ".join(f"{c} R" for c in CATEGORIES)
        + " |",
        "| --- |" + " ---: |" * (7 + len(CATEGORIES)),
    ]
    for name, row in tools.items():
        ratio = f"{base / row['notes_per_second']:.2f}" if base else ""
        lines.append(
            f"| {name} | {row['notes_per_second']:.1f} | {row['load_seconds']:.1f} | {row['peak_rss_mb']:.0f} | "
            f"{row['precision']:.4f} | {row['recall']:.4f} | {row['hipaa_recall']:.4f} | {ratio} | "
            + " | ".join(f"{row['recall_by_category'].get(c, 0.0):.3f}" for c in CATEGORIES)
            + " |"
        )
    return lines


def table_spark_scaling(data: dict[str, Any]) -> list[str]:
    result = data["result"]
    lines = [
        f"{result['notes']:,} notes of {result['patients']:,} patients ({result['bytes_per_note']:,} bytes/note, "
        f"recombined from MEDDOCAN dev), model `{result['model']}`, surrogate mode with `--patient-pattern`, "
        f"Parquet out; each run in its own process and JVM, {result['rounds']} rounds, on a {result['cpus']}-CPU machine:",
        "",
        "| run | round | start-up s | job s | notes/s | CPU s | load before, after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["runs"]:
        lines.append(
            f"| local[{r['cores']}] | {r['round']} | {r['session_s']:.1f} | {r['job_s']:.1f} | "
            f"{r['notes_per_s']:.2f} | {r['cpu_s']:.0f} | {r['load_before']:.1f}, {r['load_after']:.1f} |"
        )
    lines += [
        "",
        f"local[2] / local[1], median notes/s of the rounds: **{result['speedup']:.2f}x** "
        f"(efficiency {result['efficiency']:.0%}).",
    ]
    return lines


TABLES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "operating-point": table_operating_point,
    "per-type": table_per_type,
    "peers": table_peers,
    "spark-scaling": table_spark_scaling,
}


DRAWS: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "operating-point": draw_operating_point,
    "per-type": draw_per_type,
    "peers": draw_peers,
    "spark-scaling": draw_spark_scaling,
}


def draw() -> list[Path]:
    """Draw every chart whose data file exists; returns the images written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for chart, draw_chart in DRAWS.items():
        path = DATA / f"{chart}.json"
        if not path.exists():
            print(f"{chart}: no data (python benchmarks/charts.py run {chart})")
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        fig = draw_chart(data, plt)
        _footer(fig, data)
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        image = IMAGES / f"{chart.replace('-', '_')}.png"
        fig.savefig(image, dpi=110, metadata={"Software": None})
        plt.close(fig)
        text = DATA / f"{chart}.md"
        text.write_text("\n".join([caption(data), "", *TABLES[chart](data)]) + "\n", encoding="utf-8")
        written += [image, text]
        print(f"wrote {image.relative_to(ROOT)} and {text.relative_to(ROOT)}")
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    run_parser = sub.add_parser("run", help="run a chart's benchmark and keep its output")
    run_parser.add_argument("chart", choices=tuple(RUNS))
    sub.add_parser("draw", help="draw every chart whose data exists")
    args = parser.parse_args()
    if args.step == "run":
        run(args.chart)
    else:
        draw()
    return 0


if __name__ == "__main__":
    sys.exit(main())
