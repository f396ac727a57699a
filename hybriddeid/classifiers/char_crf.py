"""Character-level CRF (BIOES), paper section 3.2.3, made fast enough to train in minutes.

Design (measured choices are in docs/explanation/meddocan.md, "Character CRF design choices"):
- The CRF learns *boundaries*: with ``label_level="phi"`` every span trains as one label, so
  crfsuite has 5 states instead of 4x21+1, which cuts an L-BFGS iteration about 15-fold.
- A ``SpanTyper`` (a maximum-entropy model, trained with crfsuite on one-item sequences) then
  decides each span's fine type from the whole span and its context, which is where type
  evidence lives. ``label_level="subtype"`` or ``"category"`` trains the CRF on types instead.
- Character n-gram features are generated column-wise (see ``features.char``).
- The fast engine (``engine="fast"``) never builds them: ``features.char_ids`` sums each
  character's memoised weights (n-grams, words, tags) into its scores directly.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from hybriddeid.classifiers.crf import CRF_DEFAULTS, CRFTagger, check_segments
from hybriddeid.classifiers.focus import run_bounds, runs_in_regions
from hybriddeid.classifiers.sequences import UnitSequence
from hybriddeid.classifiers.span_typer import TYPER_DEFAULTS, SpanTyper
from hybriddeid.core.document import Document, Span
from hybriddeid.core.registry import ComponentSpec
from hybriddeid.core.taxonomy import guess_taxonomy
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.char import CharWindow, char_features, token_projections
from hybriddeid.features.char_ids import CharLine, CharScorer
from hybriddeid.features.gazetteer import Gazetteer

LABEL_LEVELS = ("phi", "category", "subtype")
# Feature families of the character CRF (ablations drop them one at a time): the character
# n-gram window (without it a character sees only itself), the projected token facts, and the
# line's sentence and section facts. Clusters, dictionaries and the lexicon have their own switches.
CHAR_FEATURE_FAMILIES = ("ngrams", "projection", "line")
PHI = "PHI"
TYPER_PREFIX = "typer_"  # the span typer's settings in the [char] section: typer_context, typer_c2, ...
# Characters the fast engine scores in one batch (whole lines or segments, so a batch may exceed
# it by one line): numpy's per-call cost is paid once per batch, memory stays bounded.
_SCORE_BATCH = 16384


class CharCRF(CRFTagger):
    """BIOES CRF over the characters of each line, plus a span typer for ``label_level="phi"``."""

    source = "char"
    scheme = "BIOES"
    model_file = "char.crfsuite"
    unit = "character"
    # from_disk's, for a model whose own files hold the typer's settings: Pipeline.load moves them to the config
    files_settings_: dict[str, Any]

    def __init__(
        self,
        radius: int = 4,
        bigram_radius: int | None = 2,
        trigram_radius: int | None = 2,
        language: str = "en",
        label_level: str = "phi",
        thin_interior: bool = True,
        features: Sequence[str] = CHAR_FEATURE_FAMILIES,
        typer_context: int = TYPER_DEFAULTS["context"],
        typer_c2: float = TYPER_DEFAULTS["c2"],
        typer_max_iterations: int = TYPER_DEFAULTS["max_iterations"],
        typer_lexicon: bool = TYPER_DEFAULTS["lexicon"],
        **crf_params: Any,
    ) -> None:
        if label_level not in LABEL_LEVELS:
            raise ValueError(f"label_level must be one of {LABEL_LEVELS}, not {label_level!r}")
        unknown = sorted(set(features) - set(CHAR_FEATURE_FAMILIES))
        if unknown:
            raise ValueError(f"unknown character feature families {unknown}; known: {list(CHAR_FEATURE_FAMILIES)}")
        super().__init__(label_level=label_level, **crf_params)
        self.radius = radius
        self.bigram_radius = bigram_radius
        self.trigram_radius = trigram_radius
        self.language = language
        self.thin_interior = thin_interior
        self.features = [name for name in CHAR_FEATURE_FAMILIES if name in features]
        # The span typer's settings (``SpanTyper``'s, prefixed): kept in this section of the config.
        self.typer_params: dict[str, Any] = {
            "context": typer_context,
            "c2": typer_c2,
            "max_iterations": typer_max_iterations,
            "lexicon": typer_lexicon,
        }
        self._window = CharWindow.symmetric(radius, bigram_radius, trigram_radius)
        if "ngrams" not in self.features:
            self._window = CharWindow((0,), (), ())

    def get_params(self) -> dict[str, Any]:
        params = {
            **super().get_params(),
            "radius": self.radius,
            "language": self.language,
            "thin_interior": self.thin_interior,
            "features": self.features,
            **{TYPER_PREFIX + key: value for key, value in self.typer_params.items()},
        }
        for name in ("bigram_radius", "trigram_radius"):
            if getattr(self, name) is not None:
                params[name] = getattr(self, name)
        return params

    def sequences(
        self,
        note: AnalysedNote | Document,
        lexicon: Gazetteer | None = None,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[UnitSequence]:
        """One sequence per line; with ``regions`` (sorted character stretches), one per run of
        tokens touching a stretch instead, each character's features the same as in the whole
        line's (token facts and n-grams are computed over the whole line). Runs whose character
        bounds are in ``skip`` (read before) are left out. A line longer than ``segment_chars`` is
        read as overlapping segments (``AnalysedNote.segments``), each as if it were the line;
        ``CRFTagger._tag`` stitches their cores back together."""
        note = analyse(note, self.language)
        text = note.text
        for core, item in self._char_lines(note, lexicon, regions, skip):
            line, tokens, lowers, tags = item.line, item.tokens, item.lowers, item.tags
            classes = [self.clusters_.projected(tok.text) for tok in tokens] if self.clusters_ is not None else None
            settled = [low in self.safe_words_ for low in lowers] if self.safe_words_ else None
            projected = token_projections(tokens, line, lowers) if "projection" in self.features else None
            for first, end, start, stop in item.runs:
                whole = (first, end) == (0, len(tokens))
                feats = char_features(
                    text,
                    line,
                    tokens[first:end],
                    self._window,
                    thin_interior=self.thin_interior,
                    token_features=projected[first:end] if projected is not None else None,
                    token_tags={name: values[first:end] for name, values in tags.items()},
                    settled=settled[first:end] if settled is not None else None,
                    lowers=lowers[first:end],
                    token_classes=classes[first:end] if classes is not None else None,
                    line_facts="line" in self.features,
                    projection="projection" in self.features,
                    bounds=None if whole else (start, stop),
                )
                units = list(zip(range(start, stop), range(start + 1, stop + 1)))
                yield UnitSequence(units, feats, core, None if core is None else (start, stop))

    def _char_lines(
        self,
        note: AnalysedNote,
        lexicon: Gazetteer | None,
        regions: Sequence[tuple[int, int]] | None,
        skip: Collection[tuple[int, int]],
    ) -> Iterator[tuple[tuple[int, int] | None, CharLine]]:
        """Each segment's core and what its sequences are built from (``sequences`` and the fast
        engine's ``emission_sequences`` share it): tokens, dictionary tags and the runs to read.
        What depends on a token's text alone (settled, clusters) each adds itself."""
        if lexicon is None:
            lexicon = self.lexicon_
        region_starts = [start for start, _ in regions] if regions is not None else []
        for segment in note.segments(self.segment_chars, self.segment_overlap):
            analysed = segment.line
            line, tokens = analysed.context, analysed.tokens
            runs = [(0, len(tokens))]
            if regions is not None:
                runs = runs_in_regions(tokens, regions, region_starts)
                if skip:
                    runs = [run for run in runs if run_bounds(line, tokens, run) not in skip]
                if not runs:
                    continue
            lowers = analysed.lowers
            tags = self.resource_tags(tokens, lowers, lexicon)
            bounded = [(first, end, *run_bounds(line, tokens, (first, end))) for first, end in runs]
            yield segment.core, CharLine(line, tokens, lowers, bounded, tags)

    def emission_sequences(
        self,
        note: AnalysedNote | Document,
        regions: Sequence[tuple[int, int]] | None = None,
        skip: Collection[tuple[int, int]] = (),
    ) -> Iterator[UnitSequence]:
        """``sequences`` (of ``regions``, less ``skip``) with each character's label scores in
        ``emissions``, computed from memoised weight sums (``features.char_ids``) without building
        the feature strings; lines are scored in batches of about ``_SCORE_BATCH`` characters."""
        scorer = self._scorer()
        if scorer is None:  # a window wider than the string path's padding (radius > 6)
            yield from super().emission_sequences(note, regions, skip)
            return
        note = analyse(note, self.language)
        text = note.text
        batch: list[tuple[tuple[int, int] | None, CharLine]] = []
        size = 0
        for core, item in self._char_lines(note, None, regions, skip):
            batch.append((core, item))
            size += sum(stop - start for _, _, start, stop in item.runs)
            if size >= _SCORE_BATCH:
                yield from self._scored(text, batch, scorer)
                batch, size = [], 0
        if batch:
            yield from self._scored(text, batch, scorer)

    @staticmethod
    def _scored(
        text: str, batch: list[tuple[tuple[int, int] | None, CharLine]], scorer: CharScorer
    ) -> Iterator[UnitSequence]:
        """The sequences of a batch of lines, scored together."""
        scores = iter(scorer.score(text, [item for _, item in batch]))
        for core, item in batch:
            for _, _, start, stop in item.runs:
                emissions = next(scores)
                if stop > start:
                    units = list(zip(range(start, stop), range(start + 1, stop + 1)))
                    yield UnitSequence(units, [], core, None if core is None else (start, stop), emissions)

    def _scorer(self) -> CharScorer | None:
        """This model's ``CharScorer`` (built at first use; None if the window is too wide)."""
        key = (
            id(self.weights_),
            id(self.safe_words_),
            id(self.clusters_),
            self._window,
            self.thin_interior,
            tuple(self.features),
        )
        return self._featurizer(key, self._new_scorer)

    def _new_scorer(self) -> CharScorer | None:
        if not CharScorer.supports(self._window):
            return None
        return CharScorer(
            self.weights_.state,
            self.weights_.attribute_id,
            self._window,
            self.thin_interior,
            "projection" in self.features,
            "line" in self.features,
            self.safe_words_,
            self.clusters_.projected if self.clusters_ is not None else None,
        )

    def training_label(self, span: Span) -> str:
        if self.label_level == "phi":
            return PHI
        if self.label_level == "category":
            return self.taxonomy_.category(span.label)
        return span.label

    def fit(self, docs: Iterable[Document]) -> CharCRF:
        docs = list(docs)
        self.taxonomy_ = guess_taxonomy(span.label for doc in docs for span in doc.spans)
        super().fit(docs)
        self.typer_: SpanTyper | None = None
        if self.label_level != "subtype":
            self.typer_ = SpanTyper(language=self.language, **self.typer_params).fit(docs)
        return self

    def finish(self, note: AnalysedNote, spans: list[Span]) -> list[Span]:
        """Trimmed spans, typed by the span typer (for ``label_level`` "phi" or "category")."""
        trimmed = [self._trim(note.text, span) for span in spans]
        spans = [span for span in trimmed if span is not None]
        if self.typer_ is None:
            return spans
        allowed = None
        typed = []
        for span in spans:
            if self.label_level == "category":
                allowed = [label for label in self.typer_.labels if self.taxonomy_.category(label) == span.label]
            typed.append(self.typer_.type_span(note, span, allowed))
        return typed

    @property
    def labels(self) -> tuple[str, ...]:
        self._check_fitted()
        return self.typer_.labels if self.typer_ is not None else self.labels_

    @staticmethod
    def _trim(text: str, span: Span) -> Span | None:
        """Drop whitespace a character tagger may have let into a span's edges."""
        start, end = span.start, span.end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start == end:
            return None
        return span if (start, end) == (span.start, span.end) else Span(start, end, span.label, span.source, span.score)

    def to_disk(self, path: Path) -> None:
        super().to_disk(path)
        path = Path(path)
        (path / "taxonomy.toml").write_text(tomli_w.dumps({"name": self.taxonomy_.name}), encoding="utf-8")
        if self.typer_ is not None:
            self.typer_.to_disk(path / "typer")

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any]) -> CharCRF:
        from hybriddeid.core.taxonomy import load_taxonomy

        path = Path(path)
        model = super().from_disk(path, params)
        assert isinstance(model, CharCRF)
        name = tomllib.loads((path / "taxonomy.toml").read_text(encoding="utf-8"))["name"]
        model.taxonomy_ = load_taxonomy(name)
        model.typer_ = None
        if (path / "typer").is_dir():
            model.typer_ = SpanTyper.from_disk(path / "typer", model.language, **model.typer_params)
            if model.typer_.get_params() != model.typer_params:  # an old model's own params.toml won
                model.typer_params = model.typer_.get_params()
                model.files_settings_ = {TYPER_PREFIX + key: value for key, value in model.typer_params.items()}
        return model


COMPONENT = ComponentSpec(
    class_path="hybriddeid.classifiers.char_crf:CharCRF",
    defaults={
        "radius": 4,
        "bigram_radius": 2,
        "trigram_radius": 2,
        "label_level": "phi",
        "thin_interior": True,
        "features": list(CHAR_FEATURE_FAMILIES),
        **CRF_DEFAULTS,
        **{TYPER_PREFIX + key: value for key, value in TYPER_DEFAULTS.items()},
    },
    accepts_regions=True,
    reads_marginals=True,
    fits_in_worker=True,
    check=check_segments,
)
