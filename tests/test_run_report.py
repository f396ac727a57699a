"""``hybriddeid report``: one static HTML file for a deid or annotate run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybriddeid.core.document import Document
from hybriddeid.io import write_documents
from hybriddeid.runs.report import read_run, write_report
from hybriddeid.synth import generate_corpus


def _cli(*args: str) -> subprocess.CompletedProcess:
    # Run outside the checkout, so the installed package (with its resources) is imported, not ./hybriddeid.
    return subprocess.run(
        [sys.executable, "-m", "hybriddeid.cli", *args], capture_output=True, text=True, cwd=Path(__file__).parent
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    notes = root / "notes"
    docs = list(generate_corpus(4, 21, "test", "en"))
    docs[0] = Document(docs[0].name, docs[0].text.replace("\n", "\r\n"))  # Windows line ends: offsets count "\r"
    write_documents([doc.with_spans(()) for doc in docs], notes, "text")
    for command in (
        ["deid", str(notes), str(root / "deid"), "--mode", "tag"],
        ["annotate", str(notes), str(root / "annotated"), "--format", "jsonl"],
        ["risk", str(notes), "--out", str(root / "deid")],
    ):
        done = _cli(*command, "-q")
        assert done.returncode == 0, done.stderr
    return root, docs


def _names(docs) -> set[str]:
    return {doc.text[s.start : s.end] for doc in docs for s in doc.spans if s.label == "PATIENT" and len(s) >= 6}


def test_deid_run_report(runs):
    root, docs = runs
    done = _cli("report", str(root / "deid"))
    assert done.returncode == 0, done.stderr
    page = (root / "deid" / "report.html").read_text()
    spans, texts, kind = read_run(root / "deid")
    assert kind.startswith("deid") and spans
    # every span's offsets point at its tag in the output text, "\r\n" counted as two characters
    assert all(re.fullmatch(r"\[\*\*[A-Z]+\*\*\]", texts[s.note][s.start : s.end]) for s in spans)
    assert f"<strong>{len(spans)}</strong> spans" in page
    assert page.count("<svg") >= 3  # per type, scores, risk per type
    assert "per 1,000 tokens" in page and "uncalibrated" in page
    assert len(re.findall(r"<tr><td>\d\.\d{3}</td>", page)) == min(25, len(spans))
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched from elsewhere
    assert not [name for name in _names(docs) if name in page]  # context is the de-identified output
    # each masked span stands where its replacement stood ("\r\n" counted as two characters)
    assert page.count("<mark>[") == min(25, len(spans)) and not re.search(r"\[\*\*[A-Z]*<mark>", page)


def test_annotate_run_report_masks_spans(runs, tmp_path):
    root, docs = runs
    target = write_report(root / "annotated", tmp_path / "r.html")
    page = target.read_text()
    assert "No residual-risk estimate" in page and "every found span masked" in page
    assert read_run(root / "annotated")[0] and page.count("<mark>[") == min(25, len(read_run(root / "annotated")[0]))
    assert not [name for name in _names(docs) if name in page]


def test_report_of_a_missing_folder(tmp_path):
    done = _cli("report", str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "nowhere: does not exist" in done.stderr
