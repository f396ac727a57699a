"""Token-level CRF (BIO over fine labels), paper section 3.2.2."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from hybriddeid.classifiers.crf import CRF_DEFAULTS, CRFTagger, check_segments
from hybriddeid.classifiers.sequences import UnitSequence
from hybriddeid.core.document import Document
from hybriddeid.core.registry import ComponentSpec
from hybriddeid.features.analysis import AnalysedNote, Segment, analyse
from hybriddeid.features.gazetteer import Gazetteer
from hybriddeid.features.pos import NoteTags, note_tags
from hybriddeid.features.token import TOKEN_EXTRACTORS, TokenSequence, extract_token_features
from hybriddeid.features.token_ids import Dictionary, LineInput, TokenIds
from hybriddeid.knowledge.dictionaries import known_words, proper_only_words
from hybriddeid.knowledge.dictionaries import surnames as bundled_surnames
from hybriddeid.text.tokenize import Token

# Tokens scored per call of the fast engine's featurizer: its numpy sums run once per batch of lines.
BATCH_TOKENS = 4096
DEFAULT_TOKEN_FEATURES = (
    "words",
    "ngrams",
    "context",
    "affixes",
    "orthography",
    "shapes",
    "line",
    "pos",
    "clusters",
    "extra",
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

    @property
    def vocabulary(self) -> frozenset[str] | None:
        """The language pack's known words when the "vocabulary" extractor is on (read from the pack,
        cached per language), else None."""
        return known_words(self.language) if "vocabulary" in self.features else None

    @property
    def proper_nouns(self) -> frozenset[str] | None:
        """The language pack's proper-noun-only words when the "proper" extractor is on, else None."""
        return proper_only_words(self.language) if "proper" in self.features else None

    @property
    def surnames(self) -> frozenset[str] | None:
        """The language's bundled surnames when the "usernames" extractor is on, else None."""
        return bundled_surnames(self.language) if "usernames" in self.features else None

    def token_sequences(
        self, note: AnalysedNote | Document, lexicon: Gazetteer | None = None
    ) -> Iterator[TokenSequence]:
        """One ``TokenSequence`` per non-empty line of the note (per segment of a line longer than
        ``segment_chars``), tagged by ``lexicon`` if given and by the POS/NER tag source if one is
        configured and installed (once per note)."""
        for _, seq in self._segment_sequences(note, lexicon):
            yield seq

    def _segment_sequences(
        self, note: AnalysedNote | Document, lexicon: Gazetteer | None
    ) -> Iterator[tuple[Segment, TokenSequence]]:
        note = analyse(note, self.language)
        tags = self._source_tags(note)
        for segment in note.segments(self.segment_chars, self.segment_overlap):
            line = segment.line
            tokens = line.tokens
            if tokens:
                seq = TokenSequence(
                    tokens,
                    line.context,
                    self.window,
                    lowers=list(line.lowers),
                    clusters=self.clusters_,
                    vocabulary=self.vocabulary,
                    proper_nouns=self.proper_nouns,
                    surnames=self.surnames,
                )
                seq.extra.update(self.resource_tags(tokens, seq.lowers, lexicon))
                if tags is not None:
                    seq.pos, seq.extra["ner"] = tags.align(tokens)
                yield segment, seq

    def _source_tags(self, note: AnalysedNote) -> NoteTags | None:
        """The tag source's POS and NER tags of the note (once per note), or None without one."""
        if not self.tag_source:
            return None
        return note.memo(("tags", self.tag_source), lambda: note_tags(note.text, self.tag_source))

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

    def emission_sequences(
        self,
        note: AnalysedNote | Document,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[UnitSequence]:
        """``sequences`` with each token's label scores, computed from ids cached per model
        (``features.token_ids``) instead of feature strings: the same scores within ~1e-13."""
        if regions is not None:  # the token CRF reads whole notes; the generic path says so
            yield from super().emission_sequences(note, regions, skip)
            return
        note = analyse(note, self.language)
        featurizer = self._token_ids()
        tags = self._source_tags(note)
        batch: list[tuple[LineInput, Segment]] = []
        size = 0
        for segment in note.segments(self.segment_chars, self.segment_overlap):
            tokens = segment.line.tokens
            if not tokens:
                continue
            pos = ner = None
            if tags is not None:
                pos, ner = tags.align(tokens)
            batch.append((LineInput(segment.line, pos, ner), segment))
            size += len(tokens)
            if size >= BATCH_TOKENS:
                yield from self._scored(featurizer, batch)
                batch, size = [], 0
        yield from self._scored(featurizer, batch)

    @staticmethod
    def _scored(featurizer: TokenIds, batch: list[tuple[LineInput, Segment]]) -> Iterator[UnitSequence]:
        """The batch's sequences with their rows of the batch's emissions."""
        if not batch:
            return
        emissions = featurizer.emissions([item for item, _ in batch])
        row = 0
        for item, segment in batch:
            tokens = item.line.tokens
            units = [(tok.start, tok.end) for tok in tokens]
            yield UnitSequence(units, [], segment.core, None, emissions[row : row + len(units)])
            row += len(units)

    def _token_ids(self) -> TokenIds:
        """The fast engine's featurizer for the current model and settings (kept while they hold:
        its caches are what make it fast)."""
        own_way = type(self).resource_tags is not CRFTagger.resource_tags  # a subclass tags lines itself
        key = (
            id(self.weights_),
            tuple(self.features),
            self.window,
            id(self.safe_words_),
            id(self.clusters_),
            id(self.lexicon_),
            tuple((name, id(g)) for name, g in self.gazetteers_.items()),
            own_way,
        )
        return self._featurizer(key, lambda: self._new_token_ids(own_way))

    def _new_token_ids(self, own_way: bool) -> TokenIds:
        dictionaries = [Dictionary("gaz_" + group, g, True) for group, g in self.gazetteers_.items()]
        if self.lexicon_ is not None:
            dictionaries.append(Dictionary("lex", self.lexicon_, False))
        own_tags = None
        if own_way:  # asked for every line
            lexicon = self.lexicon_

            def own_tags(tokens: Sequence[Token], lowers: Sequence[str]) -> dict[str, list[str]]:
                return self.resource_tags(tokens, lowers, lexicon)

        return TokenIds(
            self.weights_,
            self.features,
            self.window,
            self.safe_words_,
            self.clusters_,
            dictionaries,
            own_tags,
            vocabulary=self.vocabulary,
            proper_nouns=self.proper_nouns,
            surnames=self.surnames,
        )


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
