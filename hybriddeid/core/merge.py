"""The precedence merger (paper section 3.4) as a small pure function.

Spans that overlap no other span are all kept. Where spans overlap, the one from the source
earliest in ``precedence`` wins and the spans it overlaps are dropped. Ablations are simply other
precedence lists (or fewer sources). A span whose own ``source`` ends in ``FALLBACK_SUFFIX`` (a
rule marked ``fallback``) ranks after every source: it fills a gap the classifiers left, or widens
their shorter spans that lie inside it ("Bernard" to "Bernard Foley"), and never cuts a longer span
of theirs.

Given the note's ``text``, a span that loses an overlap is not dropped whole: what it covers outside
the spans kept before it (its *remainders*) is kept, with its label, source and score, where a
remainder holds a letter or digit. A token CRF's "Jordi Kowalczyk, DNI 45123987Z" cut by a rule's
"45123987Z" leaves "Jordi Kowalczyk": dropping it left the name in the output. At each edge the cut
made, a remainder is trimmed of blanks and punctuation and of the ``labels`` given (lower-case field
labels and stop words of the note's language: "DNI" before the number names the field, it is not
PHI), so a remainder made only of such words is dropped. The edges the classifier drew itself stay
as it drew them.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache

from hybriddeid.core.document import Span, span_order

DEFAULT_PRECEDENCE = ("rule", "char", "token")
FALLBACK_SUFFIX = "+fallback"


def merge(
    spans_by_source: Mapping[str, Sequence[Span]],
    precedence: Sequence[str] = DEFAULT_PRECEDENCE,
    text: str | None = None,
    labels: Collection[str] = frozenset(),
) -> list[Span]:
    """Merge each source's spans; higher-precedence sources win overlaps. Output is sorted.

    Sources missing from ``precedence`` rank after those listed, in the mapping's order; a
    span's rank comes from the mapping key it is filed under. Within
    one source, overlapping spans are resolved longest first. Every output span keeps its source.
    With the note's ``text``, a span that loses an overlap keeps its remainders (the module's
    docstring), trimmed of ``labels`` (lower-case phrases: field labels, stop words) where cut;
    without it, it is dropped whole.
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
    phrases = _phrases(frozenset(labels))
    for _, span in candidates:
        if not taken.overlaps(span.start, span.end):
            kept.append(span)
            taken.take(span.start, span.end)
        elif text is not None:
            pieces = [replace(span, start=start, end=end) for start, end in _remainders(text, span, taken, phrases)]
            for piece in pieces:
                kept.append(piece)
                taken.take(piece.start, piece.end)
    if fallbacks:
        kept = _fill_with_fallbacks(kept, fallbacks, taken)
    return sorted(kept, key=span_order)


# A word of a remainder or of a label: a run of letters and digits (re's [^\W_] is str.isalnum).
_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=8)
def _phrases(labels: frozenset[str]) -> tuple[frozenset[tuple[str, ...]], int]:
    """``labels`` as tuples of their lower-case words ("localidad/ provincia": both words), and the
    most words one has."""
    phrases = frozenset(words for words in (tuple(_WORD.findall(label.lower())) for label in labels) if words)
    return phrases, max(map(len, phrases), default=0)


def _remainders(
    text: str, span: Span, taken: _Taken, phrases: tuple[frozenset[tuple[str, ...]], int]
) -> Iterator[tuple[int, int]]:
    """The stretches of ``span`` outside ``taken`` that still hold a word once trimmed, at each edge a
    taken span cut, of blanks, punctuation and label phrases ("NºCol" after a name glued to it too)."""
    known, longest = phrases
    for start, end in taken.free(span.start, span.end):
        words = [(match.start(), match.end(), match.group().lower()) for match in _WORD.finditer(text, start, end)]
        cut_left, cut_right = start > span.start, end < span.end
        if cut_right:
            _trim_labels(words, known, longest, from_end=True)
        if cut_left:
            _trim_labels(words, known, longest, from_end=False)
        if words:
            yield (words[0][0] if cut_left else start), (words[-1][1] if cut_right else end)


def _trim_labels(
    words: list[tuple[int, int, str]], known: frozenset[tuple[str, ...]], longest: int, from_end: bool
) -> None:
    """Remove label phrases from the end (or start) of ``words`` while there is one, the longest first."""
    while words:
        for size in range(min(longest, len(words)), 0, -1):
            edge = words[-size:] if from_end else words[:size]
            if tuple(word for _, _, word in edge) in known:
                if from_end:
                    del words[-size:]
                else:
                    del words[:size]
                break
        else:
            return


def _fill_with_fallbacks(kept: list[Span], fallbacks: Sequence[Span], taken: _Taken) -> list[Span]:
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
            if not all(
                span.start <= kept[i].start and kept[i].end <= span.end and kept[i].end - kept[i].start < length
                for i in inside
            ):
                continue  # a classifier's span as long as it, or crossing its edge, stays
            replaced.update(inside)
        added.append(span)
        taken.take(span.start, span.end)
        taken_by_fallbacks.take(span.start, span.end)
    return [span for i, span in enumerate(kept) if i not in replaced] + added


def filter_scores(
    spans_by_source: Mapping[str, Sequence[Span]],
    min_score: Mapping[str, float],
    agreement_score: float | None = None,
    text: str | None = None,
    kind: Callable[[str], str] | None = None,
) -> dict[str, list[Span]]:
    """Drop each source's spans scored below that source's threshold (sources not named keep all).

    With ``agreement_score``, a span below its floor over a stretch no source kept is kept where
    another source's spans tile the same stretch (one span of exactly its extent, or, given the
    note's ``text``, pieces that start and end with it and leave only spaces between them, "Nadia" and
    "Robles Pardo" of "Nadia Robles Pardo"), all scoring at least ``agreement_score`` and, given ``kind``
    (a label's surrogate kind: person, date, city...), all of the span's kind. The two CRFs read
    different evidence (words, characters): their agreeing on what a stretch is (a person, whichever of
    patient or doctor) is evidence that neither's score holds alone; agreeing only that it is PHI, one
    reading a person and the other a hospital, is weaker. A stretch some source kept is left as it
    was (the agreement adds spans, it changes none)."""

    def passes(source: str, span: Span) -> bool:
        return span.score >= min_score.get(source, 0.0)

    kept = {source: [span for span in spans if passes(source, span)] for source, spans in spans_by_source.items()}
    if agreement_score is None:
        return kept
    low = {
        source: [span for span in spans if not passes(source, span) and span.score >= agreement_score]
        for source, spans in spans_by_source.items()
    }
    if not any(low.values()):
        return kept
    sure = _Coverage(span for spans in kept.values() for span in spans)
    tilings: dict[tuple[str, str | None], _Tiling] = {}

    def tiling(source: str, of_kind: str | None) -> _Tiling:
        if (source, of_kind) not in tilings:
            tilings[source, of_kind] = _Tiling(
                [
                    span
                    for span in spans_by_source[source]
                    if span.score >= agreement_score and (kind is None or kind(span.label) == of_kind)
                ]
            )
        return tilings[source, of_kind]

    for source, spans in low.items():
        rescued = [
            span
            for span in spans
            if not sure.overlaps(span.start, span.end)
            and any(
                tiling(other, None if kind is None else kind(span.label)).tiles(text, span.start, span.end)
                for other in spans_by_source
                if other != source
            )
        ]
        if rescued:
            kept[source] = sorted([*kept[source], *rescued], key=lambda span: (span.start, span.end))
    return kept


class _Coverage:
    """The characters some spans cover, as sorted disjoint runs: does a stretch touch any?"""

    def __init__(self, spans: Iterable[Span]) -> None:
        runs: list[list[int]] = []
        for span in sorted(spans, key=lambda span: span.start):
            if runs and span.start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], span.end)
            else:
                runs.append([span.start, span.end])
        self.starts = [run[0] for run in runs]
        self.ends = [run[1] for run in runs]

    def overlaps(self, start: int, end: int) -> bool:
        index = bisect.bisect_left(self.starts, end) - 1  # the last run starting before the stretch ends
        return index >= 0 and self.ends[index] > start


class _Tiling:
    """One source's spans, sorted, asked whether some of them tile a stretch exactly."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = sorted(spans, key=lambda span: (span.start, span.end))
        self.starts = [span.start for span in self.spans]
        self.reach: list[int] = []  # the furthest end of the spans up to each one
        for span in self.spans:
            self.reach.append(max(span.end, self.reach[-1]) if self.reach else span.end)

    def tiles(self, text: str | None, start: int, end: int) -> bool:
        """One span of exactly ``start``-``end``, or (with the text) several inside it, the first starting
        and the last ending with it, only spaces between them, none crossing its edges."""
        first = bisect.bisect_left(self.starts, start)
        if first and self.reach[first - 1] > start:  # a span crosses the stretch's start
            return False
        inside = self.spans[first : bisect.bisect_left(self.starts, end)]
        if not inside or inside[0].start != start or max(span.end for span in inside) != end:
            return False
        if len(inside) == 1:
            return True
        return text is not None and all(
            left.end <= right.start and text[left.end : right.start].isspace()
            for left, right in zip(inside, inside[1:])
        )


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
        surface = text[span.start : span.end]
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
            run = _ALNUM_RUN.match(text, start)
            assert run is not None  # the pattern matches the empty string
            start = text.find(surface, run.end() + 1)
    return sorted(out, key=span_order)


# A run of word characters, apostrophes and hyphens: where a linked name word may stand whole.
_NAME_RUN = re.compile(r"[\w'’-]+")
# A linked name word this short is not also marked in capitals unless it was found so: in a clinical
# note a short word in capitals is mostly an abbreviation ("LUE", "PEG", "CAM" are surnames too).
SHORT_NAME_WORD = 3
# A word whose parts are joined by hyphens: "Southend-on-Sea", "Jean-Pierre", "SAINT-JEAN-DE-LUZ".
_HYPHENATED = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*(?:-[^\W\d_]+(?:['’][^\W\d_]+)*)+")


def _name_parts(word: str) -> bool:
    """Whether a hyphenated word reads as one name: in mixed case, its first and last parts capitalised,
    any between capitalised or a short lower-case particle ("on", "upon", "de", "la"), none a lone
    letter. A word in capitals does not: notes in capitals glue words with hyphens ("KARGAS-PT")."""
    parts = word.split("-")
    if word.isupper() or any(len(part) < 2 for part in parts):
        return False
    if not (parts[0][:1].isupper() and parts[-1][:1].isupper()):
        return False
    return all(part[:1].isupper() or (part.islower() and len(part) <= 4) for part in parts[1:-1])


def _hyphenated_given_name(word: str) -> bool:
    """A given name written as two hyphenated syllables, the second in lower case, as romanised Korean
    and Chinese names are ("Hyun-woo", "Seo-yeon", "Xiao-ming"): widened only when a span starts at its
    second part, since "Boston-based" has the same form."""
    parts = word.split("-")
    return (
        len(parts) == 2
        and all(len(part) >= 2 for part in parts)
        and parts[0][:1].isupper()
        and parts[0][1:].islower()
        and parts[1].islower()
    )


def _elided_particle_start(text: str, start: int) -> int:
    """Where a name starting at ``start`` begins with its elided particle: "O'" of "O'Rourke", "D'" of
    "D'Angelo" (one capital and an apostrophe glued to a capitalised word of two letters or more);
    ``start`` otherwise."""
    if (
        start >= 2
        and text[start - 1] in "'’"
        and text[start - 2].isupper()
        and (start == 2 or not text[start - 3].isalpha())
        and text[start : start + 1].isupper()
        and text[start + 1 : start + 2].isalpha()  # "I'M" is no particle
    ):
        return start - 2
    return start


# The rest of a name's word after an inner apostrophe: "'i" of "Keali'i", "'bek" of "Ulug'bek".
_AFTER_INNER_APOSTROPHE = re.compile(r"['’]([^\W\d_]+)(?![\w'’])")


def _inner_apostrophe_end(text: str, end: int) -> int:
    """Where a name ending at ``end`` ends when its word goes on after an apostrophe ("Keali" of "Keali'i",
    "Ulug" of "Ulug'bek"): the rest in lower case, not a possessive "'s"; ``end`` otherwise."""
    if not (0 < end < len(text) and text[end - 1].isalpha()):
        return end
    match = _AFTER_INNER_APOSTROPHE.match(text, end)
    if match is None or not match.group(1).islower() or match.group(1) == "s":
        return end
    return match.end()


def whole_name_words(text: str, spans: Sequence[Span], widened: Container[str]) -> list[Span]:
    """Spans of the ``widened`` labels (names, places) that end or start inside a name's word widened to
    the whole word, where that overlaps no other span: the part left out would name the person or
    place in the output. The words: hyphenated names ("Southend" of "Southend-on-Sea", "Pierre" of
    "Jean-Pierre", "woo" of "Hyun-woo"), names with an elided particle ("Rourke" of "O'Rourke") and names
    going on after an inner apostrophe ("Keali" of "Keali'i")."""
    out = list(spans)
    for index, span in enumerate(spans):
        if span.label not in widened:
            continue
        start, end = _elided_particle_start(text, span.start), _inner_apostrophe_end(text, span.end)
        for edge in (span.start, span.end - 1):
            word = _word_around(text, edge)
            if word is None:
                continue
            surface = text[word[0] : word[1]]
            if _name_parts(surface) or (edge == span.start > word[0] and _hyphenated_given_name(surface)):
                start, end = min(start, word[0]), max(end, word[1])
        if (start, end) == (span.start, span.end):
            continue
        if any(other is not span and other.start < end and start < other.end for other in spans):
            continue
        out[index] = replace(span, start=start, end=end)
    return out


# The word before a name span, and what stands between them: blanks on the line.
_WORD_BEFORE = re.compile(r"(?<![\w'’-])([^\W\d_]+)[ \t]+\Z")
# How far back a given name is looked for (a word and its blanks).
_GIVEN_NAME_REACH = 40


def given_names_before(
    text: str, spans: Sequence[Span], named: Container[str], given_names: Container[str]
) -> list[Span]:
    """Spans of the ``named`` labels (people, relatives) widened over the given names written just before
    them on their line: "Nadia" of "Nadia Whitcombe", where a model found the surname alone and the given
    name would stay in the output. A given name is a word of ``given_names`` (case-folded: the language's
    first-name dictionary less its ordinary words) written capitalised ("Eva", not "EVA", a pain scale),
    that no other span touches; several are taken in turn ("Teodoro Luis")."""
    out = list(spans)
    taken = sorted((span.start, span.end) for span in spans)
    for index, span in enumerate(spans):
        if span.label not in named:
            continue
        start = span.start
        while True:
            before = _WORD_BEFORE.search(text, max(0, start - _GIVEN_NAME_REACH), start)
            if before is None:
                break
            word = before.group(1)
            if not (len(word) > 1 and word[0].isupper() and word[1:].islower() and word.casefold() in given_names):
                break
            word_start = before.start(1)
            position = bisect.bisect_left(taken, (start,))
            if position > 0 and taken[position - 1][1] > word_start:
                break  # another span holds it
            start = word_start
        if start != span.start:
            out[index] = replace(span, start=start)
    return out


# Words ("Journey", "O'Sullivan", "Núñez") with blanks between them, on one line: what a wider reading of a name
# may add on either side (``_name_words``).
_NAME_WORDS = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*(?:[ \t]+[^\W\d_]+(?:['’-][^\W\d_]+)*)*")
_NAME_REACH = 60  # characters a longer reading may add on either side of a name


def _name_words(added: str, no_name_words: Container[str]) -> bool:
    """Whether ``added`` (blanks and words, from a name's edge) is capitalised name words only, none of
    ``no_name_words``."""
    words = added.strip(" \t")
    return _NAME_WORDS.fullmatch(words) is not None and all(
        word[0].isupper() and word.lower() not in no_name_words for word in words.split()
    )


def names_widened_by_readings(
    text: str,
    spans: Sequence[Span],
    readings: Iterable[Span],
    named: Container[str],
    min_score: float,
    no_name_words: Container[str] = frozenset(),
) -> list[Span]:
    """Spans of the ``named`` labels (people, relatives) widened to a longer reading of the same name: where
    a source's span scoring at least ``min_score`` (kept or not, of any label) holds a person's span and
    adds only capitalised words beside it on its line ("Journey Lindgren Okafor" around "Lindgren Okafor": a
    given name that is also a word, which one model read as part of the name and the other not), none of
    them in ``no_name_words`` (lower case, without a final full stop: the language's stop words and titles,
    so "Halpern And Dr" is no name). The span keeps its label and takes the widest such reading
    (``_NAME_REACH`` characters more on either side at most) that touches no other of ``spans`` (merged
    spans: they do not overlap)."""
    people = [index for index, span in enumerate(spans) if span.label in named]
    if not people:
        return list(spans)
    wider = sorted((reading.start, reading.end) for reading in readings if reading.score >= min_score)
    out = list(spans)
    taken = sorted((span.start, span.end) for span in spans)
    for index in people:
        span = spans[index]
        best: tuple[int, int] | None = None
        first = bisect.bisect_left(wider, (span.start - _NAME_REACH,))
        for start, end in wider[first : bisect.bisect_right(wider, (span.start, len(text) + 1))]:
            if end < span.end or end > span.end + _NAME_REACH or (start, end) == (span.start, span.end):
                continue
            before, after = text[start : span.start], text[span.end : end]
            if before and not (before[-1] in " \t" and _name_words(before, no_name_words)):
                continue
            if after and not (after[0] in " \t" and _name_words(after, no_name_words)):
                continue
            if _touches_other(taken, span, start, end):
                continue
            if best is None or end - start > best[1] - best[0]:
                best = (start, end)
        if best is not None:
            out[index] = replace(span, start=best[0], end=best[1])
    return out


def _touches_other(taken: Sequence[tuple[int, int]], span: Span, start: int, end: int) -> bool:
    """Whether a stretch touches a span of ``taken`` (sorted, non-overlapping extents) other than ``span``'s own."""
    own = (span.start, span.end)
    position = bisect.bisect_left(taken, (start,))
    if position > 0 and taken[position - 1][1] > start and taken[position - 1] != own:
        return True
    while position < len(taken) and taken[position][0] < end:
        if taken[position] != own:
            return True
        position += 1
    return False


def _word_around(text: str, position: int) -> tuple[int, int] | None:
    """The hyphenated word holding ``position``, if it holds one."""
    if not 0 <= position < len(text) or not (text[position].isalpha() or text[position] == "-"):
        return None
    start = position
    while start > 0 and (text[start - 1].isalpha() or text[start - 1] in "-'’"):
        start -= 1
    while start < position and not text[start].isalpha():
        start += 1
    match = _HYPHENATED.match(text, start)
    if match is None or not match.start() <= position < match.end():
        return None
    return match.span()


def link_name_words(
    texts: Sequence[str],
    spans: Sequence[Sequence[Span]],
    words_of: Callable[[Span, str], Iterable[str]],
    source: str = "linked",
    capitalised_only: Container[str] = frozenset(),
) -> list[list[Span]]:
    """Each name word found in any of a patient's notes, also marked wherever else it stands in them.

    ``texts[i]`` has ``spans[i]``; ``words_of(span, surface)`` gives the words of a found span to
    look for (the caller leaves out titles, particles, initials and safe words, and returns nothing
    for spans that are not names). A word is marked where it stands as a whole word written as found,
    in capitals, or capitalised ("Beatrice", "BEATRICE"), never inside a found span; the new span has
    the label of the first span the word came from. So "Call Beatrice" is found in one note when
    "Beatrice Harlowe" was found in another, or earlier in the same note. A word of at most
    ``SHORT_NAME_WORD`` letters is marked in capitals only where it was found in capitals. A word
    whose case-folded form is in ``capitalised_only`` (an ordinary word that is also a name: "White",
    "Art") is marked only where it is capitalised as a name is written, never in capitals: notes typed
    in capitals would otherwise lose every "WHITE SPUTUM" and "ART LINE" to one doctor's name.
    """
    labels: dict[str, str] = {}
    for text, note_spans in zip(texts, spans):
        for span in note_spans:
            for word in words_of(span, text[span.start : span.end]):
                labels.setdefault(word, span.label)
    if not labels:
        return [sorted(note_spans, key=span_order) for note_spans in spans]

    def forms_of(word: str) -> tuple[str, ...]:
        capitalised = word[:1].upper() + word[1:].lower()
        if word.casefold() in capitalised_only:
            return (capitalised,)
        if len(word) <= SHORT_NAME_WORD:  # "Lue" found: not every "LUE" (left upper extremity)
            return (word, capitalised)
        return (word, word.upper(), capitalised)

    forms = {form: label for word, label in labels.items() for form in forms_of(word) if not form.islower()}
    matches: Callable[[str], Iterable[re.Match[str]]]
    if all(_NAME_RUN.fullmatch(form) for form in forms):
        # A form made of word characters, apostrophes and hyphens alone matches exactly where a whole run of
        # them is that form: a lookup per run, not a pattern of the patient's names compiled for each call.
        def matches(text: str) -> Iterator[re.Match[str]]:
            return (run for run in _NAME_RUN.finditer(text) if run.group() in forms)

    else:
        matches = re.compile(
            rf"(?<![\w'’-])(?:{'|'.join(map(re.escape, sorted(forms, key=len, reverse=True)))})(?![\w'’-])"
        ).finditer
    out = []
    for text, note_spans in zip(texts, spans):
        kept = list(note_spans)
        taken = _Taken(len(text), kept)
        for match in matches(text):
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

    def free(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """The stretches of ``start:end`` that no span taken covers, in order."""
        covered = self._covered
        while start < end:
            stop = covered.find(1, start, end)
            stop = end if stop == -1 else stop
            if stop > start:
                yield start, stop
            start = covered.find(0, stop, end)
            start = end if start == -1 else start
