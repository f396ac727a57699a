"""What the token and character CRFs share: tag schemes, crfsuite training, tagging, persistence.

A subclass turns a document into sequences of units (tokens or characters, as character
offsets) with one feature list per unit; this module does the rest. Models are crfsuite's own
binary files plus a TOML of parameters, so loading never unpickles anything.
"""
from __future__ import annotations

import bisect
import os
from collections import Counter
import tempfile
import tomllib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

import pycrfsuite
import tomli_w

from hybriddeid.classifiers.base import NotFittedError
from hybriddeid.document import Document, Span
from hybriddeid.features.gazetteer import Gazetteer, jackknife
from hybriddeid.features.resources import ClusterFeatures, dictionary_tags, grouped_gazetteers
from hybriddeid.knowledge.clusters import WordClusters
from hybriddeid.text.tokenize import Token, tokenize

OUTSIDE = "O"
LEXICON_FILE = "lexicon.json"
SAFE_WORDS_FILE = "safe_words.txt"
CLUSTERS_DIR = "clusters"
GAZETTEERS_DIR = "gazetteers"
SCHEMES = ("BIO", "BIOES")


def params_for_disk(params: dict[str, Any]) -> dict[str, Any]:
    """A tagger's params as saved: ``clusters`` names the copy inside the model folder, not the
    folder the clusters were built in (which may not exist where the model is used)."""
    return {**params, "clusters": CLUSTERS_DIR} if params.get("clusters") else params


def params_from_disk(params: dict[str, Any], path: Path) -> dict[str, Any]:
    """Saved params made usable again: ``clusters`` points at the model's copy, so a refit finds it."""
    return {**params, "clusters": str(path / CLUSTERS_DIR)} if params.get("clusters") else params


@dataclass(slots=True)
class UnitSequence:
    """One CRF sequence: unit offsets (start, end) into the note and each unit's features."""

    units: list[tuple[int, int]]
    features: list[list[str]]


@dataclass(slots=True)
class TaggedSequence:
    """One sequence as a tagger read it, kept so that P(O) thresholds and focus stretches can be
    applied later without tagging again: the Viterbi ``tags``, each unit's probability of O, the
    spans found in it (with scores, before a subclass finishes them) and, for the units whose P(O)
    is below the reading's ``keep_below``, each label's probability (only for multi-label taggers)."""

    units: list[tuple[int, int]]
    tags: list[str]
    p_outside: list[float]
    spans: list[Span]
    label_probs: dict[int, dict[str, float]]

    @property
    def bounds(self) -> tuple[int, int]:
        """Character offsets the sequence covers (how a focused re-read recognises it)."""
        return self.units[0][0], self.units[-1][1]


def encode_tags(units: Sequence[tuple[int, int]], spans: Iterable[Span], scheme: str) -> list[str]:
    """BIO/BIOES tags for ``units`` from character spans; a unit touching a span belongs to it."""
    tags = [OUTSIDE] * len(units)
    starts = [start for start, _ in units]
    for span in spans:
        first = bisect.bisect_right(starts, span.start) - 1
        if first < 0 or units[first][1] <= span.start:
            first += 1
        inside = []
        for i in range(max(first, 0), len(units)):
            if units[i][0] >= span.end:
                break
            inside.append(i)
        if not inside:
            continue
        if any(tags[i] != OUTSIDE for i in inside):
            continue  # overlapping gold spans cannot both be encoded; keep the first
        for n, i in enumerate(inside):
            prefix = "B" if n == 0 else "I"
            if scheme == "BIOES":
                if len(inside) == 1:
                    prefix = "S"
                elif n == len(inside) - 1:
                    prefix = "E"
            tags[i] = f"{prefix}-{span.label}"
    return tags


def decode_tags(
    units: Sequence[tuple[int, int]], tags: Sequence[str], source: str, scores: Sequence[float] | None = None
) -> list[Span]:
    """Spans from BIO or BIOES tags; tolerant of ill-formed sequences (an I after O starts a span).

    With per-unit ``scores`` (marginal probabilities), a span's score is its least confident unit's.
    """
    spans: list[Span] = []
    open_label: str | None = None
    open_start = 0
    open_end = 0
    open_score = 1.0

    def close() -> None:
        if open_label is not None:
            spans.append(Span(open_start, open_end, open_label, source, open_score))

    for i, ((start, end), tag) in enumerate(zip(units, tags)):
        if tag == OUTSIDE:
            close()
            open_label = None
            continue
        prefix, label = tag[0], tag[2:]
        if prefix in "BS" or label != open_label:
            close()
            open_label, open_start, open_score = label, start, 1.0
        open_end = end
        if scores is not None:
            open_score = min(open_score, scores[i])
        if prefix in "ES":
            close()
            open_label = None
    close()
    return spans


def _unsure_stretches(
    units: Sequence[tuple[int, int]],
    tags: Sequence[str],
    p_outside: Callable[[int], float],
    below: float,
    margin: int,
    claimed: Sequence[Span] = (),
) -> list[tuple[int, int]]:
    """Character stretches of the units that are tagged as PHI or whose marginal probability of O
    (``p_outside(i)``: the tagger's, or kept from a reading) is below ``below``, each widened by
    ``margin`` units; units inside a ``claimed`` span (sorted, non-overlapping) do not count."""
    n = len(units)
    unsure = [i for i in range(n) if tags[i] != OUTSIDE or p_outside(i) < below]
    if claimed and unsure:
        kept, at = [], 0
        for i in unsure:
            start = units[i][0]
            while at < len(claimed) and claimed[at].end <= start:
                at += 1
            if not (at < len(claimed) and claimed[at].start <= start):
                kept.append(i)
        unsure = kept
    stretches: list[tuple[int, int]] = []
    last_end = -1  # unit index just past the previous stretch
    for i in unsure:
        first, end = max(i - margin, 0), min(i + margin + 1, n)
        if stretches and first <= last_end:
            stretches[-1] = (stretches[-1][0], units[end - 1][1])
        else:
            stretches.append((units[first][0], units[end - 1][1]))
        last_end = end
    return stretches


def focus_stretches(
    sequences: Iterable[TaggedSequence], below: float, margin: int, claim_from: float | None = None
) -> list[tuple[int, int]]:
    """``predict_with_focus``'s stretches, from sequences kept by ``CRFTagger.read``: the same
    marginals give the same stretches, at any ``below``, without tagging again."""
    stretches: list[tuple[int, int]] = []
    for seq in sequences:
        claimed = [span for span in seq.spans if span.score >= claim_from] if claim_from is not None else ()
        stretches.extend(_unsure_stretches(seq.units, seq.tags, seq.p_outside.__getitem__, below, margin, claimed))
    return stretches


def safe_vocabulary(docs: Iterable[Document], min_count: int) -> frozenset[str]:
    """Lower-cased words seen at least ``min_count`` times in training notes and never inside
    or touching a gold span ("paciente", "presenta"): the taggers give them thin features, as
    their label is settled, which halves the feature strings a note needs."""
    counts: Counter[str] = Counter()
    unsafe: set[str] = set()
    for doc in docs:
        covered = bytearray(len(doc.text) + 1)
        for span in doc.spans:
            covered[span.start:span.end] = b"\x01" * (span.end - span.start)
        for tok in tokenize(doc.text):
            word = tok.text.lower()
            if not word.isalpha():
                continue
            counts[word] += 1
            if any(covered[tok.start:tok.end]):
                unsafe.add(word)
    return frozenset(word for word, n in counts.items() if n >= min_count and word not in unsafe)


def train_to_bytes(trainer: pycrfsuite.Trainer) -> bytes:
    """Run crfsuite training (it writes a file) and return the model file's bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "model.crfsuite")
        trainer.train(model_path)
        return Path(model_path).read_bytes()


def open_tagger(data: bytes) -> pycrfsuite.Tagger:
    """A crfsuite tagger over an in-memory model (crfsuite's own format: nothing is unpickled)."""
    tagger = pycrfsuite.Tagger()
    tagger.open_inmemory(data)
    return tagger


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
        self.verbose = verbose
        self.lexicon_: Gazetteer | None = None
        self.safe_words_: frozenset[str] = frozenset()
        self.clusters_: ClusterFeatures | None = None
        self.gazetteers_: dict[str, Gazetteer] = {}

    # -- what subclasses provide -------------------------------------------------------------
    def sequences(self, doc: Document, lexicon: Gazetteer | None = None) -> Iterator[UnitSequence]:
        """The document's sequences; ``lexicon`` (default: the learned one) tags tokens for features."""
        raise NotImplementedError

    def training_sequences(self, docs: list[Document]) -> Iterator[tuple[Document, Iterable[UnitSequence]]]:
        """Each training document with its sequences.

        With ``lexicon``, training notes are tagged by jackknifed lexicons (see
        ``features.gazetteer.jackknife``); prediction uses the lexicon of all training notes.
        """
        if not self.lexicon:
            for doc in docs:
                yield doc, self.sequences(doc)
            return
        self.lexicon_ = Gazetteer.from_documents(docs)
        for held_out, lexicon in jackknife(docs, self.lexicon_folds):
            for doc in held_out:
                yield doc, self.sequences(doc, lexicon)

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
        self.clusters_ = ClusterFeatures(WordClusters.from_disk(Path(self.clusters))) if self.clusters else None
        self.gazetteers_ = grouped_gazetteers(self.language, self.gazetteers, self.extra_gazetteers)

    def resource_tags(self, tokens: Sequence[Token], lowers: Sequence[str], lexicon: Gazetteer | None) -> dict[str, list[str]]:
        """Per-token tags of a line from the lexicon ("lex") and each dictionary group ("gaz_names")."""
        tags = dictionary_tags(self.gazetteers_, tokens, lowers) if self.gazetteers_ else {}
        if lexicon is not None:
            tags["lex"] = lexicon.tag(lowers)
        return tags

    def fit(self, docs: Iterable[Document]) -> "CRFTagger":
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
        self.labels_ = tuple(sorted({tag[2:] for tag in self.tagger_.labels() if tag != OUTSIDE}))
        self.tags_by_label_ = {label: [tag for tag in self.tagger_.labels() if tag[2:] == label] for label in self.labels_}

    # -- prediction -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "tagger_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit() or from_disk()")

    @property
    def labels(self) -> tuple[str, ...]:
        self._check_fitted()
        return self.labels_

    def predict(self, doc: Document, regions: Sequence[tuple[int, int]] | None = None) -> list[Span]:
        """Spans with scores: the lowest marginal probability of the tags inside each span.

        ``regions`` (sorted character stretches, e.g. from another tagger's ``predict_with_focus``)
        limits tagging to those stretches, for subclasses whose ``sequences`` support it."""
        return self.finish(doc, self._tag(doc, regions)[0])

    def finish(self, doc: Document, spans: list[Span]) -> list[Span]:
        """The spans ``predict`` returns for the raw spans decoded from tags (hook: the character
        CRF trims and types them); also applied to spans a P(O) threshold makes."""
        return spans

    def read(
        self,
        doc: Document,
        keep_below: float,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> tuple[list[Span], list[TaggedSequence]]:
        """``predict``'s spans plus every sequence read, with each unit's P(O) and, where that is
        below ``keep_below``, its label probabilities: what a P(O) threshold up to ``keep_below``
        and focus stretches at any level need (``hybriddeid.operating_point``). Sequences whose
        ``bounds`` are in ``skip`` (already read by an earlier call) are left out."""
        spans, _, sequences = self._tag(doc, regions, keep_below=keep_below, skip=skip)
        return self.finish(doc, spans), sequences

    def predict_with_focus(
        self, doc: Document, below: float, margin: int, claim_from: float | None = None
    ) -> tuple[list[Span], list[tuple[int, int]]]:
        """``predict``'s spans plus the stretches where this tagger is unsure: units whose
        probability of being outside PHI is below ``below`` (or tagged as PHI), widened by
        ``margin`` units on each side within their line; sorted character offsets.

        With ``claim_from``, units inside this tagger's own spans scoring at least that are left
        out: when this tagger outranks the one being focused, the merger drops anything the other
        finds overlapping them (unless a still higher-ranked source displaces them first). A
        pipeline runs a slower tagger only on the stretches (config ``focus``); the
        forward-backward pass per line costs about a fifth of tagging it."""
        spans, unsure, _ = self._tag(doc, None, below, margin, claim_from)
        return spans, unsure

    def _tag(
        self,
        doc: Document,
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
        tagger = self.tagger_
        if regions is None:
            sequences = self.sequences(doc)
        else:
            sequences = self.sequences(doc, regions=regions, skip=skip) if skip else self.sequences(doc, regions=regions)
        for seq in sequences:
            if not seq.units:
                continue
            tags = tagger.tag(seq.features)
            tagged = [i for i, tag in enumerate(tags) if tag != OUTSIDE]
            found: list[Span] = []
            if tagged:  # most lines hold no PHI: skip decoding them unit by unit
                first, last = tagged[0], tagged[-1] + 1  # units outside this stretch are all O
                window = tags[first:last]
                scores = [1.0 if tag == OUTSIDE else tagger.marginal(tag, first + i) for i, tag in enumerate(window)]
                found = decode_tags(seq.units[first:last], window, self.source, scores)
                spans.extend(found)
            if keep_below is not None:  # P(O) of every unit, once: thresholds and focus (focus_stretches) share it
                kept.append(self._kept_sequence(seq.units, tags, found, keep_below))
            if below is not None:
                claimed = [span for span in found if span.score >= claim_from] if claim_from is not None else ()
                unsure.extend(_unsure_stretches(seq.units, tags, partial(tagger.marginal, OUTSIDE), below, margin, claimed))
        return spans, unsure, kept

    def _kept_sequence(
        self, units: list[tuple[int, int]], tags: list[str], found: list[Span], keep_below: float
    ) -> TaggedSequence:
        """The sequence just tagged, with its marginals (see ``TaggedSequence``)."""
        marginal = self.tagger_.marginal
        p_outside = [marginal(OUTSIDE, i) for i in range(len(units))]
        label_probs: dict[int, dict[str, float]] = {}
        if len(self.labels_) > 1:  # a one-label tagger's label needs no probabilities
            for i, p in enumerate(p_outside):
                if p < keep_below:
                    label_probs[i] = {label: sum(marginal(tag, i) for tag in tags_of)
                                      for label, tags_of in self.tags_by_label_.items()}
        return TaggedSequence(units, tags, p_outside, found, label_probs)

    # -- persistence ------------------------------------------------------------------------
    def to_disk(self, path: Path) -> None:
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / self.model_file).write_bytes(self.model_bytes_)
        (path / "params.toml").write_text(tomli_w.dumps(params_for_disk(self.get_params())), encoding="utf-8")
        if self.lexicon_ is not None:
            self.lexicon_.to_disk(path / LEXICON_FILE)
        if self.safe_words_:
            (path / SAFE_WORDS_FILE).write_text("\n".join(sorted(self.safe_words_)) + "\n", encoding="utf-8")
        if self.clusters_ is not None:
            self.clusters_.clusters.to_disk(path / CLUSTERS_DIR)
        for group, gazetteer in self.gazetteers_.items():  # hashed, like the lexicon: user lists may hold PHI
            gazetteer.to_disk(path / GAZETTEERS_DIR / f"{group}.json")

    @classmethod
    def from_disk(cls, path: Path) -> "CRFTagger":
        path = Path(path)
        params = tomllib.loads((path / "params.toml").read_text(encoding="utf-8"))
        tagger = cls(**params_from_disk(params, path))
        tagger._load_model((path / cls.model_file).read_bytes())
        if tagger.lexicon:
            tagger.lexicon_ = Gazetteer.from_disk(path / LEXICON_FILE)
        if tagger.safe_min_count > 0:
            tagger.safe_words_ = frozenset((path / SAFE_WORDS_FILE).read_text(encoding="utf-8").split())
        if tagger.clusters:
            tagger.clusters_ = ClusterFeatures(WordClusters.from_disk(Path(tagger.clusters)))
        if tagger.gazetteers or tagger.extra_gazetteers:
            tagger.gazetteers_ = {
                file.stem: Gazetteer.from_disk(file) for file in sorted((path / GAZETTEERS_DIR).glob("*.json"))
            }
        return tagger
