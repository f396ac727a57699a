"""Word clusters: k-means, word2vec ids, the WordClusters loader and the ``resources clusters`` command."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from hybriddeid.cli import main
from hybriddeid.knowledge.clusters import WordClusters, normalize_word, read_brown, write_brown

FIXTURES = Path(__file__).parent / "fixtures" / "io"


def test_normalize_word_lowercases_and_zeroes_digits():
    assert [normalize_word(w) for w in ("Madrid", "MADRID", "28016", "B12c", "-")] == [
        "madrid",
        "madrid",
        "00000",
        "b00c",
        "-",
    ]


def test_lookups_prefixes_and_round_trip(tmp_path):
    clusters = WordClusters(
        brown={"madrid": ("0010110", 7), "ana": ("111", 3), "0000": ("0101", 9)},
        w2v={200: {"madrid": 17, "ana": 4}, 50: {"madrid": 3}},
        meta={"language": "es"},
    )
    assert clusters.brown_prefixes("MADRID", lengths=(2, 4, 20)) == ("00", "0010", "0010110")
    assert clusters.brown_prefixes("2016") == ("0101",) * 4  # digits normalised, short path whole
    assert clusters.brown_prefixes("nadie") == ()
    assert clusters.w2v_ids("Madrid") == ((50, 3), (200, 17))
    assert clusters.w2v_ids("Ana") == ((200, 4),)
    assert clusters.w2v_ids("nadie") == ()
    assert clusters.w2v_ks == (50, 200)

    clusters.to_disk(tmp_path / "c")
    assert (tmp_path / "c" / "brown.txt").read_text(encoding="utf-8").splitlines()[0] == "0010110\tmadrid\t7"
    loaded = WordClusters.from_disk(tmp_path / "c")
    assert loaded.brown == clusters.brown and loaded.w2v == clusters.w2v
    assert loaded.meta["language"] == "es"


def test_folders_of_the_same_files_load_as_one_object_and_a_changed_folder_anew(tmp_path):
    WordClusters(brown={"lugo": ("01", 2)}, w2v={50: {"lugo": 1}}).to_disk(tmp_path / "token")
    WordClusters(brown={"lugo": ("01", 2)}, w2v={50: {"lugo": 1}}).to_disk(tmp_path / "char")
    first = WordClusters.from_disk(tmp_path / "token")
    assert WordClusters.from_disk(tmp_path / "char") is first  # a model's two CRFs share one copy
    write_brown(tmp_path / "char" / "brown.txt", [("10", "lugo", 2)])
    again = WordClusters.from_disk(tmp_path / "char")
    assert again is not first and again.brown_path("lugo") == "10" and first.brown_path("lugo") == "01"


def test_reads_wcluster_paths_files_with_raw_words(tmp_path):
    (tmp_path / "paths").write_text("0\tThe\t6\n0\tthe\t60\n10\tchased\t3\n11\t1999\t2\n", encoding="utf-8")
    clusters = WordClusters.from_disk(tmp_path)
    assert clusters.brown_path("THE") == "0" and clusters.brown["the"] == ("0", 60)
    assert clusters.brown_path("2024") == "11"
    (tmp_path / "paths").write_text("0 the 6\n", encoding="utf-8")
    with pytest.raises(ValueError, match="paths:1"):
        WordClusters.from_disk(tmp_path)


def test_refuses_clusters_normalised_differently_and_empty_folders(tmp_path):
    write_brown(tmp_path / "brown.txt", [("0", "a", 1)])
    assert read_brown(tmp_path / "brown.txt") == {"a": ("0", 1)}
    (tmp_path / "meta.json").write_text(json.dumps({"normalization": "none"}), encoding="utf-8")
    with pytest.raises(ValueError, match="normalised"):
        WordClusters.from_disk(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no brown.txt"):
        WordClusters.from_disk(tmp_path / "empty")


def test_kmeans_finds_separated_groups_deterministically():
    np = pytest.importorskip("numpy")
    from hybriddeid.knowledge.word2vec import kmeans

    rng = np.random.default_rng(0)
    centres = np.eye(4, dtype=np.float32) * 10
    points = np.concatenate([c + rng.normal(scale=0.1, size=(30, 4)).astype(np.float32) for c in centres])
    labels = kmeans(points, 4, seed=3)
    assert [len(set(labels[i * 30 : (i + 1) * 30].tolist())) for i in range(4)] == [1, 1, 1, 1]
    assert len(set(labels.tolist())) == 4
    assert labels[0] == 0  # ids numbered by first appearance
    assert np.array_equal(kmeans(points, 4, seed=3), labels)
    assert len(set(kmeans(points[:3], 10).tolist())) == 3  # k capped at the distinct points


def tiny_notes() -> list[str]:
    rng = random.Random(0)
    names, cities = ["Ana", "Luis", "Marta", "Pedro"], ["Madrid", "Sevilla", "Bilbao", "Lugo"]
    return [
        "\n".join(
            f"Paciente {rng.choice(names)} vive en {rng.choice(cities)} desde {rng.randint(1990, 2020)}."
            for _ in range(20)
        )
        for _ in range(10)
    ]


def test_word2vec_clusters_are_seeded_and_cover_the_vocabulary():
    pytest.importorskip("gensim")
    from hybriddeid.knowledge.build import note_sequences
    from hybriddeid.knowledge.word2vec import word2vec_clusters

    sequences = note_sequences(tiny_notes())
    first = word2vec_clusters(sequences, ks=(2, 5), min_count=2, seed=7, epochs=2)
    assert first == word2vec_clusters(sequences, ks=(2, 5), min_count=2, seed=7, epochs=2)
    vocabulary = {w for seq in sequences for w in seq}
    assert set(first) == {2, 5}
    assert set(first[5]) == vocabulary  # every word occurs at least twice here
    assert set(first[2].values()) == {0, 1} and set(first[5].values()) == set(range(5))


def test_resources_clusters_command_writes_a_loadable_folder(tmp_path):
    pytest.importorskip("gensim")
    notes = tmp_path / "notes"
    notes.mkdir()
    for i, text in enumerate(tiny_notes()):
        (notes / f"nota-{i}.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "clusters"
    code = main(
        [
            "-q",
            "resources",
            "clusters",
            "--text",
            str(notes),
            str(FIXTURES / "brat"),
            "--out",
            str(out),
            "--language",
            "es",
            "--min-count",
            "2",
            "--brown-clusters",
            "6",
            "--w2v-k",
            "2,4",
        ]
    )
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["brown.txt", "meta.json", "word2vec-k2.txt", "word2vec-k4.txt"]
    clusters = WordClusters.from_disk(out)
    assert clusters.meta["corpus"]["documents"] == 11 and clusters.meta["language"] == "es"
    assert clusters.meta["brown"]["leaves"] == 6
    assert len(clusters.brown_prefixes("Madrid")) == 4 and clusters.w2v_ks == (2, 4)
    assert clusters.brown_path("1999") == clusters.brown_path("2016")  # both "0000"


def test_resources_clusters_command_fails_cleanly(tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["-q", "resources", "clusters", "--text", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert (
        main(
            [
                "-q",
                "resources",
                "clusters",
                "--text",
                str(FIXTURES / "text"),
                "--out",
                str(tmp_path / "o"),
                "--w2v-k",
                "a,b",
            ]
        )
        == 2
    )
    assert not (tmp_path / "o").exists()
