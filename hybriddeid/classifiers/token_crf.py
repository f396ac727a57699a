"""Token-level CRF (BIO over fine labels), paper section 3.2.2."""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from hybriddeid.analysis import AnalysedNote, Segment, analyse
from hybriddeid.classifiers.crf import CRF_DEFAULTS, CRFTagger, check_segments
from hybriddeid.classifiers.sequences import UnitSequence
from hybriddeid.document import Document
from hybriddeid.features.gazetteer import Gazetteer
from hybriddeid.features.pos import note_tags
from hybriddeid.features.token import TOKEN_EXTRACTORS, TokenSequence, extract_token_features
from hybriddeid.registry import ComponentSpec

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

    def token_sequences(self, note: AnalysedNote | Document, lexicon: Gazetteer | None = None) -> Iterator[TokenSequence]:
        """One ``TokenSequence`` per non-empty line of the note (per segment of a line longer than
        ``segment_chars``), tagged by ``lexicon`` if given and by the POS/NER tag source if one is
        configured and installed (once per note)."""
        for _, seq in self._segment_sequences(note, lexicon):
            yield seq

    def _segment_sequences(
        self, note: AnalysedNote | Document, lexicon: Gazetteer | None
    ) -> Iterator[tuple[Segment, TokenSequence]]:
        note = analyse(note, self.language)
        tags = note.memo(("tags", self.tag_source), lambda: note_tags(note.text, self.tag_source)) if self.tag_source else None
        for segment in note.segments(self.segment_chars, self.segment_overlap):
            line = segment.line
            tokens = line.tokens
            if tokens:
                seq = TokenSequence(tokens, line.context, self.window, lowers=list(line.lowers), clusters=self.clusters_)
                seq.extra.update(self.resource_tags(tokens, seq.lowers, lexicon))
                if tags is not None:
                    seq.pos, seq.extra["ner"] = tags.align(tokens)
                yield segment, seq

    def sequences(self, note: AnalysedNote | Document, lexicon: Gazetteer | None = None) -> Iterator[UnitSequence]:
        safe = self.safe_words_
        if lexicon is None:
            lexicon = self.lexicon_
        for segment, seq in self._segment_sequences(note, lexicon):
            feats = extract_token_features(seq, self.features)
            if safe:
                for i, low in enumerate(seq.lowers):
                    if low in safe:  # settled label: a few features keep transitions informed
                        feats[i] = ["safe", feats[i][0]]
            yield UnitSequence([(tok.start, tok.end) for tok in seq.tokens], feats, segment.core)


def _check_section(section: Mapping[str, Any]) -> list[str]:
    unknown = [name for name in section.get("features", ()) if name not in TOKEN_EXTRACTORS]
    problems = [f"unknown token features {unknown}; this version knows {sorted(TOKEN_EXTRACTORS)}"] if unknown else []
    return problems + check_segments(section)


COMPONENT = ComponentSpec(
    class_path="hybriddeid.classifiers.token_crf:TokenCRF",
    defaults={
        "features": list(DEFAULT_TOKEN_FEATURES),
        "window": 2,
        # POS and general-NER tags, e.g. "spacy:es_core_news_sm" (hybriddeid.features.pos); "" = none.
        "tag_source": "",
        **CRF_DEFAULTS,
    },
    reads_marginals=True,
    fits_in_worker=True,
    check=_check_section,
)
