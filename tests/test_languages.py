"""Language packs (hybriddeid.core.languages): discovery, extra folders, overrides, and a toy language
used end to end by the rules, the CRF features, the dictionaries, surrogates and a trained pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hybriddeid.classifiers.rules import RuleClassifier, bundled_languages
from hybriddeid.classifiers.safelist import load_safelist
from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import (
    ENV_VAR,
    MissingResourceError,
    add_language_folder,
    available_languages,
    clear_caches,
    language_pack,
    remove_language_folder,
)
from hybriddeid.core.profiles import hipaa_age_rule
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.features.context import section_headers
from hybriddeid.knowledge.dictionaries import bundled_kinds, load_gazetteers
from hybriddeid.pipeline.core import ConfigError, Pipeline, build_config
from hybriddeid.surrogates import DeidOptions, deidentify_document
from hybriddeid.synth import load_synth_resources

ROOT = Path(__file__).resolve().parents[1]
KEY = b"k" * 32
TOY_RULES = """taxonomy = "i2b2-2014"
language = "xx"

[[rule]]
name = "toy_record"
label = "MEDICALRECORD"
pattern = \'\'\'\\bZQ-\\d{4}\\b\'\'\'
examples = ["ZQ-1234"]
counter_examples = ["ZQ-12345"]
"""


def write_pack(folder: Path, code: str = "xx", **files: str) -> Path:
    """A pack folder ``folder/code`` with ``files`` (name -> text; "/" makes subfolders)."""
    pack = folder / code
    for name, text in {"pack.toml": 'name = "Toy"\ntaxonomy = "i2b2-2014"\n', **files}.items():
        (pack / name).parent.mkdir(parents=True, exist_ok=True)
        (pack / name).write_text(text, encoding="utf-8")
    return pack


@pytest.fixture
def extra_folder(tmp_path):
    """An empty folder searched for packs for the duration of one test."""
    folder = tmp_path / "packs"
    folder.mkdir()
    add_language_folder(folder)
    yield folder
    remove_language_folder(folder)


@pytest.fixture
def toy(extra_folder):
    """The toy language "xx": sections, one rule, surrogates (the English file with its own tag
    format, so that output shows which file was read), a dictionary and number words."""
    surrogates = language_pack("en").read_text("surrogates").replace('format = "[**{label}**]"', 'format = "<{label}>"')
    assert "<{label}>" in surrogates
    write_pack(
        extra_folder,
        **{
            "regex.toml": TOY_RULES,
            "sections.txt": "# toy headers\nzqhistory\nzqplan\n",
            "surrogates.toml": surrogates,
            "dictionaries/cities.txt": "Zorblax\nQuux City\n",
            "numbers.toml": "[values]\nzqnine = 9\n",
        },
    )
    clear_caches()
    return "xx"


TOY_TEXTS = [
    "ZQHISTORY: seen in Zorblax.\nRecord ZQ-{n:04d} reviewed by staff.\n",
    "ZQPLAN: follow up.\nChart ZQ-{n:04d} on file, from Quux City.\n",
]


def toy_documents(count: int) -> list[Document]:
    docs = []
    for n in range(count):
        text = TOY_TEXTS[n % 2].format(n=1000 + n)
        start = text.index("ZQ-")
        city = "Zorblax" if "Zorblax" in text else "Quux City"
        city_start = text.index(city)
        spans = sorted([Span(start, start + 7, "MEDICALRECORD"), Span(city_start, city_start + len(city), "CITY")])
        docs.append(Document(f"toy{n}", text, tuple(spans)))
    return docs


# -- discovery --------------------------------------------------------------------------------------
def test_bundled_packs_are_found_with_their_metadata():
    assert available_languages() == ("en", "es")
    assert (language_pack("en").name, language_pack("en").taxonomy) == ("English", "i2b2-2014")
    assert (language_pack("es").name, language_pack("es").taxonomy) == ("Spanish", "meddocan")


@pytest.mark.parametrize("code", ["en", "es"])
def test_a_bundled_pack_names_the_taxonomy_its_rule_file_uses(code):
    pack = language_pack(code)
    header = tomllib.loads(pack.read_text("regex"))["taxonomy"]
    assert load_taxonomy(header).name == load_taxonomy(pack.taxonomy).name


@pytest.mark.parametrize("model", ["en", "es"])
def test_the_bundled_models_rule_digest_still_matches_the_moved_rule_files(model):
    saved = tomllib.loads((ROOT / "hybriddeid" / "models" / model / "rule" / "rules.toml").read_text("utf-8"))
    assert saved["bundled_sha256"] == RuleClassifier(model)._bundled_digest()  # bundled model names are their languages


def test_unknown_language_is_refused_with_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown language 'zz'; available: en, es$"):
        language_pack("zz")
    with pytest.raises(ValueError, match="available: en, es"):
        section_headers("zz")
    with pytest.raises(ValueError, match="en, es"):
        DeidOptions(language="zz")


def test_a_missing_optional_resource_is_named_when_needed_not_at_discovery(extra_folder):
    write_pack(extra_folder, "zz")
    clear_caches()
    assert not language_pack("zz").has("synth") and not language_pack("zz").has("safelist")
    with pytest.raises(MissingResourceError, match=r"language 'zz' .* no synth\.toml"):
        load_synth_resources("zz")
    with pytest.raises(MissingResourceError, match=r"language 'zz' .* no safelist\.txt"):
        load_safelist("zz")
    with pytest.raises(ConfigError, match=r"safelist: language 'zz' .* no safelist\.txt"):
        build_config({"pipeline": {"language": "zz", "safelist": "zz"}})


def test_a_folder_holding_no_pack_file_is_not_a_pack(extra_folder):
    (extra_folder / "yy").mkdir()
    (extra_folder / "yy" / "sections.txt").write_text("a\n", encoding="utf-8")
    write_pack(extra_folder, "zz")
    clear_caches()
    assert available_languages() == ("en", "es", "zz")


def test_a_broken_pack_file_fails_when_that_pack_is_used_naming_the_file(extra_folder):
    write_pack(extra_folder, "yy", **{"pack.toml": 'name = "Y"\ntaxonomy = "no-such-taxonomy"\n'})
    write_pack(extra_folder, "zz", **{"pack.toml": 'name = "Z"\ntaxonmy = "meddocan"\n'})
    clear_caches()
    assert "yy" in available_languages()  # listing does not read pack files
    with pytest.raises(ValueError, match=r"yy.pack\.toml: unknown taxonomy 'no-such-taxonomy'"):
        language_pack("yy")
    with pytest.raises(ValueError, match=r"zz.pack\.toml: unknown keys \['taxonmy'\]"):
        language_pack("zz")
    assert language_pack("en").name == "English"


def test_add_language_folder_refuses_what_is_not_a_folder(tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        add_language_folder(tmp_path / "missing")


def test_remove_language_folder_forgets_its_packs(tmp_path):
    write_pack(tmp_path, "qq", **{"sections.txt": "qqheader\n"})
    add_language_folder(tmp_path)
    try:
        assert "qq" in available_languages() and section_headers("qq") == {"qqheader"}
    finally:
        remove_language_folder(tmp_path)
    assert "qq" not in available_languages()
    with pytest.raises(ValueError, match="unknown language 'qq'"):
        section_headers("qq")  # the downstream cache was cleared too


# -- the toy language, end to end ---------------------------------------------------------------------
def test_the_toy_pack_is_listed_everywhere(toy):
    assert available_languages() == ("en", "es", "xx")
    assert "xx" in bundled_languages()
    assert not language_pack("xx").bundled
    from hybriddeid.cli import build_parser

    args = build_parser().parse_args(["synth", "--n", "1", "--out", "o", "--language", "xx"])
    assert args.language == "xx"


def test_the_toy_rules_sections_and_dictionaries_load(toy):
    text = "Record ZQ-1234; not ZQ-12345."
    spans = RuleClassifier("xx").predict(Document("d", text))
    assert [(text[s.start : s.end], s.label) for s in spans] == [("ZQ-1234", "MEDICALRECORD")]
    assert section_headers("xx") == {"zqhistory", "zqplan"}
    assert bundled_kinds("xx") == ("cities",)
    assert load_gazetteers("xx")["cities"].tag(["quux", "city", "zorblax"]) == ["B-cities", "E-cities", "S-cities"]
    assert hipaa_age_rule().stated_age("zqnine") == 9  # every pack's number words are read
    with pytest.raises(MissingResourceError, match=r"language 'xx' .* no synth\.toml"):
        load_synth_resources("xx")


def test_the_toy_surrogate_resources_are_used(toy):
    (doc,) = toy_documents(1)
    tagged = deidentify_document(doc, DeidOptions(mode="tag", language="xx"))
    assert tagged.text == "ZQHISTORY: seen in <LOCATION>.\nRecord <ID> reviewed by staff.\n"
    replaced = deidentify_document(doc, DeidOptions(mode="surrogate", language="xx", key=KEY))
    assert "ZQ-1000" not in replaced.text and "Zorblax" not in replaced.text
    assert replaced.text.startswith("ZQHISTORY: seen in ")


def test_a_pipeline_trains_and_predicts_in_the_toy_language(toy):
    docs = toy_documents(12)
    pipeline = Pipeline({"pipeline": {"language": "xx"}}).fit(docs, n_jobs=1)
    assert pipeline.language == "xx"
    text = "ZQPLAN: follow up.\nChart ZQ-2222 on file, from Zorblax.\n"
    found = {(text[s.start : s.end], s.label) for s in pipeline.predict(text)}
    assert ("ZQ-2222", "MEDICALRECORD") in found
    result = pipeline.deidentify(text, mode="surrogate", key=KEY)
    assert "ZQ-2222" not in result.text


def test_rules_and_dictionaries_are_read_beside_the_folder_of_packs_where_the_pack_has_none(tmp_path):
    """The bundled layout (resources/regex/<code>.toml, resources/dictionaries/<code>/) for any pack;
    a pack's own regex.toml and dictionaries/ win."""
    assert language_pack("es").origin("regex") == "regex/es.toml"
    assert language_pack("en").origin("dictionaries") == "dictionaries/en"
    assert language_pack("en").origin("sections") == "languages/en/sections.txt"
    assert (ROOT / "resources" / "regex" / "es.toml").read_text("utf-8") == language_pack("es").read_text("regex")
    packs = tmp_path / "resources" / "languages"
    write_pack(packs, "xx", **{"sections.txt": "zqplan\n"})
    write_pack(packs, "yy", **{"regex.toml": TOY_RULES.replace("toy_record", "own_rule")})
    for code in ("xx", "yy"):
        (tmp_path / "resources" / "regex").mkdir(exist_ok=True)
        (tmp_path / "resources" / "regex" / f"{code}.toml").write_text(TOY_RULES, encoding="utf-8")
    (tmp_path / "resources" / "dictionaries" / "xx").mkdir(parents=True)
    (tmp_path / "resources" / "dictionaries" / "xx" / "cities.txt").write_text("Zorblax\n", encoding="utf-8")
    add_language_folder(packs)
    try:
        assert language_pack("xx").origin("regex") == str(tmp_path / "resources" / "regex" / "xx.toml")
        assert [rule.name for rule in RuleClassifier("xx").rules] == ["toy_record"]
        assert load_gazetteers("xx")["cities"].tag(["zorblax"]) == ["S-cities"]
        assert [rule.name for rule in RuleClassifier("yy").rules] == ["own_rule"]  # its own file wins
        assert not language_pack("yy").has("dictionaries")
        with pytest.raises(
            MissingResourceError, match=r"language 'yy' has no dictionaries: its pack has no dictionaries \("
        ):
            _ = language_pack("yy").dictionaries
    finally:
        remove_language_folder(packs)


# -- extra folders override bundled packs -------------------------------------------------------------
def test_an_extra_pack_overrides_the_bundled_one_and_removing_it_restores_it(extra_folder):
    bundled_rules = [rule.name for rule in RuleClassifier("es").rules]
    assert "nhc" in bundled_rules
    bundled_headers = section_headers("es")  # cached now: the override must clear it
    write_pack(
        extra_folder,
        "es",
        **{
            "pack.toml": 'name = "Mine"\ntaxonomy = "meddocan"\n',
            "regex.toml": TOY_RULES.replace('"i2b2-2014"', '"meddocan"').replace(
                '"MEDICALRECORD"', '"ID_SUJETO_ASISTENCIA"'
            ),
            "sections.txt": "mi cabecera\n",
        },
    )
    add_language_folder(extra_folder)  # again: clears the caches
    assert available_languages() == ("en", "es")
    assert language_pack("es").name == "Mine"
    assert [rule.name for rule in RuleClassifier("es").rules] == ["toy_record"]
    assert section_headers("es") == {"mi cabecera"}
    remove_language_folder(extra_folder)
    assert language_pack("es").name == "Spanish"
    assert section_headers("es") == bundled_headers
    assert [rule.name for rule in RuleClassifier("es").rules] == bundled_rules


def test_the_most_recently_added_folder_wins(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    write_pack(first, "qq", **{"pack.toml": 'name = "First"\ntaxonomy = "meddocan"\n'})
    write_pack(second, "qq", **{"pack.toml": 'name = "Second"\ntaxonomy = "meddocan"\n'})
    try:
        add_language_folder(first)
        add_language_folder(second)
        assert language_pack("qq").name == "Second"
    finally:
        remove_language_folder(first)
        remove_language_folder(second)


def test_the_environment_variable_adds_folders(tmp_path, monkeypatch):
    write_pack(tmp_path / "one", "qq", **{"sections.txt": "qqheader\n"})
    write_pack(tmp_path / "two", "es", **{"pack.toml": 'name = "From env"\ntaxonomy = "meddocan"\n'})
    monkeypatch.setenv(
        ENV_VAR, os.pathsep.join([str(tmp_path / "one"), str(tmp_path / "missing"), str(tmp_path / "two")])
    )
    clear_caches()
    try:
        assert available_languages() == ("en", "es", "qq")
        assert language_pack("es").name == "From env"
        assert section_headers("qq") == {"qqheader"}
    finally:
        monkeypatch.delenv(ENV_VAR)
        clear_caches()
    assert available_languages() == ("en", "es")


def test_the_environment_variable_reaches_a_new_process_and_the_cli(tmp_path):
    write_pack(tmp_path, "qq")
    env = {**os.environ, ENV_VAR: str(tmp_path)}  # the installed package, as a user's new process gets it
    code = (
        "from hybriddeid.core.languages import available_languages; from hybriddeid.cli import build_parser; "
        "print(available_languages(), build_parser().parse_args(['synth', '--n', '1', '--out', 'o', '--language', 'qq']).language)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "('en', 'es', 'qq') qq"


def test_a_pack_names_the_scripts_its_models_read(tmp_path):
    from hybriddeid.core.languages import language_pack, unread_characters

    assert language_pack("en").scripts == ("Latin", "Greek")
    assert unread_characters("β-blocker, café, naïve", "en") == 0
    assert unread_characters("note: 你好 😀 done", "es") == len("你好 😀")


def test_a_stretch_meets_unread_letters_exactly_where_the_unread_pattern_finds_text_in_it():
    """``Pipeline.within_phi_set`` finds the runs of unread letters once and bisects them per span: the
    same answer as ``unread_pattern`` searched inside each span, on random mixes of scripts."""
    import random

    from hybriddeid.core.languages import unread_letters, unread_pattern
    from hybriddeid.pipeline.core import _meets

    rng = random.Random(3)
    alphabet = (
        "ab 1,.\n\u00e9\u03b2" + "\u0417\u0434\u0440\u0430\u0432" + "\u0645\u0631\u062d" + "\U0001f600" + "\u6f22"
    )
    checked = met = 0
    for code in ("en", "es"):
        pattern, letters = unread_pattern(code), unread_letters(code)
        for _ in range(500):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
            runs = [match.span() for match in letters.finditer(text)]
            ends = [end for _, end in runs]
            for _ in range(10):
                start = rng.randrange(len(text))
                end = rng.randint(start + 1, len(text))
                found = pattern.search(text, start, end) is not None
                assert _meets(runs, ends, start, end) == found, (code, text, start, end)
                checked, met = checked + 1, met + found
    assert checked == 10_000 and 1_000 < met < 9_000
