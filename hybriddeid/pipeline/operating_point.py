"""An operating point for recall: a threshold on the CRFs' marginal probability of O.

At threshold ``t`` the output is the configured pipeline's output (score floors, precedence,
propagation, safe-list: what no threshold gives, "the base") plus every CRF unit (a token of the
token CRF, a character of the character CRF) whose marginal P(O) is below ``t``, even where
Viterbi said O. So the threshold only adds:

- **Floors** still decide which Viterbi spans make the base; a unit below the threshold is PHI
  whatever its span scored. Raising ``t`` never removes a letter or digit from the output, so
  recall never falls as ``t`` rises, and as ``t`` goes to 0 the output becomes the base.
- **Spans.** Consecutive units below ``t`` form a run (a character run widened to the whole
  tokens it touches). The parts of a run the output does not cover yet, cut to their first and
  last letter or digit, are added: joined to a span they touch inside a token ("Smi" + "th"),
  whose label is kept, or else as spans labelled by their CRF: the token CRF's most probable
  non-O label over the part's units, the character CRF's span typer. CRFs add in precedence
  order. Added parts are neither propagated nor safe-listed: either would let a span growing
  with ``t`` remove output elsewhere. No token is ever split between two spans by an added part.
  What grows is the set of letters and digits (and so tokens) in the output; binary token recall
  in the i2b2 sense (alphanumeric runs inside spans) could still fall where a gold span ends
  inside such a run ("104" of "104yo") and a span added at a lower threshold grows across it.
- **Focus.** The focused CRF reads the stretches seeded at ``focus_below`` exactly as without a
  threshold (so the base is unchanged) and, for a threshold above ``focus_below``, also those
  seeded at each step 0.9, 0.99, 0.999, ... above it up to the first at or above ``t``
  (``focus_levels``): the stretches then hold every token whose P(O) is below ``t`` (but for the
  focuser's own confident spans, left out as without a threshold). A stretch
  read before is not read again, and a character's P(O) is the least any of these reads gave,
  so reading more never takes a unit away.

``Pipeline.read`` tags a note once and keeps the units whose P(O) is below the largest threshold
wanted; ``NoteReading.spans(t)`` then applies any threshold up to it without tagging again,
which is what ``Pipeline.predict(note, threshold=t)`` and ``hybriddeid evaluate --sweep`` do.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybriddeid.core.document import Document, Span

if TYPE_CHECKING:
    from hybriddeid.classifiers.sequences import TaggedSequence

MAX_NINES = 15  # the last step below 1.0 is 0.999999999999999
NO_THRESHOLD = 0.0  # per call: no threshold, whatever the config says (no P(O) is below 0)


def check_threshold(value: Any, name: str = "threshold") -> float:
    """``value`` as a P(O) threshold, or a ValueError saying what is allowed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be a number in (0, 1], not {value!r}")
    return float(value)


def shown_probability(value: float) -> str:
    """``value`` (a threshold or recall target) with enough digits that it never reads as a rounder
    number than it is: ``%.7g``, or Python's exact shortest form when that would round it to 0 or 1
    ("0.99999999" must not be told as "1")."""
    text = f"{value:.7g}"
    return repr(float(value)) if float(text) != value and float(text) in (0.0, 1.0) else text


def focus_levels(below: float, threshold: float) -> list[float]:
    """The P(O) levels whose stretches a focused CRF reads for ``threshold``: ``below`` and, when
    the threshold is above it, each step 0.9, 0.99, ... above ``below`` up to the first at or
    above the threshold (1.0 last). Fixed steps make the reads of a lower threshold a subset of
    those of a higher one, which keeps the output monotone."""
    levels = [below]
    for nines in range(1, MAX_NINES + 1):
        if levels[-1] >= threshold:
            return levels
        step = float("0." + "9" * nines)
        if step > levels[-1]:
            levels.append(step)
    if levels[-1] < threshold:
        levels.append(1.0)
    return levels


@dataclass(frozen=True, slots=True)
class Candidate:
    """A unit that any threshold above its ``p_outside`` makes PHI."""

    start: int
    end: int
    p_outside: float
    label_probs: Mapping[str, float]


@dataclass(slots=True)
class Run:
    """Consecutive units below a threshold: their character extent and the units (by offsets)."""

    start: int
    end: int
    units: dict[tuple[int, int], Candidate]

    def units_in(self, start: int, end: int) -> list[Candidate]:
        return [unit for unit in self.units.values() if unit.start < end and start < unit.end]


@dataclass
class SourceCandidates:
    """One CRF's units with P(O) below a reading's maximum threshold, per sequence read, each
    read with the focus level it was made for (0.0: read whatever the threshold)."""

    source: str
    finish: Callable[[list[Span]], list[Span]]
    single_label: str | None
    words: Sequence[tuple[int, int]] | None = None  # token offsets runs widen to (character units)
    reads: list[tuple[float, list[list[tuple[int, Candidate]]]]] = field(default_factory=list)
    _finished: dict[tuple[int, int, str], tuple[int, int, str] | None] = field(default_factory=dict, repr=False)

    def add_read(self, level: float, sequences: Sequence[TaggedSequence], keep_below: float) -> None:
        """Keep the units of ``sequences`` whose P(O) is below ``keep_below``."""
        kept = []
        for seq in sequences:
            units = [
                (i, Candidate(*seq.units[i], p, seq.label_probs.get(i, {})))
                for i, p in enumerate(seq.p_outside)
                if p < keep_below
            ]
            if units:
                kept.append(units)
        self.reads.append((level, kept))

    def runs(self, threshold: float, level: float) -> list[Run]:
        """Runs of units below ``threshold`` in the reads up to focus ``level``; runs of several
        reads that overlap or touch are one run, and a unit read twice keeps its lower P(O)."""
        pieces: list[Run] = []
        for read_level, sequences in self.reads:
            if read_level > level:
                continue
            for units in sequences:
                previous = -2
                for index, unit in units:
                    if unit.p_outside >= threshold:
                        continue
                    if index == previous + 1:
                        pieces[-1].end = unit.end
                        pieces[-1].units[(unit.start, unit.end)] = unit
                    else:
                        pieces.append(Run(unit.start, unit.end, {(unit.start, unit.end): unit}))
                    previous = index
        if self.words is not None:
            self._widen_to_words(pieces, self.words)
        pieces.sort(key=lambda run: run.start)
        runs: list[Run] = []
        for piece in pieces:
            if runs and piece.start <= runs[-1].end:
                last = runs[-1]
                last.end = max(last.end, piece.end)
                for key, unit in piece.units.items():
                    if key not in last.units or unit.p_outside < last.units[key].p_outside:
                        last.units[key] = unit
            else:
                runs.append(piece)
        return runs

    @staticmethod
    def _widen_to_words(runs: list[Run], words: Sequence[tuple[int, int]]) -> None:
        """Move each run's ends out to the edges of the ``words`` (token offsets) they fall in."""
        starts = [start for start, _ in words]
        for run in runs:
            at = bisect.bisect_right(starts, run.start) - 1
            if at >= 0 and words[at][1] > run.start:
                run.start = words[at][0]
            at = bisect.bisect_left(starts, run.end) - 1
            if at >= 0 and words[at][1] > run.end:
                run.end = words[at][1]

    def new_span(self, start: int, end: int, units: Sequence[Candidate]) -> Span | None:
        """The span this CRF makes of ``text[start:end]`` (none: the typer's trimming left nothing):
        its label is the most probable non-O label summed over ``units``, finished (trimmed,
        typed) as the CRF finishes its own spans; its score is the least P(not O) of ``units``."""
        label = self.single_label
        if label is None:
            totals: dict[str, float] = {}
            for unit in units:
                for name, probability in unit.label_probs.items():
                    totals[name] = totals.get(name, 0.0) + probability
            label = max(sorted(totals), key=totals.__getitem__)
        score = 1.0 - max(unit.p_outside for unit in units)
        key = (start, end, label)
        if key not in self._finished:  # a sweep asks for the same span at many thresholds
            done = self.finish([Span(start, end, label, self.source, score)])
            self._finished[key] = (done[0].start, done[0].end, done[0].label) if done else None
        finished = self._finished[key]
        return Span(finished[0], finished[1], finished[2], self.source, score) if finished else None


def _uncovered(text: str, spans: Sequence[Span], starts: Sequence[int], run: Run) -> list[tuple[int, int]]:
    """The parts of ``run`` outside ``spans`` (sorted, disjoint; ``starts`` their starts), cut to
    their first and last letter or digit (a part without one is no part: it holds no PHI token)."""
    parts, cursor = [], run.start
    at = max(bisect.bisect_right(starts, run.start) - 1, 0)
    while at < len(spans) and spans[at].start < run.end:
        if spans[at].end > cursor:
            parts.append((cursor, spans[at].start))
            cursor = spans[at].end
        at += 1
    parts.append((cursor, run.end))
    trimmed = []
    for start, end in parts:
        while start < end and not text[start].isalnum():
            start += 1
        while end > start and not text[end - 1].isalnum():
            end -= 1
        if start < end:
            trimmed.append((start, end))
    return trimmed


def _inside_token(text: str, at: int) -> bool:
    """Whether offset ``at`` falls inside a token: letters or digits on both sides ("Smi|th"; not
    "104|yo", which the tokenizer splits and gold often does too)."""
    before, after = text[at - 1], text[at]
    return (before.isalpha() and after.isalpha()) or (before.isdigit() and after.isdigit())


def widen(text: str, spans: Sequence[Span], runs: Sequence[Run], source: SourceCandidates) -> list[Span]:
    """``spans`` (sorted, disjoint) plus the parts of ``runs`` they do not cover. A part touching
    spans inside a token ("Smi" + "th") joins them into one span: the longest one's label and
    source, the least score. Any other part becomes ``source``'s own span. Spans no part joins
    are returned unchanged."""
    starts = [span.start for span in spans]
    items: list[tuple[int, int, Span | None, Run | None]] = [(s.start, s.end, s, None) for s in spans]
    for run in runs:
        items.extend((start, end, None, run) for start, end in _uncovered(text, spans, starts, run))
    items.sort(key=lambda item: item[0])
    groups: list[list[tuple[int, int, Span | None, Run | None]]] = []
    for item in items:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and last[1] == item[0]
            and _inside_token(text, item[0])
            and (last[2] is None or item[2] is None)
        ):
            groups[-1].append(item)
        else:
            groups.append([item])
    out: list[Span] = []
    for group in groups:
        bases = [base for _, _, base, _ in group if base is not None]
        if len(group) == 1 and bases:
            out.append(bases[0])
            continue
        # a part of a character run widened to its token's end may hold none of the run's units
        # ("Martínez" read as PHI, "NºCol" glued to it): it takes its run's
        parts = [
            (start, end, run.units_in(start, end) or list(run.units.values()))
            for start, end, _, run in group
            if run is not None
        ]
        if not bases:
            span = source.new_span(group[0][0], group[-1][1], [unit for _, _, units in parts for unit in units])
            if span is not None:
                out.append(span)
            continue
        longest = max(bases, key=len)
        scores = [base.score for base in bases] + [1.0 - max(u.p_outside for u in units) for _, _, units in parts]
        out.append(Span(group[0][0], group[-1][1], longest.label, longest.source, min(scores)))
    return out


@dataclass
class NoteReading:
    """One note read once by a pipeline (``Pipeline.read``): its output without a threshold and
    each CRF's units below ``max_threshold``, in precedence order."""

    doc: Document
    base: list[Span]
    candidates: list[SourceCandidates]
    max_threshold: float
    focus_below: float | None = None  # set when a focused CRF read stretches at several levels

    def spans(self, threshold: float | None) -> list[Span]:
        """``Pipeline.predict(doc, threshold=threshold)``; None: no threshold (the base)."""
        if threshold is None:
            return list(self.base)
        threshold = check_threshold(threshold)
        if threshold > self.max_threshold:
            raise ValueError(f"threshold {threshold} is above the {self.max_threshold} this note was read for")
        level = focus_levels(self.focus_below, threshold)[-1] if self.focus_below is not None else 0.0
        spans = self.base
        for source in self.candidates:
            runs = source.runs(threshold, level)
            if runs:
                spans = widen(self.doc.text, spans, runs, source)
        return list(spans)
