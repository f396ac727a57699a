"""Word clusters and dictionaries as CRF features: memoised strings, case marks, grouping,
and models that carry their own (hashed) copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybriddeid.classifiers.char_crf import CharCRF
from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.features.gazetteer import Gazetteer
from hybriddeid.features.resources import ClusterFeatures, case_marked, grouped_gazetteers
from hybriddeid.knowledge.clusters import WordClusters
from hybriddeid.pipeline.core import Pipeline, load_config
from hybriddeid.text.tokenize import tokenize

CLUSTERS = WordClusters(
    brown={"ana": ("0110", 9), "ruiz": ("011101", 5), "madrid": ("1100", 7)},
    w2v={50: {"ana": 3, "ruiz": 3, "madrid": 8}, 200: {"ana": 17, "ruiz": 21, "madrid": 40}},
)


def test_cluster_features_of_a_word():
    features = ClusterFeatures(CLUSTERS, prefix_lengths=(2, 6))
    assert features.own("Ana") == ("bc2=01", "bc6=0110", "wv50=3", "wv200=17")
    assert features.neighbour("RUIZ") == "011101"
    assert features.projected("Madrid") == ("tbc=1100", "twv=40")
    assert features.own("zzz") == ("bc=none",) and features.neighbour("zzz") == "none"


def test_dictionary_hits_in_lower_case_are_marked():
    text = "vive en león y León"
    tokens = tokenize(text)
    tags = ["O", "O", "S-cities", "O", "S-cities"]
    assert case_marked(tags, tokens) == ["O", "O", "S-cities:lc", "O", "S-cities"]
    two = tokenize("san sebastián")
    assert case_marked(["B-cities", "E-cities"], two) == ["B-cities:lc", "E-cities:lc"]


def test_union_keeps_the_first_label_of_a_shared_phrase():
    first = Gazetteer.from_phrases({"first_names": ["Rosa", "Juan Carlos"]})
    last = Gazetteer.from_phrases({"last_names": ["Rosa", "Gil"]})
    both = Gazetteer.union([first, last])
    assert both.tag(["rosa", "gil", "juan", "carlos"]) == [
        "S-first_names",
        "S-last_names",
        "B-first_names",
        "E-first_names",
    ]


def test_bundled_dictionaries_are_grouped_and_user_lists_added(tmp_path):
    wards = tmp_path / "wards.txt"
    wards.write_text("Planta Azul\n", encoding="utf-8")
    groups = grouped_gazetteers("es", ["first_names", "last_names", "cities"], [str(wards)])
    assert list(groups) == sorted(groups) and {"names", "places", "wards"} <= set(groups)
    assert groups["wards"].tag(["planta", "azul"]) == ["B-wards", "E-wards"]
    assert grouped_gazetteers("es", []) == {}


def _corpus() -> list[Document]:
    docs = []
    for i, (name, city) in enumerate(
        [
            ("Ana Ruiz", "Madrid"),
            ("Luis Gil", "Soria"),
            ("Eva Sanz", "Lugo"),
            ("Juan Mora", "Vigo"),
            ("Rosa Vila", "León"),
            ("Ana Gil", "Madrid"),
        ]
    ):
        text = f"Nombre: {name}.\nCiudad: {city}.\nSecreta: Planta Azul.\n"
        docs.append(
            Document(
                f"d{i}",
                text,
                (
                    Span(8, 8 + len(name), "NOMBRE_SUJETO_ASISTENCIA"),
                    Span(text.index(city), text.index(city) + len(city), "TERRITORIO"),
                ),
            )
        )
    return docs


@pytest.mark.parametrize("cls", [TokenCRF, CharCRF])
def test_a_crf_with_clusters_and_dictionaries_round_trips_without_clear_text(cls, tmp_path):
    clusters_dir = tmp_path / "clusters"
    CLUSTERS.to_disk(clusters_dir)
    secret_list = tmp_path / "secret_wards.txt"
    secret_list.write_text("Planta Azul\n", encoding="utf-8")
    docs = _corpus()
    model = cls(
        language="es",
        max_iterations=30,
        clusters=str(clusters_dir),
        gazetteers=["cities"],
        extra_gazetteers=[str(secret_list)],
    ).fit(docs[:5])
    first_line = next(iter(model.sequences(docs[5]))).features
    flat = {feature for feats in first_line for feature in feats}
    if cls is TokenCRF:
        assert {"bc4=0110", "wv200=17", "gaz_places=O"} <= flat
    else:
        assert {"tbc=0110", "twv=17"} <= flat
    model.to_disk(tmp_path / "m")
    secret_list.unlink()  # the model must not need the user's file (or the clusters) any more
    (clusters_dir / "brown.txt").unlink()
    reloaded = cls.from_disk(tmp_path / "m", model.get_params())
    assert [reloaded.predict(d) for d in docs] == [model.predict(d) for d in docs]
    # the dictionaries are stored as keyed hashes (the CRF's own weights name words, as any CRF's do)
    saved = b"".join(p.read_bytes() for p in (tmp_path / "m" / "gazetteers").rglob("*") if p.is_file())
    assert saved and b"Planta" not in saved and b"planta" not in saved


def test_a_saved_pipeline_names_its_own_cluster_copies_and_still_works_when_moved(tmp_path):
    """The saved config.toml points at the copies inside the model (relative paths), never at the
    folder the clusters were built in, so a moved or bundled model can be loaded and retrained."""
    CLUSTERS.to_disk(tmp_path / "built")
    config = {
        "pipeline": {"language": "es", "components": ["token"], "precedence": ["token"]},
        "token": {"clusters": str(tmp_path / "built"), "max_iterations": 20},
    }
    docs = _corpus()
    pipeline = Pipeline(config).fit(docs[:5], n_jobs=1)
    pipeline.to_disk(tmp_path / "model")
    saved_text = (tmp_path / "model" / "config.toml").read_text(encoding="utf-8")
    assert str(tmp_path) not in saved_text and 'clusters = "token/clusters"' in saved_text
    assert not (tmp_path / "model" / "token" / "params.toml").exists()  # one config: the pipeline's
    (tmp_path / "model").rename(tmp_path / "moved")
    (tmp_path / "built" / "brown.txt").unlink()
    reloaded = Pipeline.load(tmp_path / "moved")
    assert [reloaded.predict(d) for d in docs] == [pipeline.predict(d) for d in docs]
    retrained = Pipeline(load_config(tmp_path / "moved" / "config.toml")).fit(docs[:5], n_jobs=1)
    assert [retrained.predict(d) for d in docs] == [pipeline.predict(d) for d in docs]


def test_config_paths_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "cfg").mkdir()
    config_file = tmp_path / "cfg" / "model.toml"
    config_file.write_text('[token]\nclusters = "clusters"\nextra_gazetteers = ["lists/wards.txt"]\n', encoding="utf-8")
    config = load_config(config_file)
    assert Path(config["token"]["clusters"]) == tmp_path / "cfg" / "clusters"
    assert Path(config["token"]["extra_gazetteers"][0]) == tmp_path / "cfg" / "lists" / "wards.txt"
    assert config["char"]["clusters"] == ""


def test_ensure_clusters_builds_only_missing_folders(tmp_path):
    pytest.importorskip("gensim")
    from hybriddeid.knowledge.build import ensure_clusters

    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(4):
        (notes / f"n{i}.txt").write_text("Paciente de Madrid.\nVive en Soria con su madre.\n" * 3, encoding="utf-8")
    existing = tmp_path / "existing"
    CLUSTERS.to_disk(existing)
    config = {"char": {"clusters": str(tmp_path / "new")}, "token": {"clusters": str(existing)}}
    assert ensure_clusters(config, [notes], "es") == [tmp_path / "new"]
    built = WordClusters.from_disk(tmp_path / "new")
    assert built.brown_prefixes("madrid") and built.w2v_ids("soria")
    assert ensure_clusters(config, [notes], "es") == []


def test_user_names_made_of_initials_and_a_surname_are_marked_and_words_and_names_are_not():
    from hybriddeid.features.token import username_features
    from hybriddeid.knowledge.dictionaries import known_words, surnames

    last, known = surnames("en"), known_words("en")
    assert {"kowalski", "fitzgerald", "hernandez"} <= last
    assert username_features("jkowalski", last, known) == ["user=i+last", "user=i+last|lower"]
    assert username_features("TFITZGERALD", last, known) == ["user=i+last", "user=i+last|upper"]
    assert username_features("hernandezm", last, known)[0] == "user=last+i"
    assert username_features("abhernandez", last, known)[0] == "user=ii+last"
    # a surname itself, a capitalised word, an English word that is a letter and a surname, short words
    for word in ("kowalski", "Jkowalski", "aware", "arose", "levo", "j2smith"):
        assert username_features(word, last, known) == [], word
    assert username_features("jkowalski", frozenset(), known) == []
