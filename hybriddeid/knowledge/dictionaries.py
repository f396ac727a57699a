"""The bundled dictionaries (``dictionaries/<kind>.txt`` of each language pack) as gazetteers.

Each kind (first names, cities, hospitals, ...) becomes one ``Gazetteer``, so a token can carry a
BIOES tag from each dictionary it is in ("Madrid" is a city and a province). Users add their own
lists by path: a file whose stem is a bundled kind extends it, any other stem is a new kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache, lru_cache
from importlib.resources.abc import Traversable
from pathlib import Path

from hybriddeid.core.languages import language_pack, register_cache
from hybriddeid.features.gazetteer import Gazetteer


def _folder(language: str) -> Traversable:
    return language_pack(language).dictionaries


def bundled_kinds(language: str) -> tuple[str, ...]:
    """The kinds with a file in ``language``'s pack (e.g. "cities", "first_names"), sorted;
    () when the pack has no dictionaries (they are optional)."""
    pack = language_pack(language)
    if not pack.has("dictionaries"):
        return ()
    return tuple(sorted(entry.name[:-4] for entry in pack.dictionaries.iterdir() if entry.name.endswith(".txt")))


def read_entries(text: str) -> list[str]:
    """The entries of a dictionary file's text: one a line; blank lines and "#" comments skipped."""
    return [entry for entry in map(str.strip, text.splitlines()) if entry and entry[0] != "#"]


@register_cache
@cache
def pack_entries(language: str, resource: str) -> tuple[str, ...]:
    """The entries of ``language``'s pack file ``resource`` ("words", "stopwords"...), read once: the
    word lists below share the 74,000 lines of English ``words.txt``."""
    return tuple(read_entries(language_pack(language).read_text(resource)))


@register_cache
@cache
def bundled_entries(language: str, kind: str) -> tuple[str, ...]:
    """The entries of ``dictionaries/<kind>.txt`` in ``language``'s pack."""
    return tuple(read_entries(_folder(language).joinpath(f"{kind}.txt").read_text("utf-8")))


@register_cache
@lru_cache(maxsize=8)
def _load(language: str, kinds: tuple[str, ...] | None, extra_files: tuple[str, ...]) -> dict[str, Gazetteer]:
    available = bundled_kinds(language)
    if not available and not extra_files:
        _folder(language)  # names the missing dictionaries/ folder, if that is why
        raise ValueError(f"no bundled dictionaries for language {language!r}")
    wanted = available if kinds is None else kinds
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise ValueError(
            f"no bundled {language!r} dictionary for {', '.join(unknown)}; bundled: {', '.join(available)}"
        )
    entries: dict[str, list[str]] = {kind: list(bundled_entries(language, kind)) for kind in wanted}
    for name in extra_files:
        path = Path(name)
        entries.setdefault(path.stem, []).extend(read_entries(path.read_text(encoding="utf-8")))
    return {kind: Gazetteer.from_phrases({kind: phrases}) for kind, phrases in entries.items()}


def load_gazetteers(
    language: str,
    kinds: Iterable[str] | None = None,
    extra_files: Sequence[str | Path] = (),
) -> dict[str, Gazetteer]:
    """kind -> ``Gazetteer`` (tagging with the kind as label: "B-cities") for ``language``.

    ``kinds`` picks bundled kinds (default: all of the language's); each path in ``extra_files``
    is a user list whose file stem names its kind. Built once per arguments and shared
    (read-only) between callers; entries are tokenized with the notes' tokenizer.
    """
    chosen = None if kinds is None else tuple(sorted(set(kinds)))
    extras = tuple(str(Path(path).resolve()) for path in extra_files)
    return dict(_load(language, chosen, extras))


@register_cache
@cache
def known_words(language: str) -> frozenset[str]:
    """The ordinary words of ``language``, case-folded: its pack's common-word list (``words.txt``),
    safe-list (drugs, eponyms, abbreviations) and stop words: what rule lookup kind ``unknown`` is
    not, and what the token CRF's ``vocabulary`` feature calls known."""
    pack = language_pack(language)
    resources = [resource for resource in ("words", "safelist", "stopwords") if pack.has(resource)]
    # one casefold of the joined entries: casefold maps each character alone, and adds no line break
    joined = "\n".join(entry for resource in resources for entry in pack_entries(language, resource))
    return frozenset(joined.casefold().split("\n")) if joined else frozenset()


# A pack's first- and last-name dictionaries: its own lists (CRF features too) and the rules-only lists of
# names of other origins (English: the largest US foreign-born groups', tools/build_gazetteers.py).
FIRST_NAME_KINDS = ("first_names", "resident_first_names")
LAST_NAME_KINDS = ("last_names", "resident_last_names")


@register_cache
@cache
def name_words(language: str) -> frozenset[str]:
    """The words of ``language``'s bundled first- and last-name dictionaries, case-folded (empty for a
    pack without them). The build tool already dropped names that are mostly common words ("Will")."""
    kinds = [kind for kind in (*FIRST_NAME_KINDS, *LAST_NAME_KINDS) if kind in bundled_kinds(language)]
    return frozenset(
        word.casefold() for kind in kinds for entry in bundled_entries(language, kind) for word in entry.split()
    )


@register_cache
@cache
def surnames(language: str) -> frozenset[str]:
    """The one-word entries of ``language``'s bundled last-name dictionaries, case-folded (empty for a
    pack without them): what a user name built from a surname ("mrossi", "pmurphy") is read against."""
    kinds = [kind for kind in LAST_NAME_KINDS if kind in bundled_kinds(language)]
    return frozenset(
        entry.casefold() for kind in kinds for entry in bundled_entries(language, kind) if " " not in entry
    )


@register_cache
@cache
def given_names(language: str) -> frozenset[str]:
    """The words of ``language``'s bundled first-name dictionaries that are no ordinary word of it
    (``lower_words``), case-folded: "eva", not "rosa" (a colour in Spanish). Empty without one."""
    kinds = [kind for kind in FIRST_NAME_KINDS if kind in bundled_kinds(language)]
    ordinary = lower_words(language)
    return frozenset(
        folded
        for kind in kinds
        for entry in bundled_entries(language, kind)
        for word in entry.split()
        if (folded := word.casefold()) not in ordinary
    )


@register_cache
@cache
def lower_words(language: str) -> frozenset[str]:
    """The ordinary words of ``language``: the entries its common-word list (``words.txt``) writes in
    lower case ("bill", "will"; not "Bernini"), and its stop words. Empty without a ``words.txt``."""
    pack = language_pack(language)
    if not pack.has("words"):
        return frozenset()
    entries = (
        entry for resource in ("words", "stopwords") if pack.has(resource) for entry in pack_entries(language, resource)
    )
    return frozenset(entry for entry in entries if entry.islower())


@register_cache
@cache
def measurement_labels(language: str) -> frozenset[str]:
    """``language``'s measurement labels (``measurements.txt``: "peep", "hr"), lower case; empty
    without one. A pair of numbers right after one is a reading, not a date."""
    pack = language_pack(language)
    return (
        frozenset(entry.lower() for entry in pack_entries(language, "measurements"))
        if pack.has("measurements")
        else frozenset()
    )


@register_cache
@cache
def rating_words(language: str) -> tuple[frozenset[str], frozenset[str]]:
    """``language``'s rating words (``ratings.txt``: "pain", "strength") and the words that, right before a
    number, make it a date instead ("on", "since": the file's "!" lines), lower case; both empty without one.
    A number out of 10 or 5 near a rating word is a score, not a date (``validators.score_on_scale``)."""
    if not language_pack(language).has("ratings"):
        return frozenset(), frozenset()
    entries = [entry.lower() for entry in pack_entries(language, "ratings")]
    return (
        frozenset(entry for entry in entries if not entry.startswith("!")),
        frozenset(entry[1:] for entry in entries if entry.startswith("!")),
    )


@register_cache
@cache
def proper_only_words(language: str) -> frozenset[str]:
    """Case-folded words that ``language``'s word list (``words.txt``) writes only capitalised
    ("bernini", "january"): proper nouns, for the token CRF's "proper" feature. Empty without one."""
    pack = language_pack(language)
    if not pack.has("words"):
        return frozenset()
    capitalised = {entry.casefold() for entry in pack_entries(language, "words") if not entry.islower()}
    return frozenset(capitalised - lower_words(language))
