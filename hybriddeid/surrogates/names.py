"""Surrogate person names whose parts stay linked.

Each word of a name is replaced on its own, keyed by the word itself, so "John Smith", "Mr. Smith",
"SMITH, John" and "Smith" share one surrogate surname and one surrogate given name in any note and
any order. Whether a word is a given name (and of which gender) or a surname comes from the Faker
locale's own name lists; titles and particles ("Dr.", "de la") are kept. An initial ("J.") becomes the
initial of the surrogate of the patient's most frequent given name with that initial, preferring
names seen beside the same surname, so "J. Smith" follows "John Smith".
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable

from hybriddeid.surrogates.language import LanguageResources, fold
from hybriddeid.surrogates.shape import copy_case

NAME_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")

# (role, folded word) -> surrogate word; roles: "given_female", "given_male", "surname"
WordSurrogate = Callable[[str, str], str]


class NameInventory:
    """The name words of one patient's notes, to link initials to full names deterministically."""

    def __init__(self, names: Iterable[str], particles: frozenset[str], titles: frozenset[str]) -> None:
        self.counts: Counter[str] = Counter()
        self.companions: dict[str, set[str]] = {}  # word -> the other words of the names it appears in
        for name in names:
            words = [fold(w) for w in NAME_WORD.findall(name)]
            words = [w for w in words if len(w) > 1 and w not in particles and w not in titles]
            for word in words:
                self.counts[word] += 1
                self.companions.setdefault(word, set()).update(w for w in words if w != word)

    def expand(self, initial: str, beside: set[str], is_given: Callable[[str], bool]) -> str | None:
        """The full word an initial most likely stands for, or None."""
        candidates = [w for w in self.counts if w.startswith(initial)]
        for pool in (
            [w for w in candidates if is_given(w) and self.companions[w] & beside],
            [w for w in candidates if self.companions[w] & beside],
            [w for w in candidates if is_given(w)],
        ):
            if pool:
                return min(pool, key=lambda w: (-self.counts[w], w))
        return None


@dataclass
class NameSurrogates:
    """Replaces person-name spans word by word with linked surrogates.

    ``female``/``male``: folded given names of the locale; ``word_surrogate(role, word)`` and
    ``letter_surrogate(letter)`` draw keyed surrogates; ``inventory`` holds the patient's names.
    """

    lang: LanguageResources
    female: frozenset[str]
    male: frozenset[str]
    word_surrogate: WordSurrogate
    letter_surrogate: Callable[[str], str]
    inventory: NameInventory

    def role(self, folded: str) -> str:
        if folded in self.female:
            return "given_female"
        if folded in self.male:
            return "given_male"
        return "surname"

    def is_given(self, folded: str) -> bool:
        return self.role(folded) != "surname"

    def replace(self, name: str) -> str | None:
        """The surrogate for one name span, or None when it holds no name word to replace."""
        words = list(NAME_WORD.finditer(name))
        folded = [fold(m.group()) for m in words]
        full_words = {w for w in folded if len(w) > 1}
        out, last, changed = [], 0, False
        for index, match in enumerate(words):
            word, key = match.group(), folded[index]
            out.append(name[last:match.start()])
            last = match.end()
            followed_by_dot = name[match.end():match.end() + 1] == "."
            if key in self.lang.titles and (followed_by_dot or index < len(words) - 1) and len(words) > 1:
                out.append(word)
            elif key in self.lang.particles and index < len(words) - 1:
                out.append(word)
            elif len(key) == 1:
                out.append(self._initial(word, key, full_words))
                changed = True
            else:
                out.append(copy_case(word, self.word_surrogate(self.role(key), key)))
                changed = True
        out.append(name[last:])
        return "".join(out) if changed else None

    def _initial(self, letter: str, key: str, beside: set[str]) -> str:
        full = self.inventory.expand(key, beside, self.is_given)
        if full is not None:
            surrogate = self.word_surrogate(self.role(full), full)
            return copy_case(letter, surrogate[:1])
        return copy_case(letter, self.letter_surrogate(key))
