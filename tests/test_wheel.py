"""The built wheel carries the bundled resources and loads them without the source tree.

Builds the wheel from a copy of the project (so the working tree gets no build/ or egg-info),
installs it into a fresh venv with only the dependencies the check imports, and runs the check
from a directory outside the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("setup.cfg", "pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in")
PROJECT_DIRS = ("hybriddeid", "resources")
CHECK_DEPENDENCIES = ("regex>=2023.0", "tomli-w>=1.0")  # what hybriddeid.classifiers.rules imports
MODEL_DEPENDENCIES = (
    "python-crfsuite>=0.9.9",
    "Faker>=30.0",
    "tqdm>=4.60",
    "numpy>=1.24",
)  # the rest of install_requires

CHECK = """
import hybriddeid, pathlib, sys
from hybriddeid.classifiers.rules import RuleClassifier, bundled_languages
from hybriddeid.core.document import Document

assert pathlib.Path(sys.prefix) in pathlib.Path(hybriddeid.__file__).parents, hybriddeid.__file__
assert {"en", "es"} <= set(bundled_languages()), bundled_languages()
from hybriddeid.core.languages import available_languages, language_pack
assert available_languages() == ("en", "es"), available_languages()
assert language_pack("es").taxonomy == "meddocan" and language_pack("es").has("synth") and language_pack("es").has("safelist")
text = "NHC: 4455667.\\nEdad: 73 años Sexo: M.\\n"
es = {(text[s.start:s.end], s.label) for s in RuleClassifier("es").predict(Document("es", text))}
assert ("4455667", "ID_SUJETO_ASISTENCIA") in es and ("73 años", "EDAD_SUJETO_ASISTENCIA") in es, es
text = "Call (617) 555-0142."
en = [(text[s.start:s.end], s.label) for s in RuleClassifier("en").predict(Document("en", text))]
assert en == [("(617) 555-0142", "PHONE")], en
import importlib, warnings
from hybriddeid._moved import MOVED
old, new = next(item for item in MOVED.items() if item[1] == "hybriddeid.core.languages")  # a path from before the folders
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert importlib.import_module(old) is importlib.import_module(new) and caught[0].category is DeprecationWarning
from hybriddeid.knowledge.dictionaries import load_gazetteers
assert load_gazetteers("es", kinds=["countries"])["countries"].tag(["españa"]) == ["S-countries"]
print("wheel ok")
"""

MODEL_CHECK = """
import pathlib, sys
import hybriddeid
from hybriddeid import Pipeline
from hybriddeid.synth import check_offsets, generate_corpus

assert pathlib.Path(sys.prefix) in pathlib.Path(hybriddeid.__file__).parents, hybriddeid.__file__
pipeline = Pipeline.load()
assert pipeline.language == "en" and Pipeline.load("es").language == "es"
from hybriddeid.pipeline.recipes import recipe_names, recipe_overrides
assert recipe_names() == ("en-default", "meddocan") and recipe_overrides("meddocan")["pipeline"]["language"] == "es"
text = "Mr. Hugo Baptiste (MRN 4417920) was seen on 03/14/2024; Foley removed. Call (617) 555-0142."
found = {(text[s.start:s.end], s.label) for s in pipeline.predict(text)}
assert {("4417920", "MEDICALRECORD"), ("03/14/2024", "DATE"), ("(617) 555-0142", "PHONE")} <= found, found
assert not any(surface == "Foley" for surface, _ in found), found
tagged = pipeline.deidentify(text).text
assert "4417920" not in tagged and "[**DATE**]" in tagged, tagged
doc = next(generate_corpus(1, seed=1))
assert doc.spans and check_offsets(doc) == []
print("model ok")
"""


def run(*args: str | Path, cwd: Path) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_wheel_ships_and_loads_the_rule_packs_and_the_default_model(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in PROJECT_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    for name in PROJECT_DIRS:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", wheels, source, cwd=tmp_path)
    (wheel,) = wheels.glob("hybriddeid-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for language in ("en", "es"):
        pack = f"hybriddeid/resources/languages/{language}"
        assert {
            f"{pack}/{name}"
            for name in ("pack.toml", "sections.txt", "surrogates.toml", "numbers.toml", "stopwords.txt")
        } <= names
        assert {
            f"hybriddeid/resources/regex/{language}.toml",
            f"hybriddeid/resources/dictionaries/{language}/cities.txt",
            f"hybriddeid/resources/dictionaries/{language}/README.md",
        } <= names
        assert f"hybriddeid/models/{language}/config.toml" in names
    assert {
        "hybriddeid/resources/languages/en/safelist.txt",
        "hybriddeid/resources/languages/es/safelist.txt",
        "hybriddeid/resources/languages/en/words.txt",
        "hybriddeid/resources/languages/es/words.txt",
        "hybriddeid/resources/languages/en/synth.toml",
        "hybriddeid/resources/languages/es/synth.toml",
        "hybriddeid/resources/languages/README.md",
        "hybriddeid/resources/surrogates/kinds.toml",
        "hybriddeid/resources/recipes/meddocan.toml",
        "hybriddeid/resources/recipes/en-default.toml",
        "hybriddeid/review/assets/index.html",
        "hybriddeid/review/assets/app.js",
    } <= names
    assert wheel.stat().st_size < 20e6, f"the wheel is {wheel.stat().st_size / 1e6:.1f} MB"

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    run(python, "-m", "pip", "install", "-q", "--no-deps", wheel, cwd=tmp_path)
    run(python, "-m", "pip", "install", "-q", *CHECK_DEPENDENCIES, cwd=tmp_path)
    assert run(python, "-c", CHECK, cwd=tmp_path).strip() == "wheel ok"
    # The bundled English model, with the rest of the dependencies, from outside the source tree.
    run(python, "-m", "pip", "install", "-q", *MODEL_DEPENDENCIES, cwd=tmp_path)
    assert run(python, "-c", MODEL_CHECK, cwd=tmp_path).strip() == "model ok"
