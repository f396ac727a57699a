"""``hybriddeid report OUT_DIR``: one static HTML file summarising a run, to read without a server.

A run is a ``deid`` output folder (its ``audit/*.jsonl`` give every span's label, source and score,
and the de-identified notes give the context) or an ``annotate`` output folder (BRAT, i2b2 or
JSONL: spans from the annotations, context from the note with every found span masked), or the
output folder of a table run (``part-*`` files: spans from the ``audit`` column, else ``phi_spans``). The
report holds the number of notes, spans per type, the score histogram (inline SVG), the
lowest-scoring spans in their context with the span itself masked, and the residual-risk estimate
when ``hybriddeid risk --out`` left ``risk.json`` (and ``reliability.png``, inlined) in the folder or
``--risk`` names one. Context is the output as written: PHI the model missed can stand in it.
"""

from __future__ import annotations

import base64
import html
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybriddeid.io import InputError, atomic_write_text, read_corpus

CONTEXT_CHARS = 40
LOWEST = 25


@dataclass(frozen=True)
class RunSpan:
    """One span of a run: where it stands in the text the report shows, and what found it."""

    note: str
    start: int
    end: int
    label: str
    source: str
    score: float


def _deid_run(out_dir: Path) -> tuple[list[RunSpan], dict[str, str], str]:
    from hybriddeid.surrogates.audit import AUDIT_FORMATS, audit_rows

    spans: list[RunSpan] = []
    texts: dict[str, str] = {}
    audits = sorted(path for fmt in AUDIT_FORMATS for path in (out_dir / "audit").glob(f"*.{fmt}"))
    for path in audits:  # the audit's own reader: JSONL or CSV (--audit-format), the run record skipped
        try:
            for record in audit_rows(path):
                spans.append(
                    RunSpan(
                        str(record["note"]),
                        int(record["out_start"]),
                        int(record["out_end"]),
                        str(record["label"]),
                        str(record.get("source", "?")),
                        float(record.get("score", 1.0)),
                    )
                )
        except (ValueError, KeyError, TypeError) as exc:  # the type only: a message could quote a row
            raise InputError(path, f"is not an audit file ({type(exc).__name__})") from None
    for name in {span.note for span in spans}:
        output = out_dir / f"{name}.txt"
        if output.is_file():
            texts[name] = output.read_bytes().decode("utf-8", errors="replace")  # offsets count "\r\n" as two
    return spans, texts, "deid output"


def _annotate_run(out_dir: Path) -> tuple[list[RunSpan], dict[str, str], str]:
    docs = read_corpus(out_dir)
    spans, texts = [], {}
    for doc in docs:
        masked = list(doc.text)
        for span in doc.spans:
            spans.append(RunSpan(doc.name, span.start, span.end, span.label, span.source, span.score))
            masked[span.start : span.end] = ["█"] * len(span)
        texts[doc.name] = "".join(masked)
    return spans, texts, "annotations"


def _table_run(out_dir: Path, state: Path) -> tuple[list[RunSpan], dict[str, str], str]:
    """A table run's folder (``tables``): the spans of every row of its part files, by note id, from
    the ``audit`` column (offsets in the output text) or else ``phi_spans`` (offsets in the input); the
    output text is the context when the audit is there and the text is the one column besides the id."""
    from hybriddeid.io.tables import AUDIT_COLUMN, OUTPUT_SUFFIXES, SPANS_COLUMN, read_table

    try:
        columns = json.loads(state.read_text(encoding="utf-8"))["table_columns"]
        id_col = columns[0]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        raise InputError(state, "is not a table run's settings (no table_columns)") from None
    audited = AUDIT_COLUMN in columns
    others = [name for name in columns[1:] if name not in (SPANS_COLUMN, AUDIT_COLUMN)]
    text_col = others[0] if audited and len(others) == 1 else None
    if not audited and SPANS_COLUMN not in columns:
        raise InputError(out_dir, "this table run wrote no spans: rerun it with --spans or --audit for a report")
    spans: list[RunSpan] = []
    texts: dict[str, str] = {}
    parts = sorted(path for suffix in set(OUTPUT_SUFFIXES.values()) for path in out_dir.glob(f"part-*{suffix}"))
    for path in parts:
        try:
            for row in read_table(path):
                note = str(row[id_col])
                records = row[AUDIT_COLUMN if audited else SPANS_COLUMN]
                records = json.loads(records) if isinstance(records, str) else records or []
                start, end = ("out_start", "out_end") if audited else ("start", "end")
                spans.extend(
                    RunSpan(
                        note,
                        int(r[start]),
                        int(r[end]),
                        str(r["label"]),
                        str(r.get("source", "?")),
                        float(r.get("score", 1.0)),
                    )
                    for r in records
                )
                if text_col is not None and isinstance(row.get(text_col), str):
                    texts[note] = row[text_col]
        except (OSError, ValueError, KeyError, TypeError) as exc:  # the type only: a message could quote a row
            raise InputError(path, f"is not a part of this table run ({type(exc).__name__})") from None
    return spans, texts, "deid table output" if audited else "table annotations"


def read_run(out_dir: Path) -> tuple[list[RunSpan], dict[str, str], str]:
    """The spans of the run in ``out_dir``, each note's text as the report may show it, and what
    kind of run it was."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise InputError(out_dir, "not a folder" if out_dir.exists() else "does not exist")
    state = out_dir / "_hybriddeid" / "run.json"  # tables.STATE_DIR: a table run's folder
    if state.is_file():
        return _table_run(out_dir, state)
    return _deid_run(out_dir) if (out_dir / "audit").is_dir() else _annotate_run(out_dir)


def _context(text: str | None, span: RunSpan) -> str:
    """HTML of the span's surroundings with the span itself masked as its label."""
    if text is None:
        return "<em>output text not found</em>"

    def clean(part: str) -> str:
        return html.escape(part.replace("\r", "").replace("\n", " ⏎ "))

    before = text[max(0, span.start - CONTEXT_CHARS) : span.start]
    after = text[span.end : span.end + CONTEXT_CHARS]
    return f"…{clean(before)}<mark>[{html.escape(span.label)}]</mark>{clean(after)}…"


def bar_chart(counts: Sequence[tuple[str, float]], title: str, width: int = 560) -> str:
    """A horizontal bar chart as inline SVG."""
    row, left = 18, 150
    top = max((value for _, value in counts), default=1) or 1
    height = row * len(counts) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(title)}"><text x="0" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>'
    ]
    for i, (name, value) in enumerate(counts):
        y = 24 + i * row
        bar = (width - left - 60) * value / top
        parts.append(
            f'<text x="{left - 6}" y="{y + 12}" font-size="12" text-anchor="end">{html.escape(str(name))}</text>'
            f'<rect x="{left}" y="{y + 2}" width="{bar:.1f}" height="{row - 5}" fill="#4a7fb0"/>'
            f'<text x="{left + bar + 4:.1f}" y="{y + 12}" font-size="11">{value:g}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def score_histogram(scores: Sequence[float], bins: int = 10) -> list[tuple[str, float]]:
    counts = Counter(min(int(score * bins), bins - 1) for score in scores)
    return [(f"{i / bins:.1f}–{(i + 1) / bins:.1f}", counts.get(i, 0)) for i in range(bins)]


def _risk_html(risk: dict[str, Any] | None, png: Path | None) -> str:
    if risk is None:
        return (
            "<p>No residual-risk estimate: run <code>hybriddeid risk NOTES --out OUT_DIR</code> (with "
            "<code>--reviewed</code> to calibrate it) to add one.</p>"
        )
    low, high = risk["interval"]
    how = (
        f"uncalibrated: {html.escape(risk['uncalibrated_because'])}"
        if risk.get("uncalibrated_because")
        else f"calibrated ({html.escape(risk['calibration']['method'])}) on {risk['reviewed_notes']} reviewed notes"
        if risk.get("reviewed_notes")
        else "uncalibrated (raw marginals)"
    )
    parts = [
        f"<p><strong>{risk['expected_missed']:.1f}</strong> PHI tokens likely missed "
        f"({low:.1f}–{high:.1f}, {round(100 * risk.get('interval_level', 0.95))}% interval) in "
        f"{risk['tokens']:,} tokens: <strong>{risk['per_1000']:.2f} per 1,000 tokens</strong>; {how}.</p>"
    ]
    per_type = sorted(risk.get("per_type", {}).items(), key=lambda item: -item[1])[:15]
    if per_type:
        parts.append(
            bar_chart([(label, round(value, 2)) for label, value in per_type], "Expected missed tokens per type")
        )
    if png is not None and png.is_file():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f'<p><img alt="reliability diagram" width="400" src="data:image/png;base64,{data}"></p>')
    return "".join(parts)


def write_report(out_dir: Path, target: Path | None = None, risk_path: Path | None = None) -> Path:
    """Write the report of the run in ``out_dir`` to ``target`` (default ``out_dir/report.html``)."""
    out_dir = Path(out_dir)
    spans, texts, kind = read_run(out_dir)
    risk_path = risk_path or (out_dir / "risk.json" if (out_dir / "risk.json").is_file() else None)
    risk = None
    if risk_path is not None:
        try:
            risk = json.loads(Path(risk_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(Path(risk_path), f"cannot be read as a risk estimate ({type(exc).__name__})") from None
    per_type = Counter(span.label for span in spans).most_common()
    per_source = Counter(span.source for span in spans).most_common()
    lowest = sorted(spans, key=lambda span: (span.score, span.note, span.start))[:LOWEST]
    rows = "".join(
        f"<tr><td>{span.score:.3f}</td><td>{html.escape(span.label)}</td><td>{html.escape(span.source)}</td>"
        f"<td>{html.escape(span.note)}</td><td class=ctx>{_context(texts.get(span.note), span)}</td></tr>"
        for span in lowest
    )
    notes = len({span.note for span in spans} | set(texts))
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hybriddeid run report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60em; margin: 1em auto; color: #222; }}
table {{ border-collapse: collapse; font-size: .9em; }} td, th {{ border-bottom: 1px solid #ddd; padding: .2em .5em; text-align: left; }}
td.ctx {{ font-family: ui-monospace, monospace; font-size: .85em; }} mark {{ background: #ffd6d6; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 2em; }}
</style></head><body>
<h1>hybriddeid run report</h1>
<p>{html.escape(str(out_dir.name))}: {html.escape(kind)}; <strong>{notes}</strong> notes, <strong>{len(spans)}</strong> spans
({html.escape(", ".join(f"{source} {count}" for source, count in per_source))}).</p>
<div class="charts">
{bar_chart(per_type, "Spans per type")}
{bar_chart(score_histogram([span.score for span in spans]), "Span scores")}
</div>
<h2>Residual risk</h2>
{_risk_html(risk, Path(risk_path).with_name("reliability.png") if risk_path else None)}
<h2>Lowest-confidence spans</h2>
<p>The {len(lowest)} lowest-scoring spans, each shown as its label in its context ({"the de-identified output" if kind.startswith("deid") else "the note with every found span masked"}).</p>
<table><tr><th>score</th><th>label</th><th>source</th><th>note</th><th>context</th></tr>{rows}</table>
</body></html>
"""
    target = Path(target) if target is not None else out_dir / "report.html"
    atomic_write_text(target, page)
    return target
