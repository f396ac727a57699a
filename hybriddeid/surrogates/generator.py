"""Realistic surrogates of each kind, drawn deterministically from the key.

Every draw seeds a Faker instance of the note's locale from HMAC(key, scope, kind, value), so a value
gets the same surrogate in every note of its scope, in any process and any order. Values are
compared case- and accent-insensitively; the surrogate copies the original's case pattern.

A draw that would bring back one of the scope's original values (another name of the same patient,
the patient's city inside a hospital name, another age) is redrawn; shifted dates are the exception,
since moving every date by one offset may land one date on another's original value.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from hybriddeid.core.profiles import hipaa_age_rule
from hybriddeid.knowledge.dictionaries import FIRST_NAME_KINDS, LAST_NAME_KINDS, bundled_entries, bundled_kinds
from hybriddeid.surrogates.dates import DateShifter
from hybriddeid.surrogates.identifiers import valid_identifier
from hybriddeid.surrogates.keys import Keyed
from hybriddeid.surrogates.language import GENERATED_KINDS, LanguageResources, fold
from hybriddeid.surrogates.names import (
    GIVEN,
    NAME_WORD,
    NameInventory,
    NameSurrogates,
    is_relation_word,
    relation_head,
)
from hybriddeid.surrogates.shape import copy_case, shape_surrogate

if TYPE_CHECKING:
    from faker import Faker

_NUMBER = re.compile(r"\d+")
_ZIP = re.compile(r"\d{5}")
_TEMPLATE_FIELD = re.compile(r"\{(\w+)\}")
_RETRIES = 8
# What may stand between a kept relation word and the rest of its span ("Son, ...", "hija: ...").
# Kinds whose abbreviations ("MA", "GBMC") get abbreviated surrogates.
ABBREVIABLE_KINDS = frozenset({"state", "country", "city", "hospital", "organization", "health_center", "department"})
_ABBREVIATION = re.compile(r"(?:[^\W\d_a-z]\.?){2,5}")
AGE_JITTER = 3  # ages move by 1..3 years (1 for small numbers), never to themselves
MAX_SHOWN_AGE = 89  # Safe Harbor: older ages (and the dates that tell them) are aggregated

# method values recorded in the audit ("kept": a relation word, never replaced)
SURROGATE, DATE_SHIFT, DATE_FALLBACK, SHAPE, SAFE_HARBOR, KEPT = (
    "surrogate",
    "date-shift",
    "date-fallback",
    "shape",
    "safe-harbor",
    "kept",
)


@cache
def faker_for(locale: str) -> Faker:
    """One Faker per locale and process; every use re-seeds it, so sharing it is safe. Faker is imported
    here, on first use: its import (~35 ms) is wasted on runs that write no surrogates (``annotate``)."""
    from faker import Faker

    return Faker(locale)


def name_word(faker: Faker, kind: str, sex: str) -> str:
    """A first (``kind`` "first", of ``sex`` "female" or "male") or last name of ``faker``'s locale in
    Latin letters: the romanized list where the locale writes names in another script and Faker has
    one (ja_JP, zh_CN), so notes in English or Spanish can name people of those origins."""
    if hasattr(faker, "last_romanized_name"):
        if kind != "first":
            return faker.last_romanized_name()
        gendered = f"first_romanized_name_{sex}"
        return getattr(faker, gendered)() if hasattr(faker, gendered) else faker.first_romanized_name()
    if kind == "first":
        return faker.first_name_female() if sex == "female" else faker.first_name_male()
    return faker.last_name()


# Faker locales whose gendered first-name lists tell a given name's gender beside the note's own
# locale's: a note names people of many origins ("Miriam", "Olga" are in no en_US list).
GENDER_LOCALES = ("en_US", "en_GB", "es_ES", "es_MX", "de_DE", "fr_FR", "it_IT", "pt_BR", "pl_PL", "nl_NL")


def _person_provider(locale: str):
    faker = faker_for(locale)
    return next(p for p in faker.providers if type(p).__module__.startswith("faker.providers.person"))


@cache
def given_names(locale: str) -> tuple[frozenset[str], frozenset[str]]:
    """Folded female and male first names: the locale's own lists first (a name female there is
    female), then those of ``GENDER_LOCALES``."""
    female: set[str] = set()
    male: set[str] = set()
    for name in (locale, *GENDER_LOCALES):
        person = _person_provider(name)
        own_female = {fold(n) for n in getattr(person, "first_names_female", ())}
        own_male = {fold(n) for n in getattr(person, "first_names_male", ())} - own_female
        female |= own_female - male
        male |= own_male - female
    return frozenset(female), frozenset(male)


@cache
def name_lists(language: str, locale: str) -> tuple[frozenset[str], frozenset[str]]:
    """Folded given names and surnames of any list: the Faker locale's and the language pack's first- and
    last-name dictionaries (``FIRST_NAME_KINDS``, ``LAST_NAME_KINDS``: the rules' lists too), to tell a name
    word's part."""
    person = _person_provider(locale)
    given = {
        fold(n) for attr in ("first_names_female", "first_names_male", "first_names") for n in getattr(person, attr, ())
    }
    surnames = {fold(n) for n in getattr(person, "last_names", ())}
    kinds = bundled_kinds(language)
    for found, dictionary_kinds in ((given, FIRST_NAME_KINDS), (surnames, LAST_NAME_KINDS)):
        for kind in dictionary_kinds:
            if kind in kinds:
                found.update(fold(n) for n in bundled_entries(language, kind))
    return frozenset(given), frozenset(surnames)


_WORD = re.compile(r"[^\W\d_]{4,}")  # a word of four letters or more
_NUMBER_WORD = re.compile(r"[^\W\d_]+")
_COMPOUND = re.compile(r"[^\W\d_]+(?:['’‐-][^\W\d_]+)*")  # words joined by hyphens or apostrophes


def shares_a_word(surrogate: str, value: str) -> bool:
    """Whether ``surrogate`` repeats a word of four letters or more of ``value`` (compared folded)."""
    return not set(_WORD.findall(fold(surrogate))).isdisjoint(_WORD.findall(fold(value)))


def is_abbreviation(value: str) -> bool:
    """Two to five capital letters, dotted or not ("MA", "U.K.", "EE.UU."); undotted ones of four or
    five letters only with at most one vowel ("GBMC", "UCSF"), so all-capitals words ("COOK", "OHIO")
    are not taken for abbreviations."""
    value = value.strip()
    if not _ABBREVIATION.fullmatch(value) or value.upper() != value:
        return False
    return "." in value or len(value) <= 3 or sum(fold(c) in "aeiou" for c in value) <= 1


def fill_template(faker: Faker, template: str, lang: LanguageResources) -> str:
    """``template`` (from ``[templates]`` of the language's surrogate resources) with its {city},
    {last_name} and {first_name} fields drawn from ``faker``."""
    fields: dict[str, Callable[[], str]] = {
        "city": lambda: str(getattr(faker, lang.faker_methods["city"])()),
        "last_name": faker.last_name,
        "first_name": faker.first_name,
    }
    return _TEMPLATE_FIELD.sub(lambda m: fields[m.group(1)](), template)


@dataclass(frozen=True)
class SurrogateSettings:
    """The options that change surrogates (see ``DeidOptions``). ``oldest_shown_year``: dates of
    earlier years would tell an age over 89 and are aggregated (None: no such limit)."""

    cap_ages: bool = False
    truncate_zips: bool = False
    oldest_shown_year: int | None = None


class Surrogates:
    """Surrogates for one consistency scope (a patient, or the corpus) and one patient's dates."""

    def __init__(
        self,
        lang: LanguageResources,
        keyed: Keyed,
        scope: str,
        dates: DateShifter,
        inventory: NameInventory,
        settings: SurrogateSettings,
        avoid: Iterable[str] = (),
    ) -> None:
        self.lang = lang
        avoid = sorted({fold(value) for value in avoid if value.strip()}, key=len, reverse=True)
        self._avoid = re.compile(rf"(?<!\w)(?:{'|'.join(map(re.escape, avoid))})(?!\w)") if avoid else None
        self._avoid_numbers = {int(v) for v in avoid if v.isdigit()}
        self.keyed = keyed
        self.scope = scope
        self.dates = dates
        self.settings = settings
        self.faker = faker_for(lang.faker_locale)
        female, male = given_names(lang.faker_locale)
        given, surnames = name_lists(lang.language, lang.faker_locale)
        self.names = NameSurrogates(lang, female, male, self._name_word, self._letter, inventory, given, surnames)
        self._handlers: dict[str, Callable[[str], tuple[str, str]]] = {
            "person": self._person,
            "location": self._location,
            "street": self._street,
            "zip": self._zip,
            "age": self._age,
            "date": self._date,
            "email": self._email,
            "url": self._url,
            "ip": self._ip,
            "sex": self._sex,
            "relative": self._relative,
            "id": self._id,
        }
        for kind in GENERATED_KINDS:
            self._handlers[kind] = (
                self._template(kind) if kind in lang.templates else self._faker_kind(kind, case=kind != "username")
            )
        self._handlers["username"] = self._username
        self._named_department = self._handlers["department"]
        self._handlers["department"] = self._department
        self._cache: dict[tuple[str, str], tuple[str, str]] = {}

    # -- entry point ----------------------------------------------------------------------------
    def replace(self, kind: str, value: str) -> tuple[str, str]:
        """(surrogate, method) for ``value`` of surrogate ``kind``; unknown kinds keep the shape."""
        cache_key = (kind, value)
        if cache_key not in self._cache:
            head = self._relation_head(kind, value)
            if head:  # "hijo Rosa" read as a street: "hijo" stays, "Rosa" becomes a street
                surrogate, method = self.replace(kind, value[len(head) :])
                self._cache[cache_key] = head + surrogate, method
            elif kind in ABBREVIABLE_KINDS and is_abbreviation(value):
                self._cache[cache_key] = self._abbreviation(kind, value)
            else:
                self._cache[cache_key] = self._handlers.get(kind, self._shape)(value)
        return self._cache[cache_key]

    def _relation_head(self, kind: str, value: str) -> str:
        """The relation words ``value`` begins with and the separator after them, kept as written, when
        something to replace follows; "" otherwise. Names and family mentions keep relation words
        wherever they stand (their own handlers); a span of relation words alone keeps its handling.
        A comma or colon after the relation word stays with it, not in what is replaced ("Son, jill@..."
        would lose it in the e-mail's surrogate), and a separator without a space gets one, so the kept
        word stands as a word of its own ("Son:jill@..." -> "Son: ...", never "Son...@...")."""
        if kind in ("person", "relative"):
            return ""
        end, gap = relation_head(value, self.lang.relative_terms)
        if not end or not any(c.isalnum() for c in value[gap:]):
            return ""
        head = value[:gap]
        return head if head[-1].isspace() else head + " "

    # -- draws ----------------------------------------------------------------------------------
    def _rng(self, *parts: str) -> random.Random:
        return random.Random(self.keyed.integer(self.scope, *parts))

    def _acceptable(self, surrogate: str, value: str) -> bool:
        """Differs from ``value`` and holds none of the scope's original values as a whole token."""
        folded = fold(surrogate)
        return folded != fold(value) and (self._avoid is None or not self._avoid.search(folded))

    def _fake(self, kind: str, value: str, make: Callable[[Faker], str], attempt: int = 0) -> str:
        self.faker.seed_instance(self.keyed.integer(self.scope, kind, fold(value), str(attempt)))
        return " ".join(make(self.faker).split())  # some locales' addresses end in a space

    def _differing(self, kind: str, value: str, make: Callable[[Faker], str], avoid_its_words: bool = False) -> str:
        """A Faker draw that differs from ``value`` (compared folded); with ``avoid_its_words``, preferably one
        that repeats none of its words either ("Sacred Heart Memorial" should not become "Boone Memorial
        Hospital": a reader would take the word for the original's)."""
        acceptable = None
        for attempt in range(_RETRIES):
            surrogate = self._fake(kind, value, make, attempt)
            if self._acceptable(surrogate, value):
                if not avoid_its_words or not shares_a_word(surrogate, value):
                    return surrogate
                acceptable = acceptable or surrogate
        return acceptable or surrogate

    def _method(self, kind: str) -> Callable[[Faker], str]:
        name = self.lang.faker_methods[kind]
        return lambda faker: str(getattr(faker, name)())

    # -- kinds ----------------------------------------------------------------------------------
    def _shape(self, value: str, purpose: str = "shape", method: str = SHAPE) -> tuple[str, str]:
        for attempt in range(_RETRIES):
            surrogate = shape_surrogate(value, self._rng(purpose, fold(value), str(attempt)))
            if self._acceptable(surrogate, value):
                break
        return surrogate, method

    def _id(self, value: str) -> tuple[str, str]:
        """An identifier of a documented format (DNI, NIE, IBAN) becomes another valid one (its check
        letter or digits recomputed); any other keeps its shape."""
        for attempt in range(_RETRIES):
            valid = valid_identifier(value, self._rng("id", fold(value), str(attempt)))
            if valid is None:
                return self._shape(value)
            surrogate = valid
            if self._acceptable(surrogate, value):
                break
        return surrogate, SURROGATE

    def _faker_kind(self, kind: str, case: bool = True) -> Callable[[str], tuple[str, str]]:
        def handler(value: str) -> tuple[str, str]:
            surrogate = self._differing(kind, value, self._method(kind))
            return (copy_case(value, surrogate) if case else surrogate), SURROGATE

        return handler

    def _template(self, kind: str) -> Callable[[str], tuple[str, str]]:
        templates = self.lang.templates[kind]

        def make(faker: Faker) -> str:
            return fill_template(faker, faker.random_element(templates), self.lang)

        return lambda value: (copy_case(value, self._differing(kind, value, make, avoid_its_words=True)), SURROGATE)

    def _name_word(self, role: str, folded: str) -> str:
        if role == GIVEN:  # a given name of no known gender: one of either, by the key
            role = ("given_female", "given_male")[self.keyed.choice_index(2, self.scope, "given-gender", folded)]
        method = {"given_female": "first_name_female", "given_male": "first_name_male"}.get(role, "last_name")
        for attempt in range(_RETRIES):
            surrogate = self._fake(f"name:{role}", folded, lambda f: getattr(f, method)(), attempt)
            if self._acceptable(surrogate, folded) and len(NAME_WORD.findall(surrogate)) == 1:
                return surrogate
        return surrogate

    def _letter(self, folded: str) -> str:
        letters = [c for c in string.ascii_lowercase if c != folded]
        return letters[self.keyed.choice_index(len(letters), self.scope, "initial", folded)]

    def _person(self, value: str) -> tuple[str, str]:
        surrogate = self.names.replace(value)
        if surrogate is not None:
            return surrogate, SURROGATE
        if any(fold(word) in self.lang.relative_terms for word in NAME_WORD.findall(value) + _COMPOUND.findall(value)):
            return value, KEPT  # relation words alone ("son" tagged as a name): kept as the relatives' are
        return self._shape(value)

    def _location(self, value: str) -> tuple[str, str]:
        """Place names whose label does not say which kind of place: by shape."""
        has_digit, has_letter = any(c.isdigit() for c in value), any(c.isalpha() for c in value)
        if has_digit and not has_letter:
            return self._zip(value)
        return self.replace("street" if has_digit else "city", value)

    def _street(self, value: str) -> tuple[str, str]:
        """Addresses keep their layout: street types and floors stay, other words become surrogate
        surnames, numbers same-shape numbers."""
        return self._layout(value, self.lang.street_words)

    def _department(self, value: str) -> tuple[str, str]:
        """A ward or building ("6 West", "Fleming 2 ICU") keeps its layout, as an address does; a named
        department ("Cardiology") becomes another."""
        ward_words = self.lang.ward_words
        if _NUMBER.search(value) or any(fold(word) in ward_words for word in NAME_WORD.findall(value)):
            return self._layout(value, ward_words | self.lang.street_words)
        return self._named_department(value)

    def _abbreviation(self, kind: str, value: str) -> tuple[str, str]:
        """An abbreviated place or institution ("MA", "GBMC", "EE.UU.") stays an abbreviation: the
        language's abbreviation of a surrogate state where Faker has one, else the initials of the
        surrogate the whole name would get, dotted when the original is."""
        if kind == "state" and "state_abbreviation" in self.lang.faker_methods:
            return self._differing("state-abbreviation", value, self._method("state_abbreviation")).upper(), SURROGATE
        full, method = self._handlers.get(kind, self._shape)(value)
        words = [word for word in NAME_WORD.findall(full) if fold(word) not in self.lang.particles]
        initials = "".join(word[0] for word in words).upper()
        if len(initials) < 2 and words:  # a one-word surrogate: its first letters, as many as the original's
            initials = words[0][: sum(c.isalpha() for c in value)].upper()
        if "." in value:
            initials = "".join(f"{letter}." for letter in initials)
        if len(initials) < 2 or fold(initials) == fold(value):
            return self._shape(value)
        return initials, method

    def _username(self, value: str) -> tuple[str, str]:
        """A user name keeps its form: its case, and digits only where it had them (as many)."""
        letters = "".join(c for c in self._differing("username", value, self._method("username")) if c.isalpha())
        digits = "".join(c for c in value if c.isdigit())
        rng = self._rng("username-digits", fold(value))
        surrogate = copy_case(value, letters) + "".join(str(rng.randrange(10)) for _ in digits)
        return (surrogate, SURROGATE) if self._acceptable(surrogate, value) else self._shape(value)

    def _layout(self, value: str, kept_words: frozenset[str]) -> tuple[str, str]:
        """``value`` with its layout kept: ``kept_words``, particles and single letters stay, other
        words become surrogate surnames and numbers same-shape numbers."""
        changed = False

        def word(match: re.Match[str]) -> str:
            nonlocal changed
            text, key = match.group(), fold(match.group())
            if len(key) == 1 or key in kept_words or key in self.lang.particles or key in self.lang.titles:
                return text
            changed = True
            return copy_case(text, self._name_word("surname", key))

        def number(match: re.Match[str]) -> str:
            nonlocal changed
            changed = True
            return shape_surrogate(match.group(), self._rng("street-number", match.group()))

        out = _NUMBER.sub(number, NAME_WORD.sub(word, value))
        return (out, SURROGATE) if changed else self._shape(value)

    def _zip(self, value: str) -> tuple[str, str]:
        digits = "".join(c for c in value if c.isdigit())
        if self.settings.truncate_zips and len(digits) >= 3:
            prefix = digits[:3]
            if prefix in self.lang.restricted_zip_prefixes:
                prefix = self.lang.restricted_zip_replacement
            return prefix, SAFE_HARBOR
        if _ZIP.fullmatch(value):
            return self._differing("zip", value, self._method("zip")), SURROGATE
        return self._shape(value)

    def _age_number(self, number: str, plural: bool = False) -> tuple[str, str]:
        """An age over 89 as the Safe Harbor aggregate ("90+"), never a number; others moved a little,
        staying at most 89 (a surrogate over 89 would tell something false). ``plural``: not 1 when
        the original is more (its unit word stays plural: "dos meses" never becomes "uno meses")."""
        age = int(number)
        if age > MAX_SHOWN_AGE:
            return self.lang.age_cap, SAFE_HARBOR
        for spread in (AGE_JITTER,) if age >= 10 else (1, 2, AGE_JITTER):  # a small age looks further only
            nearby = [
                a
                for a in range(max(0, age - spread), min(MAX_SHOWN_AGE, age + spread) + 1)  # to avoid an original
                if a != age and not (plural and age > 1 and a <= 1)
            ] or [age + 1]
            choices = [a for a in nearby if a not in self._avoid_numbers]
            if choices:
                break
        choices = choices or nearby
        new = choices[self.keyed.choice_index(len(choices), self.scope, "age", number.lstrip("0") or "0")]
        return str(new).zfill(len(number)), SURROGATE

    def _age_in_words(self, value: str) -> tuple[str, str]:
        """An age written in words: over 89, its number words become the language's words cap ("90 or
        older"); younger, a nearby age, in one word where the pack's numbers.toml has one ("dos años" ->
        "tres años"), else in digits ("sixty-two" -> "63"); other words ("years", "años") stay. No
        number words: the same shape."""
        rule = hipaa_age_rule()
        words = [
            m
            for m in _NUMBER_WORD.finditer(value)
            if m.group().lower() in rule.number_words or m.group().lower() in rule.multipliers
        ]
        age = rule.stated_age(value)
        if not words or age is None:
            return self._shape(value)
        start, end = words[0].start(), words[-1].end()
        if age > MAX_SHOWN_AGE:
            return value[:start] + copy_case(value[start:end], self.lang.age_words_cap) + value[end:], SAFE_HARBOR
        new = self._age_number(str(age), plural=True)[0]
        written = self.lang.number_words.get(int(new))
        new = copy_case(value[start:end], written) if written else new
        return value[:start] + new + value[end:], SURROGATE

    def _age(self, value: str) -> tuple[str, str]:
        if not _NUMBER.search(value):
            return self._age_in_words(value)
        methods: set[str] = set()

        def number(match: re.Match[str]) -> str:
            text, method = self._age_number(match.group())
            methods.add(method)
            return text

        out = _NUMBER.sub(number, value)
        return out, SAFE_HARBOR if SAFE_HARBOR in methods else SURROGATE

    def _date(self, value: str) -> tuple[str, str]:
        """The date shifted in its own format; one that cannot be read gets another date of the same
        form (the same whatever the attempt when it holds no number or date name to change); one whose
        year would tell an age over 89, the aggregate."""
        oldest = self.settings.oldest_shown_year
        if oldest is not None and any(year < oldest for year in self.dates.years(value)):
            return self.lang.date_cap, SAFE_HARBOR
        shifted = self.dates.shift(value)
        if shifted is not None:  # equal to ``value`` only when kept on purpose (a year with keep_years)
            return shifted, DATE_SHIFT
        for attempt in range(_RETRIES):
            surrogate = self.dates.same_kind(value, self._rng("date", fold(value), str(attempt)))
            if self._acceptable(surrogate, value):
                break
        return surrogate, DATE_FALLBACK

    def _email(self, value: str) -> tuple[str, str]:
        domain = self._method("email_domain")
        surrogate = self._differing("email", value, lambda f: f"{f.user_name()}@{domain(f)}")
        return copy_case(value, surrogate), SURROGATE

    def _url(self, value: str) -> tuple[str, str]:
        surrogate = self._differing("url", value, self._method("url"))
        if not value.lower().startswith(("http:", "https:")):
            surrogate = re.sub(r"^https?://", "", surrogate)
        if not value.endswith("/"):
            surrogate = surrogate.rstrip("/")
        return surrogate, SURROGATE

    def _ip(self, value: str) -> tuple[str, str]:
        make = (lambda f: f.ipv6()) if ":" in value else (lambda f: f.ipv4())
        return self._differing("ip", value, make), SURROGATE

    def _sex(self, value: str) -> tuple[str, str]:
        """One surrogate sex per scope, written in the style of the original term."""
        pair = self.lang.sex_lookup.get(fold(value))
        if pair is None:
            return self._shape(value)
        side = self.keyed.choice_index(2, self.scope, "sex")
        return copy_case(value, self.lang.sex_pairs[pair][side]), SURROGATE

    def _relative(self, value: str) -> tuple[str, str]:
        """A family mention: relation words kept (who the person is to the patient is a clinical fact:
        "hija" stays "hija"), capitalised words replaced as names, numbers as ages. A mention of
        relation words alone is kept whole (method "kept")."""
        changed = False

        def word(match: re.Match[str]) -> str:
            nonlocal changed
            text, key = match.group(), fold(match.group())
            if text[:1].isupper() and len(text) > 1 and key not in self.lang.particles:
                changed = True
                return copy_case(text, self._name_word(self.names.role(key), key))
            return text

        def compound(match: re.Match[str]) -> str:  # "son-in-law" is one relation word, "Ben-David" one name
            if is_relation_word(fold(match.group()), self.lang.relative_terms):
                return match.group()
            return NAME_WORD.sub(word, match.group())

        out = _COMPOUND.sub(compound, value)
        if _NUMBER.search(out):
            out, changed = _NUMBER.sub(lambda m: self._age_number(m.group())[0], out), True
        if changed:
            return out, SURROGATE
        if any(fold(w) in self.lang.relative_terms for w in NAME_WORD.findall(value) + _COMPOUND.findall(value)):
            return value, KEPT
        return self._shape(value)
