"""Decide the fine PHI type of a span whose boundaries are already known.

A maximum-entropy classifier over the span's words and shapes, its left/right context and its
line key ("Médico:", "NHC:"). It is trained with crfsuite on one-item sequences (a linear-chain
CRF over one item is exactly multinomial logistic regression), so it needs no extra dependency
and saves as a crfsuite file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pycrfsuite

from hybriddeid.classifiers.base import NotFittedError
from hybriddeid.classifiers.crfsuite_files import open_tagger, train_to_bytes
from hybriddeid.core.document import Document, Span
from hybriddeid.features.analysis import AnalysedNote, analyse
from hybriddeid.features.gazetteer import LEXICON_FILE, Gazetteer, cached_phrase_key, jackknife
from hybriddeid.features.lexical import short_shape

# The typer's settings (besides its language) and their defaults. A saved model keeps them in its
# owner's config section (the character CRF's ``typer_*`` keys), not in a file of its own.
TYPER_DEFAULTS: dict[str, Any] = {"context": 3, "c2": 0.1, "max_iterations": 150, "lexicon": True}
LEGACY_PARAMS_FILE = "params.toml"  # where models saved before one config kept the settings


class SpanTyper:
    """Multinomial logistic regression from span features to a fine label."""

    model_file = "typer.crfsuite"

    def __init__(
        self,
        language: str = "en",
        context: int = TYPER_DEFAULTS["context"],
        c2: float = TYPER_DEFAULTS["c2"],
        max_iterations: int = TYPER_DEFAULTS["max_iterations"],
        lexicon: bool = TYPER_DEFAULTS["lexicon"],
    ) -> None:
        self.language = language
        self.context = context
        self.c2 = c2
        self.max_iterations = max_iterations
        self.lexicon = lexicon
        self.lexicon_: Gazetteer | None = None

    def span_features(self, note: AnalysedNote, span: Span, lexicon: Gazetteer | None = None) -> list[str]:
        """The span's words and shape, its neighbours within its line, and the line's facts."""
        line = note.line_at(span.start)
        line_start, line_end = (line.start, line.end) if line else (0, len(note.text))
        inside = note.tokens_in(span.start, span.end)
        left = note.tokens_in(max(line_start, span.start - 80), span.start)[-self.context :]
        right = note.tokens_in(span.end, min(line_end, span.end + 60))[: self.context - 1]
        words = [tok.text.lower() for tok in inside]
        feats = [f"n={min(len(inside), 6)}", "shape=" + "".join(short_shape(tok.text) for tok in inside[:6])]
        feats.extend("in=" + w for w in words)
        if words:
            feats.extend(("first=" + words[0], "last=" + words[-1], "suf3=" + words[-1][-3:]))
        if lexicon is None:
            lexicon = self.lexicon_
        if lexicon is not None:
            feats.append("lex=" + lexicon.table.get(cached_phrase_key(tuple(words)), "none"))
            feats.extend("lexw=" + tag[2:] for tag in lexicon.tag(words) if tag != "O")
        for k, tok in enumerate(reversed(left), 1):
            feats.append(f"l{k}=" + tok.text.lower())
        for k, tok in enumerate(right, 1):
            feats.append(f"r{k}=" + tok.text.lower())
        if line is not None:
            feats.extend(line.features)
            feats.append("key=" + line.key if line.key and span.start >= line.key_end else "key=none")
        return feats

    def fit(self, docs: Iterable[Document]) -> SpanTyper:
        trainer = pycrfsuite.Trainer(algorithm="lbfgs", verbose=False)
        trainer.set_params({"c2": self.c2, "max_iterations": self.max_iterations})
        docs = list(docs)
        batches: list[tuple[Sequence[Document], Gazetteer | None]]
        if self.lexicon:
            self.lexicon_ = Gazetteer.from_documents(docs)
            batches = list(jackknife(docs))
        else:
            batches = [(docs, None)]
        for held_out, lexicon in batches:
            for doc in held_out:
                note = analyse(doc, self.language)
                for span in doc.spans:
                    trainer.append([self.span_features(note, span, lexicon)], [span.label])
        self._load_model(train_to_bytes(trainer))
        return self

    def _load_model(self, data: bytes) -> None:
        self.model_bytes_ = data
        self.tagger_ = open_tagger(data)
        self.labels_ = tuple(sorted(self.tagger_.labels()))

    @property
    def labels(self) -> tuple[str, ...]:
        if not hasattr(self, "labels_"):
            raise NotFittedError("SpanTyper is not fitted")
        return self.labels_

    def type_span(self, note: AnalysedNote | Document, span: Span, allowed: Sequence[str] | None = None) -> Span:
        """``span`` relabelled with its most probable type (restricted to ``allowed`` if given)."""
        self.tagger_.set([self.span_features(analyse(note, self.language), span)])
        if allowed:
            best = max(allowed, key=lambda label: self.tagger_.marginal(label, 0))
        else:
            best = self.tagger_.tag()[0]
        return span.with_label(best)

    def get_params(self) -> dict[str, Any]:
        """The settings ``to_disk`` leaves to the owner's config (``TYPER_DEFAULTS``' keys)."""
        return {key: getattr(self, key) for key in TYPER_DEFAULTS}

    def to_disk(self, path: Path) -> None:
        """The weights and the lexicon; the settings belong in the owner's config (``get_params``)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / self.model_file).write_bytes(self.model_bytes_)
        if self.lexicon_ is not None:
            self.lexicon_.to_disk(path / LEXICON_FILE)

    @classmethod
    def from_disk(cls, path: Path, language: str = "en", **params: Any) -> SpanTyper:
        """The typer saved in ``path``, with ``params`` from the owner's config; a model saved before
        one config (a ``params.toml`` beside the weights) is read with that file's settings, which
        are what it was trained with (its config had no typer settings)."""
        path = Path(path)
        legacy = path / LEGACY_PARAMS_FILE
        if legacy.is_file():
            params = tomllib.loads(legacy.read_text(encoding="utf-8"))
            params.setdefault("lexicon", False)  # typers saved before lexicons existed had none
        else:
            params = {"language": language, **params}
        typer = cls(**params)
        typer._load_model((path / cls.model_file).read_bytes())
        if typer.lexicon:
            typer.lexicon_ = Gazetteer.from_disk(path / LEXICON_FILE)
        return typer
