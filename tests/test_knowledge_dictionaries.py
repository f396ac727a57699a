"""Bundled dictionaries: file hygiene, loading as gazetteers, user lists."""

from __future__ import annotations

import pytest

from hybriddeid.core.languages import language_pack
from hybriddeid.knowledge.dictionaries import bundled_kinds, load_gazetteers
from hybriddeid.text.tokenize import tokenize

COMMON = {
    "first_names",
    "last_names",
    "cities",
    "states",
    "countries",
    "hospitals",
    "health_organizations",
    "professions",
}


def words(text: str) -> list[str]:
    return [tok.text.lower() for tok in tokenize(text)]


def tagged(tags: list[str], text: str) -> list[tuple[str, str]]:
    return [(w, t) for w, t in zip(words(text), tags) if t != "O"]


def test_resident_names_are_given_and_linked_names_but_no_crf_feature_of_the_english_recipe():
    import tomllib
    from pathlib import Path

    from hybriddeid.knowledge.dictionaries import bundled_entries, given_names, name_words

    resident = bundled_entries("en", "resident_first_names")
    assert resident and not {n.casefold() for n in resident} & {
        n.casefold() for n in bundled_entries("en", "first_names")
    }
    assert {n.casefold() for n in resident if " " not in n} <= given_names("en")
    assert {n.casefold() for n in bundled_entries("en", "resident_last_names") if " " not in n} <= name_words("en")
    recipe = tomllib.loads((Path(__file__).parents[1] / "resources" / "recipes" / "en-default.toml").read_text())
    assert not {"resident_first_names", "resident_last_names", "*"} & set(recipe["token"]["gazetteers"])


def test_every_language_has_the_kinds_and_files_are_sorted_unique_and_small():
    # towns: world towns beside US places; resident names: names of other origins, for the rules only
    english_only = {"postal_codes", "towns", "resident_first_names", "resident_last_names", "employers"}
    assert COMMON | english_only == set(bundled_kinds("en"))
    assert COMMON == set(bundled_kinds("es"))  # no offline source of Spanish postal codes
    with pytest.raises(ValueError, match=r"unknown language 'xx'; available: .*en"):
        bundled_kinds("xx")
    total = 0
    for language in ("en", "es"):
        folder = language_pack(language).dictionaries
        for kind in bundled_kinds(language):
            data = folder.joinpath(f"{kind}.txt").read_bytes()
            total += len(data)
            lines = data.decode("utf-8").split("\n")
            assert lines[-1] == "" and all(line and line == line.strip() for line in lines[:-1]), kind
            assert lines[:-1] == sorted(set(lines[:-1])), f"{language}/{kind} not sorted or has duplicates"
    assert total < 5_000_000


def test_english_towns_hold_no_ordinary_word_and_only_latin_letters():
    # A foreign town that is an English word ("Date", "Split") would read as a place in every note; one
    # in Greek or Cyrillic letters can never match an English note.
    import unicodedata

    from hybriddeid.knowledge.dictionaries import bundled_entries

    ordinary = {line for line in language_pack("en").read_text("words").splitlines() if line.islower()}
    entries = bundled_entries("en", "towns")
    assert not [entry for entry in entries if entry.lower() in ordinary]
    assert all("LATIN" in unicodedata.name(ch) for entry in entries for ch in entry if ch.isalpha())
    assert {"Medicine Hat", "St. Augustine", "Southend-on-Sea", "Stratford-upon-Avon"} <= set(entries)


def test_spanish_gazetteers_tag_multiword_entries_longest_first():
    gazetteers = load_gazetteers("es")
    text = "Ingresa en el Hospital Universitario La Paz. Vive en Santa Cruz de Tenerife (España)."
    assert tagged(gazetteers["hospitals"].tag(words(text)), text) == [
        ("hospital", "B-hospitals"),
        ("universitario", "I-hospitals"),
        ("la", "I-hospitals"),
        ("paz", "E-hospitals"),
    ]
    assert ("tenerife", "E-cities") in tagged(gazetteers["cities"].tag(words(text)), text)
    assert tagged(gazetteers["countries"].tag(words(text)), text) == [("españa", "S-countries")]
    assert ("abogado", "S-professions") in tagged(gazetteers["professions"].tag(words("Es abogado.")), "Es abogado.")


def test_common_words_were_filtered_but_names_kept():
    gazetteers = load_gazetteers("es", kinds=["first_names", "last_names"])
    assert set(gazetteers) == {"first_names", "last_names"}
    assert gazetteers["first_names"].tag(["paz", "josé", ",", "maría"]) == ["O", "S-first_names", "O", "S-first_names"]
    assert gazetteers["first_names"].tag(["maría", "josé"]) == ["B-first_names", "E-first_names"]  # one compound name
    assert gazetteers["last_names"].tag(["blanco", "garcía"]) == ["O", "S-last_names"]
    english = load_gazetteers("en", kinds=["postal_codes", "states"])
    assert english["postal_codes"].tag(["02114"]) == ["S-postal_codes"]
    assert english["states"].tag(["md", "new", "york"]) == ["O", "B-states", "E-states"]  # no abbreviations


def test_user_lists_extend_a_kind_or_add_one_and_loading_is_cached(tmp_path):
    (tmp_path / "hospitals.txt").write_text("# ours\nClínica Los Olmos\n\n", encoding="utf-8")
    (tmp_path / "wards.txt").write_text("Planta Tercera\n", encoding="utf-8")
    gazetteers = load_gazetteers(
        "es", kinds=["hospitals"], extra_files=[tmp_path / "hospitals.txt", tmp_path / "wards.txt"]
    )
    assert set(gazetteers) == {"hospitals", "wards"}
    assert gazetteers["hospitals"].tag(words("clínica los olmos")) == ["B-hospitals", "I-hospitals", "E-hospitals"]
    assert gazetteers["hospitals"].tag(words("hospital la paz")) == ["B-hospitals", "I-hospitals", "E-hospitals"]
    assert gazetteers["wards"].tag(["planta", "tercera"]) == ["B-wards", "E-wards"]
    again = load_gazetteers(
        "es", kinds=["hospitals"], extra_files=[str(tmp_path / "hospitals.txt"), tmp_path / "wards.txt"]
    )
    assert again["hospitals"] is gazetteers["hospitals"]


def test_unknown_kind_or_language_is_refused():
    with pytest.raises(ValueError, match="postal_codes"):
        load_gazetteers("es", kinds=["postal_codes"])
    with pytest.raises(ValueError, match="language"):
        load_gazetteers("xx")


def test_english_employers_hold_no_ordinary_word_name_or_city_and_professions_hold_the_trades():
    # Employers are matched case-blind: a one-word brand that is an English word ("Progressive", "Plexus") or a
    # name ("Ford") would fire in every note; WordNet's occupations add the trades Faker's office titles lack.
    from hybriddeid.knowledge.dictionaries import bundled_entries

    ordinary = {line for line in language_pack("en").read_text("words").splitlines() if line.islower()}
    people = {e.casefold() for kind in ("first_names", "last_names", "cities") for e in bundled_entries("en", kind)}
    employers = bundled_entries("en", "employers")
    single = [e for e in employers if " " not in e]
    assert len(employers) > 500 and single
    assert not [e for e in single if e.lower() in ordinary or e.casefold() in people]
    professions = {e.lower() for e in bundled_entries("en", "professions")}
    assert {"roofer", "welder", "machinist", "attorney", "flight attendant", "accountant"} <= professions
    assert not {"resident", "stroke", "head", "general", "patient"} & professions
