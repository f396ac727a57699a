"""Dictionary matching (BIOES tags, longest match) and the lexicon learned from training notes."""
from __future__ import annotations

from hybriddeid.document import Document, Span
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
    assert Gazetteer.from_disk(tmp_path / "lex.json").tag(["madrid", "sur", "madrid"]) == ["B-HOSPITAL", "E-HOSPITAL", "S-TERRITORIO"]
