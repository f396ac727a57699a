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
- ASQ-PHI leaves ages under 90 unmarked (Safe Harbor); i2b2 2014 counts every age, so ages written
  in the usual ways ("34-year-old", "70yo", "age 60") are added as AGE spans.

Only the dev halves are read. The other halves are held out for independent measurement.
"""
from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

import regex

from hybriddeid.document import Document, Span
from hybriddeid.io import read_corpus
from hybriddeid.knowledge.dictionaries import bundled_entries

LABELS_FILE = Path(__file__).with_name("real_text_labels.toml")
PLACE_JOINT = regex.compile(r",\s*|\s+in\s+")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora"
CORPORA = {"asq": SHARED / "asq-phi" / "dev", "presidio": SHARED / "presidio-synth" / "dev"}


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

    @classmethod
    def for_corpus(cls, corpus: str) -> "Relabeller":
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

    def relabel(self, doc: Document) -> Document:
        spans: list[Span] = []
        for span in doc.spans:
            label = self.labels.get(span.label)
            if label is None:
                continue
            value = doc.text[span.start:span.end]
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


@lru_cache(maxsize=None)
def _entries(kind: str) -> frozenset[str]:
    """The bundled English dictionary ``kind`` as a set, for membership tests."""
    return frozenset(bundled_entries("en", kind))


def load_relabelled(corpus: str, folder: Path | None = None) -> list[Document]:
    """The dev half of ``corpus`` ("asq" or "presidio") with i2b2 2014 labels, named "<corpus>/<note>"."""
    relabeller = Relabeller.for_corpus(corpus)
    docs = read_corpus(folder or CORPORA[corpus], "brat")
    return [relabeller.relabel(doc) for doc in docs]


def folds(docs: Sequence[Document], k: int, seed: int = 0) -> list[list[Document]]:
    """``docs`` shuffled with ``seed`` and dealt into ``k`` folds of near-equal size."""
    order = list(docs)
    random.Random(seed).shuffle(order)
    return [order[i::k] for i in range(k)]


def cross_validation_splits(docs: Sequence[Document], k: int, seed: int = 0) -> Iterator[tuple[list[Document], list[Document]]]:
    """(train, held_out) for each of ``k`` folds."""
    parts = folds(docs, k, seed)
    for i, held_out in enumerate(parts):
        yield [doc for j, part in enumerate(parts) if j != i for doc in part], held_out
