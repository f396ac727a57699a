"""Dictionary matching (BIOES tags, longest match) and the lexicon learned from training notes."""

from __future__ import annotations

from hybriddeid.core.document import Document, Span
from hybriddeid.features.gazetteer import Gazetteer


def test_paper_example_tags_bioes():
    gaz = Gazetteer.from_phrases({"STATE": ["Mississippi"], "CITY": ["Grand Island"]})
    words = "mary was born in mississippi , and is currently living with daughter in grand island .".split()
    tags = gaz.tag(words)
    assert tags[4] == "S-STATE"
    assert tags[13:15] == ["B-CITY", "E-CITY"]
    assert tags.count("O") == len(words) - 3


def test_longest_match_wins_and_matches_do_not_overlap():
    gaz = Gazetteer.from_phrases({"CITY": ["San Juan", "San Juan de Dios Norte"], "NAME": ["Juan"]})
    assert gaz.tag(["san", "juan", "de", "dios", "norte"]) == ["B-CITY", "I-CITY", "I-CITY", "I-CITY", "E-CITY"]
    assert gaz.tag(["san", "juan", "de", "dios"]) == ["B-CITY", "E-CITY", "O", "O"]
    assert gaz.tag(["juan", "san"]) == ["S-NAME", "O"]


def test_learned_lexicon_takes_majority_label_and_stores_no_text(tmp_path):
    text = "Vive en Madrid. Nació en Madrid. Trabaja en Madrid Sur."
    docs = [
        Document("a", text, (Span(8, 14, "TERRITORIO"), Span(25, 31, "TERRITORIO"), Span(44, 54, "HOSPITAL"))),
    ]
    gaz = Gazetteer.from_documents(docs)
    assert gaz.tag(["madrid"]) == ["S-TERRITORIO"]
    assert gaz.tag(["madrid", "sur"]) == ["B-HOSPITAL", "E-HOSPITAL"]
    gaz.to_disk(tmp_path / "lex.json")
    stored = (tmp_path / "lex.json").read_text()
    assert "madrid" not in stored.lower()
    assert Gazetteer.from_disk(tmp_path / "lex.json").tag(["madrid", "sur", "madrid"]) == [
        "B-HOSPITAL",
        "E-HOSPITAL",
        "S-TERRITORIO",
    ]


def test_files_of_the_same_bytes_load_as_one_gazetteer_and_a_changed_file_anew(tmp_path):
    Gazetteer.from_phrases({"CITY": ["Lugo"]}).to_disk(tmp_path / "token.json")
    (tmp_path / "char.json").write_bytes((tmp_path / "token.json").read_bytes())
    first = Gazetteer.from_disk(tmp_path / "token.json")
    assert Gazetteer.from_disk(tmp_path / "char.json") is first  # a model's components share one lexicon
    Gazetteer.from_phrases({"CITY": ["Vigo"]}).to_disk(tmp_path / "token.json")
    again = Gazetteer.from_disk(tmp_path / "token.json")
    assert again is not first and again.tag(["vigo"]) == ["S-CITY"] and first.tag(["vigo"]) == ["O"]


def _reference_tags(phrases: dict[str, list[tuple[str, ...]]], words: list[str]) -> list[str]:
    """Longest match first, left to right, written the plain way: the tagger's specification."""
    table = {phrase: label for label, entries in phrases.items() for phrase in reversed(entries)}
    longest = max(map(len, table))
    tags, i = ["O"] * len(words), 0
    while i < len(words):
        length = next((n for n in range(min(longest, len(words) - i), 0, -1) if tuple(words[i : i + n]) in table), 0)
        if not length:
            i += 1
            continue
        label = table[tuple(words[i : i + length])]
        tags[i : i + length] = (
            ["S-" + label] if length == 1 else ["B-" + label] + ["I-" + label] * (length - 2) + ["E-" + label]
        )
        i += length
    return tags


def test_tagging_equals_a_plain_longest_match_on_random_text():
    import random

    vocabulary = ["san", "juan", "de", "dios", "norte", "ana", "maria", "lopez", "del", "rio", ","]
    generator = random.Random(4)
    phrases: dict[str, list[tuple[str, ...]]] = {"CITY": [], "NAME": []}
    for label in phrases:
        for _ in range(25):
            phrases[label].append(tuple(generator.choice(vocabulary) for _ in range(generator.randint(1, 4))))
    # a phrase listed under two labels keeps the first: drop later repeats so the reference agrees
    seen: set[tuple[str, ...]] = set()
    for label in phrases:
        phrases[label] = [p for p in dict.fromkeys(phrases[label]) if not (p in seen or seen.add(p))]
    gazetteer = Gazetteer.from_phrases({label: [" ".join(p) for p in entries] for label, entries in phrases.items()})
    for _ in range(300):
        words = [generator.choice(vocabulary) for _ in range(generator.randint(0, 30))]
        assert gazetteer.tag(words) == _reference_tags(phrases, words)
