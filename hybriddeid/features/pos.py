"""Part-of-speech and general named-entity tags for the token CRF, from an installed tagger.

A *tag source* is named by a string in the token CRF's config: ``"spacy:<pipeline>"`` (any
installed spaCy pipeline with a tagger/morphologizer and/or NER, e.g. ``es_core_news_sm``) or
``"nltk"`` (NLTK's English perceptron tagger, when its data is installed). The tagger's own
tokens never replace ours: each of our tokens takes the tags of the tagger token that contains
its first character, so features stay aligned whatever the tagger's tokenisation.

When the source cannot be loaded, the POS/NER features are skipped with one warning per source
and everything else works: the tags are an optional extra, never a requirement.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from hybriddeid.text.tokenize import Token

log = logging.getLogger(__name__)

NO_TAG = "O"
# spaCy components a tag source does not need; leaving them out makes tagging several times faster.
_SPACY_UNUSED = ("parser", "lemmatizer", "senter")


@dataclass(frozen=True, slots=True)
class NoteTags:
    """A tagger's analysis of one note: its tokens' starts and ends, POS and entity tags."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    pos: tuple[str, ...]
    entities: tuple[str, ...]  # "B-PER", "I-LOC", "O"

    def align(self, tokens: Sequence[Token]) -> tuple[list[str], list[str]]:
        """POS and entity tags for ``tokens`` (ours), from the tagger token holding each start."""
        pos: list[str] = []
        entities: list[str] = []
        for tok in tokens:
            i = bisect.bisect_right(self.starts, tok.start) - 1
            if i >= 0 and tok.start < self.ends[i]:
                pos.append(self.pos[i])
                entities.append(self.entities[i])
            else:  # whitespace the tagger kept as a token, or text it skipped
                pos.append("X")
                entities.append(NO_TAG)
        return pos, entities


Tagger = Callable[[str], NoteTags]
_warned: set[str] = set()


def _spacy_tagger(name: str) -> Tagger:
    import spacy  # optional dependency: imported only when a config asks for it

    nlp = spacy.load(name, exclude=[pipe for pipe in _SPACY_UNUSED])

    def tag(text: str) -> NoteTags:
        starts, ends, pos, entities = [], [], [], []
        # spaCy refuses texts over nlp.max_length; feed long notes in line-aligned chunks.
        limit = max(nlp.max_length // 2, 1)
        offset = 0
        while offset < len(text):
            stop = len(text) if len(text) - offset <= limit else text.rfind("\n", offset, offset + limit) + 1
            if stop <= offset:
                stop = offset + limit
            for tok in nlp(text[offset:stop]):
                if tok.is_space:
                    continue
                starts.append(offset + tok.idx)
                ends.append(offset + tok.idx + len(tok.text))
                pos.append(tok.pos_ or tok.tag_ or "X")
                entities.append(f"{tok.ent_iob_}-{tok.ent_type_}" if tok.ent_type_ else NO_TAG)
            offset = stop
        return NoteTags(tuple(starts), tuple(ends), tuple(pos), tuple(entities))

    return tag


def _nltk_tagger() -> Tagger:
    import nltk  # optional dependency

    nltk.pos_tag(["test"])  # raises LookupError when the tagger's data is not installed
    from hybriddeid.text.tokenize import tokenize

    def tag(text: str) -> NoteTags:
        tokens = tokenize(text)
        tagged = nltk.pos_tag([tok.text for tok in tokens])
        return NoteTags(
            tuple(tok.start for tok in tokens),
            tuple(tok.end for tok in tokens),
            tuple(pos for _, pos in tagged),
            tuple(NO_TAG for _ in tokens),
        )

    return tag


@cache
def load_tag_source(spec: str) -> Tagger | None:
    """The tagger named by ``spec`` ("spacy:<pipeline>", "nltk"), or None (with one warning)
    when it is not installed. An empty spec means no tagger, silently."""
    if not spec:
        return None
    kind, _, name = spec.partition(":")
    try:
        if kind == "spacy" and name:
            return _spacy_tagger(name)
        if kind == "nltk":
            return _nltk_tagger()
        raise ValueError(f"unknown tag source {spec!r}: use 'spacy:<pipeline name>' or 'nltk'")
    except (ImportError, OSError, LookupError) as exc:
        if spec not in _warned:
            _warned.add(spec)
            log.warning("POS/NER features skipped: tag source %r is not available (%s)", spec, type(exc).__name__)
        return None


def note_tags(text: str, spec: str) -> NoteTags | None:
    """The tags of a whole note (``AnalysedNote.memo`` keeps them for the classifiers of one pipeline)."""
    tagger = load_tag_source(spec)
    return tagger(text) if tagger is not None else None
