"""The two public English dev halves (ASQ-PHI, presidio-research) as training notes in i2b2 2014 labels.

The bundled English model learns mostly from generated notes; these halves are the only English text
here that nobody on the project wrote. Their label sets and conventions differ from i2b2 2014, so
each gold span is relabelled with the data in ``tools/real_text_labels.toml``:

- a label maps to one i2b2 2014 subtype, or is dropped where i2b2 2014 does not count it as PHI
  (presidio's honorifics "Mr."/"Mrs.", nationalities);
- place labels that mix kinds (ASQ's GEOGRAPHIC_LOCATION, presidio's GPE) are cut at ", " and " in "
  ("Mayo Clinic in Rochester, MN") and each part typed by the bundled dictionaries and a few words:
  hospitals and clinics, states, countries, else cities;
- titles are cut off the front of names ("Dr. Sarah P." -> "Sarah P."), as i2b2 2014 marks names;
- ASQ-PHI and PhysioNet leave ages under 90 unmarked (Safe Harbor); i2b2 2014 counts every age, so
  ages written in the usual ways ("34-year-old", "70yo", "age 60") are added as AGE spans;
- PhysioNet marks a many-word value word by word ("HOLY" "CROSS"): neighbours of one category with
  only a space or ". " between them are joined, as i2b2 2014 marks them; spans lose edge blanks.

PhysioNet's notes come with their patients (``dev_index.tsv``): cross-validation keeps a patient's
notes in one fold (``group_of``). Only the dev halves are read. The other halves are held out for
independent measurement.
"""

from __future__ import annotations

import random
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import regex

from hybriddeid.core.document import Document, Span
from hybriddeid.features.gazetteer import NOT_IN_LEXICON
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.dictionaries import bundled_entries

LABELS_FILE = Path(__file__).with_name("real_text_labels.toml")
PLACE_JOINT = regex.compile(r",\s*|\s+in\s+")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora"
CORPORA = {
    "asq": SHARED / "asq-phi" / "dev",
    "presidio": SHARED / "presidio-synth" / "dev",
    "physionet": SHARED / "physionet-deid" / "dev",
}
PATIENT_INDEX = {"physionet": "dev_index.tsv"}
# The sealed lockbox (issue 42): PhysioNet dev patients whose notes no one reads; models are judged on
# them after training on the other patients (benchmarks/en_real_cv.py). One patient id a line.
LOCKBOX_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "lockbox.txt"
LOCKBOX_CORPUS = "physionet"
# Real notes of one hospital, whose other half is held out: the CRFs learn from them, but their PHI
# values enter no lexicon (features.gazetteer.NOT_IN_LEXICON), so no list of those values ships.
NOT_IN_LEXICON_CORPORA = frozenset({"physionet"})  # corpus -> file of (stem, patient, note) rows beside its folder


@dataclass(frozen=True)
class Relabeller:
    """Maps one corpus's gold spans onto i2b2 2014 subtypes (see the module docstring)."""

    labels: dict[str, str]
    split_places: frozenset[str]
    hospital_words: frozenset[str]
    state_abbreviations: frozenset[str]
    strip_titles: regex.Pattern
    add_ages: regex.Pattern | None
    drop_values: regex.Pattern | None
    join_gaps: frozenset[str] = frozenset()
    join_date_years: bool = False

    @classmethod
    def for_corpus(cls, corpus: str) -> Relabeller:
        data = tomllib.loads(LABELS_FILE.read_text("utf-8"))
        common, own = data["common"], data[corpus]
        ages = own.get("add_ages")
        return cls(
            labels=dict(own["labels"]),
            split_places=frozenset(own.get("split_places", ())),
            hospital_words=frozenset(word.lower() for word in common["hospital_words"]),
            state_abbreviations=frozenset(common["state_abbreviations"]),
            strip_titles=regex.compile(common["strip_titles"]),
            add_ages=regex.compile(ages, regex.IGNORECASE) if ages else None,
            drop_values=regex.compile(own["drop_values"]) if "drop_values" in own else None,
            join_gaps=frozenset(own.get("join_gaps", ())),
            join_date_years=bool(own.get("join_date_years", False)),
        )

    def place_label(self, value: str) -> str:
        """HOSPITAL, STATE, COUNTRY or CITY for a place of a mixed label."""
        words = {word.lower().strip(".,'’s") for word in value.split()}
        if words & self.hospital_words or value in _entries("hospitals"):
            return "HOSPITAL"
        if value in _entries("states") or value in self.state_abbreviations:
            return "STATE"
        if value in _entries("countries"):
            return "COUNTRY"
        return "CITY"

    def place_parts(self, text: str, span: Span) -> list[Span]:
        """A mixed place span cut where i2b2 2014 would cut it ("Mayo Clinic in Rochester, MN" ->
        HOSPITAL, CITY, STATE; the joining ", " and " in " stay outside), each part typed."""
        parts, start = [], span.start
        for joint in [*PLACE_JOINT.finditer(text, span.start, span.end), None]:
            end = joint.start() if joint else span.end
            if start < end:
                parts.append(Span(start, end, self.place_label(text[start:end]), "gold"))
            start = joint.end() if joint else end
        return parts

    def joined(self, doc: Document) -> list[Span]:
        """The gold spans without edge blanks, word-by-word neighbours of one label joined (``join_gaps``)."""
        spans: list[Span] = []
        for span in sorted(doc.spans, key=lambda s: s.start):
            value = doc.text[span.start : span.end]
            start = span.start + len(value) - len(value.lstrip())
            end = span.end - len(value) + len(value.rstrip())
            if start >= end:
                continue
            span = Span(start, end, span.label, span.source)
            if spans:
                last = spans[-1]
                gap = doc.text[last.end : span.start]
                same = self.labels.get(last.label) == self.labels.get(span.label)
                date_year = (
                    self.join_date_years
                    and self.labels.get(last.label) == "DATE"
                    and span.label.endswith("Year")
                    and gap in (", ", ",", " ")
                )
                if (same and gap in self.join_gaps) or date_year:
                    spans[-1] = Span(last.start, span.end, last.label, last.source)
                    continue
            spans.append(span)
        return spans

    def relabel(self, doc: Document) -> Document:
        spans: list[Span] = []
        for span in self.joined(doc) if self.join_gaps else doc.spans:
            label = self.labels.get(span.label)
            if label is None:
                continue
            value = doc.text[span.start : span.end]
            if self.drop_values is not None and self.drop_values.match(value):
                continue
            if span.label in self.split_places:
                spans.extend(self.place_parts(doc.text, span))
                continue
            start = span.start
            if label in ("PATIENT", "DOCTOR"):
                title = self.strip_titles.match(value)
                if title:
                    label = "DOCTOR" if title.group().lower().startswith("dr") else label
                    start += title.end()
            if start < span.end:
                spans.append(Span(start, span.end, label, "gold"))
        if self.add_ages is not None:
            for match in self.add_ages.finditer(doc.text):
                age = Span(match.start("age"), match.end("age"), "AGE", "gold")
                if not any(age.overlaps(other) for other in spans):
                    spans.append(age)
        return doc.with_spans(spans)


@cache
def _entries(kind: str) -> frozenset[str]:
    """The bundled English dictionary ``kind`` as a set, for membership tests."""
    return frozenset(bundled_entries("en", kind))


def load_relabelled(corpus: str, folder: Path | None = None) -> list[Document]:
    """The dev half of ``corpus`` ("asq", "presidio" or "physionet") with i2b2 2014 labels; each
    document's ``meta["group"]`` is its patient where the corpus says (else its own name), for folds."""
    relabeller = Relabeller.for_corpus(corpus)
    folder = folder or CORPORA[corpus]
    docs = read_corpus(folder, "brat")
    patients = _patients(corpus, folder)
    own = {NOT_IN_LEXICON: True} if corpus in NOT_IN_LEXICON_CORPORA else {}
    return [
        replace(
            relabeller.relabel(doc),
            meta={**doc.meta, **own, "corpus": corpus, "group": f"{corpus}/{patients.get(doc.name, doc.name)}"},
        )
        for doc in docs
    ]


def _patients(corpus: str, folder: Path) -> dict[str, str]:
    """Note stem -> patient, from the corpus's index beside ``folder`` (empty when it has none)."""
    index = PATIENT_INDEX.get(corpus)
    if index is None or not (folder.parent / index).is_file():
        return {}
    rows = [line.split("\t") for line in (folder.parent / index).read_text("utf-8").splitlines()[1:] if line.strip()]
    return {row[0]: row[1] for row in rows}


@cache
def sealed_groups() -> frozenset[str]:
    """The lockbox's patients as ``group_of`` names them ("physionet/<patient>")."""
    lines = LOCKBOX_FILE.read_text("utf-8").splitlines()
    return frozenset(f"{LOCKBOX_CORPUS}/{line.strip()}" for line in lines if line.strip() and not line.startswith("#"))


def split_lockbox(docs: Sequence[Document]) -> tuple[list[Document], list[Document]]:
    """(open notes, sealed notes): the sealed ones are the lockbox patients' (``sealed_groups``)."""
    sealed = sealed_groups()
    return ([doc for doc in docs if group_of(doc) not in sealed], [doc for doc in docs if group_of(doc) in sealed])


def group_of(doc: Document) -> str:
    """The unit cross-validation keeps in one fold: the note's patient, or the note itself."""
    return str(doc.meta.get("group", doc.name))


def folds(docs: Sequence[Document], k: int, seed: int = 0) -> list[list[Document]]:
    """``docs`` dealt into ``k`` folds, a group's notes (``group_of``: a patient's) always in one: the
    groups of each corpus shuffled with ``seed`` and dealt in turn, so every fold gets a near-equal
    share of every corpus's groups (notes without a group are groups of one)."""
    groups: dict[str, list[Document]] = {}
    for doc in docs:
        groups.setdefault(group_of(doc), []).append(doc)
    by_corpus: dict[str, list[str]] = {}
    for group in groups:
        by_corpus.setdefault(str(groups[group][0].meta.get("corpus", "")), []).append(group)
    rng = random.Random(seed)
    parts: list[list[Document]] = [[] for _ in range(k)]
    dealt = 0
    for corpus in sorted(by_corpus):
        order = by_corpus[corpus]
        rng.shuffle(order)
        for group in order:
            parts[dealt % k].extend(groups[group])
            dealt += 1
    return parts


def cross_validation_splits(
    docs: Sequence[Document], k: int, seed: int = 0
) -> Iterator[tuple[list[Document], list[Document]]]:
    """(train, held_out) for each of ``k`` folds."""
    parts = folds(docs, k, seed)
    for i, held_out in enumerate(parts):
        yield [doc for j, part in enumerate(parts) if j != i for doc in part], held_out
