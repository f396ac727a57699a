"""The rules' one-scan prefilter (issue 45): it may report a rule that then finds nothing, never miss one
that finds something, so the rule spans are the same with and without it."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest
import regex

from hybriddeid.classifiers import rule_prefilter
from hybriddeid.classifiers.rules import RuleClassifier, RuleFileError, bundled_rules_text, parse_rule_file

pytestmark = pytest.mark.skipif(rule_prefilter.hyperscan is None, reason="Hyperscan has no wheel for this platform")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora"


@pytest.fixture(scope="module", params=["en", "es"])
def classifier(request: pytest.FixtureRequest) -> RuleClassifier:
    return RuleClassifier(language=request.param)


def missed(clf: RuleClassifier, text: str) -> list[str]:
    """The rules that find something in ``text`` but that the prefilter leaves out."""
    prefilter = clf._prefilter()
    assert prefilter is not None
    may_match = prefilter.candidates(text)
    if may_match is None:
        return []
    return [rule.name for order, rule in enumerate(clf.enabled_rules) if order not in may_match and rule.spans(text)]


def variants(text: str, rng: random.Random) -> list[str]:
    """``text`` in other cases, with Latin-1 accents and curly quotes, and inside other text."""
    accents = str.maketrans({"e": "é", "a": "á", "o": "ö", "n": "ñ", "'": "\u2019", "-": "\u2013", "u": "ü"})
    mixed = "".join(ch.upper() if rng.random() < 0.5 else ch.lower() for ch in text)
    return [
        text,
        text.upper(),
        text.lower(),
        text.title(),
        mixed,
        text.translate(accents),
        f"Seen today.\n{text}\nPlan: follow up.",
        f"{text}\t| {text.upper()} |",
    ]


def test_every_rule_example_in_every_variant_is_reported(classifier: RuleClassifier) -> None:
    rng = random.Random(45)
    problems = []
    for rule in classifier.enabled_rules:
        texts = [example.text for example in rule.examples] + list(rule.counter_examples)
        for text in texts:
            for variant in variants(text, rng):
                problems.extend((name, variant) for name in missed(classifier, variant))
    assert not problems, problems[:10]


def test_the_same_hits_on_generated_and_real_notes(classifier: RuleClassifier) -> None:
    from hybriddeid.io import read_corpus
    from hybriddeid.synth import generate_corpus

    language = classifier.language
    assert language is not None
    texts = [doc.text for doc in generate_corpus(60, 7, "test", language)]
    real = SHARED / ("physionet-deid/dev" if language == "en" else "meddocan/dev/brat")
    if real.is_dir():
        texts += [doc.text for doc in sorted(read_corpus(real), key=lambda doc: doc.name)[:150]]
    prefilter = classifier._prefilter()
    assert prefilter is not None
    scanned = sum(prefilter.candidates(text) is not None for text in texts)
    assert scanned > len(texts) // 2  # most notes are prefiltered, so the check means something
    problems = [(i, name) for i, text in enumerate(texts) for name in missed(classifier, text)]
    assert not problems, problems[:10]


def test_notes_with_characters_it_is_unsure_of_search_every_rule() -> None:
    prefilter = RuleClassifier(language="en")._prefilter()
    assert prefilter is not None
    assert prefilter.candidates("MRN 1234567 seen by Dr. Ávila") is not None
    assert prefilter.candidates("Nguyễn Văn Đặng, Łukasz Wójcik, Ștefan") is not None
    unsure = (
        "Pt \u0130brahim seen",
        "MRN\x1c1234567",
        "Yılmaz",
        "5 \u00b5g",
        "Stra\u00dfe 4",
        "\u212aelvin",
        "x\u00b2",
    )
    for text in (*unsure, "page\x0cbreak", "Jose\u0301"):
        assert prefilter.candidates(text) is None, text


def test_a_rule_that_says_prefilter_false_is_searched_in_every_note(tmp_path: Path) -> None:
    text = """
taxonomy = "i2b2-2014"
[[rule]]
name = "always"
label = "MEDICALRECORD"
pattern = '(?i)mrn\\s*(?P<phi>\\d{5,})'
prefilter = false

[[rule]]
name = "scanned"
label = "MEDICALRECORD"
pattern = '(?i)acct\\s*(?P<phi>\\d{5,})'
"""
    path = tmp_path / "rules.toml"
    path.write_text(text, encoding="utf-8")
    clf = RuleClassifier(language=None, rule_files=[path])
    prefilter = clf._prefilter()
    assert prefilter is not None
    assert prefilter.candidates("nothing to see") == frozenset({0})
    assert prefilter.candidates("ACCT 123456") == frozenset({0, 1})
    with pytest.raises(RuleFileError, match="prefilter must be true or false"):
        parse_rule_file(text.replace("prefilter = false", 'prefilter = "no"'), "bad.toml")


def test_the_database_is_cached_and_a_damaged_cache_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path))
    text = "Pt seen 3/4/2021, MRN: 1234567, Dr. Smith, (617) 555-0199"
    first = RuleClassifier(language="es")
    expected = first.predict(first_doc(text))
    prefilter = first._prefilter()
    assert prefilter is not None and prefilter.path.is_file()
    prefilter.path.write_bytes(b"[1, 2]\nnot a database")
    second = RuleClassifier(language="es")
    assert second.predict(first_doc(text)) == expected
    second_prefilter = second._prefilter()
    assert second_prefilter is not None and second_prefilter._database is not None
    assert second_prefilter.path.read_bytes() != b"[1, 2]\nnot a database"  # rebuilt and cached again


def test_an_unwritable_cache_and_a_pickled_classifier_still_tag_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be", encoding="utf-8")
    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(blocked))
    text = "Paciente: Juan García. DNI 45123987Z. Tel. 912 345 678."
    clf = RuleClassifier(language="es")
    expected = clf.predict(first_doc(text))
    prefilter = clf._prefilter()
    assert prefilter is not None and prefilter._database is not None  # compiled in memory
    copy = pickle.loads(pickle.dumps(clf))
    assert copy.predict(first_doc(text)) == expected
    monkeypatch.setenv("HYBRIDDEID_RULE_PREFILTER", "0")
    assert RuleClassifier(language="es")._prefilter() is None
    assert RuleClassifier(language="es").predict(first_doc(text)) == expected


def first_doc(text: str):  # noqa: ANN201 - a Document
    from hybriddeid.core.document import Document

    return Document("note", text)


def test_the_letter_classes_are_unicodes_on_every_character_a_prefiltered_note_may_hold() -> None:
    import regex

    held = [chr(code) for code in range(0x2030) if rule_prefilter._UNSURE.match(chr(code)) is None]
    assert len(held) > 200
    for name, letters in rule_prefilter._LETTERS.items():
        unicode, latin = regex.compile(rf"\p{{{name}}}"), regex.compile(f"[{letters}]")
        assert [c for c in held if unicode.match(c)] == [c for c in held if latin.match(c)], name


def test_patterns_are_rewritten_only_where_the_reading_stays_the_same() -> None:
    rewrite = rule_prefilter.with_latin_letters
    exact, wide = rule_prefilter._LETTERS, rule_prefilter._WIDE_LETTERS
    # where a class must match, a superset of its letters; where it must not (a negated class, a negative
    # lookaround), exactly its letters
    assert rewrite(r"[\p{L}'-]+\s\p{Lu}", False) == f"[{wide['L']}'-]+\\s[{wide['Lu']}]"
    assert rewrite(r"(?<![\p{L}.])[^\p{Ll}]", False) == f"(?<![{exact['L']}.])[^{exact['Ll']}]"
    assert rewrite(r"(?!(?:a|\p{L}))\p{L}", False) == f"(?!(?:a|[{exact['L']}]))[{wide['L']}]"
    # a verbose pattern's comment is copied as it is, brackets and all
    assert rewrite("(?x)a # [not a class \\p{L}\n\\p{L}", True) == f"(?x)a # [not a class \\p{{L}}\n[{wide['L']}]"
    assert rewrite(r"\p{Han}", False) is None and rewrite(r"\P{L}", False) is None
    assert rewrite(r"(?:a)(?x)b", False) is None  # a verbose switch in mid-pattern
    held = [chr(c) for low, high in rule_prefilter.HELD for c in range(low, high + 1)]
    for name in exact:  # every held letter of a class is in its wider form
        wide_class = regex.compile(f"[{wide[name]}]")
        assert all(wide_class.match(c) for c in held if regex.match(f"[{exact[name]}]", c)), name
    again = rule_prefilter._without_backreferences
    assert again(r"(?P<sep>[/-])\d(?P=sep)") == r"(?P<sep>[/-])\d(?:[/-])"
    assert again(r"(?P<a>[)(])x(?P=a)") == r"(?P<a>[)(])x(?:[)(])"
    assert again(r"(?P=missing)") is None


def test_a_lookahead_ending_an_alternative_is_read_as_a_group() -> None:
    consumed = rule_prefilter.lookaheads_consumed
    assert consumed(r"\d+(?=[ ]?yo\b)|age (?=\d)", False) == r"\d+(?:[ ]?yo\b)|age (?:\d)"
    # followed by more pattern, by a quantifier, inside a group, or negative: left as it is
    for pattern in (
        r"(?=a)b",
        r"a(?=b)c",
        r"a(?=b)?",
        r"(?:a(?=b))",
        r"a(?!b)",
        r"a(?<=b)",
        "a(?=b) ",
        r"(?# ( )a(?=b)",
    ):
        assert consumed(pattern, False) == pattern
    # a verbose pattern's spaces and comments after it, and brackets or escapes inside it, change nothing
    assert consumed("(?x)a (?=[)(] \\) ) # c(\n", True) == "(?x)a (?:[)(] \\) ) # c(\n"
    # matched somewhere exactly where the lookahead form is
    for pattern, text in ((r"\d+(?=,? \d{5})", "at 12, 34567"), (r"\d+(?=,? \d{5})", "at 12, 3456")):
        assert bool(regex.search(pattern, text)) == bool(regex.search(consumed(pattern, False), text))


@pytest.mark.parametrize("language", ["en", "es"])
def test_rules_whose_needs_the_prefilter_saw_find_the_same_without_looking_for_them(language: str) -> None:
    from hybriddeid.synth import generate_corpus

    clf = RuleClassifier(language=language)
    prefilter = clf._prefilter()
    assert prefilter is not None and prefilter.candidates("warm up") is not None
    assert len(prefilter.needs_held) >= 5  # most rules with needs have them in the database
    texts = [doc.text for doc in generate_corpus(60, 11, "test", language)]
    checked = 0
    for text in texts:
        may_match = prefilter.candidates(text)
        assert may_match is not None
        for order, rule in enumerate(clf.enabled_rules):
            if order in may_match and order in prefilter.needs_held:
                assert rule.spans(text, needs_met=True) == rule.spans(text), rule.name
                checked += 1
    assert checked > 50


def test_the_cache_keeps_the_databases_used_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "rule-prefilter"
    folder.mkdir()
    for i in range(rule_prefilter.CACHE_KEPT + 3):  # older databases of other rule sets
        stale = folder / f"old{i}.hsdb"
        stale.write_bytes(b"[]\n")
        os.utime(stale, (1000 + i, 1000 + i))
    clf = RuleClassifier(language="es")
    clf.predict(first_doc("Paciente: Juan García."))
    prefilter = clf._prefilter()
    assert prefilter is not None
    kept = sorted(path.name for path in folder.glob("*.hsdb"))
    assert len(kept) == rule_prefilter.CACHE_KEPT and prefilter.path.name in kept
    assert "old0.hsdb" not in kept and f"old{rule_prefilter.CACHE_KEPT + 2}.hsdb" in kept


def test_hyperscan_reads_every_held_character_as_regex_does() -> None:
    """Classes, word characters, spaces, digits and case folding agree on every character a prefiltered note
    may hold (rule_prefilter.HELD): what makes a prefilter report a superset of regex's hits."""
    import regex

    hyperscan = rule_prefilter.hyperscan
    held = [chr(c) for low, high in rule_prefilter.HELD for c in range(low, high + 1)]
    assert all(rule_prefilter._UNSURE.match(char) is None for char in held)
    assert rule_prefilter._UNSURE.match("\u0131") and rule_prefilter._UNSURE.match("\x0c")
    utf8 = hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_UCP | hyperscan.HS_FLAG_SINGLEMATCH

    def reads(patterns: list[str], flags: int) -> list[set[int]]:
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(
            expressions=[p.encode() for p in patterns], ids=list(range(len(patterns))), flags=[flags] * len(patterns)
        )
        found: list[set[int]] = []
        for char in held:
            hits: set[int] = set()
            database.scan(char.encode(), match_event_handler=lambda i, *_, hits=hits: hits.add(i))
            found.append(hits)
        return found

    classes = [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", r"\p{L}", r"\p{Lu}", r"\p{Ll}", "."]
    for char, hits in zip(held, reads([f"^{c}$" for c in classes], utf8), strict=True):
        expected = {i for i, c in enumerate(classes) if regex.fullmatch(c, char)}
        assert hits == expected, (hex(ord(char)), hits ^ expected)
    letters = [char for char in held if char.isalpha()]
    escaped = [f"^{regex.escape(char)}$" for char in letters]
    for char, hits in zip(held, reads(escaped, utf8 | hyperscan.HS_FLAG_CASELESS), strict=True):
        expected = {i for i, letter in enumerate(letters) if regex.fullmatch(regex.escape(letter), char, regex.I)}
        assert expected <= hits, (hex(ord(char)), [letters[i] for i in expected - hits])


@pytest.mark.parametrize("language", ["en", "es"])
def test_a_bundled_rule_compiled_on_first_use_gives_the_prefilter_what_a_compiled_one_does(language: str) -> None:
    """A model's bundled rules are compiled when first searched; the prefilter reads their flags off the
    pattern text meanwhile: the same flags regex compiles them with, the same Hyperscan expressions."""
    text = bundled_rules_text(language)
    compiled = parse_rule_file(text, "bundled").rules
    deferred = parse_rule_file(text, "bundled", deferred=True).rules
    for now, later in zip(compiled, deferred, strict=True):
        assert later.pattern_flags == now.compiled.flags, now.name
        assert later.needs_flags == tuple(needs.flags for needs in now.needs_patterns), now.name
        assert rule_prefilter.expression(later) == rule_prefilter.expression(now), now.name
        assert rule_prefilter.needs_expressions(later) == rule_prefilter.needs_expressions(now), now.name
    assert not any("_regex" in rule.__dict__ for rule in deferred)  # nothing above compiled them
    for now, later in zip(compiled, deferred, strict=True):  # searched, they compile and find the same
        assert [later.spans(example.text) for example in now.examples] == [
            now.spans(example.text) for example in now.examples
        ], now.name


def test_a_deferred_rule_whose_pattern_does_not_compile_names_its_file_and_rule_when_first_searched() -> None:
    text = """taxonomy = "i2b2-2014"
[[rule]]
name = "broken"
label = "DATE"
pattern = '(?P<phi>\\d+'
"""
    with pytest.raises(RuleFileError, match="does not compile"):
        parse_rule_file(text, "mine.toml")
    (rule,) = parse_rule_file(text, "mine.toml", deferred=True).rules
    with pytest.raises(RuleFileError, match=r"mine\.toml: rule 'broken': pattern does not compile"):
        rule.spans("12")


def test_a_run_builds_the_scan_before_it_forks_its_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty cache each worker compiled the prefilter on its first note (seconds), against the note's
    time limit, and again in each worker started after a kill: every note of a run timed out."""
    from hybriddeid.runs.processing import load_model

    monkeypatch.setenv("HYBRIDDEID_CACHE_DIR", str(tmp_path))
    load_model("es")
    cached = list((tmp_path / "rule-prefilter").glob("*"))
    assert cached and all(path.stat().st_size > 0 for path in cached)
