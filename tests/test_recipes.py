"""Training defaults that fit the data: language detection, recipes, label mapping and its warnings."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from hybriddeid import Pipeline
from hybriddeid.cli import main
from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import detect_language
from hybriddeid.io import read_corpus, write_document
from hybriddeid.pipeline.recipes import recipe_names, recipe_overrides, training_config

MEDDOCAN_DEV = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "meddocan" / "dev" / "brat"
SPANISH = [
    "Paciente de 45 años que acude a urgencias por dolor abdominal de tres días de evolución.",
    "Se realiza una ecografía en la que se observa una masa en el riñón derecho.",
]
ENGLISH = [
    "The patient was seen in clinic with his wife; she reports that the pain has improved.",
    "He was discharged home on aspirin and will follow up with his physician in two weeks.",
]
FAST = "[char]\nmax_iterations = 20\n[token]\nmax_iterations = 20\n"
NAMES = ["Ana Ruiz", "Pedro Gil", "Marta Sanz", "Luis Vega", "Eva Mora", "Juan Ortiz"]


def spanish_notes() -> list[Document]:
    """Invented notes labelled the MEDDOCAN way, with an e-mail the English rules call EMAIL."""
    docs = []
    for i, name in enumerate(NAMES):
        user = name.split()[0].lower()
        text = (
            f"Nombre: {name}.\nCorreo electrónico: {user}@hospital.es.\nFecha de ingreso: 1{i}/03/2019.\n"
            f"Paciente de la consulta con fiebre y tos desde hace tres días.\n"
        )
        spans = []
        for value, label in (
            (name, "NOMBRE_SUJETO_ASISTENCIA"),
            (f"{user}@hospital.es", "CORREO_ELECTRONICO"),
            (f"1{i}/03/2019", "FECHAS"),
        ):
            spans.append(Span(text.index(value), text.index(value) + len(value), label))
        docs.append(Document(f"note{i}", text, tuple(spans)))
    return docs


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    for doc in spanish_notes():
        write_document(doc, tmp_path / "train", "brat")
    (tmp_path / "fast.toml").write_text(FAST, encoding="utf-8")
    return tmp_path


# ---- language detection ------------------------------------------------------------------------


def test_detect_language_picks_the_pack_whose_stop_words_fit() -> None:
    assert detect_language(SPANISH).code == "es"
    assert detect_language(ENGLISH).code == "en"
    guess = detect_language(["12/03/2019 4455667 ####"])  # no words: nothing fits
    assert guess.code is None and guess.words == 0
    assert "es 0.0%" in detect_language(ENGLISH).reason() and "patient" not in detect_language(ENGLISH).reason()


@pytest.mark.skipif(not MEDDOCAN_DEV.is_dir(), reason="MEDDOCAN is not in ../shared")
def test_detect_language_on_meddocan_dev() -> None:
    assert detect_language(doc.text for doc in read_corpus(MEDDOCAN_DEV)).code == "es"


def test_training_config_takes_the_language_from_flag_config_recipe_then_text(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybriddeid")
    assert training_config(SPANISH)["pipeline"]["language"] == "es"
    assert "detected from the training text" in caplog.text and "dolor" not in caplog.text
    assert training_config(SPANISH, language="en")["pipeline"]["language"] == "en"
    config = tmp_path / "c.toml"
    config.write_text('[pipeline]\nlanguage = "en"\n', encoding="utf-8")
    caplog.clear()
    assert training_config(SPANISH, config_path=config)["pipeline"]["language"] == "en"
    assert "looks like language es, but the pipeline is set to en" in caplog.text
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        training_config(SPANISH, language="xx")
    caplog.clear()
    assert training_config(["4455667 12/03/2019"])["pipeline"]["language"] == "en"  # nothing fits: the default
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "language en (the default: no language pack's stop words fit the training text" in record.getMessage()


# ---- recipes -----------------------------------------------------------------------------------


def test_recipes_ship_and_unknown_names_list_them(tmp_path: Path, corpus: Path, caplog) -> None:
    assert {"meddocan", "en-default"} <= set(recipe_names())
    assert recipe_overrides("meddocan")["pipeline"]["language"] == "es"
    with pytest.raises(ValueError, match=r"unknown recipe 'nope'; shipped recipes: en-default, meddocan"):
        recipe_overrides("nope")
    assert (
        main(["-q", "train", "--train", str(corpus / "train"), "--recipe", "nope", "--out", str(tmp_path / "m")]) == 2
    )
    assert "shipped recipes: en-default, meddocan" in caplog.text and not (tmp_path / "m").exists()


def test_config_keys_win_over_the_recipe(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[pipeline]\npropagate = false\n[token]\nmax_iterations = 7\nclusters = ""\n', encoding="utf-8")
    merged = training_config(SPANISH, recipe="en-default", config_path=config)
    assert merged["pipeline"]["propagate"] is False and merged["token"]["max_iterations"] == 7
    assert merged["pipeline"]["language"] == "en" and merged["pipeline"]["safelist"] == "en"  # the recipe's
    assert "cities" in merged["token"]["gazetteers"] and merged["rule"]["map_labels"] == "off"  # the recipe's


def test_train_recipe_builds_clusters_from_the_training_text(corpus: Path, tmp_path: Path, monkeypatch, caplog) -> None:
    pytest.importorskip("gensim")
    cache = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(cache))
    caplog.set_level(logging.INFO, logger="hybriddeid")
    model = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--train",
                str(corpus / "train"),
                "--recipe",
                "meddocan",
                "--config",
                str(corpus / "fast.toml"),
                "--out",
                str(model),
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    (built,) = (cache / "clusters").iterdir()
    assert f"word clusters: building from the text of 6 notes in {corpus / 'train'} into {built}" in caplog.text
    config = (model / "config.toml").read_text(encoding="utf-8")
    assert 'clusters = "char/clusters"' in config and (model / "token" / "clusters").is_dir()
    saved = Pipeline.load(model).config["pipeline"]
    assert saved["precedence"] == ["rule", "token", "char"] and saved["focus"] == {"char": "token"}  # the recipe's
    caplog.clear()
    assert (
        main(
            [
                "train",
                "--train",
                str(corpus / "train"),
                "--recipe",
                "meddocan",
                "--config",
                str(corpus / "fast.toml"),
                "--out",
                str(tmp_path / "again"),
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert f"word clusters: reusing {built}" in caplog.text
    assert not any(doc.text.splitlines()[0] in caplog.text for doc in spanish_notes())  # no note text


# ---- the default training on a Spanish corpus, and the warnings ---------------------------------


def test_default_train_detects_spanish_and_maps_rules(corpus: Path, tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybriddeid")
    model = tmp_path / "model"
    assert (
        main(
            [
                "train",
                "--train",
                str(corpus / "train"),
                "--config",
                str(corpus / "fast.toml"),
                "--out",
                str(model),
                "--jobs",
                "1",
            ]
        )
        == 0
    )
    assert "language es (detected from the training text" in caplog.text
    meta = json.loads((model / "meta.json").read_text(encoding="utf-8"))
    assert meta["fit_reports"]["rule"]["map_labels"] == "auto"
    loaded = Pipeline.load(model)
    assert set(loaded.labels) <= set(meta["labels"])  # nothing the corpus does not have


def test_english_rules_on_a_spanish_corpus_are_mapped_and_the_label_warning(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hybriddeid")
    docs = spanish_notes()
    fast = {"pipeline": {"language": "en"}, "char": {"max_iterations": 20}, "token": {"max_iterations": 20}}
    mapped = Pipeline(fast).fit(docs, n_jobs=1)
    assert mapped.meta["fit_reports"]["rule"]["label_map"]["email"] == "CORREO_ELECTRONICO"
    text = "Correo: rosa@clinica.es."
    assert [(s.label, text[s.start : s.end]) for s in mapped.components["rule"].predict(Document("x", text))] == [
        ("CORREO_ELECTRONICO", "rosa@clinica.es")
    ]
    assert "can predict labels not in" not in caplog.text
    # With the mapping off the English labels stay: warned at training and, once, at loading.
    unmapped = Pipeline({**fast, "rule": {"map_labels": "off"}}).fit(docs, n_jobs=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "component 'rule' can predict labels not in the training corpus: " in w and "EMAIL" in w for w in warnings
    )
    unmapped.to_disk(tmp_path / "m")
    caplog.clear()
    Pipeline.load(tmp_path / "m")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "component 'rule' can predict labels not in" in warning and "'s training corpus: " in warning
    assert "hospital.es" not in caplog.text and "Ana" not in caplog.text


def test_labels_of_the_corpus_taxonomy_are_only_noted_when_a_model_loads(caplog) -> None:
    # The bundled Spanish model's URL and IP rules speak MEDDOCAN labels its corpus never used.
    caplog.set_level(logging.INFO, logger="hybriddeid")
    Pipeline.load("es")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "labels of the meddocan taxonomy that" in caplog.text and "URL_WEB" in caplog.text
