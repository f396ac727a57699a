"""Token-level CRF (BIO over fine labels), paper section 3.2.2."""
from __future__ import annotations

from typing import Any, Iterator, Sequence

from hybriddeid.classifiers.crf import CRFTagger, UnitSequence
from hybriddeid.document import Document
from hybriddeid.features.context import lines_with_tokens
from hybriddeid.features.gazetteer import Gazetteer
from hybriddeid.features.pos import note_tags
from hybriddeid.features.token import TokenSequence, extract_token_features

DEFAULT_TOKEN_FEATURES = (
    "words", "ngrams", "context", "affixes", "orthography", "shapes", "line", "pos", "clusters", "extra",
)


class TokenCRF(CRFTagger):
    """BIO CRF over the tokens of each line; features are named extractors from ``features.token``."""

    source = "token"
    scheme = "BIO"
    model_file = "token.crfsuite"

    def __init__(
        self,
        features: Sequence[str] = DEFAULT_TOKEN_FEATURES,
        window: int = 2,
        language: str = "en",
        tag_source: str = "",
        **crf_params: Any,
    ) -> None:
        super().__init__(**crf_params)
        self.features = list(features)
        self.window = window
        self.language = language
        self.tag_source = tag_source  # e.g. "spacy:es_core_news_sm": POS and NER tags (features.pos)

    def get_params(self) -> dict[str, Any]:
        return {
            **super().get_params(),
            "features": self.features,
            "window": self.window,
            "language": self.language,
            "tag_source": self.tag_source,
        }

    def token_sequences(self, doc: Document, lexicon: Gazetteer | None = None) -> Iterator[TokenSequence]:
        """One ``TokenSequence`` per non-empty line of ``doc``, tagged by ``lexicon`` if given and
        by the POS/NER tag source if one is configured and installed."""
        tags = note_tags(doc.text, self.tag_source) if self.tag_source else None
        for line, tokens in lines_with_tokens(doc.text, self.language):
            if tokens:
                seq = TokenSequence(tokens, line, self.window, clusters=self.clusters_)
                seq.extra.update(self.resource_tags(tokens, seq.lowers, lexicon))
                if tags is not None:
                    seq.pos, seq.extra["ner"] = tags.align(tokens)
                yield seq

    def sequences(self, doc: Document, lexicon: Gazetteer | None = None) -> Iterator[UnitSequence]:
        safe = self.safe_words_
        if lexicon is None:
            lexicon = self.lexicon_
        for seq in self.token_sequences(doc, lexicon):
            feats = extract_token_features(seq, self.features)
            if safe:
                for i, low in enumerate(seq.lowers):
                    if low in safe:  # settled label: a few features keep transitions informed
                        feats[i] = ["safe", feats[i][0]]
            yield UnitSequence([(tok.start, tok.end) for tok in seq.tokens], feats)
