"""``Pipeline``: the hybrid system (rules + character CRF + token CRF + precedence merger).

A pipeline is fully described by its config (one TOML file saved with the model), so a saved
model can always be rebuilt and checked: ``Pipeline.load`` refuses a model whose saved recipe
does not match the code's feature names or whose files are missing. No pickles anywhere.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import hashlib
import json
import logging
import platform
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import cache, lru_cache, partial
from importlib import resources
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from hybriddeid._version import __version__
from hybriddeid.classifiers.crf import CLUSTERS_DIR, ENGINES
from hybriddeid.classifiers.focus import focus_stretches
from hybriddeid.classifiers.safelist import load_safelist
from hybriddeid.classifiers.sequences import TaggedSequence
from hybriddeid.classifiers.validators import (
    age_possible,
    decimal_cut,
    ip_address_possible,
    measurement_piece,
    name_possible,
    numeric_date_possible,
    reading_after_label,
    reading_with_unit,
    score_on_scale,
    series_piece,
    street_possible,
)
from hybriddeid.core.document import Document, Span, reading_copy
from hybriddeid.core.languages import register_cache, stop_words, unread_letters
from hybriddeid.core.merge import (
    DEFAULT_PRECEDENCE,
    filter_scores,
    given_names_before,
    link_name_words,
    merge,
    names_widened_by_readings,
    propagate,
    whole_name_words,
)
from hybriddeid.core.profiles import DEFAULT_PHI_SET, PHI_SETS, check_phi_set, filter_spans
from hybriddeid.core.registry import component_names, find_component, get_component
from hybriddeid.core.taxonomy import Taxonomy, guess_taxonomy
from hybriddeid.features.analysis import AnalysedNote, Piece, analyse, analysed_pieces
from hybriddeid.features.context import field_labels
from hybriddeid.knowledge.dictionaries import given_names, lower_words, measurement_labels, name_words, rating_words
from hybriddeid.pipeline.operating_point import (
    NO_THRESHOLD,
    NoteReading,
    SourceCandidates,
    check_threshold,
    focus_levels,
)
from hybriddeid.surrogates.language import fold, load_kinds, load_language
from hybriddeid.surrogates.names import NAME_WORD, relation_head

if TYPE_CHECKING:
    from hybriddeid.surrogates import DeidResult

log = logging.getLogger(__name__)

CONFIG_FILE = "config.toml"
META_FILE = "meta.json"
DEFAULT_MODEL = "default"
BUNDLED_MODELS = ("en", "es")  # hybriddeid/models/<name>
DEFAULT_BUNDLED = "en"  # what "default" (and no --model) loads
RESOURCE_PATH_KEYS = ("clusters", "extra_gazetteers")  # relative paths in a config file mean "next to it"

# The [pipeline] section; each component's section holds its registered defaults (hybriddeid.core.registry).
PIPELINE_DEFAULTS: dict[str, Any] = {
    "language": "en",
    "components": ["rule", "char", "token"],
    "precedence": list(DEFAULT_PRECEDENCE),
    # Per-source confidence floor, e.g. {char = 0.95}: spans scored lower are dropped before merging.
    "min_score": {"char": 0.9, "token": 0.5},
    # Agreement between sources: a stretch no source kept is kept where two sources found it (one span
    # of its extent, or pieces tiling it), each scoring at least this: two CRFs reading different
    # evidence, words and characters, that agree on a name neither is sure of (merge.filter_scores).
    # None (not written to config.toml): each source's floor alone.
    "agreement_score": None,
    # With agreement: the sources must also agree on what the stretch is, by the labels' surrogate
    # kinds (person, date, hospital...: a patient and a doctor agree, a person and a hospital do not).
    # Neither recipe sets it: English agrees on PHI alone (presidio-research F1 0.9401 against 0.9366 by
    # kind), Spanish not at all (MEDDOCAN dev strict F1 0.0000-0.0003 lower by kind, 0.0002-0.0005 on PHI alone).
    "agreement_same_kind": False,
    # Mark further occurrences, in the same note, of strings already found as PHI.
    "propagate": False,
    # Drop merged spans made only of clinical safe-list entries (hybriddeid.classifiers.safelist):
    # a bundled list's language ("en"), or "" for none.
    "safelist": "",
    # Relation words ("daughter", "son-in-law": the language pack's [relatives] terms) are nobody's
    # identifier: trim them from the start of merged spans ("daughter Rosa" -> "Rosa") and drop spans
    # made only of them. For taxonomies that never mark them (i2b2); MEDDOCAN marks relatives' mentions.
    "trim_relation_words": False,
    # Cascade, e.g. {char = "token"}: the character CRF tags only the stretches around tokens
    # the token CRF is unsure about (probability of O below focus_below, or tagged as PHI),
    # widened by focus_margin tokens. Elsewhere the focused tagger's spans could only fill gaps
    # the others leave where they are sure; on MEDDOCAN dev this kept F1 and made the pipeline
    # 1.5x faster (docs/explanation/meddocan.md). A CRF's marginals change near the end of a cut-off
    # sequence: with a margin of 2 a run ending two tokens after a doubt gave false positives.
    # {} = every component reads the whole note. Which components can focus or be focused is
    # their spec's (reads_marginals, accepts_regions).
    "focus": {},
    "focus_below": 0.999,
    "focus_margin": 8,
    # Which merged spans are PHI (hybriddeid.core.profiles): "i2b2-2014", every span; "hipaa", only
    # HIPAA Safe Harbor's identifiers (no professions, states, countries; ages only over 89).
    "phi_set": DEFAULT_PHI_SET,
    # Drop a DATE span that is only numbers no numeric date writing reads ("40/1000/15", "70-84":
    # ventilator settings and pressure ranges; validators.numeric_date_possible), whichever
    # component found it: in nursing notes such spans were most false DATEs, and surrogate mode
    # would replace a clinical value with random numbers. An IPADDR span with no address shape
    # ("7.45", a pH; validators.ip_address_possible) is dropped too, and so is an ID or IPADDR that is a
    # piece of a measurement series ("BP 114-17-49/52-67", "FS 178-224"; validators.measurement_piece).
    "drop_impossible_dates": True,
    # Operating point for recall (hybriddeid.pipeline.operating_point): a CRF token or character whose
    # marginal P(O) is below this is PHI too, on top of the output above. None (not written to
    # config.toml): no threshold.
    "phi_threshold": None,
    # A note longer than piece_chars characters is read in pieces of at most that many, overlapping
    # by piece_overlap (docs/explanation/long-notes.md): what a note costs is bounded by a piece, and every
    # component reads a piece as a note. Spans starting in a piece's core are kept, then merged,
    # propagated and filtered over the whole note. Shorter notes are read whole, as always.
    "piece_chars": 1_000_000,
    "piece_overlap": 10_000,
    # Training only: this share of the training notes (chosen by a hash of the note's name, so the
    # same every run) is also given flattened to one line, so tagging does not lean on line breaks
    # that exports lose. 0: none.
    "flattened_copies": 0.0,
    # Training only: shares of the training notes (chosen by a hash of the note's name and the case)
    # also given in capitals, in lower case or in title case, e.g. {upper = 0.2, lower = 0.1}: real notes
    # are often typed in capitals or without any, which no generated note and few real ones show, and a
    # CRF that learned names from capital letters misses them there. {}: none.
    "case_copies": {},
}


class ConfigError(ValueError):
    """A configuration (file or dict) that cannot describe a pipeline."""


def build_config(overrides: Mapping[str, Any] | None = None, origin: str = "config") -> dict[str, Any]:
    """The default config with ``overrides`` applied section by section; unknown keys are errors.

    The config has a [pipeline] section and one section per component: the default pipeline's
    components always, and any other registered component (e.g. [neural]) when it is listed or
    its section is given, each starting from the component's registered defaults.
    """
    overrides = overrides or {}
    pipeline_section = overrides.get("pipeline", {})
    listed = pipeline_section.get("components", []) if isinstance(pipeline_section, Mapping) else []
    config: dict[str, Any] = {"pipeline": copy.deepcopy(PIPELINE_DEFAULTS)}
    for name in [*PIPELINE_DEFAULTS["components"], *listed, *overrides]:
        spec = find_component(name) if isinstance(name, str) and name not in config else None
        if spec is not None:
            config[name] = copy.deepcopy(dict(spec.defaults))
    for section, values in overrides.items():
        if section not in config:
            raise ConfigError(
                f"{origin}: unknown section [{section}]; known: pipeline and the components {list(component_names())}"
            )
        if not isinstance(values, Mapping):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        for key, value in values.items():
            if key not in config[section]:
                raise ConfigError(f"{origin}: unknown key {key!r} in [{section}]")
            config[section][key] = value
    _validate(config, origin)
    return config


def _validate(config: dict[str, Any], origin: str) -> None:
    components = config["pipeline"]["components"]
    known = component_names()
    unknown = [name for name in components if name not in known]
    if unknown or not components or not all(isinstance(name, str) for name in components):
        raise ConfigError(f"{origin}: components must be a non-empty subset of {list(known)}")
    if sorted(config["pipeline"]["precedence"]) != sorted(set(config["pipeline"]["precedence"])):
        raise ConfigError(f"{origin}: precedence lists a source twice")
    min_score = config["pipeline"]["min_score"]
    if not isinstance(min_score, Mapping) or not all(0.0 <= float(v) <= 1.0 for v in min_score.values()):
        raise ConfigError(f"{origin}: min_score must map sources to thresholds in [0, 1]")
    if config["pipeline"]["safelist"]:
        try:
            load_safelist(config["pipeline"]["safelist"])
        except ValueError as exc:
            raise ConfigError(f"{origin}: safelist: {exc}") from None
    for key in ("trim_relation_words", "agreement_same_kind"):
        if not isinstance(config["pipeline"][key], bool):
            raise ConfigError(f"{origin}: {key} must be true or false")
    _validate_focus(config["pipeline"], origin)
    pieces, overlap = config["pipeline"]["piece_chars"], config["pipeline"]["piece_overlap"]
    if not (
        isinstance(pieces, int) and isinstance(overlap, int) and 0 <= overlap and max(10_000, 4 * overlap) <= pieces
    ):
        raise ConfigError(
            f"{origin}: piece_chars must be an integer of at least 10000 and at least 4 times "
            f"piece_overlap, an integer of at least 0 (got {pieces!r} and {overlap!r})"
        )
    if config["pipeline"]["phi_set"] not in PHI_SETS:
        raise ConfigError(
            f"{origin}: phi_set must be one of {', '.join(PHI_SETS)}, not {config['pipeline']['phi_set']!r}"
        )
    for key in ("phi_threshold", "agreement_score"):  # probabilities in (0, 1], or unset
        if config["pipeline"][key] is not None:
            try:
                check_threshold(config["pipeline"][key], key)
            except ValueError as exc:
                raise ConfigError(f"{origin}: {exc}") from None
    for name, section in config.items():
        check = get_component(name).check if name != "pipeline" else None
        for problem in check(section) if check else ():
            raise ConfigError(f"{origin}: [{name}] {problem}")


def _validate_focus(settings: Mapping[str, Any], origin: str) -> None:
    focus, components = settings["focus"], settings["components"]
    if not isinstance(focus, Mapping):
        raise ConfigError(f'{origin}: focus must be a table such as {{char = "token"}}')
    focusable = [name for name in components if get_component(name).accepts_regions]
    focusers = [name for name in components if get_component(name).reads_marginals]
    for focused, focuser in focus.items():
        if focused not in components or focuser not in components:
            raise ConfigError(f"{origin}: focus {focused} = {focuser!r} names a component the pipeline does not list")
        if focused not in focusable or focuser not in focusers or focused == focuser:
            raise ConfigError(
                f"{origin}: focus {focused} = {focuser!r}: of this pipeline's components only {focusable} "
                f"can be focused, by one of {focusers} other than itself"
            )
        if focuser in focus:
            raise ConfigError(f"{origin}: focus {focused} = {focuser!r}: a focusing component cannot be focused itself")
    if not 0.0 < float(settings["focus_below"]) <= 1.0 or not 0 <= int(settings["focus_margin"]) <= 50:
        raise ConfigError(f"{origin}: focus_below must be in (0, 1] and focus_margin in [0, 50]")
    if not 0.0 <= float(settings["flattened_copies"]) <= 1.0:
        raise ConfigError(f"{origin}: flattened_copies must be a share in [0, 1]")
    case_copies = settings["case_copies"]
    if not isinstance(case_copies, Mapping) or any(
        case not in CASES or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0
        for case, share in case_copies.items()
    ):
        raise ConfigError(f"{origin}: case_copies must map cases ({', '.join(CASES)}) to shares in [0, 1]")


def flattened_copies(docs: Sequence[Document], share: float) -> list[Document]:
    """Flattened copies (``Document.flattened``) of about ``share`` of the notes that have line
    breaks, picked by a hash of each name: the same notes every run, whatever their order."""
    if share <= 0:
        return []
    picked = (
        doc
        for doc in docs
        if ("\n" in doc.text or "\r" in doc.text) and hashlib.sha256(doc.name.encode("utf-8")).digest()[0] < share * 256
    )
    return [replace(doc.flattened(), name=doc.name + "#flat") for doc in picked]


CASES = ("upper", "lower", "title")


def without_relation_words(text: str, spans: Sequence[Span], terms: frozenset[str]) -> list[Span]:
    """``spans`` with the relation words (``terms``, folded) each begins with cut off, with the
    spaces and separators after them; a span of relation words alone is dropped. Only words written
    as a relation word is ("daughter", "Son:"), never what may be a name: capitalised with no
    separator after it ("Son Nguyen") or with letters folding takes accents from ("Sơn")."""
    kept = []
    for span in spans:
        value = text[span.start : span.end]
        words, end = relation_head(value, terms)
        head = value[:words]
        relation = bool(words) and fold(head) == head.lower() and (head.islower() or bool(value[words:end].strip()))
        if not relation:
            kept.append(span)
        elif any(c.isalnum() for c in value[end:]):
            kept.append(replace(span, start=span.start + end))
    return kept


def case_copies(docs: Sequence[Document], shares: Mapping[str, float]) -> list[Document]:
    """Copies of about ``shares[case]`` of the notes in each case (``Document.recased``), picked by a
    hash of the case and each name: the same notes every run, whatever their order, and other notes
    for each case."""
    copies: list[Document] = []
    for case, share in shares.items():
        for doc in docs:
            if share > 0 and hashlib.sha256(f"{case}:{doc.name}".encode()).digest()[0] < share * 256:
                copy = doc.recased(case)
                if copy is not None:
                    copies.append(replace(copy, name=f"{doc.name}#{case}"))
    return copies


# A name span's words are carried to the rest of a patient's notes only when its score is at least this.
LINK_MIN_SCORE = 0.9


def name_like(word: str, ordinary: frozenset[str], names: frozenset[str]) -> bool:
    """Whether ``word`` may be a name wherever it stands: a word of the name dictionaries, or one that
    the language's word list does not write in lower case (an ordinary word: "will", "was", "bill")."""
    folded = word.casefold()
    return folded in names or folded not in ordinary


def load_config(path: Path) -> dict[str, Any]:
    """Read a TOML config file (partial configs are completed with the defaults); relative
    resource paths in a component's section (``RESOURCE_PATH_KEYS``) are taken from its folder."""
    return build_config(config_overrides(path), origin=str(Path(path)))


def config_overrides(path: Path) -> dict[str, Any]:
    """What a TOML config file sets, not completed with the defaults (so callers can tell what it
    leaves out), with relative resource paths taken from its folder as ``load_config`` takes them."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config ({exc})") from None
    for section, values in data.items():
        if section == "pipeline" or not isinstance(values, dict):
            continue
        for key in RESOURCE_PATH_KEYS:
            if isinstance(values.get(key), str) and values[key]:
                values[key] = str(path.parent / values[key])
            elif isinstance(values.get(key), list):
                values[key] = [str(path.parent / item) for item in values[key]]
    return data


@register_cache
@cache
def label_words(language: str) -> frozenset[str]:
    """What names or joins a note's fields rather than fills them: ``language``'s field labels and
    stop words (lower-case). The merger trims them off a span where it cuts one (``merge.merge``)."""
    return field_labels(language) | stop_words(language)


@lru_cache(maxsize=16)
def _taxonomy_of(labels: tuple[str, ...]) -> Taxonomy:
    """``guess_taxonomy`` of a model's labels, once per label set (``within_phi_set`` asks per note)."""
    return guess_taxonomy(labels)


@register_cache
@cache
def _no_name_words(language: str) -> frozenset[str]:
    """Words a longer reading of a name may not add (``merge.names_widened_by_readings``): the language's
    stop words and titles ("And", "Dr")."""
    return stop_words(language) | load_language(language).titles


@lru_cache(maxsize=16)
def _person_labels(labels: tuple[str, ...]) -> frozenset[str]:
    """The labels among ``labels`` of people and relatives (``merge.given_names_before``)."""
    kinds = load_kinds()
    return frozenset(label for label in labels if kinds.kind(label) in ("person", "relative"))


@lru_cache(maxsize=16)
def _name_and_place_labels(labels: tuple[str, ...]) -> frozenset[str]:
    """The labels among ``labels`` whose category is a name or a place, and those of relatives, whose
    spans hold their names too (MEDDOCAN's FAMILIARES_SUJETO_ASISTENCIA): ``merge.whole_name_words``."""
    taxonomy, kinds = _taxonomy_of(labels), load_kinds()
    return frozenset(
        label for label in labels if taxonomy.category(label) in ("NAME", "LOCATION") or kinds.kind(label) == "relative"
    )


def component_params(name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments of component ``name``: its config section plus the language."""
    return {**config[name], "language": config["pipeline"]["language"]}


def build_component(name: str, config: Mapping[str, Any]) -> Any:
    """An unfitted classifier for component ``name`` with the parameters of ``config`` (a full
    pipeline config, e.g. from ``build_config``): what ``Pipeline.fit`` trains, for ablations."""
    return get_component(name).component_class()(**component_params(name, config))


def load_component(name: str, config: Mapping[str, Any], folder: Path, device: str | None = None) -> Any:
    """Component ``name`` as saved in ``folder`` (its native files), built with ``config``'s parameters;
    ``device`` goes to components that have a ``device`` setting (where they run, chosen at load)."""
    spec = get_component(name)
    params = component_params(name, config)
    if device is not None and "device" in spec.defaults:
        return spec.component_class().from_disk(Path(folder), params, device=device)
    return spec.component_class().from_disk(Path(folder), params)


def _fit_and_save(name: str, config: dict[str, Any], docs: list[Document], out_dir: str) -> float:
    """Fit one component and write it to ``out_dir`` (runs in a worker process)."""
    started = time.perf_counter()
    build_component(name, config).fit(docs).to_disk(Path(out_dir))
    return time.perf_counter() - started


class Pipeline:
    """Rules, character CRF and token CRF run independently (or the character CRF only where the
    token CRF is unsure, config ``focus``); their spans are merged by precedence."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = build_config(config)
        self.components: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}

    @property
    def language(self) -> str:
        return self.config["pipeline"]["language"]

    @property
    def precedence(self) -> list[str]:
        return list(self.config["pipeline"]["precedence"])

    @property
    def phi_set(self) -> str:
        """The PHI set the merged spans are filtered to unless a call names another (config ``phi_set``)."""
        return self.config["pipeline"]["phi_set"]

    @property
    def taxonomy(self) -> Taxonomy:
        """The bundled taxonomy that knows the model's labels: PHI sets read its spans through it."""
        return _taxonomy_of(tuple(self.labels))

    # -- training -------------------------------------------------------------------------
    def fit(self, docs: Iterable[Document], n_jobs: int = 2, corpus_name: str = "") -> Pipeline:
        """Train every component on ``docs``; the two CRFs train in parallel processes when n_jobs > 1."""
        docs = list(docs)
        if not any(doc.spans for doc in docs):
            raise ValueError("no training document has any gold span; nothing to learn from")
        originals = list(docs)
        docs += flattened_copies(originals, float(self.config["pipeline"]["flattened_copies"]))
        docs += case_copies(originals, self.config["pipeline"]["case_copies"])
        names = list(self.config["pipeline"]["components"])
        timings: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as tmp:
            crfs = [
                name for name in names if get_component(name).fits_in_worker
            ]  # others (torch) train in this process
            if n_jobs > 1 and len(crfs) > 1:
                with ProcessPoolExecutor(max_workers=min(n_jobs, len(crfs)), mp_context=get_context("fork")) as pool:
                    futures = {
                        name: pool.submit(_fit_and_save, name, self.config, docs, f"{tmp}/{name}") for name in crfs
                    }
                    timings.update({name: future.result() for name, future in futures.items()})
            else:
                for name in crfs:
                    timings[name] = _fit_and_save(name, self.config, docs, f"{tmp}/{name}")
            for name in names:
                if name not in crfs:
                    started = time.perf_counter()
                    self.components[name] = build_component(name, self.config).fit(docs)
                    timings[name] = time.perf_counter() - started
                else:
                    self.components[name] = load_component(name, self.config, Path(tmp) / name)
        labels = sorted({span.label for doc in docs for span in doc.spans})
        warn_unseen_labels(self.components, labels, "the training corpus")
        reports = {name: c.fit_report() for name, c in self.components.items() if hasattr(c, "fit_report")}
        self.meta = {
            "hybriddeid_version": __version__,
            "python": platform.python_version(),
            "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "training_corpus": {"name": corpus_name, "documents": len(docs), "spans": sum(len(d.spans) for d in docs)},
            "labels": labels,
            "fit_seconds": {name: round(seconds, 1) for name, seconds in timings.items()},
        }
        if reports:  # e.g. the rules' label mapping
            self.meta["fit_reports"] = reports
        return self

    # -- prediction -----------------------------------------------------------------------
    def _as_document(self, doc_or_text: AnalysedNote | Document | str) -> Document:
        if isinstance(doc_or_text, AnalysedNote):
            return doc_or_text.doc
        if isinstance(doc_or_text, Document):
            return doc_or_text
        if isinstance(doc_or_text, str):
            return Document("text", doc_or_text)
        raise TypeError("predict() takes a Document or a str")

    def analyse(self, doc_or_text: AnalysedNote | Document | str) -> AnalysedNote:
        """The note analysed once for this pipeline's language: every component reads this one."""
        return analyse(
            doc_or_text if isinstance(doc_or_text, AnalysedNote) else self._as_document(doc_or_text), self.language
        )

    def _check_ready(self) -> None:
        if not self.components:
            raise RuntimeError("this pipeline has no trained components; call fit() or Pipeline.load()")

    def pieces(self, doc_or_text: AnalysedNote | Document | str) -> Iterator[tuple[Piece, AnalysedNote]]:
        """The note analysed as the components read it: a note longer than ``piece_chars`` as pieces
        (``analysis.analysed_pieces``), one at a time; any other, or a note analysed already, whole."""
        if self._long(doc_or_text):
            settings = self.config["pipeline"]
            yield from analysed_pieces(
                self._as_document(doc_or_text), self.language, settings["piece_chars"], settings["piece_overlap"]
            )
            return
        note = self.analyse(doc_or_text)
        yield Piece(0, len(note.text), 0, len(note.text)), note

    def _long(self, doc_or_text: AnalysedNote | Document | str) -> bool:
        """Whether the note is read in pieces: longer than ``piece_chars`` and not analysed already."""
        return (
            not isinstance(doc_or_text, AnalysedNote)
            and len(self._as_document(doc_or_text).text) > self.config["pipeline"]["piece_chars"]
        )

    def predict_by_source(
        self, doc_or_text: AnalysedNote | Document | str, precedence: Sequence[str] | None = None
    ) -> dict[str, list[Span]]:
        """Each component's own spans, before merging (for ablations and error analysis); a long
        note's read piece by piece (``pieces``) and joined.

        With a ``focus`` config the focused component reads only where its focuser is unsure and,
        when the focuser ranks above it in ``precedence`` (default: the config's), not inside the
        focuser's own spans that pass its score floor: the merger would drop what it found there."""
        self._check_ready()
        joined: dict[str, list[Span]] = {name: [] for name in self.components}
        for piece, note in self.pieces(doc_or_text):
            for name, spans in self._note_by_source(note, precedence).items():
                joined[name].extend(piece.keep(spans))
        return joined

    def _note_by_source(self, note: AnalysedNote, precedence: Sequence[str] | None) -> dict[str, list[Span]]:
        """``predict_by_source`` of one analysed note (or piece)."""
        settings = self.config["pipeline"]
        focus = settings["focus"]
        if not focus:
            return {name: component.predict(note) for name, component in self.components.items()}
        order = list(self.precedence if precedence is None else precedence)
        spans: dict[str, list[Span]] = {}
        regions: dict[tuple[str, float | None], list[tuple[int, int]]] = {}
        for focused, focuser in focus.items():
            claim_from = self._claim_from(focused, focuser, order)
            key = (focuser, claim_from)
            if key not in regions:
                spans[focuser], regions[key] = self.components[focuser].predict_with_focus(
                    note, float(settings["focus_below"]), int(settings["focus_margin"]), claim_from
                )
            spans[focused] = self.components[focused].predict(note, regions=regions[key])
        for name, component in self.components.items():
            if name not in spans:
                spans[name] = component.predict(note)
        return {name: spans[name] for name in self.components}

    def _claim_from(self, focused: str, focuser: str, order: Sequence[str]) -> float | None:
        """The focuser's score floor when it outranks the focused component in ``order`` (its
        spans passing it are left out of the focused one's stretches), else None."""
        outranks = focuser in order and (focused not in order or order.index(focuser) < order.index(focused))
        return float(self.config["pipeline"]["min_score"].get(focuser, 0.0)) if outranks else None

    @contextlib.contextmanager
    def cpu_only(self) -> Iterator[None]:
        """Every component that has a device (the neural tagger) tags on the CPU inside the block:
        for work done before forking workers that will use a GPU (see ``NeuralTagger.cpu_only``)."""
        with contextlib.ExitStack() as stack:
            for component in self.components.values():
                if hasattr(component, "cpu_only"):
                    stack.enter_context(component.cpu_only())
            yield

    def prepare(self, patterns: bool = True) -> None:
        """Build now what components otherwise build on first use (the rules' one-scan prefilter and, with
        ``patterns``, the bundled rules' patterns): for a server or a batch run, before it forks its
        workers, so that they share it and no request or note pays for it."""
        for component in self.components.values():
            if hasattr(component, "prepare"):
                component.prepare(patterns=patterns)

    def threshold_for(self, threshold: float | None = None) -> float | None:
        """The P(O) threshold a call uses: ``threshold`` if given (0: none), else the config's
        ``phi_threshold``; None when there is none."""
        chosen = self.config["pipeline"]["phi_threshold"] if threshold is None else threshold
        return None if chosen is None or chosen == NO_THRESHOLD else check_threshold(chosen)

    def predict(
        self,
        doc_or_text: Document | str,
        precedence: Sequence[str] | None = None,
        phi_set: str | None = None,
        threshold: float | None = None,
    ) -> list[Span]:
        """Merged PHI spans of a note (character offsets into its text), within ``phi_set`` (default:
        the config's). ``threshold`` (default: the config's ``phi_threshold``, usually none; 0: none)
        also makes PHI every CRF unit whose P(O) is below it (``hybriddeid.pipeline.operating_point``); the
        PHI set applies last, to those too. A long note is read piece by piece (``pieces``). A note holding
        characters typed text does not (an apostrophe look-alike, a soft hyphen or zero-width space inside a word
        or number, letters with their accents as combining marks) is read as typed text, merge steps included, and
        its spans put back on its own offsets (``core.document.reading_copy``)."""
        doc = self._as_document(doc_or_text)
        typed = reading_copy(doc)
        if typed is not None:
            return typed.spans_back(self.predict(typed.doc, precedence, phi_set, threshold))
        threshold = self.threshold_for(threshold)
        if threshold is None:
            return self.combine(doc, self.predict_by_source(doc_or_text, precedence), precedence, phi_set)
        if not self._long(doc_or_text):
            return self.within_phi_set(doc, self.read(doc_or_text, threshold, precedence).spans(threshold), phi_set)
        # A long note is read twice: its spans without a threshold (merged and propagated over the
        # whole note), then each piece's marginals widen those inside it, as a whole reading would.
        base = self.combine(doc, self.predict_by_source(doc, precedence), precedence, DEFAULT_PHI_SET)
        joined: list[Span] = []
        for piece, note in self.pieces(doc):
            reading = replace(self.read(note, threshold, precedence), base=piece.inside(base))
            joined.extend(piece.keep(reading.spans(threshold)))
        return self.within_phi_set(doc, joined, phi_set)

    def link_names(self, docs: Sequence[Document]) -> list[Document]:
        """A patient's notes (with their predicted spans) with each name word found in any of them also
        marked where it stands alone in the others, or elsewhere in its own note ("Call Beatrice" once
        "Beatrice Harlowe" was found): ``merge.link_name_words``. Only the words of confident spans all
        of whose words are name-like are carried (``name_like``, ``LINK_MIN_SCORE``): one wrong name
        span ("Scattered Rhonchi") must not mark every "will", "and", "Hct" or "RHONCHI" of a patient's
        notes; a name that is also an ordinary word ("White") only where it is capitalised, never in
        capitals ("WHITE SPUTUM"). Titles, particles, initials and the safe-list's words are not linked
        either."""
        kinds, lang = load_kinds(), load_language(self.language)
        skipped = lang.titles | lang.particles
        safelist = load_safelist(self.config["pipeline"]["safelist"]) if self.config["pipeline"]["safelist"] else None
        ordinary, names = lower_words(self.language), name_words(self.language)

        found: dict[
            tuple[str, str, bool], list[str]
        ] = {}  # a long note repeats its names hundreds of thousands of times

        def words_of(span: Span, surface: str) -> list[str]:
            key = (span.label, surface, span.score >= LINK_MIN_SCORE)
            if key not in found:
                words = (
                    [
                        word
                        for word in NAME_WORD.findall(surface)
                        if len(word) > 1
                        and fold(word) not in skipped
                        and (safelist is None or not safelist.is_safe_text(word))
                    ]
                    if kinds.kind(span.label) == "person" and key[2]
                    else []
                )
                # A span holding an ordinary word that is no name ("Scattered Rhonchi") is no name the
                # model is sure of: none of its words is carried.
                found[key] = words if all(name_like(word, ordinary, names) for word in words) else []
            return found[key]

        linked = link_name_words(
            [doc.text for doc in docs], [doc.spans for doc in docs], words_of, capitalised_only=ordinary
        )
        return [doc.with_spans(spans) for doc, spans in zip(docs, linked)]

    def within_phi_set(self, doc: Document, spans: Sequence[Span], phi_set: str | None = None) -> list[Span]:
        """The spans inside ``phi_set`` (default: the config's), read through the model's taxonomy; never
        one holding text of a script the model does not read (``languages.unread_letters``), where its
        features are meaningless (Arabic sentences were read as URLs), nor (``drop_impossible_dates``) a
        DATE of numbers no date writing reads, an IPADDR with no address in it, a street that is one
        run of a number glued to a word (``validators.street_possible``), or an ID or IPADDR that is a
        piece of a series of measurements (``validators.measurement_piece``)."""
        phi_set = check_phi_set(self.phi_set if phi_set is None else phi_set)
        # the runs of unread characters, found once: a search per span cost seconds on a long note's million spans
        runs = [match.span() for match in unread_letters(self.language).finditer(doc.text)]
        if runs:
            ends = [end for _, end in runs]
            spans = [span for span in spans if not _meets(runs, ends, span.start, span.end)]
        taxonomy = self.taxonomy  # once: it reads every component's labels
        if self.config["pipeline"]["drop_impossible_dates"]:
            labels = {span.label for span in spans}
            checks = {label: numeric_date_possible for label in labels if taxonomy.category(label) == "DATE"}
            checks.update({label: ip_address_possible for label in labels if label == "IPADDR"})
            checks.update({label: age_possible for label in labels if taxonomy.category(label) == "AGE"})
            kinds = load_kinds()
            checks.update({label: street_possible for label in labels if kinds.kind(label) == "street"})
            persons = {label for label in labels if kinds.kind(label) == "person"}
            identifiers = {label for label in labels if label == "IPADDR" or taxonomy.category(label) == "ID"}
            dates = {label for label in labels if taxonomy.category(label) == "DATE"}
            readings = measurement_labels(self.language)
            ratings = rating_words(self.language)
            possible: dict[tuple[str, str], bool] = {}  # a long note repeats its surfaces many times
            kept = []
            for span in spans:
                if span.label in identifiers and measurement_piece(doc.text, span.start, span.end):
                    continue
                if span.label in dates and (
                    series_piece(doc.text, span.start, span.end)
                    or decimal_cut(doc.text, span.start, span.end)
                    or reading_after_label(doc.text, span.start, span.end, readings)
                    or score_on_scale(doc.text, span.start, span.end, ratings)
                ):
                    continue
                if span.label in dates and reading_with_unit(doc.text, span.start, span.end):
                    continue
                if span.label in persons and not name_possible(doc.text, span.start, span.end):
                    continue
                check = checks.get(span.label)
                if check is not None:
                    surface = doc.text[span.start : span.end]
                    key = (span.label, surface)
                    if key not in possible:
                        possible[key] = check(surface)
                    if not possible[key]:
                        continue
                kept.append(span)
            spans = kept
        return list(spans) if phi_set == DEFAULT_PHI_SET else filter_spans(spans, doc.text, taxonomy, phi_set)

    def read(
        self,
        doc_or_text: AnalysedNote | Document | str,
        max_threshold: float,
        precedence: Sequence[str] | None = None,
        keep_below: float | None = None,
    ) -> NoteReading:
        """Run the components over a note once, keeping each CRF unit whose P(O) is below
        ``max_threshold``: ``within_phi_set(doc, reading.spans(t))`` is ``predict(doc, precedence,
        threshold=t)`` for any t up to it (or None), without tagging again (what a threshold sweep needs).
        ``keep_below`` (at least ``max_threshold``) keeps more units, with their label
        probabilities, than the threshold needs, without reading more (the residual-risk
        estimate reads every token's P(O): ``hybriddeid.evaluation.risk``).

        The base spans are ``predict_by_source``'s; with ``focus``, the focused CRF also reads the
        stretches of each level ``focus_levels`` adds for ``max_threshold``, each run only once."""
        self._check_ready()
        note = self.analyse(doc_or_text)
        doc = note.doc
        max_threshold = check_threshold(max_threshold)
        keep_below = (
            max(max_threshold, check_threshold(keep_below, "keep_below")) if keep_below is not None else max_threshold
        )
        settings = self.config["pipeline"]
        order = list(self.precedence if precedence is None else precedence)
        spans: dict[str, list[Span]] = {}
        sequences: dict[str, list[TaggedSequence]] = {}  # a focuser's, for its stretches at every level
        kept: dict[str, SourceCandidates] = {}

        def candidates(name: str) -> SourceCandidates:
            if name not in kept:
                component = self.components[name]
                labels = component.labels_
                words = note.token_bounds if component.unit == "character" else None
                kept[name] = SourceCandidates(
                    name, partial(component.finish, note), labels[0] if len(labels) == 1 else None, words
                )
            return kept[name]

        for focused, focuser in settings["focus"].items():
            if focuser not in spans:
                spans[focuser], sequences[focuser] = self.components[focuser].read(note, keep_below)
                candidates(focuser).add_read(0.0, sequences[focuser], keep_below)
            claim_from = self._claim_from(focused, focuser, order)
            read_before: set[tuple[int, int]] = set()
            for level in focus_levels(float(settings["focus_below"]), max_threshold):
                regions = focus_stretches(sequences[focuser], level, int(settings["focus_margin"]), claim_from)
                found, more = self.components[focused].read(note, keep_below, regions, skip=read_before)
                spans.setdefault(focused, found)  # the first level's spans are predict_by_source's
                read_before.update(key for seq in more for key in seq.read_keys)
                candidates(focused).add_read(level, more, keep_below)
        for name, component in self.components.items():
            if name in spans:
                continue
            if get_component(name).reads_marginals:
                spans[name], read = component.read(note, keep_below)
                candidates(name).add_read(0.0, read, keep_below)
            else:
                spans[name] = component.predict(note)
        by_source = {name: spans[name] for name in self.components}
        ranked = [*[name for name in order if name in kept], *[name for name in kept if name not in order]]
        return NoteReading(
            doc,
            self.combine(doc, by_source, precedence, DEFAULT_PHI_SET),
            [kept[name] for name in ranked],
            max_threshold,
            float(settings["focus_below"]) if settings["focus"] else None,
        )

    def combine(
        self,
        doc: Document,
        by_source: Mapping[str, Sequence[Span]],
        precedence: Sequence[str] | None = None,
        phi_set: str | None = None,
    ) -> list[Span]:
        """Filter, merge and (if configured) propagate per-source spans, then keep those inside
        ``phi_set`` (default: the config's): the pipeline's final step. The merger reads the note: a
        span that loses an overlap keeps what lies outside the winner (``merge.merge``)."""
        settings = self.config["pipeline"]
        kind = load_kinds().kind if settings["agreement_same_kind"] else None
        spans = merge(
            filter_scores(by_source, settings["min_score"], settings["agreement_score"], doc.text, kind),
            self.precedence if precedence is None else precedence,
            doc.text,
            label_words(self.language),
        )
        spans = propagate(doc.text, spans) if settings["propagate"] else spans
        spans = whole_name_words(doc.text, spans, _name_and_place_labels(tuple(self.labels)))
        people = _person_labels(tuple(self.labels))
        if settings["agreement_score"] is not None:
            readings = (span for spans_of_source in by_source.values() for span in spans_of_source)
            spans = names_widened_by_readings(
                doc.text, spans, readings, people, settings["agreement_score"], _no_name_words(self.language)
            )
        spans = given_names_before(doc.text, spans, people, given_names(self.language))
        if settings["safelist"]:
            spans = load_safelist(settings["safelist"]).split(doc.text, spans)[0]
        if settings["trim_relation_words"]:
            spans = without_relation_words(doc.text, spans, load_language(self.language).relative_terms)
        return self.within_phi_set(doc, spans, phi_set)

    def annotate(self, doc: Document, phi_set: str | None = None, threshold: float | None = None) -> Document:
        """``doc`` with its spans replaced by the pipeline's merged predictions (``phi_set`` and
        ``threshold``: as in ``predict``)."""
        return doc.with_spans(self.predict(doc, phi_set=phi_set, threshold=threshold))

    def deidentify(
        self,
        doc_or_text: Document | str,
        patient_id: str | None = None,
        mode: str = "tag",
        key: bytes | None = None,
        phi_set: str | None = None,
        threshold: float | None = None,
        **options: Any,
    ) -> DeidResult:
        """The note with its PHI replaced: ``mode`` "tag", "mask" or "surrogate" (needs a ``key``);
        ``phi_set`` and ``threshold`` as in ``predict``.

        Returns a ``hybriddeid.surrogates.DeidResult`` (``.text``, ``.document`` with spans at output
        offsets, ``.replacements`` for an audit). Surrogates and the date offset are consistent for one
        ``patient_id`` under one key; without one, a Document is its own patient (by name) and so is a
        plain string (by its text). Only spans inside ``phi_set`` (default: the config's) are replaced.
        ``options`` are further ``DeidOptions`` fields (scope,
        date_shift_days, keep_years, cap_ages, truncate_zips, tag_level, mask_char, language).
        """
        import hashlib

        from hybriddeid.surrogates import DeidOptions, deidentify_document

        if patient_id is None and isinstance(doc_or_text, str):
            patient_id = "text:" + hashlib.sha256(doc_or_text.encode("utf-8")).hexdigest()
        options.setdefault("language", self.language)
        return deidentify_document(
            self.annotate(self._as_document(doc_or_text), phi_set, threshold),
            DeidOptions(mode=mode, key=key, **options),
            patient_id,
        )

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(sorted({label for component in self.components.values() for label in component.labels}))

    # -- persistence ----------------------------------------------------------------------
    def to_disk(self, path: Path) -> None:
        """Write config.toml, meta.json and one folder per component into ``path``."""
        self._check_ready()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / CONFIG_FILE).write_text(tomli_w.dumps(self._config_for_disk()), encoding="utf-8")
        (path / META_FILE).write_text(json.dumps(self.meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for name, component in self.components.items():
            component.to_disk(path / name)

    def _config_for_disk(self) -> dict[str, Any]:
        """The config as saved: each component's word clusters named by the copy the component
        saves (relative, so a moved or bundled model names folders that exist; components read
        their own copy) rather than the folder they were built in."""
        config = copy.deepcopy(self.config)
        for key in ("phi_threshold", "agreement_score"):
            if config["pipeline"][key] is None:  # TOML has no null: unset is left out
                del config["pipeline"][key]
        for name in self.components:
            if config.get(name, {}).get("clusters"):
                config[name]["clusters"] = f"{name}/{CLUSTERS_DIR}"
        return config

    @classmethod
    def load(
        cls, path_or_name: str | Path = DEFAULT_MODEL, engine: str | None = None, device: str | None = None
    ) -> Pipeline:
        """Load a saved pipeline from a folder, or a bundled model by name: "en" (English, also
        "default"), "es" (Spanish, MEDDOCAN). A folder of that name with a model in it wins.
        ``engine`` ("fast" or "crfsuite") sets how every CRF component tags, whatever the saved
        config says (both give the same spans; see ``classifiers.crf.ENGINES``). ``device``
        ("auto", "cpu", "cuda", "cuda:N") is where components with a device (the neural tagger)
        run; None: each one's config, which keeps where it was trained (a CUDA device this machine
        lacks means the CPU). The config itself is left as saved."""
        path = model_folder(path_or_name)
        config = load_config(path / CONFIG_FILE)
        if engine is not None:
            if engine not in ENGINES:
                raise ValueError(f"engine must be one of {list(ENGINES)}, not {engine!r}")
            for name in config["pipeline"]["components"]:
                if "engine" in get_component(name).defaults:
                    config[name]["engine"] = engine
        pipeline = cls(config)
        meta_path = path / META_FILE
        pipeline.meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        for name in pipeline.config["pipeline"]["components"]:
            if not (path / name).is_dir():
                raise FileNotFoundError(f"{path}: the config lists component {name!r} but its folder is missing")
            pipeline.components[name] = load_component(name, pipeline.config, path / name, device)
            # Settings an older layout kept in the component's own files (``files_settings_``, e.g.
            # the span typer's params.toml) join its config section, so saving again keeps them.
            pipeline.config[name].update(getattr(pipeline.components[name], "files_settings_", {}))
        if pipeline.meta.get("labels"):
            warn_unseen_labels(
                pipeline.components, pipeline.meta["labels"], f"{path}'s training corpus", taxonomy_aware=True
            )
        return pipeline


def _meets(runs: Sequence[tuple[int, int]], ends: Sequence[int], start: int, end: int) -> bool:
    """Whether ``[start, end)`` shares a character with one of ``runs`` (sorted, disjoint; ``ends``
    their ends): the first run ending after ``start`` begins before ``end``."""
    at = bisect.bisect_right(ends, start)
    return at < len(runs) and runs[at][0] < end


def unseen_labels(components: Mapping[str, Any], labels: Iterable[str]) -> dict[str, list[str]]:
    """Per component, the labels it can predict that are not in ``labels`` (only those with any)."""
    known = set(labels)
    found = {name: sorted(set(component.labels) - known) for name, component in components.items()}
    return {name: extra for name, extra in found.items() if extra}


def warn_unseen_labels(
    components: Mapping[str, Any], labels: Iterable[str], where: str, taxonomy_aware: bool = False
) -> None:
    """Log a warning per component that can predict a label ``where`` (the training corpus) lacks:
    such spans never score as correct against data annotated like it (labels only, no text).

    ``taxonomy_aware`` (loading a model, where the user may not be the trainer): labels that the
    corpus lacks but its taxonomy knows (the Spanish rules' URL_WEB on MEDDOCAN) are only noted at
    INFO; a label from another naming (EMAIL on MEDDOCAN) is still a warning."""
    labels = list(labels)
    taxonomy = _taxonomy_of(tuple(sorted(set(labels)))) if taxonomy_aware else None
    for name, extra in unseen_labels(components, labels).items():
        foreign = [label for label in extra if taxonomy is None or not taxonomy.knows(label)]
        if foreign:
            log.warning("component %r can predict labels not in %s: %s", name, where, ", ".join(foreign))
        if taxonomy is not None and len(foreign) < len(extra):
            log.info(
                "component %r can predict labels of the %s taxonomy that %s lacks: %s",
                name,
                taxonomy.name,
                where,
                ", ".join(label for label in extra if label not in foreign),
            )


def model_folder(path_or_name: str | Path = DEFAULT_MODEL) -> Path:
    """The folder of a saved model, or of a bundled one by name ("en", "es", "default"); a folder of
    that name with a model in it wins. FileNotFoundError when there is no config.toml there."""
    path = Path(path_or_name)
    name = DEFAULT_BUNDLED if str(path_or_name) == DEFAULT_MODEL else str(path_or_name)
    if not (path / CONFIG_FILE).is_file() and name in BUNDLED_MODELS:
        path = Path(str(resources.files("hybriddeid.models").joinpath(name)))
    if not (path / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{path}: not a hybriddeid model (no {CONFIG_FILE})")
    return path


def model_language(path_or_name: str | Path = DEFAULT_MODEL) -> str:
    """The language of a saved or bundled model, read from its config.toml alone: no component is
    loaded, for callers that need nothing else (``deid``'s default surrogate language)."""
    return load_config(model_folder(path_or_name) / CONFIG_FILE)["pipeline"]["language"]
