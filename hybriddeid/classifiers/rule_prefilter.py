"""One scan of a note for every rule (issue 45): which rules could match at all, before any is searched.

A rule's regex search costs about 20-100 us on a 1 kB note even where it finds nothing, and most
rules find nothing in most notes. Hyperscan (Intel's multi-pattern matcher; ``hyperscan`` on PyPI,
MIT bindings of a BSD library, with wheels for x86-64 Linux, macOS and Windows) compiles every
rule's pattern in *prefilter* mode into one automaton: a scan of the note reports each rule whose
pattern could match, lookarounds and back-references approximated so that it may report a rule
that does not match but never misses one that does. The classifier then searches only those rules
with ``regex``, so the spans are the same, found sooner.

What keeps the report a superset of ``regex``'s hits:
- only notes of characters on which the two engines' classes, word boundaries and case folding
  agree are prefiltered (``HELD``: ASCII, most of Latin-1, Latin Extended-A, Vietnamese and Romanian
  letters, common punctuation; each character checked in the tests); any other note is searched rule
  by rule, as before;
- on those characters ``\\p{L}``, ``\\p{Lu}`` and ``\\p{Ll}`` are written as classes of their letters (exactly
  where a class must not match, as whole blocks where it must), which Hyperscan compiles in a fraction of
  the time (4 s for the English rules, 15 s with exact classes and more with Unicode's); a back-reference
  becomes a copy of the group it names, which matches all it matched;
- a pattern Hyperscan cannot compile, or one using syntax it would read otherwise (``regex``'s
  fuzzy matching, named lists, ``V1`` set operations, ``\\N``, numbered back-references, group calls),
  other Unicode properties or flags it lacks, is searched in every note, as before (6 of the 109
  English and Spanish rules), as is a rule that says ``prefilter = false``.
Two readings make the report sharper without losing a match: a lookahead that ends a top-level alternative
is compiled as a plain group (``A(?=X)`` matches somewhere exactly where ``AX`` does, and Hyperscan would
otherwise read the lookahead as absent), and each rule's ``needs`` patterns are in the same database, so a
rule is reported only where one of its needs may match too, and is then searched without looking for them.
``tests/test_rule_prefilter.py`` checks every bundled rule's examples, changed in case and accents,
the bundled models' rule hits on generated, MEDDOCAN and PhysioNet notes with and without the
prefilter, and the letter classes against ``regex``'s on every character a prefiltered note may hold.

Compiling takes seconds (Hyperscan builds its automata ahead: about 5 s for the English rules and their needs, 1 s for
the Spanish ones), so the database is compiled once per rule set and machine kind, kept in the user's
cache (``core.cache.cache_dir()/rule-prefilter``, Hyperscan's own serialized format, no pickle) and
loaded in about 10 ms after that. Without Hyperscan (a platform without its wheel), or with
``HYBRIDDEID_RULE_PREFILTER=0``, every rule is searched in every note.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import regex

from hybriddeid.core.cache import cache_dir
from hybriddeid.io._common import atomic_write_bytes

if TYPE_CHECKING:
    from hybriddeid.classifiers.rules import Rule

log = logging.getLogger("hybriddeid")

PREFILTER_ENV = "HYBRIDDEID_RULE_PREFILTER"
FORMAT = "2"  # part of the cache key: bump when what is compiled changes
CACHE_KEPT = 8  # databases kept in the cache folder, the ones used last
# The characters on which regex and Hyperscan (UTF-8, Unicode properties) agree for every construct the
# rules use (classes, word boundaries, case folding: tests/test_rule_prefilter.py checks each): printable
# ASCII with tabs and line breaks; Latin-1's letters and signs but the micro sign, "ß", "ÿ" and the
# superscripts and fractions (Hyperscan's \w holds them, regex's does not); Latin
# Extended-A but the dotted and dotless i, "ŉ" and the long s; Vietnamese "ơ" and "ư" and Romanian "ș" and
# "ț"; Latin Extended Additional (Vietnamese) but U+1E96-U+1E9F; dashes, quotes and bullets (U+2010-U+2027).
# A note with any other character is searched rule by rule.
HELD = (
    (0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x7E), (0xA0, 0xB1), (0xB4, 0xB4), (0xB6, 0xB8), (0xBA, 0xBB),
    (0xBF, 0xDE), (0xE0, 0xFE), (0x100, 0x12F),
    (0x132, 0x148), (0x14A, 0x17E), (0x1A0, 0x1A1), (0x1AF, 0x1B0), (0x218, 0x21B), (0x1E00, 0x1E95),
    (0x1EA0, 0x1EFF), (0x2010, 0x2027),
)  # fmt: skip
_UNSURE = regex.compile("[^" + "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in HELD) + "]")
# Syntax that regex reads and Hyperscan would read otherwise or not at all: fuzzy constraints,
# named lists, \N{name}, backreferences by name or number, group calls left in a pattern.
_OTHER_SYNTAX = regex.compile(r"\{[eisd]\s*[<=]|\\L<|\\N|\\[1-9]|\\g<|\(\?&|\(\?R\)|\(\?[0-9]")
_BACKREFERENCE = regex.compile(r"\(\?P=(\w+)\)")
# A character class from its "[" to its "]" ("[^" and a "]" first in it are no ends)
_CLASS = regex.compile(r"\[\^?\]?(?:\\.|[^\]\\])*\]")
# Named groups become plain groups: Hyperscan refuses a name used twice and needs none.
_NAMED_GROUP = regex.compile(r"\(\?P?<(?![=!])\w+>")
_UNSUPPORTED_FLAGS = (
    regex.VERSION1 | regex.FULLCASE | regex.WORD | regex.REVERSE | regex.BESTMATCH | regex.ENHANCEMATCH | regex.POSIX
)


# The letters among the characters a prefiltered note may hold, for \\p{L}, \\p{Lu} and \\p{Ll}: the same
# characters there, and far cheaper for Hyperscan to compile than Unicode's classes (13 s against 3 s for
# the English rules).
def _letter_class(categories: tuple[str, ...]) -> str:
    chars = [chr(c) for low, high in HELD for c in range(low, high + 1) if unicodedata.category(chr(c)) in categories]
    runs: list[list[str]] = []
    for char in chars:
        if runs and ord(char) == ord(runs[-1][-1]) + 1:
            runs[-1].append(char)
        else:
            runs.append([char])
    return "".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


_LETTERS = {
    "L": _letter_class(("Lu", "Ll", "Lt", "Lm", "Lo")),
    "Lu": _letter_class(("Lu",)),
    "Ll": _letter_class(("Ll",)),
}
# Where a class must match (not where it must not), a superset does: beyond Latin-1, whole blocks of
# letters of both cases, which Hyperscan compiles as a few ranges (15 s -> 3 s for the English rules).
_EXTENDED_LETTERS = "Ā-žƠ-ơƯ-ưȘ-țḀ-ỿ"
_WIDE_LETTERS = {
    "L": "A-Za-zªµºÀ-ÖØ-öø-ÿ" + _EXTENDED_LETTERS,
    "Lu": "A-ZÀ-ÖØ-Þ" + _EXTENDED_LETTERS,
    "Ll": "a-zµß-öø-ÿ" + _EXTENDED_LETTERS,
}
_INLINE_FLAGS = regex.compile(r"\(\?([a-zA-Z]+)\)")

try:  # optional: a platform without a wheel searches every rule, as before
    import hyperscan
except ImportError:  # pragma: no cover - the bundled platforms have it
    hyperscan = None  # type: ignore[assignment]


def enabled() -> bool:
    """Whether rules are prefiltered here: Hyperscan is installed and ``HYBRIDDEID_RULE_PREFILTER`` is not 0."""
    return hyperscan is not None and os.environ.get(PREFILTER_ENV, "1") != "0"


def expression(rule: Rule) -> tuple[bytes, int] | None:
    """The Hyperscan expression and flags of ``rule``'s pattern, or None when it is searched in every
    note (its ``prefilter = false``, flags or syntax the two engines read differently)."""
    if hyperscan is None or not rule.prefilter:
        return None
    return _expression(rule.pattern, rule.pattern_flags, consume_lookaheads=True)


def needs_expressions(rule: Rule) -> list[tuple[bytes, int]] | None:
    """The Hyperscan expressions of ``rule``'s ``needs`` patterns, or None when it has none or one of them
    is read otherwise by the two engines (its needs are then checked with ``regex``, as before)."""
    if hyperscan is None or not rule.prefilter or not rule.needs:
        return None
    found = [_expression(needs, flags) for needs, flags in zip(rule.needs, rule.needs_flags)]
    return None if any(item is None for item in found) else cast("list[tuple[bytes, int]]", found)


def _expression(pattern: str, flags: int, consume_lookaheads: bool = False) -> tuple[bytes, int] | None:
    """``pattern`` (compiled by ``regex`` with ``flags``) as a Hyperscan prefilter expression and its flags;
    ``consume_lookaheads``: a lookahead ending a top-level alternative is matched as a group
    (``lookaheads_consumed``)."""
    if flags & _UNSUPPORTED_FLAGS or _OTHER_SYNTAX.search(pattern):
        return None
    hs_flags = (
        hyperscan.HS_FLAG_PREFILTER
        | hyperscan.HS_FLAG_UTF8
        | hyperscan.HS_FLAG_UCP
        | hyperscan.HS_FLAG_SINGLEMATCH
        | hyperscan.HS_FLAG_ALLOWEMPTY
    )
    if flags & regex.IGNORECASE:  # also set by a global (?i) inside the pattern
        hs_flags |= hyperscan.HS_FLAG_CASELESS
    if flags & regex.MULTILINE:
        hs_flags |= hyperscan.HS_FLAG_MULTILINE
    if flags & regex.DOTALL:
        hs_flags |= hyperscan.HS_FLAG_DOTALL
    verbose = bool(flags & regex.VERBOSE)
    rewritten = _without_backreferences(pattern)
    if rewritten is None:
        return None
    rewritten = with_latin_letters(_NAMED_GROUP.sub("(?:", rewritten), verbose)
    if rewritten is None:
        return None
    if consume_lookaheads:
        rewritten = lookaheads_consumed(rewritten, verbose)
    return rewritten.encode("utf-8"), hs_flags


def lookaheads_consumed(pattern: str, verbose: bool) -> str:
    """``pattern`` with each lookahead that ends a top-level alternative written as a plain group:
    ``A(?=X)`` matches somewhere exactly where ``AX`` does, and Hyperscan, which approximates a lookahead
    in prefilter mode as if it were not there, then reads X too ("a city" becomes "a city, a state and a
    ZIP code"). Anything else is left as it is (a lookahead followed by more pattern, or by a quantifier), and
    so is a pattern with an inline comment group, whose parentheses this reading would not skip."""
    if "(?#" in pattern:
        return pattern
    depth = 0
    lookahead_at: list[int] = []  # where each open group starts, -1 for groups that are no lookahead
    last_closed = -1  # the start of the top-level lookahead closed last, while nothing followed it
    consumed: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            last_closed = -1
            i += 1
        elif char == "[":  # a class: skipped whole
            whole = _CLASS.match(pattern, i)
            i, last_closed = (n if whole is None else whole.end()), -1
            continue
        elif verbose and char == "#":
            end = pattern.find("\n", i)
            i = n if end < 0 else end
            continue
        elif verbose and char.isspace():
            pass
        elif char == "(":
            lookahead_at.append(i if pattern.startswith("(?=", i) else -1)
            depth += 1
            last_closed = -1
        elif char == ")" and depth:
            depth -= 1
            opened = lookahead_at.pop()
            last_closed = opened if depth == 0 else -1
        elif char == "|" and depth == 0:
            if last_closed >= 0:
                consumed.append(last_closed)
            last_closed = -1
        else:
            last_closed = -1
        i += 1
    if last_closed >= 0:
        consumed.append(last_closed)
    out = list(pattern)
    for start in consumed:
        out[start + 2] = ":"
    return "".join(out)


def _without_backreferences(pattern: str) -> str | None:
    """``pattern`` with each ``(?P=name)`` replaced by a copy of the group it names (which matches whatever the
    group matched, and more); None when the group is not there once, with balanced parentheses."""
    for name in dict.fromkeys(_BACKREFERENCE.findall(pattern)):
        opening = f"(?P<{name}>"
        start = pattern.find(opening)
        if start < 0 or pattern.find(opening, start + 1) >= 0:
            return None
        depth, i = 1, start + len(opening)
        while depth and i < len(pattern):
            if pattern[i] == "\\":
                i += 1
            elif pattern[i] == "[":  # a class holds no group: skip to its end
                end = _CLASS.match(pattern, i)
                if end is None:
                    return None
                i = end.end() - 1
            elif pattern[i] == "(":
                depth += 1
            elif pattern[i] == ")":
                depth -= 1
            i += 1
        if depth:
            return None
        body = pattern[start + len(opening) : i - 1]
        pattern = pattern.replace(f"(?P={name})", f"(?:{body})")
    return pattern


def with_latin_letters(pattern: str, verbose: bool) -> str | None:
    """``pattern`` with each ``\\p{L}``, ``\\p{Lu}`` and ``\\p{Ll}`` written as the letters a prefiltered note
    may hold (``_LETTERS``), inside a character class or as one; None when it has another Unicode property
    or flags set inside it that this reading does not follow. ``verbose``: the pattern's own flag; a
    ``(?x:...)`` group (an inlined definition) is verbose too, and its comments are copied untouched."""
    leading = _INLINE_FLAGS.match(pattern)
    if any("x" in flags for flags in _INLINE_FLAGS.findall(pattern, leading.end() if leading else 0)):
        return None  # a verbose switch in mid-pattern: comments would be read as pattern
    out: list[str] = []
    modes = [verbose]  # verbose or not, per open group
    negative = [False]  # inside a negative lookaround, per open group
    in_class = class_negated = False
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            if pattern.startswith(("\\p{", "\\P{"), i):
                end = pattern.find("}", i)
                # where a class must not match, its exact letters; where it must, a cheaper superset
                exact = negative[-1] or (in_class and class_negated)
                table = _LETTERS if exact else _WIDE_LETTERS
                letters = table.get(pattern[i + 3 : end]) if end > 0 and pattern[i + 1] == "p" else None
                if letters is None:
                    return None
                out.append(letters if in_class else f"[{letters}]")
                i = end + 1
            else:
                out.append(pattern[i : i + 2])
                i += 2
        elif in_class:
            in_class = char != "]"
            out.append(char)
            i += 1
        elif char == "[":
            in_class = True
            class_negated = pattern.startswith("^", i + 1)
            out.append(char)
            i += 1
            for literal in ("^", "]"):  # "[^" and a "]" first in a class are no ends
                if pattern.startswith(literal, i):
                    out.append(literal)
                    i += 1
        elif char == "#" and modes[-1]:  # a comment, to the line's end
            end = pattern.find("\n", i)
            end = n if end < 0 else end
            out.append(pattern[i:end])
            i = end
        elif char == "(":
            scoped = regex.match(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?:", pattern[i:])
            on, off = (scoped.group(1) or "", scoped.group(2) or "") if scoped else ("", "")
            modes.append(True if "x" in on else False if "x" in off else modes[-1])
            negative.append(negative[-1] or pattern.startswith(("(?!", "(?<!"), i))
            out.append(char)
            i += 1
        elif char == ")":
            if len(modes) > 1:
                modes.pop()
                negative.pop()
            out.append(char)
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


class RulePrefilter:
    """Which of ``rules`` may match a text: :meth:`candidates`. The database is built or loaded on
    first use, once per process and rule set."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        expressions = [(i, expression(rule)) for i, rule in enumerate(rules)]
        self._expressions = [(i, found) for i, found in expressions if found is not None]
        # each rule's needs too, as ids after the rules' own, one id per distinct needs (forty rules need a
        # digit): a rule held with its needs is reported only where its pattern and one of its needs may
        # match, and its needs are not searched again
        needs_ids: dict[tuple[bytes, int], int] = {}
        rules_needing: dict[int, set[int]] = {}
        for i, rule in enumerate(rules):
            for item in needs_expressions(rule) or ():
                if item not in needs_ids:
                    needs_ids[item] = len(rules) + len(needs_ids)
                    self._expressions.append((needs_ids[item], item))
                rules_needing.setdefault(needs_ids[item], set()).add(i)
        self._needs_of: dict[int, frozenset[int]] = {key: frozenset(found) for key, found in rules_needing.items()}
        self._all = frozenset(range(len(rules)))
        self._outside = self._all  # the rules the database does not hold: always searched
        self.needs_held: frozenset[int] = frozenset()  # the rules whose needs the database holds, all of them
        self._database: Any = None
        self._scratch: Any = None
        self._lock = threading.Lock()
        self._failed = not self._expressions

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes without Hyperscan's objects
        state = dict(self.__dict__)
        state.update(_database=None, _scratch=None, _lock=None, _outside=self._all, needs_held=frozenset())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def key(self) -> str:
        """The cache key: the expressions, their flags, the Hyperscan version and the machine kind."""
        digest = hashlib.sha256(f"{FORMAT}\0{getattr(hyperscan, '__version__', '')}\0{platform.machine()}".encode())
        for i, (pattern, flags) in self._expressions:
            digest.update(f"\0{i}\0{flags}\0".encode() + pattern)
        return digest.hexdigest()[:32]

    @property
    def path(self) -> Path:
        """Where the compiled database is kept between runs."""
        return cache_dir() / "rule-prefilter" / f"{self.key}.hsdb"

    def candidates(self, text: str) -> frozenset[int] | None:
        """Indexes of the rules that may match ``text``, or None when every rule must be searched
        (a character the prefilter is not sure of, no database). A rule of ``needs_held`` is among
        them only where one of its needs matched too: it needs no search of its needs."""
        if self._failed or _UNSURE.search(text) is not None or not self._ready():
            return None
        found: set[int] = set()

        def on_match(rule: int, start: int, end: int, flags: int, context: object) -> None:
            found.add(rule)

        try:
            with self._lock:  # a scratch space serves one scan at a time
                self._database.scan(text.encode("utf-8"), match_event_handler=on_match, scratch=self._scratch)
        except hyperscan.error as exc:  # e.g. a cached database built for another CPU's instructions
            log.warning("rule prefilter scan failed (%s); searching every rule", type(exc).__name__)
            self._failed = True
            return None
        needs_met = {rule for i in found if i in self._needs_of for rule in self._needs_of[i]}
        may_match = self._outside | found
        return frozenset(i for i in may_match if i in self._all and (i in needs_met or i not in self.needs_held))

    def build(self) -> None:
        """Read or compile the database now rather than on the first scan (before a run forks its workers)."""
        self._ready()

    def _ready(self) -> bool:
        if self._database is None:
            with self._lock:
                if self._database is None and not self._failed:
                    self._load()
        return self._database is not None

    def _load(self) -> None:
        """Read the cached database, else compile it and cache it (the ids it holds on its first line)."""
        try:
            header, _, body = self.path.read_bytes().partition(b"\n")
            held = frozenset(json.loads(header))
            database = hyperscan.loadb(body, hyperscan.HS_MODE_BLOCK)
            with contextlib.suppress(OSError):
                os.utime(self.path)  # used now: the pruning below keeps it
        except (OSError, ValueError, TypeError, hyperscan.error):
            try:
                database, held = self._compile()
            except hyperscan.error as exc:
                log.warning("rule prefilter not built (%s); searching every rule", type(exc).__name__)
                self._failed = True
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(self.path, json.dumps(sorted(held)).encode() + b"\n" + hyperscan.dumpb(database))
                _prune(self.path.parent)
            except OSError as exc:  # a read-only home: compiled again next time
                log.info("rule prefilter not cached (%s)", type(exc).__name__)
        self._scratch = hyperscan.Scratch(database)
        self._outside = self._all - held
        needs_ids = {i for i, _ in self._expressions if i in self._needs_of}
        lacking = {rule for i in needs_ids - held for rule in self._needs_of[i]}  # a needs Hyperscan refused
        self.needs_held = frozenset(rule for i in needs_ids for rule in self._needs_of[i]) - lacking
        self._database = database

    def _compile(self) -> tuple[Any, frozenset[int]]:
        """One database of every expression Hyperscan accepts, and the rule indexes it holds."""
        log.info("compiling the rule prefilter for %d rules (once per rule set, then cached)", len(self._expressions))
        accepted = list(self._expressions)
        while True:
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            try:
                database.compile(
                    expressions=[pattern for _, (pattern, _) in accepted],
                    ids=[i for i, _ in accepted],
                    flags=[flags for _, (_, flags) in accepted],
                )
                return database, frozenset(i for i, _ in accepted)
            except hyperscan.error:
                refused = next((item for item in accepted if not _compiles(item[1])), None)
                if refused is None or len(accepted) == 1:
                    raise
                accepted.remove(refused)


def _prune(folder: Path) -> None:
    """Keep the ``CACHE_KEPT`` databases used last (a few MB each; every change of a rule set makes one)."""
    databases = sorted(folder.glob("*.hsdb"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in databases[CACHE_KEPT:]:
        with contextlib.suppress(OSError):
            stale.unlink()


def _compiles(item: tuple[bytes, int]) -> bool:
    pattern, flags = item
    try:
        hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(expressions=[pattern], ids=[0], flags=[flags])
    except hyperscan.error:
        return False
    return True
