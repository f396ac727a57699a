"""examples/ablation.ipynb runs end to end (on a small MEDDOCAN slice) and its functions hold up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybriddeid.pipeline.ablation import ablations, markdown_table
from hybriddeid.pipeline.core import build_config

REPO = Path(__file__).resolve().parents[1]
MEDDOCAN = REPO.parent / "shared" / "corpora" / "meddocan"


def test_ablation_rows_follow_the_config():
    plain = {(row.component, row.family) for row in ablations(build_config())}
    assert ("token", "affixes") in plain and ("char", "character n-grams") in plain
    assert ("token", "word clusters") not in plain  # no clusters folder configured
    rich = build_config({"token": {"clusters": "c", "gazetteers": ["*"], "tag_source": "spacy:x"}})
    rows = {(row.component, row.family): row.change for row in ablations(rich)}
    assert rows[("token", "word clusters")] == {"clusters": ""}
    assert rows[("token", "dictionaries")] == {"gazetteers": [], "extra_gazetteers": []}
    assert rows[("token", "POS & NER")] == {"tag_source": ""}
    assert "affixes" not in rows[("token", "affixes")]["features"]


def test_markdown_table_signs_deltas():
    table = markdown_table([{"family": "affixes", "f1": 0.5, "delta_f1": -0.01}], ["family", "f1", "delta_f1"])
    assert table.splitlines()[2] == "| affixes | 0.5000 | -0.0100 |"


def run_notebook(tmp_path: Path, monkeypatch, meddocan: Path) -> dict:
    """Every code cell of examples/ablation.ipynb on a small slice of ``meddocan`` (generated notes when
    it is missing, as for a new user); the notebook's namespace."""
    pytest.importorskip("gensim")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("HYBRIDDEID_ABLATION_SMALL", "1")
    monkeypatch.setenv("HYBRIDDEID_REPO", str(REPO))
    monkeypatch.setenv("HYBRIDDEID_ABLATION_WORK", str(tmp_path))
    monkeypatch.setenv("MEDDOCAN", str(meddocan))
    notebook = json.loads((REPO / "examples" / "ablation.ipynb").read_text(encoding="utf-8"))
    namespace: dict = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "ablation.ipynb", "exec"), namespace)
    result = namespace["result"]
    precedence = " > ".join(namespace["config"]["pipeline"]["precedence"])
    assert [row["system"] for row in result["systems"]][-1] == f"merged {precedence}"
    families = {(row["component"], row["family"]) for row in result["ablations"]}
    assert {("token", "word clusters"), ("char", "dictionaries")} <= families
    assert {row["system"] for row in result["categories"]} == {"token", "char", "merged"}
    assert (tmp_path / "ablation.png").stat().st_size > 10_000
    assert (tmp_path / "clusters" / "brown.txt").is_file()
    return namespace


@pytest.mark.slow
@pytest.mark.skipif(not MEDDOCAN.is_dir(), reason="needs ../shared/corpora/meddocan")
def test_the_ablation_notebook_runs_on_a_small_meddocan_slice(tmp_path, monkeypatch):
    namespace = run_notebook(tmp_path, monkeypatch, MEDDOCAN)
    assert namespace["DATA"] == "MEDDOCAN"
    families = {(row["component"], row["family"]) for row in namespace["result"]["ablations"]}
    assert ("char", "token projection") in families


@pytest.mark.slow
def test_the_ablation_notebook_runs_as_shipped_without_meddocan(tmp_path, monkeypatch):
    namespace = run_notebook(tmp_path, monkeypatch, tmp_path / "no-meddocan-here")
    assert namespace["DATA"] == "generated English notes" and namespace["config"]["pipeline"]["language"] == "en"
