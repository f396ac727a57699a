"""One scan of a note for every rule (issue 45): which rules could match at all, before any is searched.

A rule's regex search costs about 20-100 us on a 1 kB note even where it finds nothing, and most
rules find nothing in most notes. Hyperscan (Intel's multi-pattern matcher; ``hyperscan`` on PyPI,
MIT bindings of a BSD library, with wheels for x86-64 Linux, macOS and Windows) compiles every
rule's pattern in *prefilter* mode into one automaton: a scan of the note reports each rule whose
pattern could match, lookarounds and back-references approximated so that it may report a rule
that does not match but never misses one that does. The classifier then searches only those rules
with ``regex``, so the spans are the same, found sooner.

What keeps the report a superset of ``regex``'s hits:
- a pattern Hyperscan cannot compile, or one using syntax it would read otherwise (``regex``'s
  fuzzy matching, named lists, ``V1`` set operations, ``\\N``), or flags it lacks, is searched in
  every note, as before;
- only notes of characters on which the two engines' classes, word boundaries and case folding
  agree are prefiltered: printable ASCII with tabs and line breaks, Latin-1's letters and signs
  (not the micro sign, "ß" or "ÿ", whose case folding leaves Latin-1) and the common punctuation of
  U+2010-U+2027 (dashes, curly quotes, bullets); any other note is searched rule by rule, as before.
  ``tests/test_rule_prefilter.py`` checks every bundled rule's examples, changed in case and
  accents, and the bundled models' spans on generated, MEDDOCAN and PhysioNet notes with and
  without the prefilter.

Compiling takes seconds (Hyperscan builds its automata ahead), so the database is compiled once per
rule set and machine kind, kept in the user's cache (``core.cache.cache_dir()/rule-prefilter``,
Hyperscan's own serialized format, no pickle) and loaded in a millisecond after that; a few rules
whose patterns take Hyperscan longest to compile say ``prefilter = false`` and are searched in
every note. Without Hyperscan (another platform), or with ``HYBRIDDEID_RULE_PREFILTER=0``, every
rule is searched in every note.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex

from hybriddeid.core.cache import cache_dir
from hybriddeid.io._common import atomic_write_bytes

if TYPE_CHECKING:
    from hybriddeid.classifiers.rules import Rule

log = logging.getLogger("hybriddeid")

PREFILTER_ENV = "HYBRIDDEID_RULE_PREFILTER"
FORMAT = "1"  # part of the cache key: bump when what is compiled changes
# The characters on which regex and Hyperscan (UTF-8, Unicode properties) agree for every construct
# the rules use; a note with any other character is searched rule by rule.
_UNSURE = regex.compile(r"[^\t\n\r\x0b\x0c\x20-\x7e\u00a0-\u00b4\u00b6-\u00de\u00e0-\u00fe\u2010-\u2027]")
# Syntax that regex reads and Hyperscan would read otherwise or not at all: fuzzy constraints,
# named lists, \N{name}, backreferences by name or number, group calls left in a pattern.
_OTHER_SYNTAX = regex.compile(r"\{[eisd]\s*[<=]|\\L<|\\N|\(\?P=|\\[1-9]|\\g<|\(\?&|\(\?R\)|\(\?[0-9]")
# Named groups become plain groups: Hyperscan refuses a name used twice and needs none.
_NAMED_GROUP = regex.compile(r"\(\?P?<(?![=!])\w+>")
_UNSUPPORTED_FLAGS = (
    regex.VERSION1 | regex.FULLCASE | regex.WORD | regex.REVERSE | regex.BESTMATCH | regex.ENHANCEMATCH | regex.POSIX
)

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
    flags = rule.compiled.flags
    if flags & _UNSUPPORTED_FLAGS or _OTHER_SYNTAX.search(rule.pattern):
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
    return _NAMED_GROUP.sub("(?:", rule.pattern).encode("utf-8"), hs_flags


class RulePrefilter:
    """Which of ``rules`` may match a text: :meth:`candidates`. The database is built or loaded on
    first use, once per process and rule set."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        expressions = [(i, expression(rule)) for i, rule in enumerate(rules)]
        self._expressions = [(i, found) for i, found in expressions if found is not None]
        self._all = frozenset(range(len(rules)))
        self._outside = self._all  # the rules the database does not hold: always searched
        self._database: Any = None
        self._scratch: Any = None
        self._lock = threading.Lock()
        self._failed = not self._expressions

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes without Hyperscan's objects
        state = dict(self.__dict__)
        state.update(_database=None, _scratch=None, _lock=None, _outside=self._all)
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
        (a character the prefilter is not sure of, no database)."""
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
        return self._outside | found

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
            except OSError as exc:  # a read-only home: compiled again next time
                log.info("rule prefilter not cached (%s)", type(exc).__name__)
        self._scratch = hyperscan.Scratch(database)
        self._outside = self._all - held
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


def _compiles(item: tuple[bytes, int]) -> bool:
    pattern, flags = item
    try:
        hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(expressions=[pattern], ids=[0], flags=[flags])
    except hyperscan.error:
        return False
    return True
