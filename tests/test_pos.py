"""POS/NER tag sources: alignment to our tokens, spaCy pipelines, and a missing tagger."""

from __future__ import annotations

import logging

import pytest

from hybriddeid.classifiers.token_crf import TokenCRF
from hybriddeid.core.document import Document, Span
from hybriddeid.features.pos import NoteTags, load_tag_source, note_tags
from hybriddeid.text.tokenize import tokenize


def test_alignment_takes_the_tagger_token_holding_each_start():
    text = "Dr. Ana-María 12/03"
    # a tagger that keeps "Ana-María" and "12/03" whole
    tags = NoteTags((0, 4, 14), (3, 13, 19), ("PROPN", "PROPN", "NUM"), ("O", "B-PER", "O"))
    pos, entities = tags.align(tokenize(text))
    words = [tok.text for tok in tokenize(text)]
    assert words == ["Dr", ".", "Ana", "-", "María", "12", "/", "03"]
    assert pos == ["PROPN", "PROPN", "PROPN", "PROPN", "PROPN", "NUM", "NUM", "NUM"]
    assert entities == ["O", "O", "B-PER", "B-PER", "B-PER", "O", "O", "O"]


def test_a_missing_tag_source_warns_once_and_features_are_skipped(caplog):
    spec = "spacy:no_such_pipeline_xyz"
    with caplog.at_level(logging.WARNING, logger="hybriddeid.features.pos"):
        assert load_tag_source(spec) is None
        assert load_tag_source(spec) is None
    notices = [r for r in caplog.records if "POS/NER features skipped" in r.getMessage()]
    assert len(notices) == 1
    doc = Document("d", "Nombre: Ana Ruiz.\nEdad: 45 años.\n")
    seqs = list(TokenCRF(language="es", tag_source=spec).token_sequences(doc))
    assert seqs and all(seq.pos is None and "ner" not in seq.extra for seq in seqs)


def test_an_unknown_tag_source_kind_is_an_error():
    with pytest.raises(ValueError, match="unknown tag source"):
        load_tag_source("stanza:es")


def _tiny_spacy_pipeline(path):
    """A spaCy pipeline that needs no download: rules set POS and entities."""
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("es")
    ruler = nlp.add_pipe("attribute_ruler")
    ruler.add(patterns=[[{"IS_TITLE": True}]], attrs={"POS": "PROPN"})
    ruler.add(patterns=[[{"IS_DIGIT": True}]], attrs={"POS": "NUM"})
    entities = nlp.add_pipe("entity_ruler")
    entities.add_patterns([{"label": "PER", "pattern": [{"IS_TITLE": True}, {"IS_TITLE": True}]}])
    nlp.to_disk(path)
    return f"spacy:{path}"


def test_spacy_tags_feed_the_token_crf(tmp_path):
    spec = _tiny_spacy_pipeline(tmp_path / "nlp")
    text = "Nombre: Ana Ruiz.\nEdad: 45 años.\n"
    tags = note_tags(text, spec)
    assert tags is not None
    seqs = list(TokenCRF(language="es", tag_source=spec).token_sequences(Document("d", text)))
    first = seqs[0]
    assert [tok.text for tok in first.tokens] == ["Nombre", ":", "Ana", "Ruiz", "."]
    assert first.pos[2:4] == ["PROPN", "PROPN"]
    assert first.extra["ner"][2:4] == ["B-PER", "I-PER"]
    assert seqs[1].pos[2] == "NUM"
    # the tags reach the features: POS n-grams, word x POS and the NER tag with its neighbours
    from hybriddeid.features.token import extract_token_features

    feats = extract_token_features(first, ["pos", "extra"])
    assert "pos[0]=PROPN" in feats[2] and "w|p[0]=ana|PROPN" in feats[2]
    assert "ner=B-PER" in feats[2] and "ner[1]=I-PER" in feats[2]


def test_a_token_crf_trained_with_tags_round_trips(tmp_path):
    spec = _tiny_spacy_pipeline(tmp_path / "nlp")
    docs = []
    for i, name in enumerate(["Ana Ruiz", "Luis Gil", "Eva Sanz", "Juan Mora", "Rosa Vila", "Pablo Ortiz"]):
        text = f"Nombre: {name}.\nEdad: {30 + i} años.\n"
        docs.append(Document(f"d{i}", text, (Span(8, 8 + len(name), "NOMBRE_SUJETO_ASISTENCIA"),)))
    model = TokenCRF(language="es", tag_source=spec, max_iterations=30).fit(docs[:5])
    model.to_disk(tmp_path / "m")
    reloaded = TokenCRF.from_disk(tmp_path / "m", model.get_params())
    assert reloaded.tag_source == spec
    assert reloaded.predict(docs[5]) == model.predict(docs[5])
    assert [(s.start, s.end) for s in model.predict(docs[5])] == [(8, 19)]
