"""PHI label taxonomies held as data (``resources/taxonomy/*.toml``).

A taxonomy maps each fine label (subtype) to its parent category and carries two flags: ``hipaa``,
the i2b2 2014 evaluation scripts' HIPAA subset (the report's "HIPAA" rows), and ``safe_harbor``, HIPAA
Safe Harbor's identifiers (45 CFR 164.514(b)(2)(i); the ``hipaa`` PHI set of ``hybriddeid.profiles``).
Evaluation, PHI sets and per-category reports read it; nothing hard-codes labels.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from hybriddeid.document import Span
from hybriddeid.languages import shared_resource

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
    def from_toml(cls, text: str, origin: str = "<string>") -> "Taxonomy":
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


@lru_cache(maxsize=None)
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
