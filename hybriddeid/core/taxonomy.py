"""PHI label taxonomies held as data (``resources/taxonomy/*.toml``).

A taxonomy maps each fine label (subtype) to its parent category and carries two flags: ``hipaa``,
the i2b2 2014 evaluation scripts' HIPAA subset (the report's "HIPAA" rows), and ``safe_harbor``, HIPAA
Safe Harbor's identifiers (45 CFR 164.514(b)(2)(i); the ``hipaa`` PHI set of ``hybriddeid.core.profiles``).
Evaluation, PHI sets and per-category reports read it; nothing hard-codes labels.
"""

from __future__ import annotations

import csv
import io
import json
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from hybriddeid.core.document import Document, Span
from hybriddeid.core.languages import shared_resource

# Order matters: guess_taxonomy gives ties to the earlier one, surrogate kinds take the first that knows a label.
BUNDLED_TAXONOMIES = ("i2b2_2014", "i2b2_2006", "meddocan", "asq_phi", "presidio", "physionet")


@dataclass(frozen=True)
class Taxonomy:
    """Fine labels -> (category, hipaa flag, safe_harbor flag). Unknown labels are their own category,
    outside the i2b2 HIPAA subset; whether they are Safe Harbor identifiers is unknown
    (``is_safe_harbor`` gives None)."""

    name: str
    categories: dict[str, str]
    hipaa: frozenset[str]
    safe_harbor: frozenset[str] | None = None  # None: every subtype (erring towards privacy)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.categories)

    def category(self, label: str) -> str:
        return self.categories.get(label, label)

    def is_hipaa(self, label: str) -> bool:
        return label in self.hipaa

    def is_safe_harbor(self, label: str) -> bool | None:
        """Whether ``label`` is a HIPAA Safe Harbor identifier; None for a label this taxonomy does not know."""
        if label not in self.categories:
            return None
        return self.safe_harbor is None or label in self.safe_harbor

    def knows(self, label: str) -> bool:
        return label in self.categories

    def to_category(self, span: Span) -> Span:
        """The span relabelled with its parent category."""
        return span.with_label(self.category(span.label))

    @classmethod
    def from_toml(cls, text: str, origin: str = "<string>") -> Taxonomy:
        try:
            data = tomllib.loads(text)
            subtypes = data["subtypes"]
            categories = {label: entry["category"] for label, entry in subtypes.items()}
            hipaa = frozenset(label for label, entry in subtypes.items() if entry.get("hipaa"))
            # a subtype without the flag counts as an identifier: erring towards privacy
            safe_harbor = frozenset(label for label, entry in subtypes.items() if entry.get("safe_harbor", True))
            return cls(data.get("name", origin), categories, hipaa, safe_harbor)
        except (tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{origin}: not a valid taxonomy file ({exc})") from None


@cache
def load_taxonomy(name: str) -> Taxonomy:
    """A bundled taxonomy by name: ``i2b2_2014``, ``i2b2_2006``, ``meddocan``, ``asq_phi`` or ``presidio``
    (dashes allowed)."""
    key = name.replace("-", "_").lower()
    if key not in BUNDLED_TAXONOMIES:
        raise ValueError(f"unknown taxonomy {name!r}; bundled: {', '.join(BUNDLED_TAXONOMIES)}")
    text = shared_resource("taxonomy", f"{key}.toml").read_text("utf-8")
    return Taxonomy.from_toml(text, origin=f"taxonomy/{key}.toml")


def guess_taxonomy(labels: Iterable[str], prefer: Taxonomy | None = None) -> Taxonomy:
    """The bundled taxonomy that knows most of ``labels``. Ties go to ``prefer`` when given (so it is
    kept whenever it knows every label), else to the first in ``BUNDLED_TAXONOMIES`` (i2b2 2014)."""
    labels = set(labels)
    candidates = [load_taxonomy(name) for name in BUNDLED_TAXONOMIES]
    if prefer is not None:
        candidates = [prefer, *(tax for tax in candidates if tax.name != prefer.name)]
    return max(candidates, key=lambda tax: sum(tax.knows(label) for label in labels))


# -- labels a corpus uses that its taxonomy does not know ------------------------------------------


def unknown_labels(docs: Iterable[Document], taxonomy: Taxonomy) -> Counter[str]:
    """Spans per label that ``taxonomy`` does not know: scored as their own category and outside every
    PHI set's rules, they silently change scores and what a trained model learns, so callers stop on them."""
    return Counter(span.label for doc in docs for span in doc.spans if not taxonomy.knows(span.label))


def describe_unknown(side: str, counts: Counter[str], taxonomy: Taxonomy) -> str:
    """Each unknown label with its count, in one line."""
    listed = ", ".join(f"{label} ({n} span{'s' * (n != 1)})" for label, n in counts.most_common())
    return f"{side} labels outside the {taxonomy.name} taxonomy: {listed}"


def read_label_map(path: Path) -> dict[str, str]:
    """A label map: TOML or JSON (``{"from": "to"}``) or CSV/TSV (two columns, from and to)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            mapping = json.loads(text)
        elif path.suffix in (".csv", ".tsv"):
            rows = csv.reader(io.StringIO(text), delimiter="\t" if path.suffix == ".tsv" else ",")
            mapping = dict(_pair(row) for row in rows if row and not row[0].startswith("#"))
        else:
            mapping = tomllib.loads(text)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the label map ({getattr(exc, 'strerror', None) or exc})") from None
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in mapping.items()
    ):
        raise ValueError(f'{path}: a label map maps label names to label names (FROM = "TO")')
    return mapping


def _pair(row: list[str]) -> tuple[str, str]:
    """A CSV/TSV label map row's (from, to); a ValueError for a row of another width."""
    if len(row) != 2:
        raise ValueError(f"a row has {len(row)} cells, not two (from, to)")
    return row[0].strip(), row[1].strip()


def relabel(docs: Iterable[Document], mapping: Mapping[str, str]) -> list[Document]:
    """``docs`` with each span's label mapped (labels the map leaves out stay)."""
    return [
        replace(doc, spans=tuple(replace(span, label=mapping.get(span.label, span.label)) for span in doc.spans))
        for doc in docs
    ]
