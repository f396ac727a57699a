"""The documentation's claims that cannot drift: its runnable examples run, its generated reference
is current, its figures name what produced them, and CI runs README's set-up commands as written.

A fenced ``bash`` or ``python`` block right after a line ``<!-- runnable -->`` in README.md or a page
of ``docs/`` is run here (docs/reference/docs.md says how): the blocks of one page in order, in one
fresh folder holding a copy of ``examples/``, with this checkout's hybriddeid first on the path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = "<!-- runnable -->"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
BLOCK_TIMEOUT_S = 300


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def runnable_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line, language, code) of each block marked runnable in ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if before.strip() == MARKER:
            blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)))
    return blocks


def test_runnable_blocks_are_bash_or_python():
    """A marked block in another language would be silently skipped: name it."""
    found = [
        (str(path.relative_to(ROOT)), line, language)
        for path in markdown_files()
        for line, language, _ in runnable_blocks(path)
        if language not in ("bash", "python")
    ]
    assert not found, f"runnable blocks neither bash nor python: {found}"


def test_a_marker_always_precedes_a_fence():
    """A marker followed by prose (a typo, a blank line too many) would leave its block unchecked."""
    stray = []
    for path in markdown_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if line.strip() == MARKER and not (number + 1 < len(lines) and lines[number + 1].startswith("```")):
                stray.append(f"{path.relative_to(ROOT)}:{number + 1}")
    assert not stray, f"{MARKER} not directly above a fenced block: {stray}"


PAGES = [path for path in markdown_files() if runnable_blocks(path)]


def _environment(work: Path) -> dict[str, str]:
    env = dict(os.environ)  # the hybriddeid under test: installed, or this checkout's by PYTHONPATH
    env["HYBRIDDEID_CACHE_DIR"] = str(work / ".cache")
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("HYBRIDDEID_LANGUAGE_PATH", None)
    return env


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_runnable_blocks_run(page: Path, tmp_path: Path):
    if shutil.which("hybriddeid") is None and not (Path(sys.executable).parent / "hybriddeid").exists():
        pytest.skip("the hybriddeid command is not installed (pip install .)")
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("*.ipynb", "spark"))
    env = _environment(tmp_path)
    for line, language, code in runnable_blocks(page):
        where = f"{page.relative_to(ROOT)}, block at line {line}"
        if language == "bash":
            command = ["bash", "-c", "set -euo pipefail\n" + code]
        else:
            command = [sys.executable, "-c", code]
        try:
            done = subprocess.run(
                command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{where}: still running after {BLOCK_TIMEOUT_S} s")
        assert done.returncode == 0, (
            f"{where} exited {done.returncode}\n--- block\n{code}\n--- stdout\n"
            f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )


def test_ci_runs_readmes_two_setup_commands_as_written():
    """README's first two bash blocks are what a new user copies; .ci/run must run exactly those."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [code.strip() for language, code in FENCE.findall(readme) if language == "bash"][:2]
    assert len(blocks) == 2 and blocks[0].startswith("pip install . ") and blocks[1].startswith('pip install ".[test]"')
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in blocks:
        assert command in ci, f".ci/run does not run README's command as written: {command}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 150


def test_generated_reference_pages_are_current():
    done = subprocess.run(
        [sys.executable, "tools/docs_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_cli_reference_lists_every_command_and_option():
    """The generator itself: every option of every subcommand shows up on the page."""
    import argparse

    from hybriddeid.cli import build_parser

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from docs_reference import cli_reference
    finally:
        sys.path.remove(str(ROOT / "tools"))

    page = cli_reference()

    def walk(parser: argparse.ArgumentParser, path: list[str]):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"## `{' '.join([*path, name])}`" in page
                    yield from walk(sub, [*path, name])
            elif action.option_strings and action.help != argparse.SUPPRESS and action.dest != "help":
                yield " ".join(path), action.option_strings[-1]

    missing = [(command, option) for command, option in walk(build_parser(), ["hybriddeid"]) if option not in page]
    assert not missing


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+\.png)\)")


def test_every_figure_names_the_command_and_commit_that_made_it():
    """Charts drawn from benchmark data carry its command and commit beside them (the included caption);
    other images (screenshots, diagrams) name the command that made them in the paragraphs around them."""
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in IMAGE.finditer(text):
            image = (page.parent / match.group(1)).resolve()
            if not image.exists():
                problems.append(f"{page.relative_to(ROOT)}: {match.group(1)} does not exist")
                continue
            data = DOCS / "images" / "data" / f"{image.stem.replace('_', '-')}.json"
            around = text[max(0, match.start() - 1500) : match.end() + 600]
            if data.exists():
                recorded = json.loads(data.read_text(encoding="utf-8"))
                snippet = f'--8<-- "docs/images/data/{data.stem}.md"'
                caption = (DOCS / "images" / "data" / f"{data.stem}.md").read_text(encoding="utf-8")
                if snippet not in around or recorded["commit"] not in caption or recorded["command"] not in caption:
                    problems.append(f"{page.relative_to(ROOT)}: {match.group(1)} without its caption {snippet}")
            elif not re.search(r"`(python |hybriddeid |HYBRIDDEID_SCREENSHOTS)", around):
                problems.append(f"{page.relative_to(ROOT)}: {match.group(1)} names no command that made it")
    assert not problems, problems


def test_chart_captions_and_tables_are_what_the_data_gives():
    """The included caption and table files are the drawing script's output for the data kept beside them."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import charts
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for data_file in sorted((DOCS / "images" / "data").glob("*.json")):
        data = json.loads(data_file.read_text(encoding="utf-8"))
        expected = "\n".join([charts.caption(data), "", *charts.TABLES[data["chart"]](data)]) + "\n"
        assert data_file.with_suffix(".md").read_text(encoding="utf-8") == expected, data_file.name


# -- benchmarks/ says what it holds -----------------------------------------------------------------
BENCHMARKS = ROOT / "benchmarks"
LISTED = re.compile(r"^- `([^`]+)`", re.M)  # a list line of a benchmarks README: "- `name`: what it is"
BARE_SCRIPT = re.compile(r"`([\w-]+\.(?:py|sh))`")  # a script named alone, as the READMEs name their own


def folder_entries(folder: Path) -> set[str]:
    """What a newcomer finds in ``folder``: files, and folders with a trailing slash; less its README,
    caches and what .gitignore keeps out of the repository (the word clusters a benchmark builds)."""
    relative = folder.relative_to(ROOT).as_posix()
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()}
    return {
        entry.name + ("/" if entry.is_dir() else "")
        for entry in folder.iterdir()
        if entry.name != "README.md"
        and not entry.name.startswith((".", "__"))
        and f"{relative}/{entry.name}" not in ignored
    }


@pytest.mark.parametrize("folder", [BENCHMARKS, BENCHMARKS / "experiments"], ids=["benchmarks", "experiments"])
def test_each_benchmarks_readme_lists_exactly_what_its_folder_holds(folder: Path):
    """benchmarks/README.md lists every script (and config, data file, folder) at the top of benchmarks/
    one a line, and benchmarks/experiments/README.md every experiment; every name they list, and every
    script they name alone elsewhere in their text (the details), is there: a script added, moved or
    removed without its line fails here."""
    readme = (folder / "README.md").read_text(encoding="utf-8")
    listed = LISTED.findall(readme)
    entries = folder_entries(folder)
    assert len(listed) == len(set(listed)), f"{folder.name}/README.md lists a name twice"
    assert not entries - set(listed), f"in {folder.name}/ but not listed in its README: {sorted(entries - set(listed))}"
    named = set(listed) | set(BARE_SCRIPT.findall(readme))
    assert not named - entries, f"named in {folder.name}/README.md but not in {folder.name}/: {sorted(named - entries)}"


def test_every_benchmark_the_docs_cite_is_where_they_say():
    """A script moved into benchmarks/experiments/ (or removed) takes its citations along: every
    benchmarks/... path that README, ARCHITECTURE.md, a page or a test names exists."""
    cited = re.compile(r"benchmarks/[\w/.-]*\w")
    missing = []
    for path in [*markdown_files(), ROOT / "ARCHITECTURE.md", *sorted((ROOT / "tests").glob("*.py"))]:
        for match in cited.finditer(path.read_text(encoding="utf-8")):
            if not (ROOT / match.group(0)).exists():
                missing.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
    assert not missing, missing


# -- claims checked against what they claim ---------------------------------------------------------
def test_readme_cites_the_paper_itself_not_a_file_a_clone_lacks():
    """README's first paragraph names the method's paper by authors, venue and year; a path into the
    project's shared folder means nothing to someone who cloned the repository."""
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")[1]
    assert "../shared/" not in first
    assert all(part in first for part in ("Liu", "J Biomed Inform", "2015"))
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert "family-names: Liu" in citation and "Biomed" in citation


def test_every_page_gives_the_same_share_of_missed_phi_on_real_notes():
    """'one PHI token in N' on real notes is said in several places: each says the N that the English model
    page's measured cross-validated recall gives (N = 1 / (1 - recall), rounded down)."""
    model_page = (DOCS / "explanation" / "english-model.md").read_text(encoding="utf-8")
    recall = float(re.search(r"cross-validated recall (0\.\d+)", model_page).group(1))
    said = {}
    for path in markdown_files():
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        for match in re.finditer(r"one PHI token in (\w+)", text):
            said.setdefault(match.group(1), []).append(str(path.relative_to(ROOT)))
    assert said and set(said) == {str(int(1 / (1 - recall)))}, said


def test_annotate_writes_what_readme_says_it_writes(tmp_path):
    """README: for a folder the spans go beside each note's text (BRAT copies the note, i2b2 XML and JSONL
    hold it); for a table, alone (a phi_spans column, never the text)."""
    from hybriddeid.cli import main
    from hybriddeid.io.tables import read_table

    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert "BRAT copies the note, i2b2 XML and JSONL hold it" in readme and "never the text" in readme
    text = "Seen by Dr. Quorvendale Zibbinshaw on 03/04/2021.\n"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "n1.txt").write_text(text, encoding="utf-8")
    for fmt in ("brat", "i2b2", "jsonl"):
        out = tmp_path / fmt
        assert main(["-q", "annotate", str(tmp_path / "notes"), str(out), "--format", fmt]) == 0
        written = "".join(
            p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file() and "_hybriddeid" not in p.parts
        )
        assert "Quorvendale Zibbinshaw on 03/04/2021" in written.replace("\\n", "\n"), fmt
    (tmp_path / "notes.csv").write_text(f'note_id,text\nn1,"{text}"\n', encoding="utf-8")
    assert main(["-q", "annotate", str(tmp_path / "notes.csv"), str(tmp_path / "table")]) == 0
    rows = read_table(tmp_path / "table" / "part-00000.csv", "csv")
    assert "text" not in rows[0] and json.loads(rows[0]["phi_spans"])
    assert "Zibbinshaw" not in (tmp_path / "table" / "part-00000.csv").read_text(encoding="utf-8")
