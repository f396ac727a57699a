"""The house: one analysed note per note, one component registry, one saved config, old models load."""

from __future__ import annotations

import json
import random
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.core.document import Document, Span
from hybriddeid.core.registry import ComponentSpec, component_names, register, unregister
from hybriddeid.features import analysis
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.pipeline.core import ConfigError, build_config
from hybriddeid.text.tokenize import tokenize

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NAMES = ["Ana Ruiz", "Luis Gil", "Eva Sanz", "Juan Mora", "Rosa Vila", "Pablo Ortiz", "Marta Soler", "Iker Lasa"]


def toy_corpus() -> list[Document]:
    docs = []
    for i, name in enumerate(NAMES):
        text = f"Nombre: {name}.\nNHC: 40{i}1234. Clave SECRET{i}7.\nFecha de ingreso: 1{i}/03/2019.\n"
        spans = [Span(text.index(name), text.index(name) + len(name), "NOMBRE_SUJETO_ASISTENCIA")]
        secret = text.index("SECRET")
        spans.append(Span(secret, secret + 8, "ID_SUJETO_ASISTENCIA"))
        date = text.index(f"1{i}/03")
        spans.append(Span(date, date + 10, "FECHAS"))
        docs.append(Document(f"d{i}", text, tuple(sorted(spans, key=lambda s: s.start))))
    return docs


# ---- the analysed note ----------------------------------------------------------------------------


def test_tokens_in_a_range_are_what_tokenizing_the_range_gives():
    rng = random.Random(7)
    alphabet = "ab Ñé12 .:-\n_²\u0301"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        note = AnalysedNote(Document("n", text), "es")
        start = rng.randint(0, len(text))
        end = rng.randint(start, len(text))
        assert note.tokens_in(start, end) == tokenize(text, start, end), (text, start, end)
        offset = rng.randint(0, max(len(text) - 1, 0))
        by_scan = next((line.context for line in note.lines if line.context.start <= offset < line.context.end), None)
        assert note.line_at(offset) == by_scan


def test_a_pipeline_analyses_each_note_once_and_classifiers_never_retokenize(monkeypatch):
    pipeline = Pipeline(
        {"pipeline": {"language": "es"}, "char": {"max_iterations": 10}, "token": {"max_iterations": 10}}
    ).fit(toy_corpus(), n_jobs=1)
    built, tokenized = [], []
    real_init, real_tokenize = AnalysedNote.__init__, analysis.tokenize

    def counting_init(self, doc, language):
        built.append(doc.name)
        real_init(self, doc, language)

    def counting_tokenize(*args, **kwargs):
        tokenized.append(1)
        return real_tokenize(*args, **kwargs)

    monkeypatch.setattr(AnalysedNote, "__init__", counting_init)
    monkeypatch.setattr(analysis, "tokenize", counting_tokenize)
    doc = Document("note", "Nombre: Carmen Pardo.\nClave SECRET97.\nFecha de ingreso: 12/05/2020.\n")
    pipeline.predict(doc)
    pipeline.predict(doc, threshold=0.5)
    assert built == ["note", "note"]  # one analysis per call, shared by the three components
    assert len(tokenized) == 2 * 3  # each call tokenizes the note's three lines once, and only there


def test_features_has_no_cache_keyed_on_note_text():
    from hybriddeid.features import context, pos

    for module in (context, pos):
        for name, value in vars(module).items():
            if hasattr(value, "cache_info") and name not in (
                "section_headers",
                "field_labels",
                "_labels_of",
                "load_tag_source",
            ):  # keyed on a language
                pytest.fail(f"{module.__name__}.{name} is cached: the analysed note is the cache")


# ---- the registry ---------------------------------------------------------------------------------

TOY_MODULE = '''
"""A toy classifier written outside the library: "SECRET" plus digits is an ID."""
import json
import re
from pathlib import Path

from hybriddeid.features.analysis import AnalysedNote
from hybriddeid.core.document import Span


class SecretFinder:
    source = "secret"
    unit = "span"

    def __init__(self, language="en", label="ID", prefix="SECRET"):
        self.language, self.label, self.prefix = language, label, prefix

    def fit(self, docs):
        self.seen_ = sum(1 for doc in docs for span in doc.spans if doc.span_text(span).startswith(self.prefix))
        return self

    def predict(self, note, regions=None):
        text = note.text if isinstance(note, AnalysedNote) else note.text
        return [Span(m.start(), m.end(), self.label, self.source) for m in re.finditer(self.prefix + r"\\d+", text)]

    @property
    def labels(self):
        return (self.label,)

    def to_disk(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "state.json").write_text(json.dumps({"seen": self.seen_}))

    @classmethod
    def from_disk(cls, path, params):
        finder = cls(**params)
        finder.seen_ = json.loads((Path(path) / "state.json").read_text())["seen"]
        return finder
'''


@pytest.fixture
def toy_component(tmp_path, monkeypatch):
    (tmp_path / "toy_secret.py").write_text(textwrap.dedent(TOY_MODULE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    register(
        "secret",
        ComponentSpec("toy_secret:SecretFinder", defaults={"label": "ID_SUJETO_ASISTENCIA", "prefix": "SECRET"}),
    )
    yield "secret"
    unregister("secret")
    sys.modules.pop("toy_secret", None)


def test_a_classifier_added_through_the_registry_trains_predicts_saves_and_loads(toy_component, tmp_path):
    assert toy_component in component_names()
    config = {
        "pipeline": {
            "language": "es",
            "components": ["rule", "token", "secret"],
            "precedence": ["secret", "rule", "token"],
        },
        "token": {"max_iterations": 10},
        "secret": {"prefix": "SECRET"},
    }
    pipeline = Pipeline(config).fit(toy_corpus(), n_jobs=1)
    assert pipeline.components["secret"].seen_ == len(NAMES)
    doc = Document("n", "Clave SECRET42 del paciente.\n")
    found = [s for s in pipeline.predict(doc) if s.source == "secret"]
    assert [(doc.span_text(s), s.label) for s in found] == [("SECRET42", "ID_SUJETO_ASISTENCIA")]
    pipeline.to_disk(tmp_path / "model")
    saved = (tmp_path / "model" / "config.toml").read_text(encoding="utf-8")
    assert "[secret]" in saved
    assert Pipeline.load(tmp_path / "model").predict(doc) == pipeline.predict(doc)


def test_capabilities_come_from_the_spec(toy_component):
    with pytest.raises(ConfigError, match="can be focused"):
        build_config(
            {
                "pipeline": {
                    "components": ["secret", "token"],
                    "precedence": ["secret", "token"],
                    "focus": {"secret": "token"},
                }
            }
        )
    with pytest.raises(ConfigError, match="unknown section"):
        build_config({"no_such": {}})
    with pytest.raises(ValueError, match="already registered"):
        register("token", ComponentSpec("x:Y"))


# ---- one saved config -----------------------------------------------------------------------------


def test_a_saved_model_is_one_config_and_native_files_and_the_config_is_what_loads(tmp_path):
    pipeline = Pipeline(
        {"pipeline": {"language": "es"}, "char": {"max_iterations": 10}, "token": {"max_iterations": 10}}
    ).fit(toy_corpus(), n_jobs=1)
    pipeline.to_disk(tmp_path / "model")
    assert (tmp_path / "model" / "char" / "typer" / "typer.crfsuite").is_file()  # the span typer is saved ...
    assert not list((tmp_path / "model").rglob("params.toml"))  # ... with its settings in config.toml
    config = tmp_path / "model" / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert "window = 2" in text and "typer_context = 3" in text
    config.write_text(text.replace("window = 2", "window = 1"), encoding="utf-8")
    assert Pipeline.load(tmp_path / "model").components["token"].window == 1  # editing the config has an effect


def test_the_span_typer_is_trained_and_loaded_with_the_char_sections_typer_settings(tmp_path):
    pipeline = Pipeline(
        {
            "pipeline": {"language": "es", "components": ["char"], "precedence": ["char"]},
            "char": {"max_iterations": 10, "typer_context": 1, "typer_max_iterations": 20},
        }
    ).fit(toy_corpus(), n_jobs=1)
    typer = pipeline.components["char"].typer_
    assert (typer.context, typer.max_iterations, typer.c2) == (1, 20, 0.1)
    pipeline.to_disk(tmp_path / "model")
    config = tmp_path / "model" / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("typer_context = 1", "typer_context = 2"), encoding="utf-8"
    )
    assert Pipeline.load(tmp_path / "model").components["char"].typer_.context == 2  # the config is what loads


def test_a_model_saved_with_the_typers_own_params_toml_still_loads_with_those_settings(tmp_path):
    """Models saved before one config (bundled ones included) kept the span typer's settings in
    char/typer/params.toml and none in config.toml: such a folder loads with that file's settings."""
    docs = toy_corpus()
    pipeline = Pipeline(
        {
            "pipeline": {"language": "es"},
            "char": {"max_iterations": 10, "typer_context": 1},
            "token": {"max_iterations": 10},
        }
    ).fit(docs, n_jobs=1)
    pipeline.to_disk(tmp_path / "new")
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    config = tmp_path / "old" / "config.toml"
    lines = config.read_text(encoding="utf-8").splitlines(keepends=True)
    config.write_text("".join(line for line in lines if not line.startswith("typer_")), encoding="utf-8")
    (tmp_path / "old" / "char" / "typer" / "params.toml").write_text(
        'language = "es"\ncontext = 1\nc2 = 0.1\nmax_iterations = 150\nlexicon = true\n', encoding="utf-8"
    )
    old = Pipeline.load(tmp_path / "old")
    assert old.components["char"].typer_.context == 1  # not the default 3 the config now implies
    assert old.components["char"].get_params()["typer_context"] == 1
    assert old.config["char"]["typer_context"] == 1  # what the model's config says now ...
    old.to_disk(tmp_path / "resaved")  # ... and what saving it again writes, in config.toml alone
    assert not list((tmp_path / "resaved").rglob("params.toml"))
    assert "typer_context = 1" in (tmp_path / "resaved" / "config.toml").read_text(encoding="utf-8")
    new, resaved = Pipeline.load(tmp_path / "new"), Pipeline.load(tmp_path / "resaved")
    assert resaved.components["char"].typer_.context == 1
    assert (
        [old.predict(doc) for doc in docs]
        == [new.predict(doc) for doc in docs]
        == [resaved.predict(doc) for doc in docs]
        == [pipeline.predict(doc) for doc in docs]
    )


def test_a_model_saved_by_hybriddeid_0_1_still_loads_and_gives_the_same_spans(tmp_path):
    """tests/fixtures/model_v0_1 was trained and saved by the code before this architecture
    (params.toml beside each CRF, rules.toml format 1); its spans were recorded by that code."""
    shutil.copytree(FIXTURES / "model_v0_1", tmp_path / "old")
    expected = json.loads((FIXTURES / "model_v0_1_spans.json").read_text(encoding="utf-8"))
    pipeline = Pipeline.load(tmp_path / "old")
    for name, text in expected["notes"].items():
        got = [[s.start, s.end, s.label, s.source, round(s.score, 9)] for s in pipeline.predict(text)]
        assert got == expected["spans"][name]


def test_each_classifier_accepts_a_note_or_a_document():
    pipeline = Pipeline(
        {"pipeline": {"language": "es"}, "char": {"max_iterations": 10}, "token": {"max_iterations": 10}}
    ).fit(toy_corpus(), n_jobs=1)
    doc = toy_corpus()[0]
    note = analyse(doc, "es")
    for component in pipeline.components.values():
        assert component.predict(note) == component.predict(doc)
