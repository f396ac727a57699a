"""What the token and character CRFs share: crfsuite training, tagging and persistence.

A subclass turns an analysed note into sequences of units (tokens or characters, as character
offsets) with one feature list per unit; this module does the rest. Tag schemes live in
``classifiers.schemes``, crfsuite's model files in ``classifiers.crfsuite_files``, focus stretches
in ``classifiers.focus``. Models are crfsuite's own binary files, so loading never unpickles anything.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pycrfsuite

from hybriddeid.classifiers.base import NotFittedError
from hybriddeid.classifiers.crfsuite_decoding import Decoder, Marginals, UnitMarginals
from hybriddeid.classifiers.crfsuite_files import CRFWeights, open_tagger, read_weights, train_to_bytes
from hybriddeid.classifiers.focus import unsure_stretches
from hybriddeid.classifiers.schemes import OUTSIDE, decode_tags, encode_tags
from hybriddeid.classifiers.sequences import TaggedSequence, UnitSequence
from hybriddeid.core.document import Document, Span
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.gazetteer import LEXICON_FILE, Gazetteer, jackknife, keys_of_words
from hybriddeid.features.resources import ClusterFeatures, dictionary_tags, grouped_gazetteers
from hybriddeid.features.safe_words import safe_vocabulary
from hybriddeid.knowledge.clusters import WordClusters
from hybriddeid.text.tokenize import Token

SAFE_WORDS_FILE = "safe_words.txt"
CLUSTERS_DIR = "clusters"
GAZETTEERS_DIR = "gazetteers"
# Longest line a CRF reads whole, and the overlap of the segments longer lines are read in: the
# longest MEDDOCAN dev line has 3,440 characters, the English test mix's 599.
SEGMENT_CHARS = 5000
SEGMENT_OVERLAP = 400
# How a fitted CRF tags: "fast" scores each unit from the model's weights read into arrays and
# has crfsuite's own functions decode those scores (crfsuite_decoding); "crfsuite" hands feature
# strings to crfsuite's tagger. Both give the same tags and marginals (to ~1e-14); crfsuite trains.
ENGINES = ("fast", "crfsuite")


# The config keys both CRFs share (each component's section holds its own copy, so either may
# differ). Knowledge features (hybriddeid.features.resources): a clusters folder made by
# `hybriddeid resources clusters`, bundled dictionary kinds ("*" = all) and the user's own lists.
CRF_DEFAULTS: dict[str, Any] = {
    "lexicon": True,
    "safe_min_count": 0,
    "algorithm": "lbfgs",
    "c1": 0.05,
    "c2": 0.01,
    "max_iterations": 100,
    "min_freq": 1,
    "clusters": "",
    "gazetteers": [],
    "extra_gazetteers": [],
    # Lines longer than segment_chars are read as segments of at most that many characters,
    # overlapping by segment_overlap, and stitched (AnalysedNote.segments): memory per note stays
    # bounded and time linear whatever a line's length (a one-line CSV export, a pasted lab dump
    # of 100,000 digits). Shorter lines, i.e. every line of ordinary notes, are read whole as before.
    "segment_chars": SEGMENT_CHARS,
    "segment_overlap": SEGMENT_OVERLAP,
    "engine": "fast",
    # Leave out of a span each unit whose tag is less probable than O ("Rosa Lindqvist, MRN" of a Viterbi
    # path running on through a label: the name's units at 1.0, the comma and label at 0.4 against 0.6 for
    # O); off keeps every unit of the Viterbi path, as models trained before it did.
    "trim_unsure": False,
}


def check_segments(section: Mapping[str, Any]) -> list[str]:
    """Problems with a CRF section's segment settings (a component spec's ``check``)."""
    size, overlap = section.get("segment_chars", SEGMENT_CHARS), section.get("segment_overlap", SEGMENT_OVERLAP)
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (size, overlap)):
        return ["segment_chars and segment_overlap must be whole numbers"]
    if overlap < 0 or size < 100 or size < 4 * overlap:
        return ["segment_chars must be at least 100 and at least 4 times segment_overlap (>= 0)"]
    engine = section.get("engine", "fast")
    if engine not in ENGINES:
        return [f"engine must be one of {list(ENGINES)}, not {engine!r}"]
    return []


class CRFTagger:
    """Base class: crfsuite training and tagging over the unit sequences a subclass produces."""

    source = "crf"
    scheme = "BIO"
    model_file = "model.crfsuite"
    unit = "token"  # what one CRF position is: "token" or "character"
    language = "en"  # subclasses take it as a parameter; resources are chosen by it

    def __init__(
        self,
        algorithm: str = "lbfgs",
        c1: float = 0.05,
        c2: float = 0.01,
        max_iterations: int = 100,
        min_freq: int = 1,
        label_level: str = "subtype",
        lexicon: bool = False,
        lexicon_folds: int = 5,
        safe_min_count: int = 0,
        clusters: str = "",
        gazetteers: Sequence[str] = (),
        extra_gazetteers: Sequence[str] = (),
        segment_chars: int = SEGMENT_CHARS,
        segment_overlap: int = SEGMENT_OVERLAP,
        engine: str = "fast",
        trim_unsure: bool = False,
        verbose: bool = False,
    ) -> None:
        self.algorithm = algorithm
        self.c1 = c1
        self.c2 = c2
        self.max_iterations = max_iterations
        self.min_freq = min_freq
        self.label_level = label_level
        self.lexicon = lexicon
        self.lexicon_folds = lexicon_folds
        self.safe_min_count = safe_min_count
        self.clusters = clusters  # folder made by `hybriddeid resources clusters`; "" = none
        self.gazetteers = list(gazetteers)  # bundled dictionary kinds, "*" = all of the language's
        self.extra_gazetteers = [str(path) for path in extra_gazetteers]  # the user's own lists
        problems = check_segments(
            {"segment_chars": segment_chars, "segment_overlap": segment_overlap, "engine": engine}
        )
        if problems:
            raise ValueError(problems[0])
        self.segment_chars = segment_chars  # longer lines are read in overlapping segments
        self.segment_overlap = segment_overlap
        self.engine = engine  # "fast" or "crfsuite" (ENGINES)
        self.trim_unsure = trim_unsure  # units less probable in their tag than outside leave spans
        self.verbose = verbose
        self.lexicon_: Gazetteer | None = None
        self.safe_words_: frozenset[str] = frozenset()
        self.clusters_: ClusterFeatures | None = None
        self.gazetteers_: dict[str, Gazetteer] = {}

    # -- what subclasses provide -------------------------------------------------------------
    def sequences(self, note: AnalysedNote | Document, lexicon: Gazetteer | None = None) -> Iterator[UnitSequence]:
        """The note's sequences; ``lexicon`` (default: the learned one) tags tokens for features."""
        raise NotImplementedError

    def emission_sequences(
        self,
        note: AnalysedNote | Document,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[UnitSequence]:
        """The fast engine's input: ``sequences`` with each unit's label scores in ``emissions``
        (``weights_.state``'s columns) instead of feature strings. This generic version looks the
        strings up; subclasses compute the scores from cached ids without building strings."""
        weights = self.weights_
        for seq in self._sequences_for(note, regions, skip):
            if seq.units:
                yield UnitSequence(seq.units, [], seq.core, seq.key, weights.emissions(seq.features))

    def _featurizer(self, key: tuple, build: Callable[[], Any]) -> Any:
        """The fast engine's featurizer that ``build()`` makes, kept while ``key`` holds: its memos
        are what make it fast, and a change to the model or settings it read needs a new one. Keys
        name objects by ``id``; the featurizer holds them, so no id is reused while it is kept."""
        cached = getattr(self, "_featurizer_", None)
        if cached is None or cached[0] != key:
            cached = self._featurizer_ = (key, build())
        return cached[1]

    def _sequences_for(
        self,
        note: AnalysedNote | Document,
        regions: Sequence[tuple[int, int]] | None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[UnitSequence]:
        """``sequences`` of the whole note, or of ``regions`` (less ``skip``) for taggers that take them."""
        if regions is None:
            return self.sequences(note)
        # a tagger whose component accepts_regions (the only ones the pipeline focuses) takes them
        sequences: Callable[..., Iterator[UnitSequence]] = self.sequences
        return sequences(note, regions=regions, skip=skip) if skip else sequences(note, regions=regions)

    def training_sequences(self, docs: list[Document]) -> Iterator[tuple[Document, Iterable[UnitSequence]]]:
        """Each training document with its sequences (each note analysed as it is read).

        With ``lexicon``, training notes are tagged by jackknifed lexicons (see
        ``features.gazetteer.jackknife``); prediction uses the lexicon of all training notes.
        """
        if not self.lexicon:
            for doc in docs:
                yield doc, self.sequences(analyse(doc, self.language))
            return
        self.lexicon_ = Gazetteer.from_documents(docs)
        for held_out, lexicon in jackknife(docs, self.lexicon_folds):
            for doc in held_out:
                yield doc, self.sequences(analyse(doc, self.language), lexicon)

    def get_params(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "c1": self.c1,
            "c2": self.c2,
            "max_iterations": self.max_iterations,
            "min_freq": self.min_freq,
            "label_level": self.label_level,
            "lexicon": self.lexicon,
            "lexicon_folds": self.lexicon_folds,
            "safe_min_count": self.safe_min_count,
            "clusters": self.clusters,
            "gazetteers": self.gazetteers,
            "extra_gazetteers": self.extra_gazetteers,
            "segment_chars": self.segment_chars,
            "segment_overlap": self.segment_overlap,
            "engine": self.engine,
            "trim_unsure": self.trim_unsure,
        }

    # -- training ---------------------------------------------------------------------------
    def _trainer_params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"max_iterations": self.max_iterations, "feature.minfreq": self.min_freq}
        if self.algorithm == "lbfgs":
            params.update({"c1": self.c1, "c2": self.c2})
        elif self.algorithm in ("l2sgd",):
            params.update({"c2": self.c2})
        return params

    def training_label(self, span: Span) -> str:
        """The tag label a gold span trains as (hook for coarser label levels)."""
        return span.label

    def _load_resources(self) -> None:
        """Word clusters and dictionaries named by the parameters (at fit; a saved model has copies)."""
        self.clusters_ = ClusterFeatures.of(WordClusters.from_disk(Path(self.clusters))) if self.clusters else None
        self.gazetteers_ = grouped_gazetteers(self.language, self.gazetteers, self.extra_gazetteers)

    def resource_tags(
        self, tokens: Sequence[Token], lowers: Sequence[str], lexicon: Gazetteer | None
    ) -> dict[str, list[str]]:
        """Per-token tags of a line from the lexicon ("lex") and each dictionary group ("gaz_names")."""
        if not self.gazetteers_ and lexicon is None:
            return {}
        word_keys = keys_of_words(lowers)  # hashed once for every dictionary and the lexicon
        tags = dictionary_tags(self.gazetteers_, tokens, lowers, word_keys) if self.gazetteers_ else {}
        if lexicon is not None:
            tags["lex"] = lexicon.tag(lowers, word_keys)
        return tags

    def fit(self, docs: Iterable[Document]) -> CRFTagger:
        docs = list(docs)
        self._load_resources()
        if self.safe_min_count > 0:
            self.safe_words_ = safe_vocabulary(docs, self.safe_min_count)
        trainer = pycrfsuite.Trainer(algorithm=self.algorithm, verbose=self.verbose)
        trainer.set_params(self._trainer_params())
        for doc, sequences in self.training_sequences(docs):
            spans = [span.with_label(self.training_label(span)) for span in doc.spans]
            for seq in sequences:
                trainer.append(seq.features, encode_tags(seq.units, spans, self.scheme))
        self._load_model(train_to_bytes(trainer))
        return self

    def _load_model(self, data: bytes) -> None:
        self.model_bytes_ = data
        self.tagger_ = open_tagger(data)
        self.weights_: CRFWeights = read_weights(data)
        self.decoder_ = Decoder(
            self.weights_, self.tagger_
        )  # the fast engine's: crfsuite's own decoding of given scores
        self.labels_ = tuple(sorted({tag[2:] for tag in self.tagger_.labels() if tag != OUTSIDE}))
        self.tags_by_label_ = {
            label: [tag for tag in self.tagger_.labels() if tag[2:] == label] for label in self.labels_
        }

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "tagger_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit() or from_disk()")

    @property
    def labels(self) -> tuple[str, ...]:
        self._check_fitted()
        return self.labels_

    def predict(self, note: AnalysedNote | Document, regions: Sequence[tuple[int, int]] | None = None) -> list[Span]:
        """Spans with scores: the lowest marginal probability of the tags inside each span.

        ``regions`` (sorted character stretches, e.g. from another tagger's ``predict_with_focus``)
        limits tagging to those stretches, for subclasses whose ``sequences`` support it."""
        note = analyse(note, self.language)
        return self.finish(note, self._tag(note, regions)[0])

    def finish(self, note: AnalysedNote, spans: list[Span]) -> list[Span]:
        """The spans ``predict`` returns for the raw spans decoded from tags (hook: the character
        CRF trims and types them); also applied to spans a P(O) threshold makes."""
        return spans

    def read(
        self,
        note: AnalysedNote | Document,
        keep_below: float,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> tuple[list[Span], list[TaggedSequence]]:
        """``predict``'s spans plus every sequence read, with each unit's P(O) and, where that is
        below ``keep_below``, its label probabilities: what a P(O) threshold up to ``keep_below``
        and focus stretches at any level need (``hybriddeid.pipeline.operating_point``). Sequences whose
        ``bounds`` are in ``skip`` (already read by an earlier call) are left out."""
        note = analyse(note, self.language)
        spans, _, sequences = self._tag(note, regions, keep_below=keep_below, skip=skip)
        return self.finish(note, spans), sequences

    def predict_with_focus(
        self, note: AnalysedNote | Document, below: float, margin: int, claim_from: float | None = None
    ) -> tuple[list[Span], list[tuple[int, int]]]:
        """``predict``'s spans plus the stretches where this tagger is unsure: units whose
        probability of being outside PHI is below ``below`` (or tagged as PHI), widened by
        ``margin`` units on each side within their line; sorted character offsets.

        With ``claim_from``, units inside this tagger's own spans scoring at least that are left
        out: when this tagger outranks the one being focused, the merger drops anything the other
        finds overlapping them (unless a still higher-ranked source displaces them first). A
        pipeline runs a slower tagger only on the stretches (config ``focus``); the
        forward-backward pass per line costs about a fifth of tagging it."""
        spans, unsure, _ = self._tag(analyse(note, self.language), None, below, margin, claim_from)
        return spans, unsure

    def _tag(
        self,
        note: AnalysedNote,
        regions: Sequence[tuple[int, int]] | None,
        below: float | None = None,
        margin: int = 0,
        claim_from: float | None = None,
        keep_below: float | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> tuple[list[Span], list[tuple[int, int]], list[TaggedSequence]]:
        self._check_fitted()
        spans: list[Span] = []
        unsure: list[tuple[int, int]] = []
        kept: list[TaggedSequence] = []
        if self.engine == "fast":
            sequences = self.emission_sequences(note, regions, skip)
        else:
            sequences = self._sequences_for(note, regions, skip)
        need_outside = below is not None or keep_below is not None
        # trimming reads P(O) only inside spans: a whole line's marginals are read lazily there, a long
        # line's stitched segments must keep the column
        readings = self._readings(sequences, need_outside, keep_below, need_outside or self.trim_unsure)
        for units, tags, marginal, parts in readings:
            found: list[Span] = []
            if tags.count(OUTSIDE) != len(tags):  # most lines hold no PHI: skip decoding them unit by unit
                # units outside this stretch are all O
                first = next(i for i, tag in enumerate(tags) if tag != OUTSIDE)
                last = len(tags) - next(i for i, tag in enumerate(reversed(tags)) if tag != OUTSIDE)
                window = tags[first:last]
                scores = marginal.span_scores(window, first)
                if self.trim_unsure:
                    window = _without_unsure_units(window, scores, marginal, first)
                found = decode_tags(units[first:last], window, self.source, scores)
                spans.extend(found)
            if keep_below is not None:  # P(O) of every unit, once: thresholds and focus (focus_stretches) share it
                kept.append(self._kept_sequence(units, tags, found, keep_below, marginal, parts))
            if below is not None:
                claimed = [span for span in found if span.score >= claim_from] if claim_from is not None else ()
                unsure.extend(
                    unsure_stretches(units, tags, marginal.column(OUTSIDE).__getitem__, below, margin, claimed)
                )
        return spans, unsure, kept

    def _readings(
        self,
        sequences: Iterable[UnitSequence],
        need_outside: bool,
        keep_below: float | None,
        keep_outside: bool,
    ) -> Iterator[tuple[list[tuple[int, int]], list[str], Marginals, tuple[tuple[int, int], ...]]]:
        """Each sequence tagged: its units, Viterbi tags, its ``Marginals`` (valid until the
        next item), and the keys of the segments stitched into it (none for a whole sequence).

        Sequences read from segments of a long line keep their core's units, and consecutive ones
        that both reach across the cut between their cores are stitched into one (what the whole
        line would have been, read with bounded memory): their tags are joined at the cut, so a
        span crossing it is decoded whole. Only the marginals the caller reads are kept: of each
        unit's own tag, P(O) when ``keep_outside`` (``need_outside`` also has every unit's marginals
        computed first) and, for units whose P(O) is below ``keep_below``, every tag's."""
        all_tags = [tag for tags_of in self.tags_by_label_.values() for tag in tags_of]
        per_tag_wanted = keep_below is not None and len(self.labels_) > 1
        chain: _Stitched | None = None
        for seq in sequences:
            if not seq.units:
                continue
            tags, marginal = self._decode(seq, need_outside)
            if seq.core is None:
                if chain is not None:
                    yield from chain.reading()
                    chain = None
                yield seq.units, tags, marginal, ()
                continue
            cut = seq.core[0]
            joins = (
                chain is not None
                and chain.cut == cut
                and chain.reaches_cut
                and seq.units[0][0] <= cut < seq.units[-1][1]
            )
            if chain is not None and not joins:
                yield from chain.reading()
                chain = None
            if chain is None:
                chain = _Stitched()
            lo = bisect.bisect_left(seq.units, (seq.core[0],))
            hi = bisect.bisect_left(seq.units, (seq.core[1],))
            base = len(chain.units)
            chain.units.extend(seq.units[lo:hi])
            chain.tags.extend(tags[lo:hi])
            chain.parts.append(seq.key if seq.key is not None else (seq.units[0][0], seq.units[-1][1]))
            for i in range(lo, hi):
                tag = tags[i]
                if tag != OUTSIDE:
                    chain.own[base + i - lo] = marginal(tag, i)
            if keep_outside:  # one column read, not a call per unit (a 20 MB line has millions)
                outside = marginal.column(OUTSIDE)[lo:hi]
                chain.outside.extend(outside)
                if per_tag_wanted and keep_below is not None:
                    for offset, p_outside in enumerate(outside):
                        if p_outside < keep_below:
                            chain.per_tag[base + offset] = {name: marginal(name, lo + offset) for name in all_tags}
            chain.cut = seq.core[1]
            chain.reaches_cut = seq.units[-1][1] > seq.core[1]
        if chain is not None:
            yield from chain.reading()

    def _decode(self, seq: UnitSequence, marginals_first: bool = False) -> tuple[list[str], Marginals]:
        """Viterbi tags of one sequence and a ``marginal(tag, i)`` valid until the next call
        (crfsuite runs forward-backward at its first call). Emission scores are decoded by
        crfsuite's own functions (``crfsuite_decoding``), exactly as it decodes the features' sums;
        ``marginals_first`` where every unit's P(O) will be read (``Decoder.decode``)."""
        if seq.emissions is None:
            tagger = self.tagger_
            return tagger.tag(seq.features), UnitMarginals(tagger.marginal, len(seq.units))
        return self.decoder_.decode(seq.emissions, marginals_first)

    def _kept_sequence(
        self,
        units: list[tuple[int, int]],
        tags: list[str],
        found: list[Span],
        keep_below: float,
        marginal: Marginals,
        parts: tuple[tuple[int, int], ...] = (),
    ) -> TaggedSequence:
        """The sequence just tagged, with its marginals (see ``TaggedSequence``)."""
        p_outside = marginal.column(OUTSIDE)
        label_probs: dict[int, dict[str, float]] = {}
        if len(self.labels_) > 1:  # a one-label tagger's label needs no probabilities
            for i, p in enumerate(p_outside):
                if p < keep_below:
                    label_probs[i] = {
                        label: sum(marginal(tag, i) for tag in tags_of)
                        for label, tags_of in self.tags_by_label_.items()
                    }
        return TaggedSequence(units, tags, p_outside, found, label_probs, parts)

    # -- persistence ------------------------------------------------------------------------
    def to_disk(self, path: Path) -> None:
        """Write what was learned: the crfsuite model, the lexicon, the safe words and copies of
        the word clusters and dictionaries (parameters are the pipeline config's)."""
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / self.model_file).write_bytes(self.model_bytes_)
        if self.lexicon_ is not None:
            self.lexicon_.to_disk(path / LEXICON_FILE)
        if self.safe_words_:
            (path / SAFE_WORDS_FILE).write_text("\n".join(sorted(self.safe_words_)) + "\n", encoding="utf-8")
        if self.clusters_ is not None:
            self.clusters_.clusters.to_disk(path / CLUSTERS_DIR)
        for group, gazetteer in self.gazetteers_.items():  # hashed, like the lexicon: user lists may hold PHI
            gazetteer.to_disk(path / GAZETTEERS_DIR / f"{group}.json")

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any]) -> CRFTagger:
        """The tagger saved in ``path`` by ``to_disk``, with ``params`` (its config section). Word
        clusters are read from the copy saved with the model, whatever folder ``clusters`` names:
        the weights were learned with those."""
        path = Path(path)
        tagger = cls(**params)
        tagger._load_model((path / cls.model_file).read_bytes())
        if tagger.lexicon:
            tagger.lexicon_ = Gazetteer.from_disk(path / LEXICON_FILE)
        if tagger.safe_min_count > 0:
            tagger.safe_words_ = frozenset((path / SAFE_WORDS_FILE).read_text(encoding="utf-8").split())
        if tagger.clusters:
            tagger.clusters_ = ClusterFeatures.of(WordClusters.from_disk(path / CLUSTERS_DIR))
        if tagger.gazetteers or tagger.extra_gazetteers:
            tagger.gazetteers_ = {
                file.stem: Gazetteer.from_disk(file) for file in sorted((path / GAZETTEERS_DIR).glob("*.json"))
            }
        return tagger


def _without_unsure_units(window: list[str], scores: Sequence[float], marginal: Marginals, first: int) -> list[str]:
    """``window``'s tags with O for each unit whose own tag's marginal (``scores``) is below its P(O): a
    span the Viterbi path carried through such units falls into the pieces each unit more probably
    belongs to, each scored by its own units. Units before and after a dropped one start new spans
    (``decode_tags`` reads an I after O as a start)."""
    out = list(window)
    for i, (tag, score) in enumerate(zip(window, scores)):
        if tag != OUTSIDE and score < 0.5 and score < marginal(OUTSIDE, first + i):
            out[i] = OUTSIDE
    return out


class _Stitched:
    """Segments of one long line read so far and stitched (see ``CRFTagger._readings``)."""

    __slots__ = ("units", "tags", "own", "outside", "per_tag", "parts", "cut", "reaches_cut")

    def __init__(self) -> None:
        self.units: list[tuple[int, int]] = []
        self.tags: list[str] = []
        self.own: dict[int, float] = {}  # marginal of each non-O unit's own tag
        self.outside = array("d")  # P(O) of every unit, when wanted
        self.per_tag: dict[int, dict[str, float]] = {}  # every tag's marginal, for units with low P(O)
        self.parts: list[tuple[int, int]] = []
        self.cut = -1  # end of the last segment's core
        self.reaches_cut = False  # whether the last segment's units reach past it

    def marginal(self, tag: str, i: int) -> float:
        if tag == OUTSIDE:
            return self.outside[i]
        if tag == self.tags[i]:
            return self.own[i]
        return self.per_tag[i][tag]

    def reading(self) -> Iterator[tuple[list[tuple[int, int]], list[str], Marginals, tuple[tuple[int, int], ...]]]:
        if self.units:
            yield self.units, self.tags, UnitMarginals(self.marginal, len(self.units)), tuple(self.parts)
