"""The precedence merger (paper section 3.4) as a small pure function.

Spans that overlap no other span are all kept. Where spans overlap, the one from the source
earliest in ``precedence`` wins and the spans it overlaps are dropped. Ablations are simply other
precedence lists (or fewer sources). A span whose own ``source`` ends in ``FALLBACK_SUFFIX`` (a
rule marked ``fallback``) ranks after every source: it fills a gap the classifiers left, or widens
their shorter spans that lie inside it ("Bernard" to "Bernard Foley"), and never cuts a longer span
of theirs.
"""
from __future__ import annotations

import bisect
import re
from typing import Callable, Iterable, Mapping, Sequence

from hybriddeid.document import Span, span_order

DEFAULT_PRECEDENCE = ("rule", "char", "token")
FALLBACK_SUFFIX = "+fallback"


def merge(spans_by_source: Mapping[str, Sequence[Span]], precedence: Sequence[str] = DEFAULT_PRECEDENCE) -> list[Span]:
    """Merge each source's spans; higher-precedence sources win overlaps. Output is sorted.

    Sources missing from ``precedence`` rank after those listed, in the mapping's order; a
    span's rank comes from the mapping key it is filed under. Within
    one source, overlapping spans are resolved longest first. Every output span keeps its source.
    """
    order = list(precedence) + [source for source in spans_by_source if source not in precedence]
    rank = {source: i for i, source in enumerate(order)}
    candidates: list[tuple[int, Span]] = []
    fallbacks: list[Span] = []
    for source, spans in spans_by_source.items():
        for span in spans:
            if span.source.endswith(FALLBACK_SUFFIX):
                fallbacks.append(span)
            else:
                candidates.append((rank[source], span))
    candidates.sort(key=lambda item: (item[0], -(item[1].end - item[1].start), item[1].start))
    fallbacks.sort(key=lambda span: (-(span.end - span.start), span.start))
    kept: list[Span] = []
    taken = _Taken(max((span.end for spans in spans_by_source.values() for span in spans), default=0))
    for _, span in candidates:
        if not taken.overlaps(span.start, span.end):
            kept.append(span)
            taken.take(span.start, span.end)
    if fallbacks:
        kept = _fill_with_fallbacks(kept, fallbacks, taken)
    return sorted(kept, key=span_order)


def _fill_with_fallbacks(kept: list[Span], fallbacks: Sequence[Span], taken: "_Taken") -> list[Span]:
    """``kept`` with the fallback spans (longest first) that overlap none of it, or whose overlap is
    only shorter spans lying inside them: a rule that read "Bernard Foley CRT" widens a classifier's
    "Bernard" to the whole name, but never cuts a classifier's longer span."""
    kept = sorted(kept, key=span_order)
    starts = [span.start for span in kept]
    replaced: set[int] = set()
    added: list[Span] = []
    taken_by_fallbacks = _Taken(len(taken))
    for span in fallbacks:
        if taken_by_fallbacks.overlaps(span.start, span.end):
            continue
        if taken.overlaps(span.start, span.end):
            # kept spans do not overlap one another, so at most one starts before span.start and reaches into it
            first = max(0, bisect.bisect_left(starts, span.start) - 1)
            inside = []
            for i in range(first, len(kept)):
                if kept[i].start >= span.end:
                    break
                if kept[i].end > span.start:  # never one replaced already: a fallback kept covers it
                    inside.append(i)
            length = span.end - span.start
            if not all(span.start <= kept[i].start and kept[i].end <= span.end and kept[i].end - kept[i].start < length
                       for i in inside):
                continue  # a classifier's span as long as it, or crossing its edge, stays
            replaced.update(inside)
        added.append(span)
        taken.take(span.start, span.end)
        taken_by_fallbacks.take(span.start, span.end)
    return [span for i, span in enumerate(kept) if i not in replaced] + added


def filter_scores(spans_by_source: Mapping[str, Sequence[Span]], min_score: Mapping[str, float]) -> dict[str, list[Span]]:
    """Drop each source's spans scored below that source's threshold (sources not named keep all)."""
    return {
        source: [span for span in spans if span.score >= min_score.get(source, 0.0)]
        for source, spans in spans_by_source.items()
    }


# An alphanumeric run: re's [^\W_] is exactly str.isalnum, character by character.
_ALNUM_RUN = re.compile(r"[^\W_]*")


def propagate(text: str, spans: Sequence[Span], min_length: int = 3, source: str = "propagated") -> list[Span]:
    """Also mark other whole-word occurrences of a string already found as PHI in the same note.

    A name or place found once (say in the header) is often repeated where context is weaker.
    Occurrences overlapping a found span are left alone; strings shorter than ``min_length`` or
    without a letter or digit are not propagated. The first label seen for a string is used.
    """
    labels: dict[str, str] = {}
    for span in spans:
        surface = text[span.start:span.end]
        if len(surface) >= min_length and any(ch.isalnum() for ch in surface):
            labels.setdefault(surface, span.label)
    out = list(spans)
    taken = _Taken(len(text), out)
    for surface, label in labels.items():
        start = text.find(surface)
        while start != -1:
            end = start + len(surface)
            whole_word = (start == 0 or not text[start - 1].isalnum()) and (end == len(text) or not text[end].isalnum())
            if whole_word and not taken.overlaps(start, end):
                out.append(Span(start, end, label, source))
                taken.take(start, end)
            # A whole word starts after a character that is not alphanumeric, so none starts inside the
            # alphanumeric run from here: skip it (a repeat inside a megabyte of digits was found at every digit).
            start = text.find(surface, _ALNUM_RUN.match(text, start).end() + 1)
    return sorted(out, key=span_order)


def link_name_words(texts: Sequence[str], spans: Sequence[Sequence[Span]], words_of: Callable[[Span, str], Iterable[str]],
                    source: str = "linked") -> list[list[Span]]:
    """Each name word found in any of a patient's notes, also marked wherever else it stands in them.

    ``texts[i]`` has ``spans[i]``; ``words_of(span, surface)`` gives the words of a found span to
    look for (the caller leaves out titles, particles, initials and safe words, and returns nothing
    for spans that are not names). A word is marked where it stands as a whole word written as found,
    in capitals, or capitalised ("Beatrice", "BEATRICE"), never inside a found span; the new span has
    the label of the first span the word came from. So "Call Beatrice" is found in one note when
    "Beatrice Harlowe" was found in another, or earlier in the same note.
    """
    labels: dict[str, str] = {}
    for text, note_spans in zip(texts, spans):
        for span in note_spans:
            for word in words_of(span, text[span.start:span.end]):
                labels.setdefault(word, span.label)
    if not labels:
        return [sorted(note_spans, key=span_order) for note_spans in spans]
    forms = {form: label for word, label in labels.items()
             for form in (word, word.upper(), word[:1].upper() + word[1:].lower()) if not form.islower()}
    pattern = re.compile(rf"(?<![\w'’-])(?:{'|'.join(map(re.escape, sorted(forms, key=len, reverse=True)))})(?![\w'’-])")
    out = []
    for text, note_spans in zip(texts, spans):
        kept = list(note_spans)
        taken = _Taken(len(text), kept)
        for match in pattern.finditer(text):
            if not taken.overlaps(match.start(), match.end()):
                kept.append(Span(match.start(), match.end(), forms[match.group()], source))
                taken.take(match.start(), match.end())
        out.append(sorted(kept, key=span_order))
    return out


class _Taken:
    """The characters of a note covered by the spans kept so far, one byte each: whether a stretch
    overlaps any of them, and taking one, cost the stretch's length. (Sorted bounds with bisection
    needed an insertion into a list of every span per span taken: quadratic in a 20 MB note's
    hundreds of thousands of spans.)"""

    __slots__ = ("_covered",)

    def __init__(self, length: int, spans: Iterable[Span] = ()) -> None:
        self._covered = bytearray(length)
        for span in spans:
            self.take(span.start, span.end)

    def __len__(self) -> int:
        return len(self._covered)

    def overlaps(self, start: int, end: int) -> bool:
        return self._covered.find(1, start, end) != -1

    def take(self, start: int, end: int) -> None:
        self._covered[start:end] = b"\x01" * (end - start)
