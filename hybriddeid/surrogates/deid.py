"""De-identified text from a document and its PHI spans: tags, masks or consistent surrogates.

Works on any spans (a model's predictions or gold annotations). Text outside the spans is copied
byte for byte; each replacement is recorded (offsets in the input and the output, label, kind,
method, source, score, replacement, never the original value) for the audit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import date
from functools import lru_cache
from typing import Any

from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import available_languages, unread_pattern
from hybriddeid.core.profiles import hipaa_age_rule
from hybriddeid.surrogates.dates import DAYS_PER_YEAR, DateShifter
from hybriddeid.surrogates.generator import MAX_SHOWN_AGE, Surrogates, SurrogateSettings
from hybriddeid.surrogates.keys import Keyed
from hybriddeid.surrogates.language import fold, load_kinds, load_language
from hybriddeid.surrogates.names import NAME_WORD, NameInventory

MODES = ("tag", "mask", "surrogate")
UNSUPPORTED_SCRIPT = ("keep", "mask")  # what becomes of text in scripts the language's models do not read
UNREAD_LABEL, UNREAD_METHOD = "UNSUPPORTED_SCRIPT", "unsupported-script"
SCOPES = ("patient", "corpus")
TAG_LEVELS = ("category", "label")
DEFAULT_DATE_SHIFT_DAYS = 365


@dataclass(frozen=True)
class DeidOptions:
    """How to de-identify.

    ``key`` (16+ bytes) is needed for ``surrogate`` mode. ``scope`` says where one value keeps one
    surrogate (and one date offset): every note of a patient, or the whole corpus. Dates move by an
    offset in [-date_shift_days, date_shift_days] that moves the weekday and, when the range allows, the
    month (``offset_magnitudes``). Ages over 89, and dates whose year tells
    one, are always aggregated ("90+"; ``cap_ages`` is kept for callers that set it). Safe Harbor
    options: ``truncate_zips`` keeps a ZIP's first three digits ("000" for restricted
    areas), ``keep_years`` leaves years as they were (shifting day and month only).
    ``unsupported_script``: text in scripts the language's models do not read (Arabic in an English
    note, emoji; ``languages.unread_pattern``) is kept as it is, or masked ("mask"); either way
    ``DeidResult.unread_characters`` counts it.
    """

    mode: str = "tag"
    language: str = "en"
    key: bytes | None = None
    scope: str = "patient"
    date_shift_days: int = DEFAULT_DATE_SHIFT_DAYS
    keep_years: bool = False
    cap_ages: bool = False
    truncate_zips: bool = False
    tag_level: str = "category"
    mask_char: str = "*"
    unsupported_script: str = "keep"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("mode", self.mode, MODES),
            ("scope", self.scope, SCOPES),
            ("tag_level", self.tag_level, TAG_LEVELS),
            ("language", self.language, available_languages()),
            ("unsupported_script", self.unsupported_script, UNSUPPORTED_SCRIPT),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")
        if self.mode == "surrogate" and not self.key:
            raise ValueError("surrogate mode needs a secret key (key=...; see hybriddeid.surrogates.new_key)")
        if not 1 <= self.date_shift_days <= 36500:
            raise ValueError("date_shift_days must be between 1 and 36500")
        if len(self.mask_char) != 1 or self.mask_char.isspace():
            raise ValueError("mask_char must be one visible character")


@dataclass(frozen=True, slots=True)
class Replacement:
    """One replaced span, as the audit records it: no original text (slots: a 20 MB note has
    hundreds of thousands)."""

    start: int
    end: int
    out_start: int
    out_end: int
    label: str
    category: str
    kind: str
    method: str
    source: str
    score: float
    replacement: str

    def to_dict(self) -> dict[str, Any]:
        # every field is a scalar: read directly (asdict's deep copy made the audit of a long note cost seconds)
        return {name: getattr(self, name) for name in _REPLACEMENT_FIELDS}


_REPLACEMENT_FIELDS = tuple(field.name for field in fields(Replacement))


@dataclass(frozen=True)
class DeidResult:
    """The de-identified note (its spans at output offsets) and what was replaced."""

    document: Document
    replacements: tuple[Replacement, ...]
    unread_characters: int = 0  # characters in scripts the models do not read (kept or masked)

    @property
    def text(self) -> str:
        return self.document.text


def scope_id(scope: str, patient_id: str) -> str:
    """The HMAC namespace of a patient's surrogates and date offset."""
    return f"patient:{patient_id}" if scope == "patient" else "corpus"


def date_offset(keyed: Keyed, scope: str, max_days: int) -> int:
    """The scope's date shift in days: from the key, in [-max_days, max_days]. Chosen among the
    magnitudes that change every calendar field a note writes alone (``offset_magnitudes``), so a
    shifted date cannot sit a day or a week from the real one."""
    magnitudes = offset_magnitudes(max_days)
    magnitude = magnitudes[keyed.choice_index(len(magnitudes), scope, "date-offset")]
    return magnitude if keyed.choice_index(2, scope, "date-offset-sign") else -magnitude


MIN_MONTHS_AWAY = 32  # days from any whole number of years: a 31-day month, and a day of leap-year drift
# The name of the rule above, recorded with a surrogate run's settings: the same key gave other offsets
# under the rule before it (any magnitude but a whole number of weeks), so a patient's later notes must
# not join output shifted by that rule.
DATE_OFFSET_RULE = "weekday-and-month"


@lru_cache(maxsize=8)
def offset_magnitudes(max_days: int) -> tuple[int, ...]:
    """The shift magnitudes in [1, max_days] that move a weekday (not a whole number of weeks) and a
    month (at least ``MIN_MONTHS_AWAY`` days from a whole number of years, so "July 29" never becomes
    "July 30" nor "March 2022" "March 2021"). A range too short for that keeps what it can: then
    weekday-moving magnitudes, then any but 0."""

    def months_away(days: int) -> bool:
        years = round(days / DAYS_PER_YEAR)
        return abs(days - years * DAYS_PER_YEAR) >= MIN_MONTHS_AWAY

    every = range(1, max_days + 1)
    for keep in (lambda d: d % 7 and months_away(d), lambda d: d % 7, lambda d: True):
        magnitudes = tuple(d for d in every if keep(d))
        if magnitudes:
            return magnitudes
    raise ValueError("max_days must be at least 1")


def disjoint(spans: Iterable[Span]) -> list[Span]:
    """Spans with overlaps merged into one span (labelled as the longest of them): each character is
    replaced once."""
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -(s.end - s.start))):
        if out and span.start < out[-1].end:
            last = out[-1]
            if span.end > last.end:
                out[-1] = Span(last.start, span.end, last.label, last.source, min(last.score, span.score))
            continue
        out.append(span)
    return out


def _masked(value: str, mask_char: str) -> str:
    return "".join(char if char.isspace() else mask_char for char in value)


def _surrogates_for(docs: Sequence[Document], options: DeidOptions, patient_id: str) -> Surrogates:
    lang = load_language(options.language)
    assert options.key is not None  # DeidOptions refuses surrogate mode without a key
    keyed = Keyed(options.key)
    scope = scope_id(options.scope, patient_id)
    kinds = load_kinds()
    names = [doc.span_text(s) for doc in docs for s in doc.spans if kinds.kind(s.label) == "person"]
    inventory = NameInventory(names, lang.particles, lang.titles)
    shifter = DateShifter(lang.dates, date_offset(keyed, scope, options.date_shift_days), options.keep_years)
    # Surrogates must not bring back the patient's own values. Not in corpus scope: a value's
    # surrogate would then depend on which patient it is seen with.
    avoid = _original_values(docs, kinds, lang) if options.scope == "patient" else []
    settings = SurrogateSettings(options.cap_ages, options.truncate_zips, oldest_shown_year(docs, kinds, shifter))
    return Surrogates(lang, keyed, scope, shifter, inventory, settings, avoid)


def oldest_shown_year(docs: Sequence[Document], kinds, shifter: DateShifter) -> int:
    """The earliest year a patient's dates may show: an earlier one (a date of birth, mostly) would
    tell an age over 89 today (Safe Harbor), or at the latest date of the patient's notes when that
    is later. A stated age over 89 needs no rule of its own: its birth year is earlier still."""
    years = [
        year
        for doc in docs
        for span in doc.spans
        if kinds.kind(span.label) == "date"
        for year in shifter.years(doc.span_text(span))
    ]
    return max([*years, date.today().year]) - MAX_SHOWN_AGE


def _original_values(docs: Sequence[Document], kinds, lang) -> list[str]:
    """The patient's PHI values that surrogates must not bring back: values, name words (not titles
    or particles) and age numbers. Sexes, family terms and dates are left out: they are drawn from
    small sets or shifted, and may rightly come out equal to another original."""
    common = lang.particles | lang.titles
    values = []
    for doc in docs:
        for span in doc.spans:
            value, kind = doc.span_text(span), kinds.kind(span.label)
            if kind not in ("sex", "relative", "date"):
                values.append(value)
            if kind in ("person", "relative"):
                values += [w for w in NAME_WORD.findall(value) if len(w) > 1 and fold(w) not in common]
            if kind in ("age", "relative"):
                values += re.findall(r"\d+", value)
            if kind == "age" and not any(c.isdigit() for c in value):  # "tres meses": 3, so no age becomes it
                stated = hipaa_age_rule().stated_age(value)
                values += [str(stated)] if stated is not None else []
    return values


def deidentify_patient(docs: Sequence[Document], options: DeidOptions, patient_id: str) -> list[DeidResult]:
    """De-identify all notes of one patient together, each with its own spans.

    Giving all of a patient's notes at once lets initials link to full names seen in any of them;
    everything else (surrogates, date offset) depends only on the key, the scope and the value.
    """
    surrogates = _surrogates_for(docs, options, patient_id) if options.mode == "surrogate" else None
    return [_deidentify(doc, options, surrogates) for doc in docs]


def deidentify_document(doc: Document, options: DeidOptions, patient_id: str | None = None) -> DeidResult:
    """De-identify one note with its own spans (gold or predicted); ``patient_id`` defaults to its name."""
    return deidentify_patient([doc], options, doc.name if patient_id is None else patient_id)[0]


def _deidentify(doc: Document, options: DeidOptions, surrogates: Surrogates | None) -> DeidResult:
    lang = load_language(options.language)
    kinds = load_kinds()
    pieces: list[str] = []
    replacements: list[Replacement] = []
    out_spans: list[Span] = []
    tags: dict[str, str] = {}
    cursor = out_length = 0
    unread = [
        Span(m.start(), m.end(), UNREAD_LABEL, UNREAD_METHOD)
        for m in unread_pattern(options.language).finditer(doc.text)
    ]
    masked_unread = unread if options.unsupported_script == "mask" else []
    kinds_of: dict[str, tuple[str, str]] = {}  # label -> (category, kind): asked once per span
    for span in disjoint([*doc.spans, *masked_unread]):
        if span.label not in kinds_of:
            kinds_of[span.label] = kinds.category(span.label), kinds.kind(span.label)
        category, kind = kinds_of[span.label]
        if span.label == UNREAD_LABEL:
            new, method, category, kind = (
                _masked(doc.span_text(span), options.mask_char),
                UNREAD_METHOD,
                "OTHER",
                "shape",
            )
        elif options.mode == "tag":
            shown = category if options.tag_level == "category" else span.label
            if shown not in tags:  # one string per tag, not per span (a long note has hundreds of thousands)
                tags[shown] = lang.tag_format.format(label=shown)
            new, method = tags[shown], "tag"
        elif options.mode == "mask":
            new, method = _masked(doc.span_text(span), options.mask_char), "mask"
        else:
            assert surrogates is not None  # made by deidentify_patient whenever the mode is surrogate
            new, method = surrogates.replace(kind, doc.span_text(span))
        kept = doc.text[cursor : span.start]
        pieces += [kept, new]
        out_start = out_length + len(kept)
        out_length = out_start + len(new)
        cursor = span.end
        replacements.append(
            Replacement(
                span.start,
                span.end,
                out_start,
                out_length,
                span.label,
                category,
                kind,
                method,
                span.source,
                span.score,
                new,
            )
        )
        if new and span.label != UNREAD_LABEL:  # masked unread text is no PHI span of the output
            out_spans.append(Span(out_start, out_length, span.label, span.source, span.score))
    pieces.append(doc.text[cursor:])
    return DeidResult(
        Document(doc.name, "".join(pieces), tuple(out_spans), doc.meta),
        tuple(replacements),
        sum(span.end - span.start for span in unread),
    )


def apply_replacements(text: str, replacements: Iterable[Replacement | dict]) -> str:
    """``text`` with recorded replacements applied (to verify an output against its audit)."""
    records = sorted((r if isinstance(r, dict) else r.to_dict() for r in replacements), key=lambda r: r["start"])
    return "".join(piece for piece in _replaced_pieces(text, records) if piece is not None)  # sorted: never None


def matches_replacements(text: str, output: str, replacements: Iterable[Replacement | dict]) -> bool:
    """Whether ``output`` is ``apply_replacements(text, replacements)``, checked piece by piece as the
    replacements come (an audit read row by row: a long note's is never held whole, nor the text it
    makes). They must come in order of their start, as audits write them; out of order: False."""
    at = 0
    for piece in _replaced_pieces(text, replacements):
        if piece is None:  # out of order
            return False
        if not output.startswith(piece, at):
            return False
        at += len(piece)
    return at == len(output)


def _replaced_pieces(text: str, replacements: Iterable[Replacement | dict]) -> Iterator[str | None]:
    """The kept text and replacements of ``text`` in turn, ``replacements`` taken in the order given;
    None (and nothing after it) where one starts before the previous one."""
    cursor = previous = 0
    for rec in replacements:
        rec = rec if isinstance(rec, dict) else rec.to_dict()
        if rec["start"] < previous:
            yield None
            return
        previous = rec["start"]
        yield text[cursor : rec["start"]]
        yield rec["replacement"]
        cursor = rec["end"]
    yield text[cursor:]
