"""Surrogate person names whose parts stay linked.

Each word of a name is replaced on its own, keyed by the word itself and its part (given name or
surname), so "John Smith", "Mr. Smith", "SMITH, John" and "Smith" share one surrogate surname and one
surrogate given name in any note and any order. A surname becomes a surname and a given name a given
name (of the same gender where the lists tell it): the part comes from the word's place in the name
("SMITH, John": surname first) and from the name lists (the Faker locale's and the language pack's
dictionaries): the first word of a full name is a given name unless only a surname list has it
("García López"), the last a surname unless it is a second given name ("María José"), and a word
alone ("Dr. Lee", "Miriam") a given name only when no surname list has it. Two words of one name
never get the same surrogate ("Smith Smith"). Titles and particles ("Dr.", "de la") are kept. An
initial ("J.") becomes the initial of the surrogate of the patient's most frequent given name with
that initial, preferring names seen beside the same surname, so "J. Smith" follows "John Smith".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hybriddeid.surrogates.language import LanguageResources, fold
from hybriddeid.surrogates.shape import copy_case

NAME_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")

# (role, folded word) -> surrogate word; roles: "given_female", "given_male", "given" (gender unknown), "surname"
WordSurrogate = Callable[[str, str], str]


class NameInventory:
    """The name words of one patient's notes, to link initials to full names deterministically, and
    the words that open a full name there (given names: "John" alone follows "John Smith")."""

    def __init__(self, names: Iterable[str], particles: frozenset[str], titles: frozenset[str]) -> None:
        self.counts: Counter[str] = Counter()
        self.companions: dict[str, set[str]] = {}  # word -> the other words of the names it appears in
        self.firsts: set[str] = set()  # words that open a name of two or more ("SMITH, John": john; "jean-pierre")
        for name in names:
            words = [fold(w) for w in NAME_WORD.findall(name)]
            words = [w for w in words if len(w) > 1 and w not in particles and w not in titles]
            for word in words:
                self.counts[word] += 1
                self.companions.setdefault(word, set()).update(w for w in words if w != word)
            matches = list(NAME_WORD.finditer(name))
            wholes = [
                (matches[unit[-1]].end(), "-".join(fold(matches[i].group()) for i in unit))
                for unit in _hyphen_units(name, matches)
            ]
            wholes = [
                (end, whole)
                for end, whole in wholes
                if len(whole) > 1 and whole not in particles and whole not in titles
            ]
            if len(wholes) > 1:
                comma = name.find(",")
                before = sum(1 for end, _ in wholes if end <= comma) if comma > 0 else 0
                if before < len(wholes):
                    self.firsts.add(wholes[before][1])

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


GIVEN, GIVEN_FEMALE, GIVEN_MALE, SURNAME = "given", "given_female", "given_male", "surname"
_HYPHENS = frozenset({"-", "‐"})


def _hyphen_units(name: str, words: list[re.Match[str]]) -> list[list[int]]:
    """The indexes of ``words`` grouped into wholes joined by a hyphen ("Ben-David", "son-in-law")."""
    units: list[list[int]] = []
    for index, match in enumerate(words):
        if units and name[words[index - 1].end() : match.start()] in _HYPHENS:
            units[-1].append(index)
        else:
            units.append([index])
    return units


def is_relation_word(key: str, terms: frozenset[str]) -> bool:
    """Whether a folded word or hyphenated whole is a relation word of ``terms`` ("hija",
    "son-in-law"): kept as written in every surrogate, since who a person is to the patient is a
    clinical fact."""
    return key in terms or any(part in terms for part in key.split("-"))


def relation_prefix(value: str, terms: frozenset[str]) -> int:
    """The end of the relation words ``value`` begins with, 0 when it begins with none: a span of
    any label that a model starts with one ("hijo Rosa" read as a street) keeps it as written."""
    words = list(NAME_WORD.finditer(value))
    end = 0
    for unit in _hyphen_units(value, words):
        key = "-".join(fold(words[i].group()) for i in unit)
        if value[end : words[unit[0]].start()].strip() or not is_relation_word(key, terms):
            break
        end = words[unit[-1]].end()
    return end


RELATION_SEPARATORS = ",;:.-–—/"  # may follow a relation word before what it introduces ("Son: Jill")


def relation_head(value: str, terms: frozenset[str]) -> tuple[int, int]:
    """Where the relation words ``value`` begins with end, and where the spaces and separators after
    them end: ``(0, 0)`` when it begins with none."""
    end = relation_prefix(value, terms)
    if not end:
        return 0, 0
    gap = end
    while gap < len(value) and (value[gap].isspace() or value[gap] in RELATION_SEPARATORS):
        gap += 1
    return end, gap


_REDRAWS = 4  # draws for a word whose surrogate another word of the same name already got


@dataclass
class NameSurrogates:
    """Replaces person-name spans word by word with linked surrogates.

    ``female``/``male``: folded given names of the locale, by gender; ``given``/``surnames``: folded
    given names and surnames of any list (the locale's and the pack's dictionaries);
    ``word_surrogate(role, word)`` and ``letter_surrogate(letter)`` draw keyed surrogates;
    ``inventory`` holds the patient's names.
    """

    lang: LanguageResources
    female: frozenset[str]
    male: frozenset[str]
    word_surrogate: WordSurrogate
    letter_surrogate: Callable[[str], str]
    inventory: NameInventory
    given: frozenset[str] = frozenset()
    surnames: frozenset[str] = frozenset()

    def given_role(self, folded: str) -> str:
        """The given-name role of a word (of a hyphenated one, its first part's): its gender where the
        lists tell it."""
        first = folded.split("-")[0]
        if first in self.female:
            return GIVEN_FEMALE
        if first in self.male:
            return GIVEN_MALE
        return GIVEN

    def is_given(self, folded: str) -> bool:
        """Whether every part of the word is a given name of some list ("jean-pierre")."""
        parts = [part for part in folded.split("-") if len(part) > 1]
        return bool(parts) and all(p in self.female or p in self.male or p in self.given for p in parts)

    def is_surname(self, folded: str) -> bool:
        """Whether a surname list has the word or a part of it ("ben-david", "garcía-ortega")."""
        return folded in self.surnames or any(part in self.surnames for part in folded.split("-") if len(part) > 1)

    def role(self, folded: str) -> str:
        """The role of a name word standing alone: a given name when it opens one of the patient's
        full names, or when no surname list has it ("Miriam"), else a surname ("Dr. Lee", "Petrov")."""
        if folded in self.inventory.firsts or (self.is_given(folded) and not self.is_surname(folded)):
            return self.given_role(folded)
        return SURNAME

    def roles(self, name: str, words: list[str], before_comma: int = 0) -> list[str]:
        """The role of each of ``words`` (folded name words of ``name``, hyphenated ones joined, no
        titles, particles or initials) by its place: "SMITH, John" (the first ``before_comma`` words
        stand before a comma: surnames), "John Smith", "María José García López", a word alone."""
        if len(words) == 1 and not before_comma:
            return [self.role(words[0])]
        roles: list[str] = []
        for index, word in enumerate(words):
            given = self.is_given(word)
            if before_comma and index < before_comma:
                roles.append(SURNAME)
            elif before_comma and index == before_comma:
                roles.append(self.given_role(word))
            elif index == 0:
                roles.append(self.given_role(word) if given or not self.is_surname(word) else SURNAME)
            elif given and roles[-1] != SURNAME and (index < len(words) - 1 or not self.is_surname(word)):
                roles.append(self.given_role(word))  # a second given name: "María José", "Mary Ann Smith"
            else:
                roles.append(SURNAME)
        return roles

    def replace(self, name: str) -> str | None:
        """The surrogate for one name span, or None when it holds no name word to replace."""
        words = list(NAME_WORD.finditer(name))
        folded = [fold(m.group()) for m in words]
        full_words = {w for w in folded if len(w) > 1}
        units = _hyphen_units(name, words)  # word indexes of each hyphenated whole ("Ben-David")
        kept = self._kept(name, words, folded, units)
        named = [unit for unit in units if any(i not in kept and len(folded[i]) > 1 for i in unit)]
        comma = name.find(",")
        before_comma = sum(1 for unit in named if words[unit[-1]].end() <= comma) if comma > 0 else 0
        unit_roles = self.roles(name, ["-".join(folded[i] for i in unit) for unit in named], before_comma)
        roles = {i: role for unit, role in zip(named, unit_roles) for i in unit}
        out, last, changed = [], 0, False
        drawn: dict[str, str] = {}  # folded surrogate -> the folded word it replaced
        for index, match in enumerate(words):
            word, key = match.group(), folded[index]
            out.append(name[last : match.start()])
            last = match.end()
            if index in kept:
                out.append(word)
            elif len(key) == 1:
                out.append(self._initial(word, key, full_words))
                changed = True
            else:
                role = roles[index]
                if role != SURNAME:  # a part of a hyphenated given name has its own gender
                    role = self.given_role(key) if self.given_role(key) != GIVEN else role
                surrogate = self._distinct(role, key, drawn)
                out.append(copy_case(word, surrogate))
                changed = True
        out.append(name[last:])
        return "".join(out) if changed else None

    def _kept(self, name: str, words: list[re.Match[str]], folded: list[str], units: list[list[int]]) -> set[int]:
        """Indexes of the words kept as written: titles before a name ("Dr."), particles inside one,
        relation words ("Daughter Miriam", "son-in-law": who the person is to the patient is a
        clinical fact)."""
        kept = set()
        for unit in units:
            if is_relation_word("-".join(folded[i] for i in unit), self.lang.relative_terms):
                kept.update(unit)
        for index, match in enumerate(words):
            key = folded[index]
            followed_by_dot = name[match.end() : match.end() + 1] == "."
            if (
                key in self.lang.titles
                and (followed_by_dot or index < len(words) - 1)
                and len(words) > 1
                or key in self.lang.particles
                and index < len(words) - 1
            ):
                kept.add(index)
        return kept

    def _distinct(self, role: str, key: str, drawn: dict[str, str]) -> str:
        """The surrogate of ``key``, redrawn (keyed by the attempt) when another word of the same name
        already got it: a full name never becomes "Smith Smith"."""
        surrogate = self.word_surrogate(role, key)
        for attempt in range(1, _REDRAWS + 1):
            if drawn.get(fold(surrogate), key) == key:
                break
            surrogate = self.word_surrogate(role, f"{key}#{attempt}")
        drawn.setdefault(fold(surrogate), key)
        return surrogate

    def _initial(self, letter: str, key: str, beside: set[str]) -> str:
        full = self.inventory.expand(key, beside, self.is_given)
        if full is not None:
            surrogate = self.word_surrogate(self.role(full), full)
            return copy_case(letter, surrogate[:1])
        return copy_case(letter, self.letter_surrogate(key))
