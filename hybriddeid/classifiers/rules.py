"""The regex rule classifier (paper section 3.3): formulaic PHI found by rules kept as data.

Rules live in TOML files (each language pack's ``regex.toml``, see :mod:`hybriddeid.core.languages`;
users add their own). Each ``[[rule]]`` has a ``name``, a ``label`` from the taxonomy named in the file
header, a ``pattern`` whose named group ``phi`` marks the PHI part (the whole match if absent; a
pattern may capture ``phi`` several times, one span each), and optionally ``flags``, ``context``
words required within ``context_window`` characters before the PHI, a ``validator`` from
:mod:`hybriddeid.classifiers.validators`, a ``lookup`` table of named groups that must be entries of
the file's language's bundled dictionaries (``{ first = "first_names", last = "last_names?" }``:
case-insensitive; "cities,!states": an entry of one plain kind and of no "!" kind; the kind ``unknown``
holds every word the pack's common-word list (``words.txt``), safe-list and stop words lack, so
"first_names,unknown" takes "grace" and "dudak" but not "aware"; a hit whose group
fails is dropped, or, for a spec ending in "?", ends before that group, so an optional surname that
is no name is left out; for a spec ending in "<", the group's longest run of leading words (split at
blanks and hyphens) that passes ends the span, so "Medicine Hat with" and "Southend-on-Sea" take a town of
several words and "Boston with" the one), ``fallback = true`` for a rule whose spans only fill gaps (they rank after
every classifier in the merger, ``merge.FALLBACK_SUFFIX``, so a CRF's longer span of the same name
wins over a rule that found its first word), ``needs``: a pattern, or a list of patterns one of
which (under the rule's flags, without lookarounds or anchors) matches inside the text every hit
reads (its match or a lookahead after it: a digit class for a rule whose hits hold a digit), so that
a note, or a 200,000-character window of a long one, where none matches is not searched at all (a
speed hint that never changes the spans: each example must hold a match of one, and the bundled
models' spans are checked with and without it; a list of plain words is searched much faster than
one pattern of alternatives), ``prefilter = false`` for a rule searched in every note rather than
only where one scan of the note for every rule says it may match (:mod:`hybriddeid.classifiers.rule_prefilter`;
for the few patterns Hyperscan compiles slowest), and ``examples`` / ``counter_examples`` that the test suite checks. Files are validated when they load, so a broken
rule fails with its file and name instead of silently never matching.

A file may name subpatterns that several rules share in a ``[define]`` table (``field_label =
'''...'''``); ``(?&field_label)`` in a pattern (or in another definition) is replaced by the
definition's text as a group, read in verbose mode (write a space as ``[ ]``) and under the rule's
flags. Inlined, not called: ``regex`` runs group calls several times slower.

Rules win over the CRFs in the merger, so they must be nearly always right: ``fit`` measures each
rule's precision on gold documents and switches off those below ``min_precision``.

A language pack's rules speak its taxonomy's labels (``DATE``), which a user's corpus may name
otherwise (``FECHAS``). With ``map_labels = "auto"`` (the default), ``fit`` relabels each rule whose
label the training corpus does not have with the gold label its hits overlap most, when at least
``MAP_MIN_HITS`` hits and ``MAP_MIN_SHARE`` of them overlap that label, and switches it off
otherwise, so that rules never emit a label the corpus lacks. Rules whose label the corpus has
are left as they are. The mapping is saved in ``rules.toml``; a model saved without one behaves
as before.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import logging
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import regex
import tomli_w

from hybriddeid.classifiers.rule_prefilter import RulePrefilter
from hybriddeid.classifiers.rule_prefilter import enabled as prefilter_enabled
from hybriddeid.classifiers.validators import Validator, get_validator, validator_names
from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import available_languages, language_pack
from hybriddeid.core.merge import FALLBACK_SUFFIX
from hybriddeid.core.registry import ComponentSpec
from hybriddeid.core.taxonomy import load_taxonomy
from hybriddeid.features.analysis import AnalysedNote
from hybriddeid.features.context import layout_lines, with_line_breaks
from hybriddeid.io import atomic_write_text
from hybriddeid.knowledge.dictionaries import (
    FIRST_NAME_KINDS,
    LAST_NAME_KINDS,
    bundled_entries,
    bundled_kinds,
    known_words,
)

log = logging.getLogger(__name__)

FLAGS: dict[str, int] = {
    "IGNORECASE": regex.IGNORECASE,
    "MULTILINE": regex.MULTILINE,
    "DOTALL": regex.DOTALL,
    "VERBOSE": regex.VERBOSE,
    "ASCII": regex.ASCII,
    "V1": regex.V1,
}
DEFAULT_CONTEXT_WINDOW = 30
DEFAULT_TIMEOUT = 0.5  # seconds per rule per window of a document; normal searches take microseconds
# A long note is searched in windows of this many characters (each with its own time limit), reading up
# to SEARCH_OVERLAP characters past a window's end: longer than any rule's hit, so no hit is cut.
SEARCH_WINDOW = 200_000
SEARCH_OVERLAP = 5_000
STATE_FILE = "rules.toml"
STATE_FORMAT = 3  # 1 also held the settings, which now live only in the pipeline config; 3 adds label_map
READABLE_FORMATS = (1, 2, 3)
MAP_LABELS = ("auto", "off")
MAP_MIN_HITS = 3  # a rule is relabelled only on this many hits overlapping the chosen gold label...
MAP_MIN_SHARE = 0.5  # ...that are at least this share of all its hits

_FILE_KEYS = frozenset({"taxonomy", "language", "description", "define", "rule"})
_RULE_KEYS = frozenset(
    {
        "name",
        "label",
        "pattern",
        "flags",
        "context",
        "context_window",
        "validator",
        "lookup",
        "fallback",
        "needs",
        "prefilter",
        "one_line",
        "examples",
        "counter_examples",
    }
)
_EXAMPLE_KEYS = frozenset({"text", "phi"})
_NAME = regex.compile(r"[A-Za-z0-9_.-]+")
_DEFINE_NAME = regex.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# in a needs pattern: lookarounds (?= (?! (?<= (?<!, anchors ^ $ \b \B \A \Z \G, not escaped
_LOOKAROUND = regex.compile(r"(?<!\\)(?:\\\\)*(?:\(\?<?[=!]|(?<!\[)\^|\$|\\[bBAZG])")
_CALL = regex.compile(r"(?<!\\)\(\?(?:&|P>)(\w+)\)")  # (?&name) and (?P>name), not escaped
# A needs pattern that is a plain word ("Dr", "(?i)hosp", "(?i)www\."): looked for with str.find
# instead of a regex search. Only letters, digits and a few signs that are no metacharacters.
_LITERAL_NEEDS = regex.compile(r"(?P<ci>\(\?i\))?(?P<word>(?:[A-Za-z0-9@&/,:;-]|\\\.)+)")


# (needs pattern, its flags, window start, reading end) -> where its first match there starts, or -1
NeedsSeen = dict[tuple[str, int, int, int], int]


class RuleFileError(ValueError):
    """A rule file that cannot be used; the message names the file and the rule."""


@dataclass(frozen=True)
class Example:
    """A text on which a rule must find exactly the ``phi`` strings, in order."""

    text: str
    phi: tuple[str, ...]


@dataclass(frozen=True)
class Lookup:
    """One ``lookup`` entry: ``group`` must be an entry of some dictionary in ``kinds`` and of none in
    ``not_kinds`` (case-insensitive, blanks normalised); when ``optional``, failing ends the span; when
    ``leading``, the group's longest passing run of leading words does."""

    group: str
    kinds: tuple[str, ...]
    not_kinds: tuple[str, ...] = ()
    optional: bool = False
    leading: bool = False

    @classmethod
    def parse(cls, group: str, spec: str) -> Lookup:
        """``spec`` as a rule file writes it: "cities,!states", "last_names?", "cities,towns<"."""
        kinds = [kind.strip() for kind in spec.rstrip("?<").split(",")]
        return cls(
            group,
            tuple(k for k in kinds if not k.startswith("!")),
            tuple(k[1:] for k in kinds if k.startswith("!")),
            spec.endswith("?"),
            spec.endswith("<"),
        )

    def longest_leading(self, language: str, text: str, start: int, end: int) -> int | None:
        """The end of the longest run of ``text[start:end]``'s leading words, shorter than the whole (which
        the caller tried), that passes; None when none does."""
        breaks = reversed(list(_LEADING_BREAK.finditer(text, start, end)))
        return next(
            (m.start() for m in breaks if m.start() > start and self.passes(language, text[start : m.start()])), None
        )

    def passes(self, language: str, text: str) -> bool:
        key = " ".join(text.split()).casefold()
        return any(_in_kind(language, kind, key) for kind in self.kinds) and not any(
            _in_kind(language, kind, key) for kind in self.not_kinds
        )


UNKNOWN_KIND = "unknown"  # the lookup kind of words no word list of the language holds
_LEADING_BREAK = regex.compile(r"[ \t]+|-")  # where a "<" lookup may end a group early
_WORD_BREAK = regex.compile(r"[\s'’-]+")
_APOSTROPHES = regex.compile(r"['’]")
_COMPOUND_NAME_KINDS = (*FIRST_NAME_KINDS, *LAST_NAME_KINDS)  # kinds whose hyphenated keys pass part by part


def _in_kind(language: str, kind: str, key: str) -> bool:
    """Whether the case-folded ``key`` belongs to lookup ``kind``: a bundled dictionary's entry, or,
    for ``unknown``, a text none of whose words the language knows as an ordinary word."""
    if kind == UNKNOWN_KIND:
        known = known_words(language)
        return not any(word in known for word in _WORD_BREAK.split(key) if word)
    entries = dictionary_set(language, kind)
    # Census surnames lost their apostrophes ("Obrien"): "o'brien" is looked up without them too.
    if key in entries or (("'" in key or "’" in key) and _APOSTROPHES.sub("", key) in entries):
        return True
    # A compound name ("Jean-Pierre", "Smith-Jones") is a name when each part is one.
    return kind in _COMPOUND_NAME_KINDS and "-" in key and all(part in entries for part in key.split("-"))


_COMPILED_PARTS = frozenset({"_regex", "_needs", "_context_regex", "_has_phi_group"})
# An inline flag group that sets flags for the whole pattern ("(?x)", "(?i)"; "(?i:...)" is scoped), and
# regex's letter for each flag (its documented inline flags; "V0"/"V1" pick the version).
_INLINE_FLAG_GROUP = regex.compile(r"\(\?([a-zA-Z01]+)\)")
_FLAG_LETTERS = {
    "a": regex.ASCII,
    "b": regex.BESTMATCH,
    "e": regex.ENHANCEMATCH,
    "f": regex.FULLCASE,
    "i": regex.IGNORECASE,
    "L": regex.LOCALE,
    "m": regex.MULTILINE,
    "p": regex.POSIX,
    "r": regex.REVERSE,
    "s": regex.DOTALL,
    "u": regex.UNICODE,
    "w": regex.WORD,
    "x": regex.VERBOSE,
}


def _flag_bits(named: Sequence[str]) -> int:
    """The ``regex`` flags a rule's ``flags`` names."""
    bits = 0
    for name in named:
        bits |= FLAGS[name]
    return bits


def _flags_in(pattern: str, named: Sequence[str]) -> int:
    """The flags ``regex`` compiles ``pattern`` with under the rule's ``named`` flags: those and every
    inline flag group's, plus what a str pattern always has (UNICODE) and the version (V0 unless set).
    Checked against the compiled flags for every bundled rule (tests/test_rule_prefilter.py)."""
    flags = regex.UNICODE | _flag_bits(named)
    for letters in _INLINE_FLAG_GROUP.findall(pattern):
        rest = letters.replace("V1", "").replace("V0", "")
        if "V1" in letters:
            flags |= regex.V1
        flags |= sum(_FLAG_LETTERS.get(letter, 0) for letter in set(rest))
    if not flags & regex.V1:
        flags |= regex.V0
    return flags


@dataclass(frozen=True, eq=False)
class Rule:
    """One compiled rule. ``spans(text)`` gives the (start, end) of its accepted PHI hits."""

    name: str
    label: str
    pattern: str
    origin: str
    flags: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    context_window: int = DEFAULT_CONTEXT_WINDOW
    validator: str | None = None
    examples: tuple[Example, ...] = ()
    counter_examples: tuple[str, ...] = ()
    lookup: tuple[Lookup, ...] = ()
    language: str | None = None
    fallback: bool = False
    needs: tuple[str, ...] = ()
    prefilter: bool = True
    # compile the patterns on first use (a bundled pack's rules, whose patterns its tests compile): a
    # process pays only for the rules its notes reach
    deferred: bool = False
    # every match lies on one line that holds a match of ``needs``, and its lookarounds read no further
    # than the line breaks around it: only those lines are searched (found by str.find where the needs
    # are plain words that match case, else by the needs' own patterns)
    one_line: bool = False
    _regex: regex.Pattern[str] = field(init=False, repr=False)
    _needs: tuple[regex.Pattern[str], ...] = field(init=False, repr=False)
    _literals: tuple[tuple[str, bool] | None, ...] = field(init=False, repr=False)
    _context_regex: regex.Pattern[str] | None = field(init=False, repr=False)
    _validate: Validator | None = field(init=False, repr=False)
    _has_phi_group: bool = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_literals", tuple(_literal_needs(needs, self.flags) for needs in self.needs))
        object.__setattr__(self, "_validate", get_validator(self.validator) if self.validator else None)
        if not self.deferred:
            self._compile()

    def _compile(self) -> None:
        flags = _flag_bits(self.flags)
        try:
            compiled = regex.compile(self.pattern, flags)
            needs = tuple(regex.compile(item, flags) for item in self.needs)
        except regex.error as exc:
            if not self.deferred:
                raise
            raise RuleFileError(f"{self.origin}: rule {self.name!r}: pattern does not compile ({exc})") from None
        context = None
        if self.context:
            words = "|".join(regex.escape(word) for word in sorted(self.context, key=len, reverse=True))
            context = regex.compile(rf"(?<!\w)(?:{words})(?!\w)", regex.IGNORECASE)
        object.__setattr__(self, "_needs", needs)
        object.__setattr__(self, "_context_regex", context)
        object.__setattr__(self, "_has_phi_group", "phi" in compiled.groupindex)
        object.__setattr__(self, "_regex", compiled)  # last: the mark that the rest is set

    def __getattr__(self, name: str) -> Any:
        # reached only when an attribute is missing: a deferred rule's compiled parts, made now
        if name in _COMPILED_PARTS and self.deferred and "_regex" not in self.__dict__:
            self._compile()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def pattern_flags(self) -> int:
        """The flags of the compiled pattern (those set inside it included), read off its text while a
        deferred rule is not compiled yet (what the prefilter needs of it)."""
        if "_regex" in self.__dict__:
            return self._regex.flags
        return _flags_in(self.pattern, self.flags)

    @property
    def needs_flags(self) -> tuple[int, ...]:
        """``pattern_flags`` of each ``needs`` pattern."""
        if "_regex" in self.__dict__:
            return tuple(needs.flags for needs in self._needs)
        return tuple(_flags_in(needs, self.flags) for needs in self.needs)

    @property
    def compiled(self) -> regex.Pattern[str]:
        """The compiled pattern (its flags include those set inside it)."""
        return self._regex

    @property
    def needs_patterns(self) -> tuple[regex.Pattern[str], ...]:
        """The compiled ``needs`` patterns (with the rule's flags)."""
        return self._needs

    def spans(
        self,
        text: str,
        timeout: float | None = None,
        needs_seen: NeedsSeen | None = None,
        needs_met: bool = False,
    ) -> list[tuple[int, int]]:
        """PHI offsets of every hit that passes the context and validator checks. ``needs_seen``: where
        each ``needs`` pattern was found in this ``text`` so far (several rules need a digit), shared
        by the rules searching one text; ``needs_met``: one of ``needs`` is known to match in ``text``
        (the prefilter saw it), so a short text is searched without looking for them.

        Raises ``TimeoutError`` when the whole search takes longer than ``timeout`` seconds.
        """
        found = []
        for match in self._matches(text, timeout, needs_seen, needs_met):
            # A pattern may capture "phi" more than once ("28036 Madrid": code and town).
            captures = match.spans("phi") if self._has_phi_group else [match.span()]
            parts = [(s, e) for s, e in captures if e > s]
            if not parts:
                continue
            if self._context_regex is not None:
                start = parts[0][0]
                if self._context_regex.search(text, max(0, start - self.context_window), start) is None:
                    continue
            if self._validate is not None and not self._validate(match):
                continue
            if self.lookup:
                parts = self._looked_up(match, parts)
                if not parts:
                    continue
            found.extend(parts)
        return found

    def _looked_up(self, match: regex.Match[str], parts: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``parts`` when every ``lookup`` group that took part passes its dictionaries; a failed
        optional group cuts the parts before it, a "<" group after its longest passing leading words;
        a failed required group drops the hit ([])."""
        text = match.string
        for lookup in self.lookup:
            for start, end in match.spans(lookup.group):
                if lookup.passes(self.language or "", text[start:end]):
                    continue
                if lookup.leading:
                    leading_end = lookup.longest_leading(self.language or "", text, start, end)
                    if leading_end is None:
                        return []
                    parts = [(s, min(e, leading_end)) for s, e in parts if s < leading_end]
                    continue
                if not lookup.optional:
                    return []
                cut = start
                while cut > 0 and text[cut - 1].isspace():  # not text[:start].rstrip(): no copy of a long note
                    cut -= 1
                parts = [(s, min(e, cut)) for s, e in parts if s < cut]
        return [(s, e) for s, e in parts if e > s]

    def _matches(
        self, text: str, timeout: float | None, needs_seen: NeedsSeen | None = None, needs_met: bool = False
    ) -> Iterator[regex.Match[str]]:
        """The matches ``finditer`` gives on the whole text, found window by window in a long one.

        Each window is searched with ``pos``/``endpos`` on the whole string (so ``^``, lookbehinds and
        the context read the real text before it), from where the last match ended, reading
        ``SEARCH_OVERLAP`` past its end; a match that reaches that reading limit is matched again on the
        whole text, where it may be longer. Each window gets ``timeout``, so a 20 MB note costs each rule
        a bounded time per window rather than one search that must finish in ``timeout``. A text, or a
        window's reading, where ``needs`` does not match holds no match and is not searched."""
        if len(text) <= SEARCH_WINDOW + SEARCH_OVERLAP:
            if self.one_line and self.needs:  # a rule changed since (dataclasses.replace) without needs: whole
                for start, end in self._needle_lines(text, timeout):
                    yield from self._regex.finditer(text, start, end, timeout=timeout)
            elif needs_met or self._may_match(text, 0, 0, len(text), timeout, needs_seen):
                yield from self._regex.finditer(text, timeout=timeout)
            return
        resume = 0
        for window_start in range(0, len(text), SEARCH_WINDOW):
            window_end = min(len(text), window_start + SEARCH_WINDOW)
            reading_end = min(len(text), window_end + SEARCH_OVERLAP)
            if not self._may_match(text, window_start, max(resume, window_start), reading_end, timeout, needs_seen):
                continue
            for match in self._regex.finditer(text, max(resume, window_start), reading_end, timeout=timeout):
                if match.start() >= window_end:
                    break
                if match.start() < resume:  # inside a match lengthened on the whole text
                    continue
                if match.end() == reading_end < len(text):
                    longer = self._regex.match(text, match.start(), timeout=timeout)
                    if longer is None:
                        continue
                    match = longer
                resume = max(match.end(), match.start() + 1)
                yield match

    def _needle_lines(self, text: str, timeout: float | None = None) -> list[tuple[int, int]]:
        """The lines of ``text`` (each with its line break, so a lookahead reads it) holding a match of one
        of a ``one_line`` rule's needs, in order, a run of lines one match spans as one stretch: plain
        words by str.find (in the case-folded text where they ignore case), other needs by their patterns."""
        lines: set[tuple[int, int]] = set()
        for needs, literal in zip(self._needs, self._literals):
            if literal is None:
                for match in needs.finditer(text, timeout=timeout):
                    lines.add(_lines_around(text, match.start(), max(match.start(), match.end() - 1)))
                continue
            word, ignore_case = literal
            haystack = _case_folded(text) if ignore_case else text
            # ASCII lower-cases character for character; any other folding may move offsets, never line breaks
            same_offsets = haystack is text or text.isascii()
            at = haystack.find(word)
            while at >= 0:  # a word holds no line break: the line it is on
                lines.add(_lines_around(text, at, at) if same_offsets else _folded_line(text, haystack, at))
                end = haystack.find("\n", at)
                if end < 0:
                    break
                at = haystack.find(word, end + 1)
        merged: list[tuple[int, int]] = []
        for start, end in sorted(lines):  # a stretch searched twice would give its hits twice
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def _may_match(
        self, text: str, window_start: int, start: int, end: int, timeout: float | None, needs_seen: NeedsSeen | None
    ) -> bool:
        """False when no pattern of ``needs`` finds anything in ``text[start:end]``: a search there finds
        no match (every match, and what its lookaheads read, lies inside and holds a match of one)."""
        if not self._needs:
            return True
        if start == 0 and end == len(text):  # a whole (short) text: plain words by str.find
            return any(
                _found(needs, text, window_start, start, end, timeout, needs_seen)
                if literal is None
                else _literal_found(literal, text)
                for needs, literal in zip(self._needs, self._literals)
            )
        return any(_found(needs, text, window_start, start, end, timeout, needs_seen) for needs in self._needs)

    def example_problems(self) -> list[str]:
        """What is wrong with this rule's own examples and counter-examples (empty when none); an
        example whose text holds no match of ``needs`` is one: the hint would hide its hits."""
        problems = []
        for example in self.examples:
            if self._needs and not any(needs.search(example.text) for needs in self._needs):
                problems.append(f"{self.name}: example {example.text!r} holds no match of needs {list(self.needs)!r}")
            got = tuple(example.text[s:e] for s, e in self.spans(example.text))
            if got != example.phi:
                problems.append(f"{self.name}: example {example.text!r} gave {got}, expected {example.phi}")
        for text in self.counter_examples:
            got = tuple(text[s:e] for s, e in self.spans(text))
            if got:
                problems.append(f"{self.name}: counter-example {text!r} matched {got}")
        return problems


def _literal_needs(needs: str, flags: Sequence[str]) -> tuple[str, bool] | None:
    """(word, case-insensitive) for a needs pattern that is a plain word under ``flags``, else None."""
    if "V1" in flags:  # full case folding: a regex search may match what the case-folded text splits
        return None
    match = _LITERAL_NEEDS.fullmatch(needs)
    if match is None:
        return None
    ignore_case = bool(match.group("ci")) or "IGNORECASE" in flags
    word = match.group("word").replace("\\.", ".")
    return (word.lower() if ignore_case else word), ignore_case


# The last text case-folded for _literal_found and its folding: the rules of one note share it.
_folded: tuple[str, str] = ("", "")
# The last folded text _folded_line read, and where each of its lines and of the text's starts.
_line_starts: tuple[str, list[int], list[int]] = ("", [0], [0])


def _case_folded(text: str) -> str:
    """``text`` case-folded as _literal_found reads it (kept for the next rule of the same note)."""
    global _folded
    last = _folded  # read once: another thread may fold another text meanwhile
    if last[0] is text:
        return last[1]
    folded = text.lower() if text.isascii() else text.casefold().replace("\u0307", "")
    _folded = (text, folded)
    return folded


def _lines_around(text: str, first: int, last: int) -> tuple[int, int]:
    """The run of ``text``'s lines holding ``text[first]`` to ``text[last]``, the last one's line break
    included (a look-ahead reads it)."""
    end = text.find("\n", last)
    return text.rfind("\n", 0, first) + 1, len(text) if end < 0 else end + 1


def _folded_line(text: str, folded: str, at: int) -> tuple[int, int]:
    """The line of ``text`` (with its line break) holding ``folded[at]``, ``folded`` being ``text``
    case-folded: the same line breaks, maybe not at the same offsets."""
    global _line_starts
    last = _line_starts
    if last[0] is folded:
        folded_starts, starts = last[1], last[2]
    else:
        folded_starts = [0, *itertools.accumulate(len(line) + 1 for line in folded.split("\n"))]
        starts = [0, *itertools.accumulate(len(line) + 1 for line in text.split("\n"))]
        _line_starts = (folded, folded_starts, starts)
    line = bisect.bisect_right(folded_starts, at) - 1
    return starts[line], min(starts[line + 1], len(text))


def _literal_found(literal: tuple[str, bool], text: str) -> bool:
    """Whether the plain word ``literal`` occurs in the whole ``text``: exactly where it matches case;
    ignoring case, in the case-folded text, which holds the lower-cased word wherever a regex
    search ignoring case finds it (every character such a search takes for an ASCII letter or
    sign case-folds to it: the Kelvin sign to "k", the long s to "s", and the dotted capital I to
    "i" once the combining dot it folds to is dropped), so a text it says lacks the word holds no
    match of it."""
    word, ignore_case = literal
    return word in (_case_folded(text) if ignore_case else text)


def _found(
    needs: regex.Pattern[str],
    text: str,
    window_start: int,
    start: int,
    end: int,
    timeout: float | None,
    needs_seen: NeedsSeen | None,
) -> bool:
    """Whether ``needs`` matches in ``text[start:end]``. Its first match from ``window_start`` is kept
    in ``needs_seen`` for the next rule needing it; without lookarounds, a match found there that
    starts at or after ``start`` is one in the stretch."""
    if needs_seen is None:
        return needs.search(text, start, end, timeout=timeout) is not None
    key = (needs.pattern, needs.flags, window_start, end)
    first = needs_seen.get(key)
    if first is None:
        found = needs.search(text, window_start, end, timeout=timeout)
        first = needs_seen[key] = -1 if found is None else found.start()
    return first >= start or (first >= 0 and needs.search(text, start, end, timeout=timeout) is not None)


@dataclass(frozen=True)
class RuleFile:
    """A parsed, validated rule file."""

    origin: str
    taxonomy: str
    language: str | None
    rules: tuple[Rule, ...]


def parse_rule_file(text: str, origin: str, deferred: bool = False) -> RuleFile:
    """Parse and validate the TOML ``text`` of a rule file; ``origin`` names it in errors. ``deferred``:
    its patterns are compiled on first use (a bundled pack's, which its tests compile), so a bad one
    is reported then."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleFileError(f"{origin}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - _FILE_KEYS)
    if unknown:
        raise RuleFileError(f"{origin}: unknown top-level key(s) {unknown}; allowed: {sorted(_FILE_KEYS)}")
    taxonomy_name = data.get("taxonomy")
    if not isinstance(taxonomy_name, str):
        raise RuleFileError(f"{origin}: the header must name its label taxonomy, e.g. taxonomy = 'meddocan'")
    try:
        taxonomy = load_taxonomy(taxonomy_name)
    except ValueError as exc:
        raise RuleFileError(f"{origin}: {exc}") from None
    language = data.get("language")
    if language is not None and not isinstance(language, str):
        raise RuleFileError(f"{origin}: language must be a string")
    defines = _parse_defines(data.get("define", {}), origin, deferred)
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise RuleFileError(f"{origin}: rules must be an array of tables ([[rule]])")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        rule = _parse_rule(entry, index, origin, taxonomy.knows, taxonomy.name, defines, language, deferred)
        if rule.name in seen:
            raise RuleFileError(f"{origin}: rule {rule.name!r}: the name is used twice")
        seen.add(rule.name)
        rules.append(rule)
    return RuleFile(origin, taxonomy.name, language, tuple(rules))


def _parse_defines(table: Any, origin: str, deferred: bool = False) -> dict[str, str]:
    """The ``[define]`` table: subpattern name -> pattern text with the definitions it uses inlined;
    each compiled to check it, unless ``deferred`` (a bundled pack's, which its tests compile)."""
    if not isinstance(table, dict):
        raise RuleFileError(f"{origin}: [define] must be a table of name = pattern")
    for name, body in table.items():
        where = f"{origin}: [define] {name!r}"
        if not _DEFINE_NAME.fullmatch(name) or name == "phi":
            raise RuleFileError(f"{where}: a name is letters, digits and '_' (not 'phi')")
        if not isinstance(body, str) or not body.strip():
            raise RuleFileError(f"{where}: needs a non-empty string pattern")
        if regex.search(r"\(\?P?<\w+>", body):
            raise RuleFileError(f"{where}: holds a named group, which every rule using it would share")
    inlined: dict[str, str] = {}
    for name in table:
        where = f"{origin}: [define] {name!r}"
        inlined[name] = _inline(f"(?&{name})", table, lambda problem: RuleFileError(f"{where}: {problem}"))  # noqa: B023 - called at once
        if deferred:
            continue
        try:
            regex.compile(inlined[name])
        except regex.error as exc:
            raise RuleFileError(f"{where}: pattern does not compile ({exc})") from None
    return inlined


def _inline(
    pattern: str, defines: Mapping[str, str], fail: Callable[[str], RuleFileError], seen: tuple[str, ...] = ()
) -> str:
    """``pattern`` with each ``(?&name)`` of a definition replaced by ``(?x:definition)``."""

    def one(match: regex.Match[str]) -> str:
        name = match.group(1)
        if name not in defines:
            return match.group(0)  # a group of the pattern's own
        if name in seen:
            raise fail(f"the definition {name!r} uses itself")
        # The newline ends a comment on the definition's last line.
        return f"(?x:{_inline(defines[name], defines, fail, seen + (name,))}\n)"

    return _CALL.sub(one, pattern)


def _with_defines(pattern: str, defines: Mapping[str, str], fail: Callable[[str], RuleFileError]) -> str:
    """``pattern`` with the file's definitions (already inlined among themselves) inlined."""
    used = {name for name in _CALL.findall(pattern) if name in defines}
    clash = sorted(name for name in used if regex.search(rf"\(\?P?<{name}>", pattern))
    if clash:
        raise fail(f"defines its own group {clash[0]!r}, which the file's [define] also names")
    return _CALL.sub(lambda m: defines.get(m.group(1), m.group(0)), pattern) if used else pattern


@cache
def dictionary_set(language: str, kind: str) -> frozenset[str]:
    """``language``'s bundled dictionary ``kind``, case-folded with blanks normalised: what a rule's
    ``lookup`` compares a group with."""
    return frozenset(" ".join(entry.split()).casefold() for entry in bundled_entries(language, kind))


def _parse_lookup(
    value: Any, pattern: str, language: str | None, fail: Callable[[str], RuleFileError], flags: int | None
) -> tuple[Lookup, ...]:
    """The ``lookup`` table, checked: the groups exist, the kinds are the language's dictionaries.
    The groups are read off the pattern compiled with the rule's ``flags`` (regex keeps it, so the
    rule's own compile finds it made); ``flags`` None (a deferred rule): left to the pack's tests."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise fail("lookup must be a table of group = dictionary kind")
    if value and not language:
        raise fail("lookup needs the file's language (language = ...), whose dictionaries it reads")
    groups = set(regex.compile(pattern, flags).groupindex) if value and flags is not None else set()
    lookups = tuple(Lookup.parse(group, spec) for group, spec in value.items())
    for lookup in lookups:
        if flags is not None and lookup.group not in groups:
            raise fail(f"lookup names group {lookup.group!r}, which the pattern does not have")
        unknown = [
            kind
            for kind in lookup.kinds + lookup.not_kinds
            if kind not in bundled_kinds(str(language)) and kind != UNKNOWN_KIND
        ]
        if unknown:
            raise fail(
                f"lookup kind(s) {unknown} are not dictionaries of {language!r} (nor {UNKNOWN_KIND!r}): "
                f"{list(bundled_kinds(str(language)))}"
            )
        if UNKNOWN_KIND in lookup.kinds + lookup.not_kinds and not language_pack(str(language)).has("words"):
            raise fail(f"lookup kind {UNKNOWN_KIND!r} needs the common-word list words.txt in the {language!r} pack")
    return lookups


def _parse_rule(
    entry: Any,
    index: int,
    origin: str,
    knows_label: Callable[[str], bool],
    taxonomy: str,
    defines: Mapping[str, str] | None = None,
    language: str | None = None,
    deferred: bool = False,
) -> Rule:
    where = f"{origin}: rule #{index}"
    if not isinstance(entry, dict):
        raise RuleFileError(f"{where}: must be a table")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RuleFileError(f"{where}: needs a name of letters, digits, '_', '-' or '.'")
    where = f"{origin}: rule {name!r}"

    def fail(problem: str) -> RuleFileError:
        return RuleFileError(f"{where}: {problem}")

    unknown = sorted(set(entry) - _RULE_KEYS)
    if unknown:
        raise fail(f"unknown key(s) {unknown}; allowed: {sorted(_RULE_KEYS)}")
    label, pattern = entry.get("label"), entry.get("pattern")
    if not isinstance(label, str) or not knows_label(label):
        raise fail(f"label {label!r} is not in the {taxonomy} taxonomy")
    if not isinstance(pattern, str) or not pattern:
        raise fail("needs a non-empty string pattern")
    pattern = _with_defines(pattern, defines or {}, fail)
    flags = _string_list(entry.get("flags", []), "flags", fail)
    bad_flags = sorted(set(flags) - set(FLAGS))
    if bad_flags:
        raise fail(f"unknown flag(s) {bad_flags}; allowed: {sorted(FLAGS)}")
    context = _string_list(entry.get("context", []), "context", fail)
    if any(not word for word in context):
        raise fail("context words must not be empty")
    window = entry.get("context_window", DEFAULT_CONTEXT_WINDOW)
    if "context_window" in entry and not context:
        raise fail("context_window is set but context is empty")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        raise fail("context_window must be a positive integer")
    validator = entry.get("validator")
    if validator is not None and validator not in validator_names():
        raise fail(f"unknown validator {validator!r}; registered: {list(validator_names())}")
    examples = tuple(_parse_example(item, fail) for item in _list(entry.get("examples", []), "examples", fail))
    counter = _string_list(entry.get("counter_examples", []), "counter_examples", fail)
    try:
        lookup = _parse_lookup(
            entry.get("lookup", {}), pattern, language, fail, None if deferred else _flag_bits(flags)
        )
        fallback = entry.get("fallback", False)
        if not isinstance(fallback, bool):
            raise fail("fallback must be true or false")
        needs = entry.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        if "needs" in entry and (
            not isinstance(needs, list) or not needs or not all(isinstance(item, str) and item for item in needs)
        ):
            raise fail("needs must be a non-empty string pattern or a list of them")
        if any(_LOOKAROUND.search(item) for item in needs):
            raise fail("needs must not hold lookarounds or anchors: it is searched inside a stretch of text alone")
        prefilter = entry.get("prefilter", True)
        if not isinstance(prefilter, bool):
            raise fail("prefilter must be true or false")
        one_line = entry.get("one_line", False)
        if not isinstance(one_line, bool):
            raise fail("one_line must be true or false")
        if one_line and not needs:
            raise fail("one_line needs needs: the words whose lines are searched")
        return Rule(
            name,
            label,
            pattern,
            origin,
            tuple(flags),
            tuple(context),
            window,
            validator,
            examples,
            tuple(counter),
            lookup,
            language,
            fallback,
            tuple(_with_defines(item, defines or {}, fail) for item in needs),
            prefilter,
            deferred,
            one_line,
        )
    except regex.error as exc:
        raise fail(f"pattern does not compile ({exc})") from None


def _list(value: Any, key: str, fail: Callable[[str], RuleFileError]) -> list[Any]:
    if not isinstance(value, list):
        raise fail(f"{key} must be a list")
    return value


def _string_list(value: Any, key: str, fail: Callable[[str], RuleFileError]) -> list[str]:
    items = _list(value, key, fail)
    if not all(isinstance(item, str) for item in items):
        raise fail(f"{key} must be a list of strings")
    return items


def _parse_example(item: Any, fail: Callable[[str], RuleFileError]) -> Example:
    """An example is a string (all of it is the PHI) or a table {text, phi = str | [str, ...]}."""
    if isinstance(item, str):
        return Example(item, (item,))
    if not isinstance(item, dict) or set(item) - _EXAMPLE_KEYS or not isinstance(item.get("text"), str):
        raise fail("each example must be a string or a table {text = ..., phi = ...}")
    phi = item.get("phi", item["text"])
    phi = (phi,) if isinstance(phi, str) else phi
    if not isinstance(phi, (list, tuple)) or not all(isinstance(p, str) for p in phi):
        raise fail("an example's phi must be a string or a list of strings")
    return Example(item["text"], tuple(phi))


def bundled_languages() -> tuple[str, ...]:
    """Languages whose pack (:mod:`hybriddeid.core.languages`) has a ``regex.toml`` rule file."""
    return tuple(code for code in available_languages() if language_pack(code).has("regex"))


def bundled_rules_text(language: str) -> str:
    """The TOML text of ``language``'s pack rule file (``regex.toml``)."""
    return language_pack(language).read_text("regex")


@dataclass
class RuleStats:
    """How one rule did on gold documents: its ``hits``, the ``correct`` ones (same offsets and
    label as a gold span) and the number of ``gold`` spans of its label."""

    hits: int = 0
    correct: int = 0
    gold: int = 0

    @property
    def precision(self) -> float:
        return self.correct / self.hits if self.hits else 1.0

    @property
    def recall(self) -> float:
        return self.correct / self.gold if self.gold else 0.0


class RuleClassifier:
    """Finds PHI with regex rules: the bundled pack for ``language`` plus user ``rule_files``.

    ``language=None`` uses only the user files. Overlapping hits are resolved longest first, then
    by rule order (bundled before user, file order within a file), so output spans never overlap.
    Usable without ``fit`` (every rule on); ``fit`` turns off rules below ``min_precision``.
    A rule whose search exceeds ``timeout`` seconds is skipped for that document with a warning.
    """

    unit = "span"  # rules find whole spans, not units

    def __init__(
        self,
        language: str | None = "en",
        rule_files: Sequence[str | Path] = (),
        min_precision: float = 0.0,
        source: str = "rule",
        timeout: float = DEFAULT_TIMEOUT,
        map_labels: str = "auto",
    ) -> None:
        if map_labels not in MAP_LABELS:
            raise ValueError(f"map_labels must be one of {', '.join(MAP_LABELS)}, not {map_labels!r}")
        self.language = language
        self.rule_files = tuple(rule_files)
        self.min_precision = min_precision
        self.map_labels = map_labels
        self.source = source
        self.timeout = timeout
        # (origin, text) of the user rule files once read; from_disk fills it from the saved state.
        self._user_texts: tuple[tuple[str, str], ...] | None = None
        self._rules: tuple[Rule, ...] | None = None

    # -- rules -------------------------------------------------------------------------------
    @property
    def rules(self) -> tuple[Rule, ...]:
        """Every loaded rule, enabled or not, in precedence order (compiled once, on first use)."""
        if self._rules is None:
            self._rules = self._load()
        return self._rules

    @property
    def enabled_rules(self) -> tuple[Rule, ...]:
        enabled = getattr(self, "enabled_", None)
        if enabled is None:
            return self.rules
        memo = self.__dict__.get("_enabled_memo")  # (enabled_, rules, the enabled rules): once per fit or load
        if memo is not None and memo[0] is enabled and memo[1] is self.rules and isinstance(enabled, tuple):
            return memo[2]
        keep = set(enabled)
        rules = tuple(rule for rule in self.rules if rule.name in keep)
        self._enabled_memo = (enabled, self.rules, rules)
        return rules

    def prepare(self, patterns: bool = True) -> None:
        """Build now what the first note would: the one-scan prefilter (compiled, or read from the cache)
        and, with ``patterns``, every enabled rule's pattern (a bundled pack's compile on first search
        otherwise)."""
        prefilter = self._prefilter()
        if prefilter is not None:
            prefilter.build()
        if patterns:
            for rule in self.enabled_rules:
                rule.compiled  # noqa: B018 - compiles a deferred rule

    def _prefilter(self) -> RulePrefilter | None:
        """The one-scan prefilter of the enabled rules (None where Hyperscan is not installed or is off)."""
        rules = self.enabled_rules
        memo = self.__dict__.get("_prefilter_memo")
        if memo is None or memo[0] is not rules:
            memo = self._prefilter_memo = (rules, RulePrefilter(rules) if prefilter_enabled() else None)
        return memo[1]

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels the enabled rules give, in order; kept while the enabled rules and the label map are
        the same objects (the pipeline asks once per note for its PHI set)."""
        rules, label_map = self.enabled_rules, getattr(self, "label_map_", None)
        memo = self.__dict__.get("_labels_memo")
        if memo is None or memo[0] is not rules or memo[1] is not label_map:
            memo = self._labels_memo = (rules, label_map, tuple(dict.fromkeys(map(self.label_of, rules))))
        return memo[2]

    def label_of(self, rule: Rule) -> str:
        """The label ``rule``'s spans get: its own, or the corpus label ``fit`` mapped it onto."""
        return getattr(self, "label_map_", {}).get(rule.name, rule.label)

    def _user_rule_texts(self) -> tuple[tuple[str, str], ...]:
        if self._user_texts is None:
            self._user_texts = tuple((str(path), Path(path).read_text(encoding="utf-8")) for path in self.rule_files)
        return self._user_texts

    def _load(self) -> tuple[Rule, ...]:
        files = []
        if self.language:
            files.append(
                parse_rule_file(
                    bundled_rules_text(self.language), language_pack(self.language).origin("regex"), deferred=True
                )
            )
        files.extend(parse_rule_file(text, origin) for origin, text in self._user_rule_texts())
        rules: list[Rule] = []
        where: dict[str, str] = {}
        for rule_file in files:
            for rule in rule_file.rules:
                if rule.name in where:
                    raise RuleFileError(
                        f"{rule_file.origin}: rule {rule.name!r}: the name is already used in {where[rule.name]}"
                    )
                where[rule.name] = rule_file.origin
                rules.append(rule)
        return tuple(rules)

    # -- the protocol --------------------------------------------------------------------------
    def _search(
        self,
        rule: Rule,
        doc: Document,
        needs_seen: NeedsSeen | None = None,
        text: str | None = None,
        needs_met: bool = False,
    ) -> list[tuple[int, int]]:
        """``rule``'s hits in ``doc`` (in ``text``, the note's text with its layout's line breaks, when
        given); a search past ``timeout`` is logged (rule and note names) and skipped.
        ``needs_seen``, ``needs_met``: as ``Rule.spans`` takes them."""
        try:
            return rule.spans(
                doc.text if text is None else text, timeout=self.timeout, needs_seen=needs_seen, needs_met=needs_met
            )
        except TimeoutError:
            log.warning(
                "rule %r timed out after %gs on document %r; skipped for this document",
                rule.name,
                self.timeout,
                doc.name,
            )
            return []

    def fit(self, docs: Iterable[Document]) -> RuleClassifier:
        """Measure every rule on the gold spans of ``docs``; keep those with precision >= min_precision.

        A hit is correct when a gold span has its offsets and label (the mapped label, with
        ``map_labels = "auto"``: module docstring). Rules that never fire stay on (nothing speaks
        against them), unless their label is not the corpus's and so cannot be mapped.
        """
        docs = list(docs)
        # Measured on the text predict reads: a note exported on one line with its layout's line breaks.
        texts = [
            with_line_breaks(doc.text, layout_lines(doc.text, self.language)) if self.language else None for doc in docs
        ]
        hits = {
            (rule.name, index): self._search(rule, doc, text=texts[index])
            for index, doc in enumerate(docs)
            for rule in self.rules
        }
        position = {id(doc): index for index, doc in enumerate(docs)}
        search: Search = lambda rule, doc: hits[(rule.name, position[id(doc)])]  # noqa: E731 (searched once)
        self.label_map_: dict[str, str] = {}
        self.unmapped_: tuple[str, ...] = ()
        if self.map_labels == "auto":
            self.label_map_, self.unmapped_ = map_rule_labels(self.rules, docs, search)
            for rule in self.rules:
                if rule.name in self.label_map_:
                    log.info(
                        "rule %r: label %s mapped onto the corpus's %s",
                        rule.name,
                        rule.label,
                        self.label_map_[rule.name],
                    )
            if self.unmapped_:
                log.info(
                    "rules switched off, their label is not the corpus's and their hits match none of its "
                    "labels often enough: %s",
                    ", ".join(self.unmapped_),
                )
        labelled = [replace_label(rule, self.label_of(rule)) for rule in self.rules]
        self.rule_stats_ = measure_rules(labelled, docs, search)
        off = set(self.unmapped_)
        self.enabled_ = tuple(
            rule.name
            for rule in self.rules
            if rule.name not in off and self.rule_stats_[rule.name].precision >= self.min_precision
        )
        return self

    def fit_report(self) -> dict[str, Any]:
        """What ``fit`` decided about labels, for the model's meta.json (rule names and labels only)."""
        return {
            "map_labels": self.map_labels,
            "label_map": dict(getattr(self, "label_map_", {})),
            "unmapped": list(getattr(self, "unmapped_", ())),
        }

    def predict(self, note: AnalysedNote | Document, regions: Sequence[tuple[int, int]] | None = None) -> list[Span]:
        """Non-overlapping rule spans of the note, sorted by offset (rules read the whole text)."""
        doc = note.doc if isinstance(note, AnalysedNote) else note
        # A note exported on one line is read in the lines the CRFs see, so a rule does not run on
        # from one field into the next ("8/22/94 EMERGENCY DEPARTMENT COURSE" as a street).
        text = note.layout_text if isinstance(note, AnalysedNote) else None
        fallback = self.source + FALLBACK_SUFFIX
        needs_seen: NeedsSeen = {}
        rules = self.enabled_rules
        # one scan of the note says which rules may match (None: search them all)
        prefilter = self._prefilter()
        may_match = None if prefilter is None else prefilter.candidates(doc.text if text is None else text)
        needs_met = frozenset() if may_match is None or prefilter is None else prefilter.needs_held
        candidates = [
            (start - end, order, start, end, self.label_of(rule), fallback if rule.fallback else self.source)
            for order, rule in enumerate(rules)
            if may_match is None or order in may_match
            for start, end in self._search(rule, doc, needs_seen, text, order in needs_met)
        ]
        candidates.sort()  # longest first, then rule order, then leftmost
        starts: list[int] = []
        kept: list[Span] = []
        for _, _, start, end, label, source in candidates:
            i = bisect.bisect_left(starts, start)
            if i > 0 and kept[i - 1].end > start or i < len(kept) and kept[i].start < end:
                continue
            starts.insert(i, start)
            kept.insert(i, Span(start, end, label, source))
        return kept

    def to_disk(self, path: Path) -> None:
        """Write ``rules.toml``: the user rule texts, the enabled rules, the fit statistics and a
        digest of the bundled pack (settings are the pipeline config's)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "bundled_sha256": self._bundled_digest(),
            "enabled": [rule.name for rule in self.enabled_rules],
            "user_rules": [{"origin": origin, "text": text} for origin, text in self._user_rule_texts()],
        }
        label_map = getattr(self, "label_map_", None)
        if label_map:  # absent when empty: such a state reads as before the mapping existed
            state["label_map"] = dict(label_map)
        stats = getattr(self, "rule_stats_", None)
        if stats is not None:
            state["rule_stats"] = {name: vars(value) for name, value in stats.items()}
        atomic_write_text(path / STATE_FILE, tomli_w.dumps(state, multiline_strings=True))

    @classmethod
    def from_disk(cls, path: Path, params: Mapping[str, Any]) -> RuleClassifier:
        """Rebuild a classifier saved by :meth:`to_disk` with ``params`` (its config section and
        language); the user rules are the saved copies. Refuses a state naming unknown rules."""
        state_file = Path(path) / STATE_FILE
        try:
            state = tomllib.loads(state_file.read_text(encoding="utf-8"))
            if state["format"] not in READABLE_FORMATS:
                raise ValueError(f"format {state['format']!r} is not one of {READABLE_FORMATS}")
            user = tuple((item["origin"], item["text"]) for item in state["user_rules"])
            clf = cls(**{**params, "rule_files": tuple(origin for origin, _ in user)})
            enabled = tuple(state["enabled"])
            stats = {name: RuleStats(**value) for name, value in state.get("rule_stats", {}).items()}
            saved_digest = state["bundled_sha256"]
            label_map = {str(name): str(label) for name, label in state.get("label_map", {}).items()}
        except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{state_file}: not a saved rule classifier ({exc})") from None
        clf._user_texts = user  # the saved copies, not the files they came from
        missing = sorted(set(enabled) - {rule.name for rule in clf.rules})
        if missing:
            raise ValueError(f"{state_file}: enabled rules {missing} are not in the current rule packs")
        if saved_digest != clf._bundled_digest():
            log.warning("%s: the bundled %r rules changed since this classifier was saved", state_file, clf.language)
        clf.enabled_ = enabled
        if label_map:
            clf.label_map_ = label_map
        if stats:
            clf.rule_stats_ = stats
        return clf

    def _bundled_digest(self) -> str:
        if not self.language:
            return ""
        return hashlib.sha256(bundled_rules_text(self.language).encode("utf-8")).hexdigest()


Search = Callable[[Rule, Document], list[tuple[int, int]]]


def replace_label(rule: Rule, label: str) -> Rule:
    """``rule`` with another label (the same object when it already has it)."""
    if label == rule.label:
        return rule
    return dataclasses.replace(rule, label=label)


def map_rule_labels(
    rules: Sequence[Rule],
    docs: Sequence[Document],
    search: Search | None = None,
    min_hits: int = MAP_MIN_HITS,
    min_share: float = MAP_MIN_SHARE,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Map each rule whose label no gold span of ``docs`` has onto the gold label its hits overlap
    most (each hit counts for the gold label it overlaps by the most characters): returns
    ({rule name: corpus label}, names of such rules left unmapped, to be switched off). A rule is
    mapped when at least ``min_hits`` of its hits, and ``min_share`` of all of them, overlap that label.
    """
    search = search or (lambda rule, doc: rule.spans(doc.text))
    corpus_labels = {span.label for doc in docs for span in doc.spans}
    foreign = [rule for rule in rules if rule.label not in corpus_labels]
    votes: dict[str, Counter[str]] = {rule.name: Counter() for rule in foreign}
    n_hits: dict[str, int] = dict.fromkeys(votes, 0)
    for doc in docs:
        gold = sorted((span.start, span.end, span.label) for span in doc.spans)
        for rule in foreign:
            for start, end in search(rule, doc):
                n_hits[rule.name] += 1
                best, best_overlap = None, 0
                for g_start, g_end, label in gold:  # a note has tens of gold spans: a plain scan
                    overlap = min(end, g_end) - max(start, g_start)
                    if overlap > best_overlap:
                        best, best_overlap = label, overlap
                if best is not None:
                    votes[rule.name][best] += 1
    mapping: dict[str, str] = {}
    unmapped: list[str] = []
    for rule in foreign:
        top = votes[rule.name].most_common(1)
        if top and top[0][1] >= min_hits and top[0][1] >= min_share * n_hits[rule.name]:
            mapping[rule.name] = top[0][0]
        else:
            unmapped.append(rule.name)
    return mapping, tuple(unmapped)


def measure_rules(
    rules: Sequence[Rule], docs: Iterable[Document], search: Search | None = None
) -> dict[str, RuleStats]:
    """Per-rule hits, exact-match correct hits and gold counts of the rule's label over ``docs``.

    ``search(rule, doc)`` gives a rule's (start, end) hits; by default ``rule.spans(doc.text)``.
    """
    search = search or (lambda rule, doc: rule.spans(doc.text))
    stats = {rule.name: RuleStats() for rule in rules}
    for doc in docs:
        gold = {(span.start, span.end, span.label) for span in doc.spans}
        per_label: dict[str, int] = {}
        for span in doc.spans:
            per_label[span.label] = per_label.get(span.label, 0) + 1
        for rule in rules:
            hits = search(rule, doc)
            entry = stats[rule.name]
            entry.hits += len(hits)
            entry.correct += sum((start, end, rule.label) in gold for start, end in hits)
            entry.gold += per_label.get(rule.label, 0)
    return stats


def _check_section(section: Mapping[str, Any]) -> list[str]:
    """Problems with a [rule] config section (the pipeline reports them as config errors)."""
    if section.get("map_labels") not in MAP_LABELS:
        return [f"map_labels must be one of {', '.join(MAP_LABELS)}, not {section.get('map_labels')!r}"]
    return []


COMPONENT = ComponentSpec(
    class_path="hybriddeid.classifiers.rules:RuleClassifier",
    # map_labels: "auto" relabels rules onto the training corpus's labels (module docstring); "off" never
    defaults={"min_precision": 0.0, "rule_files": [], "map_labels": "auto"},
    check=_check_section,
)
