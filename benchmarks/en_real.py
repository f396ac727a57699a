"""hybriddeid, Philter and Presidio on three public English dev halves (real text), in one run, with errors grouped.

Corpora (``--corpora``, default all three):

- ``asq``: ``../shared/corpora/asq-phi/dev`` (525 clinician search queries, BRAT, labels of
  ``resources/taxonomy/asq_phi.toml``);
- ``presidio``: ``../shared/corpora/presidio-synth/dev`` (750 general PII sentences, labels of
  ``presidio.toml``);
- ``physionet``: ``../shared/corpora/physionet-deid/dev`` (1,236 real ICU nursing notes of MIMIC-II with
  surrogate PHI, BRAT, labels of ``physionet.toml``; the PhysioNet deid gold standard: Neamatullah et
  al., BMC Med Inform Decis Mak 2008;8:32; Goldberger et al., Circulation 2000; cite both with any
  figure). Its notes' patients are in ``dev_index.tsv`` beside the folder.

Nobody on the project wrote them, unlike the generated notes of ``peers.py``; the first two are public
synthetic text, PhysioNet's notes are public (open access) with surrogate PHI, so token text may be printed.

Rows, each tool in its own process per corpus (``peers.run_tools`` and ``peer_worker.py``, with the
settings ``peers.py`` uses):

- ``hybriddeid``: a model (``--model``, default the bundled English one). Its ``meta.json`` says
  which halves it was trained on (``tools/train_en_default.py --real``); the row then says
  "optimistic" there, since it is scored on notes it has seen.
- ``hybriddeid-cv``: with ``--hybriddeid-pred DIR``, predictions already made, read from BRAT folders
  ``DIR/asq/``, ``DIR/presidio/`` and ``DIR/physionet/`` as ``benchmarks/en_real_cv.py --out DIR``
  writes them (cross-validated: each note tagged by a model that never saw it); no speed figures.
  Without ``--model`` only this hybriddeid row is shown; with both, both rows.
- ``philter`` (philter-lite) and ``presidio`` (presidio-analyzer), from the venvs of ``setup_peers.sh``.
  Each note gets ``--peer-note-timeout`` seconds (default 20; Philter's regular expressions backtrack
  for minutes on some PhysioNet notes in capitals): a note past it is given up by the worker, which
  goes on, and scores as no predicted spans; the notes given up are counted beside the row and listed.

Scoring, per corpus, row and PHI set (``--phi-set``, default ``hipaa`` and ``i2b2-2014``), through
``hybriddeid.evaluation.evaluate(gold, pred, taxonomy, phi_set, pred_taxonomy)``: gold read through
its corpus taxonomy; hybriddeid's spans through i2b2 2014, so its PHI set drops what it would not
redact under that set. The peers have no PHI-set switch: what they mark is what their users get
redacted, so their spans are scored as they output them, under the label ``PHI``, which no taxonomy
knows: ``hybriddeid.core.profiles`` keeps spans of unknown labels under every PHI set (it only drops what
it knows to be outside; checked at run time and printed). Reading Presidio's types through
``presidio.toml`` instead would drop its ORGANIZATION spans, which on clinical text are mostly
hospitals (PHI), because presidio-research's gold uses ORGANIZATION for companies (not PHI). Figures: binary token P/R/F1 (PHI or not), binary token recall per gold
category and per gold label, notes/s, chars/s, load seconds and peak resident memory per tool.

Errors, per binary token (alphanumeric run, as the scorer cuts spans; the same tokens ``evaluate``
counts, checked), each put in the first group whose rule holds. ASQ-PHI and presidio-research:

false alarms (predicted, not gold; the rules read the predicted span):
  1. ``age``: the tool labels the span as an age (category AGE), or the span is an age phrase
     ("60-year-old", "70yo", "26 y/o") under another label (Presidio's DATE_TIME);
  2. ``year``: the span is a year alone ("2021"; not in the issue's list, but Safe Harbor keeps years
     and ASQ-PHI leaves them unmarked, so they are no "number read as a date");
  3. ``number``: the span is another bare number or range ("80-90", "142", "120/80");
  4. ``joined``: the span joins words of two letters or more with a slash or an arrow ("HTN/DM",
     "SOB->better"; not "y/o", "w/ CHF"), and is no real URL (no "://", "www.", "@");
  5. ``drug``: the token is a word of a drug name of the generator's ``[vocab] drug`` list
     (``resources/languages/en/synth.toml``) or of the safe-list's drugs section (``resources/languages/en/safelist.txt``);
  6. ``capitalised``: the token is capitalised and starts a line or a sentence (after ". ", "! ",
     "? ", not after a title or an initial), or lies in a heading (a line's leading "Label:", or a
     line in capitals);
  7. ``other``.
misses (gold, not predicted; the rules read the gold span):
  1. ``title``: a title of the English surrogate resources ("Dr", "Mr") inside a gold name, or a
     gold span that is only a title (presidio's TITLE "Mr.");
  2. ``id_prefix``: an ID whose text starts with letters ("UCSF-12345", "#SF-998877");
  3. ``institution``: a place span labelled ORGANIZATION or HOSPITAL, or of a mixed place label
     (ASQ's GEOGRAPHIC_LOCATION, presidio's GPE) that ``tools/real_text.py`` calls a hospital
     (hospital words, bundled hospital dictionary); or an all-capitals token in a place ("UCSF");
  4. ``lower_case_name``: a lower-case token of a gold name;
  5. ``short_name``: a token of a gold name with one word of two or more letters, alone or with
     initials ("Anna", "Mary S."): first names or initials alone;
  6. ``date``: a gold date;
  7. ``other``.

PhysioNet (nursing notes: vital signs, labs and ventilator settings on every line, many notes in
capitals) has groups of its own:

false alarms (the rules read the predicted token and the note around it):
  1. ``vital``: a token with a digit inside a vital-sign, hemodynamic, lab or ventilator number
     ("ABG 91/42/7.36/25/-1", "CO/CI/SVR 7.5/3.5/437", "BP 92-119/50's", "RR 18-20", "100-200/HOUR",
     "700x12/10/40%"): a run of numbers joined by "/", "-" or "x" (``vital_patterns``) that a keyword
     of ``VITAL_KEYWORDS`` stands before on its line (at most ``VITAL_GAP_WORDS`` words and
     ``VITAL_GAP_CHARS`` characters between, no sentence end, no other number, no word after a
     comma), or that holds a "%" or is followed by a unit of ``VITAL_UNITS`` or a word of
     ``VITAL_KEYWORDS_AFTER`` ("7.5 ett"); a run that could be a date ("8/25", "12/93") only right
     after its keyword ("RR 12/14"), a clock time ("1400") or a number after "at"/"@" only with a unit;
  2. ``number``: another token with a digit (counts, doses, times such as "0700-1930");
  3. ``weekday``: a weekday name or abbreviation of the English surrogate resources ("Monday",
     "MON"), except one that is also a vital keyword ("SAT");
  4. ``and``: "and" or "or" inside a predicted span;
  5. ``capitals``: a word of two or more letters, all capitals ("REMAINS", "AFEBRILE");
  6. ``other``.
  (``weekday`` and ``and`` come before ``capitals``, so that "MONDAY" and "AND" of notes in
  capitals are counted as what they are.)
misses (the rules read the gold token and span):
  1. ``month_day``: a gold date written month/day alone ("10/3", "7/22");
  2. ``short_year``: a gold date that is a two-digit year alone ("92", "'84", "74'");
  3. ``lower_case_name``: a lower-case token of two or more letters of a gold name;
  4. ``capitals_name``: an all-capitals token of two or more letters of a gold name ("FORMAN");
  5. ``place``: a token of a gold Location (wards, short hospital names, cities);
  6. ``initial``: a one-letter token of a gold name ("A" of "DAN A.", "E.");
  7. ``other``.

Counts are primary; the most frequent examples print as the span with the group's tokens in
brackets and the label ("[80]-[90] DATE"), for the hybriddeid rows under i2b2-2014 (the widest set:
its errors include those under hipaa) or the one PHI set asked for; ``--json`` holds every row's
groups and examples.

Surrogate check (PhysioNet, hybriddeid rows): each note's predicted spans (of the row; within the
first ``--phi-set``) are replaced in surrogate mode through the library, as ``hybriddeid deid --mode
surrogate --use-annotations`` does (``processing.process_notes``: the notes of one patient of
``dev_index.tsv`` together, one date shift per patient, a fixed key so that runs repeat). Reported:
(a) vital-sign and lab numbers changed: every number of every ``vital_patterns`` match of the
original text (whatever was predicted; but a match overlapping a gold PHI span, which the
annotators read as PHI: "UO-9/10" a date) must appear unchanged at its place in the output, found
through the offsets of the replacement records (the audit's); patterns and numbers checked and
changed; (b) gold PHI strings of ``MIN_LEFT_CHARS`` (4) or more characters (gold spans of that PHI
set) still found verbatim, as whole words, in the output note: count and share (target: at most 2%).

    bash benchmarks/setup_peers.sh     # once: venvs under /tmp/hybriddeid-peers
    python benchmarks/en_real.py [--model en] [--hybriddeid-pred DIR] [--phi-set hipaa i2b2-2014]
                                 [--corpora asq presidio physionet] [--tools hybriddeid philter presidio]
                                 [--peer-note-timeout 20] [--max-notes N] [--examples 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import regex

HERE = Path(__file__).resolve().parent
for _folder in (HERE, HERE.parent / "tools"):  # peers.py and tools/real_text.py, also when imported by path
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from hybriddeid.core.document import Document, Span  # noqa: E402
from hybriddeid.core.languages import language_pack  # noqa: E402
from hybriddeid.core.profiles import PHI_SETS, filter_spans, hipaa_age_rule, in_phi_set, split_spans  # noqa: E402
from hybriddeid.core.taxonomy import Taxonomy, load_taxonomy  # noqa: E402
from hybriddeid.evaluation import evaluate  # noqa: E402
from hybriddeid.evaluation.matching import BINARY_LABEL, _outside_dont_care, span_tokens  # noqa: E402
from hybriddeid.io import read_corpus  # noqa: E402
from hybriddeid.knowledge.dictionaries import read_entries  # noqa: E402
from hybriddeid.runs.processing import NoteSettings, process_notes  # noqa: E402
from hybriddeid.surrogates import DeidOptions, Replacement  # noqa: E402
from hybriddeid.surrogates.language import fold, load_language  # noqa: E402
from hybriddeid.synth.generator import load_synth_resources  # noqa: E402
from peers import TOOLS, run_tools  # noqa: E402
from real_text import CORPORA, LOCKBOX_CORPUS, PATIENT_INDEX, Relabeller, sealed_groups  # noqa: E402

CORPUS_TITLES = {
    "asq": "ASQ-PHI dev (clinician queries)",
    "presidio": "presidio-research synth dev (general PII sentences)",
    "physionet": "PhysioNet deid dev (real ICU nursing notes)",
}
GOLD_TAXONOMY = {"asq": "asq-phi", "presidio": "presidio", "physionet": "physionet"}
CITATIONS = {
    "physionet": "PhysioNet deid gold standard: Neamatullah et al., BMC Med Inform Decis Mak 2008;8:32; "
    "Goldberger et al., Circulation 2000"
}
PRED_TAXONOMY = {
    "hybriddeid": "i2b2-2014",
    "hybriddeid-cv": "i2b2-2014",
    "presidio": "i2b2-2014",
    "philter": "i2b2-2014",
}
UNTYPED = "PHI"  # the peers' spans, scored as output: a label no taxonomy knows, kept under every PHI set
TYPED_ROWS = ("hybriddeid", "hybriddeid-cv")  # rows whose labels go through a PHI set

FALSE_ALARM_GROUPS = {
    "age": "ages (labelled as ages, or '60-year-old')",
    "year": "years alone ('2021')",
    "number": "bare numbers and ranges ('80-90', '142')",
    "joined": "slash- or arrow-joined words ('HTN/DM')",
    "drug": "drug names",
    "capitalised": "capitalised words at a sentence or line start, or in headings",
    "other": "other",
}
MISS_GROUPS = {
    "title": "titles inside gold names ('Dr', 'Mr')",
    "id_prefix": "IDs with a letter prefix",
    "institution": "institutions and abbreviations",
    "lower_case_name": "lower-case names",
    "short_name": "first names or initials alone",
    "date": "dates",
    "other": "other",
}

# false alarms: whole predicted span
AGE_PHRASE = regex.compile(r"(?i)\d{1,3}(?:[- ]?(?:year|yr|y)s?[- ]?old|[- ]?(?:yo|y/o))")
YEAR = regex.compile(r"(?:19|20)\d\d")
NUMBER_OR_RANGE = regex.compile(r"[<>~]?\d+(?:[.,]\d+)?(?:\s*(?:-|–|/|to)\s*\d+(?:[.,]\d+)?)?\s*%?")
JOINED = regex.compile(r"\p{L}{2}\s*(?:/|->|→|=>|<-|←|>)\s*\p{L}{2}")  # "HTN/DM", "SOB->better"; not "y/o", "w/"
REAL_URL = regex.compile(r"://|www\.|@")
# a line's leading "Label:" ("Chief Complaint:")
HEADING = regex.compile(r"[^\p{L}\n]*\p{L}[\p{L} '/&-]{0,40}:")
# misses: token, then whole gold span
ABBREVIATION = regex.compile(r"(?=(?:\d*\p{Lu}){2})[\p{Lu}\d]+")  # two capitals or more, no lower case: "UCSF"
ID_PREFIX = regex.compile(r"\W*\p{L}+[\s#:./-]*\d")  # "UCSF-12345", "#SF-998877", "MRN 123"
INSTITUTION_LABELS = frozenset({"ORGANIZATION", "HOSPITAL"})
MIN_DRUG_WORD = 3  # "XL", "D" of "Toprol XL", "vitamin D" are no drug names on their own

# PhysioNet's error groups (module docstring).
PHYSIONET_FALSE_ALARM_GROUPS = {
    "vital": "vital-sign, hemodynamic, lab and ventilator numbers ('BP 92-119/50's')",
    "number": "other numbers and times ('0700-1930')",
    "weekday": "weekdays",
    "and": "'and'/'or' inside a span",
    "capitals": "all-capitals words ('REMAINS')",
    "other": "other",
}
PHYSIONET_MISS_GROUPS = {
    "month_day": "month/day dates ('10/3')",
    "short_year": "two-digit years ('92', \"'84\")",
    "lower_case_name": "lower-case names",
    "capitals_name": "all-capitals names",
    "place": "places (wards, short hospital names, cities)",
    "initial": "initials ('A', 'E.')",
    "other": "other",
}
# What makes a number a vital sign, a lab value or a ventilator setting (``vital_patterns``): a keyword
# before it on its line, or a unit or a keyword right after it. Lower case; matched as whole words,
# case-insensitively. "pt" (patient, more often than prothrombin time) is left out.
VITAL_KEYWORDS = (
    # vital signs and hemodynamics
    "bp",
    "sbp",
    "dbp",
    "nbp",
    "abp",
    "art",
    "map",
    "hr",
    "pulse",
    "rr",
    "resp",
    "temp",
    "t",
    "tm",
    "tmax",
    "tc",
    "sat",
    "sats",
    "spo2",
    "sao2",
    "o2sat",
    "o2",
    "cvp",
    "pad",
    "pas",
    "pap",
    "pa",
    "pcwp",
    "wedge",
    "co",
    "ci",
    "svr",
    "pvr",
    "svo2",
    "icp",
    "cpp",
    "ef",
    "rate",
    "hemodynamics",
    "fever",
    "febrile",
    "afebrile",
    # ventilator
    "vent",
    "fio2",
    "peep",
    "ps",
    "psv",
    "cpap",
    "bipap",
    "ac",
    "a/c",
    "simv",
    "imv",
    "vt",
    "tv",
    "ve",
    "mv",
    "rsbi",
    "nif",
    "pip",
    "plat",
    "peak",
    "ett",
    "mode",
    # labs
    "abg",
    "vbg",
    "gas",
    "gases",
    "ph",
    "pco2",
    "po2",
    "pao2",
    "paco2",
    "hco3",
    "lactate",
    "lac",
    "k",
    "na",
    "cl",
    "co2",
    "mg",
    "ica",
    "phos",
    "bun",
    "cr",
    "creat",
    "creatinine",
    "glucose",
    "gluc",
    "bs",
    "fsbs",
    "fs",
    "fingerstick",
    "bg",
    "hct",
    "hgb",
    "hb",
    "wbc",
    "plt",
    "plts",
    "platelets",
    "inr",
    "ptt",
    "ck",
    "cpk",
    "trop",
    "troponin",
    "alt",
    "ast",
    "bili",
    "alb",
    "lytes",
    "level",
    "labs",
    # intake, output and drips
    "u/o",
    "uo",
    "uop",
    "urine",
    "output",
    "i/o",
    "i&o",
    "intake",
    "ivf",
    "tf",
    "tfs",
    "gtt",
    "drip",
    "bolus",
    "insulin",
    "drain",
    "ngt",
    "ogt",
    "jp",
    "stool",
)
VITAL_KEYWORDS_AFTER = ("peep", "ett", "fio2", "ps", "cpap", "nc", "lnc", "fm", "tv", "vt")  # "7.5 ett", "5 peep"
# Units after a number, one space allowed; single letters only right after it ("2L", "98.6F", "1g").
VITAL_UNITS = (
    "mmhg",
    "mm hg",
    "cmh2o",
    "cm h2o",
    "cc/hr",
    "cc/h",
    "ml/hr",
    "ml/h",
    "mg/hr",
    "mg/h",
    "mcg/kg/min",
    "mcg/kg",
    "mcg/min",
    "units/hr",
    "u/hr",
    "l/min",
    "cc/kg",
    "cc",
    "ccs",
    "ml",
    "mls",
    "lpm",
    "lnc",
    "nc",
    "liters",
    "mg",
    "mcg",
    "meq",
    "gm",
    "grams",
    "kg",
    "units",
    "bpm",
    "degrees",
    "deg",
    "/hr",
    "/hour",
    "/h",
    "/min",
    "/day",
)
VITAL_GLUED_UNITS = ("l", "u", "g", "c", "f")
VITAL_GAP_WORDS = 4
VITAL_GAP_CHARS = 30
# the surrogate check (module docstring)
SURROGATE_CHECK_CORPORA = frozenset({"physionet"})
SURROGATE_KEY = b"benchmarks/en_real.py surrogate check"  # fixed, so that runs repeat; 16+ bytes
MIN_LEFT_CHARS = 4
LEFT_TARGET = 0.02  # the target share of gold PHI strings left verbatim


def _alternatives(words: Iterable[str]) -> str:
    """A regex alternation of ``words``, longest first (so "co2" wins over "co")."""
    return "|".join(regex.escape(word) for word in sorted(set(words), key=len, reverse=True))


_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)(?:['’]?s)?%?"  # "7.36", ".5", "50's", "40%"
NUMBER_RUN = regex.compile(rf"(?<![\d.])[-+~<>]?{_NUMBER}(?:(?:\s?[-/]\s?|[xX])[-+]?{_NUMBER})*")
# one-letter keywords ("T", "K") not after a slash either: "d/t" is "due to"
VITAL_KEYWORD = regex.compile(
    rf"(?i)(?:(?<![\p{{L}}\d'’])(?:{_alternatives(w for w in VITAL_KEYWORDS if len(w) > 1)})"
    rf"|(?<![\p{{L}}\d'’/])(?:{_alternatives(w for w in VITAL_KEYWORDS if len(w) == 1)}))(?!\p{{L}})"
)
VITAL_AFTER = regex.compile(
    rf"(?i)\s?(?:{_alternatives(VITAL_UNITS)}|{_alternatives(VITAL_KEYWORDS_AFTER)})(?!\p{{L}})"
    rf"|(?:{_alternatives(VITAL_GLUED_UNITS)})(?![\p{{L}}\d])"
)
# a run that could be a date ("8/25", "6-12", "12/93", "3/4/95") is a vital number only right after its
# keyword ("RR 12/14", "CVP 8-10"): no word between, no unit or keyword after it ("9/2 GM stain")
DATE_SHAPED = regex.compile(r"(?:0?[1-9]|1[0-2])[/-](?:0?[1-9]|[12]\d|3[01]|\d\d)(?:[/-](?:\d\d){1,2})?")
# a clock time ("1400", "0700-1930"), or any number after "at" or "@" ("ABG drawn at 1400", "labs @ 2000"),
# is a vital number only with a unit after it ("at 2200cc/hr")
TIME_SHAPED = regex.compile(r"(?:[01]\d|2[0-3])[0-5]\d(?:\s?-\s?(?:[01]\d|2[0-3])[0-5]\d)?")
AT_TIME = regex.compile(r"(?i)(?:\bat|@)\s*$")
SENTENCE_END = regex.compile(r"[.!?]\s")
LETTERS_BEFORE = regex.compile(r"\p{L}+$")
NUMBER_IN_PATTERN = regex.compile(r"\d+(?:\.\d+)?")
MONTH_DAY = regex.compile(r"\d{1,2}[/-]\d{1,2}")
SHORT_YEAR = regex.compile(r"['’]?\d{2}['’]?")


@lru_cache(maxsize=8)
def vital_patterns(text: str) -> tuple[tuple[int, int], ...]:
    """(start, end) of the vital-sign, hemodynamic, lab and ventilator numbers of ``text`` (module
    docstring): each run of numbers joined by "/", "-" or "x" with a keyword of ``VITAL_KEYWORDS``
    before it on its line (at most ``VITAL_GAP_WORDS`` words and ``VITAL_GAP_CHARS`` characters
    between, no sentence end, no other number, no word after a comma), or with a "%" in it, or a unit
    of ``VITAL_UNITS`` or a word of ``VITAL_KEYWORDS_AFTER`` right after it (then part of the pattern).
    A run glued to letters counts only when they are a keyword ("MAP57-63"; not "x2", "O2"); one that
    could be a date (``DATE_SHAPED``) only right after its keyword; a clock time or a number after "at"
    or "@" (``TIME_SHAPED``, ``AT_TIME``) only with a unit."""
    found: list[tuple[int, int]] = []
    previous_end = 0
    for run in NUMBER_RUN.finditer(text):
        start, end = run.span()
        glued = LETTERS_BEFORE.search(text, max(0, start - 12), start)
        if glued and not VITAL_KEYWORD.fullmatch(glued.group()):
            continue  # part of a word: "x2", "O2", "q4h"
        date_shaped = DATE_SHAPED.fullmatch(run.group()) is not None
        after = None if date_shaped else VITAL_AFTER.match(text, end)
        vital = "%" in run.group() or after is not None or bool(glued)
        if not vital:
            line_start = text.rfind("\n", 0, start) + 1
            sentence = max((m.end() for m in SENTENCE_END.finditer(text, line_start, start)), default=line_start)
            keywords = list(VITAL_KEYWORD.finditer(text, max(line_start, sentence, previous_end), start))
            if keywords:
                gap = text[keywords[-1].end() : start]
                words = len(regex.findall(r"\p{L}+", gap))
                vital = (
                    len(gap) <= VITAL_GAP_CHARS
                    and words <= (0 if date_shaped else VITAL_GAP_WORDS)
                    and not regex.search(r"\d|[,;][^,;]*\p{L}", gap)  # no number, no word after a comma
                    and not TIME_SHAPED.fullmatch(run.group())
                    and not AT_TIME.search(gap)
                )
        previous_end = end
        if vital:
            found.append((start, after.end() if after else end))
    return tuple(found)


def in_vital_pattern(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` overlaps a ``vital_patterns`` match."""
    return any(s < end and start < e for s, e in vital_patterns(text))


def safelist_section(language: str, keyword: str) -> list[str]:
    """The entries of the bundled safe-list's sections whose "# ----" heading holds ``keyword``."""
    text = language_pack(language).read_text("safelist")
    entries: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("# ----"):
            inside = keyword in line.lower()
        elif inside:
            entries.extend(read_entries(line))
    return entries


@dataclass(frozen=True)
class ErrorRules:
    """The data the error groups read (module docstring): drug words, titles, hospital detection."""

    drugs: frozenset[str]
    titles: frozenset[str]
    places: Relabeller
    mixed_places: frozenset[str]
    age_category: str
    sentence_start: regex.Pattern = field(repr=False)
    false_alarm_groups: ClassVar[Mapping[str, str]] = FALSE_ALARM_GROUPS
    miss_groups: ClassVar[Mapping[str, str]] = MISS_GROUPS

    @classmethod
    def english(cls) -> ErrorRules:
        entries = [*load_synth_resources("en").data["vocab"]["drug"], *safelist_section("en", "drug")]
        drugs = frozenset(
            fold(word) for entry in entries for word in regex.findall(r"\p{L}+", entry) if len(word) >= MIN_DRUG_WORD
        )
        titles = load_language("en").titles
        relabellers = [Relabeller.for_corpus(corpus) for corpus in CORPORA]
        # a sentence ends at . ! ? and spaces, unless the full stop closes a title ("Dr.") or an initial ("J.")
        not_after = "|".join(sorted(titles, key=len, reverse=True))
        start = regex.compile(rf"(?m)(?:^|(?<!\b(?i:{not_after}|\p{{L}}))[.!?][\"')\]]*\s+)[\s\"'(\[*#•-]*$")
        return cls(
            drugs,
            titles,
            relabellers[0],
            frozenset().union(*(r.split_places for r in relabellers)),
            hipaa_age_rule().category,
            start,
        )

    def false_alarm(self, text: str, start: int, end: int, span: Span, taxonomy: Taxonomy) -> str:
        """The group of predicted token ``text[start:end]`` of predicted ``span`` that no gold token matches."""
        surface = text[span.start : span.end].strip()
        token = text[start:end]
        if taxonomy.category(span.label) == self.age_category or AGE_PHRASE.fullmatch(surface):
            return "age"
        if YEAR.fullmatch(surface):
            return "year"
        if NUMBER_OR_RANGE.fullmatch(surface):
            return "number"
        if JOINED.search(surface) and not REAL_URL.search(surface):
            return "joined"
        if fold(token) in self.drugs:
            return "drug"
        if token[:1].isupper() and (self.starts_sentence(text, start) or self.in_heading(text, start)):
            return "capitalised"
        return "other"

    def miss(self, text: str, start: int, end: int, span: Span, taxonomy: Taxonomy) -> str:
        """The group of gold token ``text[start:end]`` of gold ``span`` that no predicted token matches."""
        surface = text[span.start : span.end]
        token = text[start:end]
        category = taxonomy.category(span.label)
        words = [w for w in regex.findall(r"[^\W_]+", surface) if fold(w) not in self.titles]
        if fold(token) in self.titles and (category == "NAME" or not words):
            return "title"
        if category == "ID" and ID_PREFIX.match(surface):
            return "id_prefix"
        if category == "LOCATION" and (
            span.label in INSTITUTION_LABELS
            or ABBREVIATION.fullmatch(token)
            or (span.label in self.mixed_places and self.places.place_label(surface.strip()) == "HOSPITAL")
        ):
            return "institution"
        if category == "NAME" and token.islower():
            return "lower_case_name"
        if category == "NAME" and sum(len(w) > 1 for w in words) <= 1:
            return "short_name"
        if category == "DATE":
            return "date"
        return "other"

    def starts_sentence(self, text: str, start: int) -> bool:
        """Whether only spaces, quotes or bullets stand between ``start`` and a line start or a sentence end."""
        return bool(self.sentence_start.search(text, text.rfind("\n", 0, start) + 1, start))

    @staticmethod
    def in_heading(text: str, start: int) -> bool:
        """Whether ``start`` lies in its line's leading "Label:" or on a line in capitals."""
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line = text[line_start : line_end if line_end >= 0 else len(text)]
        label = HEADING.match(line)
        letters = [c for c in line if c.isalpha()]
        return bool(label and start - line_start < label.end()) or (
            len(letters) > 2 and all(c.isupper() for c in letters)
        )


@dataclass(frozen=True)
class PhysioNetRules:
    """PhysioNet's error groups (module docstring); same interface as ``ErrorRules``."""

    weekdays: frozenset[str]
    false_alarm_groups: ClassVar[Mapping[str, str]] = PHYSIONET_FALSE_ALARM_GROUPS
    miss_groups: ClassVar[Mapping[str, str]] = PHYSIONET_MISS_GROUPS

    @classmethod
    def english(cls) -> PhysioNetRules:
        vital = {fold(word) for word in VITAL_KEYWORDS}
        return cls(frozenset(word for word in load_language("en").dates.weekday_lookup if word not in vital))

    def false_alarm(self, text: str, start: int, end: int, span: Span, taxonomy: Taxonomy) -> str:
        """The group of predicted token ``text[start:end]`` of predicted ``span`` that no gold token matches."""
        token = text[start:end]
        if any(char.isdigit() for char in token):
            return "vital" if in_vital_pattern(text, start, end) else "number"
        folded = fold(token)
        if folded in self.weekdays:
            return "weekday"
        if folded in ("and", "or"):
            tokens = span_tokens(text, span)
            if tokens and tokens[0][0] < start and end < tokens[-1][1]:
                return "and"
        if len(token) >= 2 and token.isalpha() and token.isupper():
            return "capitals"
        return "other"

    def miss(self, text: str, start: int, end: int, span: Span, taxonomy: Taxonomy) -> str:
        """The group of gold token ``text[start:end]`` of gold ``span`` that no predicted token matches."""
        surface = text[span.start : span.end].strip(" \t\n.,;:()")
        token = text[start:end]
        category = taxonomy.category(span.label)
        if category == "DATE" and MONTH_DAY.fullmatch(surface):
            return "month_day"
        if category == "DATE" and SHORT_YEAR.fullmatch(surface):
            return "short_year"
        if category == "NAME" and len(token) >= 2 and token.islower():
            return "lower_case_name"
        if category == "NAME" and len(token) >= 2 and token.isupper():
            return "capitals_name"
        if category == "LOCATION":
            return "place"
        if category == "NAME" and len(token) == 1 and token.isalpha():
            return "initial"
        return "other"


Rules = ErrorRules | PhysioNetRules


def rules_for(corpus: str) -> Rules:
    """The error groups of ``corpus``: PhysioNet's own, else those of the two first halves."""
    return PhysioNetRules.english() if corpus == "physionet" else ErrorRules.english()


@dataclass
class Outcomes:
    """One document's binary tokens under a PHI set: (start, end, span) for true positives and false
    positives (span: the predicted one) and for false negatives (span: the gold one)."""

    tp: list[tuple[int, int, Span]]
    fp: list[tuple[int, int, Span]]
    fn: list[tuple[int, int, Span]]
    gold: list[tuple[int, int, Span]]  # every scored gold token, found or not


def token_outcomes(
    gold: Document, pred: Document, gold_taxonomy: Taxonomy, pred_taxonomy: Taxonomy, phi_set: str
) -> Outcomes:
    """Binary tokens as ``evaluate`` counts them (``matching``): gold spans outside ``phi_set`` are
    don't-care regions, predicted spans outside it are dropped, and predicted tokens over a
    don't-care region and no scored gold span are left out."""
    gold_kept, dont_care = split_spans(gold.spans, gold.text, gold_taxonomy, phi_set)
    pred_kept = filter_spans(pred.spans, gold.text, pred_taxonomy, phi_set)
    gold_tokens = {token: span for span in gold_kept for token in span_tokens(gold.text, span)}
    pred_tokens = {token: span for span in pred_kept for token in span_tokens(gold.text, span)}
    if dont_care:
        kept = _outside_dont_care({(BINARY_LABEL, *token) for token in pred_tokens}, dont_care, gold_kept)
        pred_tokens = {token: span for token, span in pred_tokens.items() if (BINARY_LABEL, *token) in kept}
    return Outcomes(
        tp=[(*token, span) for token, span in pred_tokens.items() if token in gold_tokens],
        fp=[(*token, span) for token, span in pred_tokens.items() if token not in gold_tokens],
        fn=[(*token, span) for token, span in gold_tokens.items() if token not in pred_tokens],
        gold=[(*token, span) for token, span in gold_tokens.items()],
    )


def example(text: str, span: Span, tokens: Iterable[tuple[int, int]]) -> str:
    """The span's text with ``tokens`` in brackets, on one line, and its label: "[80]-[90] DATE"."""
    out, at = [], span.start
    for start, end in sorted(tokens):
        out += [text[at:start], "[", text[start:end], "]"]
        at = end
    out.append(text[at : span.end])
    return " ".join("".join(out).split()) + f" {span.label}"


def group_tokens(
    text: str, items: Sequence[tuple[int, int, Span]], classify: Callable[[str, int, int, Span], str]
) -> dict[str, Counter]:
    """group -> Counter of examples (one per span, counted in tokens) of ``items`` of one document."""
    by_span: dict[tuple[str, Span], list[tuple[int, int]]] = defaultdict(list)
    for start, end, span in items:
        by_span[(classify(text, start, end, span), span)].append((start, end))
    groups: dict[str, Counter] = defaultdict(Counter)
    for (group, span), tokens in by_span.items():
        groups[group][example(text, span, tokens)] += len(tokens)
    return groups


def _recall(found: Counter, total: Counter) -> dict[str, dict[str, float]]:
    return {key: {"recall": found[key] / total[key], "tokens": total[key]} for key in sorted(total)}


def _groups(counters: Mapping[str, Counter], names: Mapping[str, str]) -> dict[str, dict]:
    return {
        group: {"tokens": sum(counters[group].values()), "examples": counters[group].most_common()} for group in names
    }


def score_row(
    gold: Sequence[Document],
    pred: Sequence[Document],
    gold_taxonomy: Taxonomy,
    pred_taxonomy: Taxonomy,
    phi_set: str,
    rules: Rules,
) -> dict:
    """Binary token P/R/F1 (``evaluate``), recall per gold category and label, and grouped errors of
    ``pred`` against ``gold`` under ``phi_set``."""
    report = evaluate(gold, pred, taxonomy=gold_taxonomy, phi_set=phi_set, pred_taxonomy=pred_taxonomy)
    overall = report.score("binary_token")
    pred_by_name = {doc.name: doc for doc in pred}
    found: dict[str, Counter] = {"category": Counter(), "label": Counter()}
    total: dict[str, Counter] = {"category": Counter(), "label": Counter()}
    false_alarms: dict[str, Counter] = defaultdict(Counter)
    misses: dict[str, Counter] = defaultdict(Counter)
    tp = fp = fn = 0
    for doc in gold:
        outcome = token_outcomes(
            doc, pred_by_name.get(doc.name, doc.with_spans(())), gold_taxonomy, pred_taxonomy, phi_set
        )
        tp, fp, fn = tp + len(outcome.tp), fp + len(outcome.fp), fn + len(outcome.fn)
        missed = {(start, end) for start, end, _ in outcome.fn}
        for start, end, span in outcome.gold:
            for level, key in (("category", gold_taxonomy.category(span.label)), ("label", span.label)):
                total[level][key] += 1
                found[level][key] += (start, end) not in missed
        for group, examples in group_tokens(
            doc.text, outcome.fp, lambda *a: rules.false_alarm(*a, pred_taxonomy)
        ).items():
            false_alarms[group].update(examples)
        for group, examples in group_tokens(doc.text, outcome.fn, lambda *a: rules.miss(*a, gold_taxonomy)).items():
            misses[group].update(examples)
    if (tp, fp, fn) != (overall.tp, overall.fp, overall.fn):  # the groups must split exactly what evaluate counts
        raise AssertionError(
            f"token outcomes {(tp, fp, fn)} differ from evaluate's {(overall.tp, overall.fp, overall.fn)}"
        )
    return {
        "precision": overall.precision,
        "recall": overall.recall,
        "f1": overall.f1,
        "tp": overall.tp,
        "fp": overall.fp,
        "fn": overall.fn,
        "gold_spans_dont_care": report.n_gold_dont_care,
        "pred_spans_dropped": report.n_pred_dropped,
        "recall_by_category": _recall(found["category"], total["category"]),
        "recall_by_label": _recall(found["label"], total["label"]),
        "false_alarms": _groups(false_alarms, rules.false_alarm_groups),
        "misses": _groups(misses, rules.miss_groups),
    }


def predicted(gold: Sequence[Document], spans: Mapping[str, Sequence[Sequence]], source: str) -> list[Document]:
    """The gold documents holding a worker's spans ([start, end, label or None]): hybriddeid's keep their
    labels, a peer's (and any None) become ``UNTYPED``, so they are scored as output (module docstring)."""

    def label(span: Sequence) -> str:
        return span[2] if source in TYPED_ROWS and len(span) > 2 and span[2] else UNTYPED

    return [
        doc.with_spans(Span(int(s[0]), int(s[1]), label(s), source) for s in spans.get(doc.name, ())) for doc in gold
    ]


def read_predictions(folder: Path, gold: Sequence[Document]) -> list[Document]:
    """BRAT predictions of ``folder`` for the ``gold`` notes; an error if one's text differs (other
    offsets), a warning for notes without prediction (``evaluate`` counts their gold as missed)."""
    pred = read_corpus(folder, "brat")
    texts = {doc.name: doc.text for doc in gold}
    wrong = [doc.name for doc in pred if doc.name in texts and doc.text != texts[doc.name]]
    if wrong:
        raise ValueError(f"{folder}: {len(wrong)} notes differ from the gold text, e.g. {wrong[0]}")
    missing = set(texts) - {doc.name for doc in pred}
    if missing:
        print(f"warning: {folder}: no prediction for {len(missing)} of {len(texts)} notes", file=sys.stderr)
    return [doc for doc in pred if doc.name in texts]  # only the notes scored (--max-notes)


def untyped_kept(phi_sets: Sequence[str]) -> bool:
    """Whether a span labelled ``UNTYPED`` counts as PHI under every set (it must, for Philter's row)."""
    span = Span(0, 1, UNTYPED)
    return all(in_phi_set(span, "x", load_taxonomy(PRED_TAXONOMY["philter"]), phi_set) for phi_set in phi_sets)


def trained_halves(meta: Mapping) -> frozenset[str]:
    """The corpora whose dev half a model was trained on, from its ``meta.json`` (``training_data``
    ``real_text`` ``corpora``; a model that says only that it saw real text saw the first two)."""
    real = meta.get("training_data", {}).get("real_text")
    if not real:
        return frozenset()
    return (
        frozenset(real.get("corpora", ()))
        if isinstance(real, Mapping) and "corpora" in real
        else frozenset({"asq", "presidio"})
    )


def model_title(model: str, trained: Collection[str], corpora: Sequence[str]) -> str:
    """The hybriddeid model row's title: optimistic on the halves the model was trained on."""
    name = "bundled model" if model in ("en", "default") else f"model {model}"
    seen = [corpus for corpus in corpora if corpus in trained]
    unseen = [corpus for corpus in corpora if corpus not in trained]

    def halves(names: list[str]) -> str:
        return f"the {', '.join(names)} {'halves' if len(names) > 1 else 'half'}"

    parts = ([f"trained on {halves(seen)}: optimistic there"] if seen else []) + (
        [f"never trained on {halves(unseen)}"] if unseen else []
    )
    return f"{name} ({'; '.join(parts)})"


def open_notes(corpus: str, gold: Sequence[Document]) -> list[Document]:
    """``gold`` without the lockbox's notes (``real_text.sealed_groups``): a CV folder holds no
    prediction for them, and their errors are never shown (issue 42), so they are not scored here."""
    if corpus != LOCKBOX_CORPUS:
        return list(gold)
    patients, sealed = patients_of(corpus), sealed_groups()
    kept = [doc for doc in gold if f"{corpus}/{patients.get(doc.name, doc.name)}" not in sealed]
    if len(kept) < len(gold):
        print(
            f"{corpus}: the {len(gold) - len(kept)} lockbox notes left out (scored only by en_real_cv.py)",
            file=sys.stderr,
        )
    return kept


def cv_title(folder: Path) -> str:
    """The cross-validated row's title, with the fold count from ``cv.json`` when there is one."""
    info = folder / "cv.json"
    if info.is_file():
        data = json.loads(info.read_text("utf-8"))
        return f"cross-validated ({data.get('folds')} folds, {data.get('generated_notes')} generated notes; {folder})"
    return f"cross-validated ({folder})"


def patients_of(corpus: str, folder: Path | None = None) -> dict[str, str]:
    """Note name -> patient, from the corpus's index beside its folder (``real_text.PATIENT_INDEX``);
    empty for a corpus without one (each note is then its own patient)."""
    folder = folder or CORPORA[corpus]
    index = folder.parent / PATIENT_INDEX[corpus] if corpus in PATIENT_INDEX else None
    if index is None or not index.is_file():
        return {}
    lines = index.read_text("utf-8").splitlines()
    columns = lines[0].split("\t")
    stem, patient = columns.index("stem"), columns.index("patient")
    return {row[stem]: row[patient] for row in (line.split("\t") for line in lines[1:] if line.strip())}


def output_position(replacements: Sequence[Replacement], position: int, side: str = "start") -> int:
    """Where input offset ``position`` lies in the de-identified output, from the replacement records
    (sorted, disjoint; their ``start``/``end`` and ``out_start``/``out_end``): moved by the length changes
    of the replacements before it; inside a replacement, that replacement's output start or end (``side``)."""
    shift = 0
    for rep in replacements:
        if rep.start >= position:
            break
        if rep.end > position:
            return rep.out_start if side == "start" else rep.out_end
        shift = rep.out_end - rep.end
    return position + shift


def output_stretch(replacements: Sequence[Replacement], start: int, end: int) -> tuple[int, int]:
    """The output offsets of input stretch [start, end): widened to whole replacements it overlaps."""
    return output_position(replacements, start, "start"), output_position(replacements, end, "end")


def changed_in_output(text: str, output: str, replacements: Sequence[Replacement], start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is not found unchanged at its place in ``output``: a replacement that
    overlaps it wrote other text, or the output there differs."""
    out_start, out_end = output_stretch(replacements, start, end)
    return output[out_start:out_end] != text[start:end]


def surrogate_check(
    gold: Sequence[Document],
    pred: Sequence[Document],
    patients: Mapping[str, str],
    gold_taxonomy: Taxonomy,
    pred_taxonomy: Taxonomy,
    phi_set: str,
    n_examples: int = 5,
) -> dict:
    """The surrogate-mode check of the module docstring on ``pred`` (the gold notes with one row's
    spans; a note without prediction keeps its text): the notes of each patient (``patients``: name ->
    patient; else the note alone) de-identified together through ``processing.process_notes`` with
    the predicted spans of ``phi_set``, then (a) vital-sign and lab numbers changed, (b) gold PHI
    strings of ``MIN_LEFT_CHARS`` or more characters left verbatim."""
    pred_by_name = {doc.name: doc for doc in pred}
    options = DeidOptions(mode="surrogate", language="en", key=SURROGATE_KEY)
    by_patient: dict[str, list[Document]] = defaultdict(list)
    for doc in gold:
        spans = pred_by_name[doc.name].spans if doc.name in pred_by_name else ()
        by_patient[patients.get(doc.name, doc.name)].append(
            Document(doc.name, doc.text, tuple(filter_spans(spans, doc.text, pred_taxonomy, phi_set)))
        )
    outputs = {}
    for patient, docs in by_patient.items():
        for note in process_notes(None, docs, NoteSettings(deid=options), patient):
            outputs[note.document.name] = note.deid
    patterns = changed = numbers = numbers_changed = checked = left = gold_phi_patterns = 0
    changed_examples: Counter = Counter()
    left_by_label: Counter = Counter()
    checked_by_label: Counter = Counter()
    left_examples: Counter = Counter()
    for doc in gold:
        result = outputs[doc.name]
        replacements = sorted(result.replacements, key=lambda r: r.start)
        for start, end in vital_patterns(doc.text):
            if any(span.start < end and start < span.end for span in doc.spans):
                gold_phi_patterns += 1  # the annotators' PHI ("UO-9/10" a date): to change is right
                continue
            flags = [
                changed_in_output(doc.text, result.text, replacements, m.start(), m.end())
                for m in NUMBER_IN_PATTERN.finditer(doc.text, start, end)
            ]
            patterns += 1
            numbers += len(flags)
            numbers_changed += sum(flags)
            if any(flags):
                changed += 1
                out_start, out_end = output_stretch(replacements, start, end)
                changed_examples[f"{doc.text[start:end]} -> {result.text[out_start:out_end]}"] += 1
        kept, _ = split_spans(doc.spans, doc.text, gold_taxonomy, phi_set)
        for span in kept:
            value = doc.text[span.start : span.end].strip()
            if len(value) < MIN_LEFT_CHARS:
                continue
            checked += 1
            checked_by_label[span.label] += 1
            if regex.search(rf"(?<![^\W_]){regex.escape(value)}(?![^\W_])", result.text):
                left += 1
                left_by_label[span.label] += 1
                left_examples[f"{value} {span.label}"] += 1
    return {
        "phi_set": phi_set,
        "notes": len(gold),
        "patients": len(by_patient),
        "notes_without_prediction": sum(doc.name not in pred_by_name for doc in gold),
        "spans_replaced": sum(len(r.replacements) for r in outputs.values()),
        "vital_patterns": patterns,
        "vital_patterns_changed": changed,
        "vital_patterns_gold_phi": gold_phi_patterns,
        "vital_numbers": numbers,
        "vital_numbers_changed": numbers_changed,
        "vital_changed_examples": changed_examples.most_common(n_examples),
        "gold_strings": checked,
        "gold_strings_left": left,
        "gold_left_share": left / checked if checked else 0.0,
        "gold_left_target": LEFT_TARGET,
        "gold_strings_by_label": {
            label: {"strings": n, "left": left_by_label[label]} for label, n in sorted(checked_by_label.items())
        },
        "gold_left_examples": left_examples.most_common(n_examples),
    }


def score_corpus(
    corpus: str,
    gold: list[Document],
    runs: dict[str, dict],
    titles: Mapping[str, str],
    pred_dir: Path | None,
    phi_sets: Sequence[str],
    rules: Rules,
    n_examples: int = 5,
) -> dict:
    """Every row of one corpus: its run figures, scores under each PHI set, spans and, for the
    hybriddeid rows on ``SURROGATE_CHECK_CORPORA``, the surrogate check under the first PHI set."""
    gold_taxonomy = load_taxonomy(GOLD_TAXONOMY[corpus])
    rows: dict[str, dict] = {}
    for key in (k for k in ("hybriddeid", "hybriddeid-cv", "philter", "presidio") if k in runs):
        run = runs[key]
        row: dict = {"title": titles[key], "run": run}
        if "error" not in run:
            spans = run.pop("spans", None)
            pred = read_predictions(pred_dir / corpus, gold) if key == "hybriddeid-cv" else predicted(gold, spans, key)
            pred_taxonomy = load_taxonomy(PRED_TAXONOMY[key])
            row["unknown_labels"] = sorted({s.label for d in pred for s in d.spans if not pred_taxonomy.knows(s.label)})
            row["scores"] = {p: score_row(gold, pred, gold_taxonomy, pred_taxonomy, p, rules) for p in phi_sets}
            if key in TYPED_ROWS and corpus in SURROGATE_CHECK_CORPORA:
                row["surrogate_check"] = surrogate_check(
                    gold, pred, patients_of(corpus), gold_taxonomy, pred_taxonomy, phi_sets[0], n_examples
                )
            row["spans"] = {d.name: [[s.start, s.end, s.label] for s in d.spans] for d in pred}
        rows[key] = row
    return {
        "notes": len(gold),
        "chars": sum(len(d.text) for d in gold),
        "gold_taxonomy": gold_taxonomy.name,
        "citation": CITATIONS.get(corpus),
        "error_groups": {"false_alarms": dict(rules.false_alarm_groups), "misses": dict(rules.miss_groups)},
        "rows": rows,
    }


def _column(row: str, phi_set: str) -> str:
    return f"{row} · {phi_set}"


def print_corpus(corpus: str, data: dict, phi_sets: Sequence[str], n_examples: int) -> None:
    """The markdown tables of one corpus."""
    rows = data["rows"]
    print(
        f"\n## {CORPUS_TITLES[corpus]}: {data['notes']} notes, {data['chars']:,} characters; "
        f"gold in {data['gold_taxonomy']} labels\n"
    )
    if data.get("citation"):
        print(f"{data['citation']}\n")
    print("| tool | notes/s | chars/s | load s | peak MB | notes timed out |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for key, row in rows.items():
        run = row["run"]
        if "error" in run:
            print(f"| {key} | could not run: {run['error']} | | | | |")
        elif "notes_per_second" in run:
            print(
                f"| {key} | {run['notes_per_second']:.1f} | {run['chars_per_second']:,.0f} | "
                f"{run['load_seconds']:.1f} | {run['peak_rss_mb']:.0f} | {_timed_out(run)} |"
            )
        else:
            print(f"| {key} | — | — | — | — | — |")
    for key, row in rows.items():
        if row["run"].get("timed_out"):
            names = row["run"]["timed_out"]
            print(
                f"\n- {key}: {len(names)} notes passed {row['run']['note_timeout']:g} s and score as no spans: "
                f"{', '.join(names)}"
            )
    scored = {key: row for key, row in rows.items() if "scores" in row}
    print("\n| tool | PHI set | token P | token R | token F1 | TP | FP | FN | notes timed out |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, row in scored.items():
        for phi_set in phi_sets:
            s = row["scores"][phi_set]
            print(
                f"| {key} | {phi_set} | {s['precision']:.4f} | {s['recall']:.4f} | {s['f1']:.4f} | "
                f"{s['tp']} | {s['fp']} | {s['fn']} | {_timed_out(row['run'])} |"
            )
    columns = [(key, phi_set) for key in scored for phi_set in phi_sets]
    for level in ("category", "label"):
        print(f"\nbinary token recall by gold {level} (gold tokens per PHI set)\n")
        print(
            "| gold "
            + level
            + " | "
            + " | ".join(f"tokens · {p}" for p in phi_sets)
            + " | "
            + " | ".join(_column(*c) for c in columns)
            + " |"
        )
        print("| --- |" + " ---: |" * (len(phi_sets) + len(columns)))
        first = next(iter(scored.values()), None)
        keys = sorted({k for p in phi_sets for k in first["scores"][p][f"recall_by_{level}"]}) if first else []
        for k in keys:
            cells = [str(first["scores"][p][f"recall_by_{level}"].get(k, {}).get("tokens", "—")) for p in phi_sets]
            for key, phi_set in columns:
                value = scored[key]["scores"][phi_set][f"recall_by_{level}"].get(k)
                cells.append(f"{value['recall']:.3f}" if value else "—")
            print(f"| {k} | " + " | ".join(cells) + " |")
    groups = data["error_groups"]
    for kind, names in groups.items():
        print(f"\n{kind.replace('_', ' ')} by group (tokens)\n")
        print(f"| {kind.replace('_', ' ')} | " + " | ".join(_column(*c) for c in columns) + " |")
        print("| --- |" + " ---: |" * len(columns))
        for group, title in names.items():
            print(
                f"| {group}: {title} | "
                + " | ".join(str(scored[key]["scores"][phi_set][kind][group]["tokens"]) for key, phi_set in columns)
                + " |"
            )
        print(
            "| **all** | "
            + " | ".join(
                str(scored[key]["scores"][phi_set]["fp" if kind == "false_alarms" else "fn"])
                for key, phi_set in columns
            )
            + " |"
        )
    example_set = "i2b2-2014" if "i2b2-2014" in phi_sets else phi_sets[0]
    for key in (k for k in scored if k.startswith("hybriddeid")):
        for kind, names in groups.items():
            print(f"\n{key}, {kind.replace('_', ' ')} under {example_set}: most frequent examples (tokens)\n")
            for group in names:
                entry = scored[key]["scores"][example_set][kind][group]
                shown = "; ".join(f"`{text}` ×{n}" for text, n in entry["examples"][:n_examples])
                print(f"- {group} ({entry['tokens']}): {shown or '—'}")
    for key, row in scored.items():
        if "surrogate_check" in row:
            print_surrogate_check(key, row["surrogate_check"], n_examples)


def _timed_out(run: Mapping) -> str:
    """The notes a peer gave up, for the tables ("—" for a row without a per-note limit)."""
    return str(len(run["timed_out"])) if run.get("note_timeout") else "—"


def print_surrogate_check(key: str, check: dict, n_examples: int) -> None:
    """The surrogate check of one row (module docstring)."""
    print(
        f"\n{key}, surrogate check (surrogate mode through processing.process_notes, predicted spans of "
        f"{check['phi_set']}, {check['patients']} patients, fixed key; {check['spans_replaced']} spans replaced in "
        f"{check['notes']} notes"
        + (f", {check['notes_without_prediction']} without prediction" if check["notes_without_prediction"] else "")
        + ")\n"
    )
    print(
        f"- (a) vital-sign and lab numbers changed: {check['vital_patterns_changed']} of {check['vital_patterns']} "
        f"patterns ({check['vital_numbers_changed']} of {check['vital_numbers']} numbers; "
        f"{check['vital_patterns_gold_phi']} more that overlap gold PHI left out)"
        + (
            "; " + "; ".join(f"`{text}` ×{n}" for text, n in check["vital_changed_examples"][:n_examples])
            if check["vital_changed_examples"]
            else ""
        )
    )
    share = check["gold_left_share"]
    print(
        f"- (b) gold PHI strings of {MIN_LEFT_CHARS}+ characters left verbatim: {check['gold_strings_left']} of "
        f"{check['gold_strings']} ({share:.1%}; target <= {check['gold_left_target']:.0%}: "
        f"{'met' if share <= check['gold_left_target'] else 'not met'}); by label: "
        + ", ".join(f"{label} {v['left']}/{v['strings']}" for label, v in check["gold_strings_by_label"].items())
        + (
            "; most frequent: " + "; ".join(f"`{text}` ×{n}" for text, n in check["gold_left_examples"][:n_examples])
            if check["gold_left_examples"]
            else ""
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        help="hybriddeid model to run (default: the bundled English one, unless --hybriddeid-pred is given alone)",
    )
    parser.add_argument(
        "--hybriddeid-pred",
        type=Path,
        metavar="DIR",
        help="score hybriddeid's predictions in DIR/<corpus> (asq, presidio, physionet; en_real_cv.py --out DIR)",
    )
    parser.add_argument("--phi-set", nargs="+", choices=PHI_SETS, default=["hipaa", "i2b2-2014"])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--corpora", nargs="+", choices=list(CORPORA), default=list(CORPORA))
    parser.add_argument("--peers-dir", type=Path, default=Path("/tmp/hybriddeid-peers"))
    parser.add_argument(
        "--peer-note-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="seconds a peer may spend on one note before it is given up (no spans; default 20, 0: none)",
    )
    parser.add_argument(
        "--max-notes", type=int, metavar="N", help="only the first N notes of each corpus (a quick check)"
    )
    parser.add_argument("--examples", type=int, default=5, help="examples printed per error group")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds a tool may spend on a whole corpus")
    parser.add_argument("--json", type=Path, help="also write every figure, group, example and span here")
    args = parser.parse_args()

    run_model = "hybriddeid" in args.tools and (args.model is not None or args.hybriddeid_pred is None)
    model = args.model or "en"
    titles: dict[str, str] = {}
    if run_model:
        from hybriddeid import Pipeline  # only for its meta.json: the worker loads it again to run it

        titles["hybriddeid"] = model_title(model, trained_halves(Pipeline.load(model).meta), args.corpora)
    if args.hybriddeid_pred:
        titles["hybriddeid-cv"] = cv_title(args.hybriddeid_pred)
    peers = [tool for tool in args.tools if tool != "hybriddeid"]
    titles.update(
        {
            "philter": "philter-lite 0.6.0, philter_delta.toml, spaCy tags",
            "presidio": "presidio-analyzer 2.2.366, default recognizers",
        }
    )

    out: dict = {
        "phi_sets": args.phi_set,
        "model": model if run_model else None,
        "hybriddeid_pred": str(args.hybriddeid_pred) if args.hybriddeid_pred else None,
        "untyped_label": UNTYPED,
        "untyped_kept": untyped_kept(args.phi_set),
        "peer_note_timeout": args.peer_note_timeout,
        "max_notes": args.max_notes,
        "corpora": {},
    }
    for corpus in args.corpora:
        gold = read_corpus(CORPORA[corpus], "brat")[: args.max_notes]
        if args.hybriddeid_pred:
            gold = open_notes(corpus, gold)
        runs = run_tools(
            gold,
            (["hybriddeid"] if run_model else []) + peers,
            args.peers_dir,
            model,
            args.timeout,
            args.peer_note_timeout,
        )
        if args.hybriddeid_pred:
            runs["hybriddeid-cv"] = {"source": str(args.hybriddeid_pred / corpus)}
        out["corpora"][corpus] = score_corpus(
            corpus, gold, runs, titles, args.hybriddeid_pred, args.phi_set, rules_for(corpus), args.examples
        )

    print(
        f"# hybriddeid, Philter and Presidio on real English text, dev halves (binary token scores; "
        f"PHI sets: {', '.join(args.phi_set)})\n"
    )
    for key, title in titles.items():
        if any(key in c["rows"] for c in out["corpora"].values()):
            print(f"- **{key}**: {title}")
    if peers:
        print(
            f"- The peers have no PHI-set switch, so their spans are scored as they output them, labelled `{UNTYPED}`, a "
            "label no taxonomy knows; hybriddeid.core.profiles "
            + (
                "keeps spans of unknown labels, so every peer span is scored under every PHI set."
                if out["untyped_kept"]
                else "drops them under some PHI set here: the peers' figures there miss them."
            )
        )
    for corpus, data in out["corpora"].items():
        for key, row in data["rows"].items():
            extra = [label for label in row.get("unknown_labels", ()) if label != UNTYPED]
            if extra:
                print(
                    f"- {corpus}, {key}: labels outside {PRED_TAXONOMY[key]} (unknown, so kept under every PHI set): "
                    f"{', '.join(extra)}"
                )
    for corpus, data in out["corpora"].items():
        print_corpus(corpus, data, args.phi_set, args.examples)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
