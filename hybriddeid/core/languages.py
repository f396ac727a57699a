"""Language packs: everything language-specific, one pack per language, and one loader.

A pack is a folder named by its language code (``en``, ``es``) that holds a ``pack.toml`` (name
and label taxonomy) and the language's resource files: ``regex.toml`` (rules), ``sections.txt``
(section headers), ``surrogates.toml`` (what de-identified output needs), ``safelist.txt``,
``synth.toml`` (synthetic notes), ``numbers.toml`` (number words for ages), ``stopwords.txt``
(common words, to detect a corpus's language: :func:`detect_language`), ``words.txt`` (optional:
a long common-word list, the rules' lookup kind "unknown" is what it lacks) and
``dictionaries/<kind>.txt``. Only ``pack.toml`` makes a
folder a pack; a missing resource is an error when something needs it, naming the language and
the file. ``resources/languages/README.md`` describes the files.

A pack's rules and dictionaries may also sit beside the folder of packs that holds it
(``BESIDE_PACKS``): a pack ``<root>/languages/<code>/`` without a ``regex.toml`` reads
``<root>/regex/<code>.toml``, one without ``dictionaries/`` reads ``<root>/dictionaries/<code>/``. The
bundled packs are laid out so (``resources/regex/``, ``resources/dictionaries/``, the rest in
``resources/languages/<code>/``); a pack of one's own is usually one folder with all its files.

Packs are looked for, first found wins, in:

1. folders given to :func:`add_language_folder`, the most recent first;
2. the folders of the ``HYBRIDDEID_LANGUAGE_PATH`` environment variable (``os.pathsep``-separated),
   in order;
3. the bundled folder, ``hybriddeid.resources/languages``.

So a pack in an extra folder overrides a bundled pack with the same code. Lookups are cached;
:func:`add_language_folder` and :func:`remove_language_folder` clear those caches and every
per-language cache downstream (registered with :func:`register_cache`). After changing the
environment variable in a running process, call :func:`clear_caches`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import regex

ENV_VAR = "HYBRIDDEID_LANGUAGE_PATH"
PACK_FILE = "pack.toml"
# resource key -> (name inside the pack, what it is, for messages)
RESOURCES: dict[str, tuple[str, str]] = {
    "regex": ("regex.toml", "regex rules"),
    "sections": ("sections.txt", "section headers"),
    "fields": ("fields.txt", "field labels"),
    "surrogates": ("surrogates.toml", "surrogate resources"),
    "safelist": ("safelist.txt", "safe-list"),
    "synth": ("synth.toml", "synthetic-note resources"),
    "numbers": ("numbers.toml", "number words"),
    "stopwords": ("stopwords.txt", "stop words"),
    "words": ("words.txt", "common-word list"),
    "measurements": ("measurements.txt", "measurement labels"),
    "ratings": ("ratings.txt", "rating words"),
    "dictionaries": ("dictionaries", "dictionaries"),
}
# Where a pack's resource is when its folder lacks it: a path under the folder that holds its folder of packs
# (the bundled packs: under hybriddeid.resources, beside resources/languages/).
BESIDE_PACKS: dict[str, str] = {"regex": "regex/{code}.toml", "dictionaries": "dictionaries/{code}"}
_PACK_KEYS = frozenset({"name", "taxonomy", "description", "scripts"})
DEFAULT_SCRIPTS = ("Latin",)
_CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class _Cached(Protocol):
    """What ``functools.cache`` and ``lru_cache`` make of a function: it can be called and cleared."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def cache_clear(self) -> None: ...


_added: list[str] = []  # add_language_folder's folders, the most recent last
_caches: list[_Cached] = []  # lru_caches keyed on a language, cleared with ours

F = TypeVar("F", bound=_Cached)


class MissingResourceError(ValueError):
    """A language pack lacks a file that the caller needs (the message names both)."""


@dataclass(frozen=True)
class LanguagePack:
    """One language's pack: its ``code``, its ``folder`` and its parsed ``pack.toml``."""

    code: str
    folder: Traversable
    metadata: Mapping[str, Any] = field(compare=False)
    bundled: bool = True
    root: Traversable | None = field(default=None, compare=False)  # what holds its folder of packs (BESIDE_PACKS)

    @property
    def name(self) -> str:
        """The language's name ("English")."""
        return self.metadata["name"]

    @property
    def taxonomy(self) -> str:
        """The bundled label taxonomy its rules and models use by default ("i2b2-2014")."""
        return self.metadata["taxonomy"]

    @property
    def scripts(self) -> tuple[str, ...]:
        """The Unicode scripts its models read (``regex`` names: "Latin", "Greek")."""
        return tuple(self.metadata.get("scripts", DEFAULT_SCRIPTS))

    def has(self, resource: str) -> bool:
        """Whether the pack has ``resource`` (a key of ``RESOURCES``)."""
        return _exists(self._locate(resource)[0], resource)

    def resource(self, resource: str) -> Traversable:
        """The pack's file (or folder) for ``resource``; ``MissingResourceError`` if absent."""
        if not self.has(resource):
            name, what = RESOURCES[resource]
            raise MissingResourceError(
                f"language {self.code!r} has no {what}: its pack has no {name} ({self.origin(resource)})"
            )
        return self._locate(resource)[0]

    def _locate(self, resource: str) -> tuple[Traversable, str]:
        """Where ``resource`` is (in the pack's folder, else where ``BESIDE_PACKS`` puts it; the pack's folder
        when neither has it) and that place relative to the bundled resources, for messages."""
        name = _resource_name(resource)
        own = self.folder.joinpath(name)
        if resource in BESIDE_PACKS and self.root is not None and not _exists(own, resource):
            relative = BESIDE_PACKS[resource].format(code=self.code)
            beside = self.root.joinpath(*relative.split("/"))
            if _exists(beside, resource):
                return beside, relative
        return own, f"languages/{self.code}/{name}"

    def read_text(self, resource: str) -> str:
        """The UTF-8 text of a file resource."""
        return self.resource(resource).read_text(encoding="utf-8")

    def origin(self, resource: str) -> str:
        """Where ``resource`` lives, for messages: its path under the bundled resources when bundled
        (``languages/<code>/sections.txt``, ``regex/<code>.toml``), else its path."""
        entry, relative = self._locate(resource)
        return relative if self.bundled else str(Path(str(entry)))

    @property
    def regex_rules(self) -> Traversable:
        return self.resource("regex")

    @property
    def sections(self) -> Traversable:
        return self.resource("sections")

    @property
    def surrogates(self) -> Traversable:
        return self.resource("surrogates")

    @property
    def safelist(self) -> Traversable:
        return self.resource("safelist")

    @property
    def synth(self) -> Traversable:
        return self.resource("synth")

    @property
    def dictionaries(self) -> Traversable:
        return self.resource("dictionaries")


def _exists(entry: Traversable, resource: str) -> bool:
    return entry.is_dir() if resource == "dictionaries" else entry.is_file()


def _resource_name(resource: str) -> str:
    if resource not in RESOURCES:
        raise ValueError(f"unknown language-pack resource {resource!r}; known: {', '.join(RESOURCES)}")
    return RESOURCES[resource][0]


def bundled_folder() -> Traversable:
    """The folder of the packs shipped with hybriddeid."""
    return resources.files("hybriddeid.resources").joinpath("languages")


def shared_resource(*parts: str) -> Traversable:
    """A language-independent bundled file (``shared_resource("taxonomy", "meddocan.toml")``)."""
    return resources.files("hybriddeid.resources").joinpath(*parts)


def language_folders() -> tuple[str, ...]:
    """The extra folders searched before the bundled one, in search order."""
    env = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return (*reversed(_added), *env)


@lru_cache(maxsize=8)
def _discover(extra: tuple[str, ...]) -> Mapping[str, tuple[Traversable, bool, Traversable]]:
    """code -> (pack folder, bundled?, what holds its folder of packs) over ``extra`` folders then the
    bundled one; first wins."""
    found: dict[str, tuple[Traversable, bool, Traversable]] = {}
    folders: list[tuple[Traversable, bool, Traversable]] = [(Path(p), False, Path(p).resolve().parent) for p in extra]
    folders.append((bundled_folder(), True, resources.files("hybriddeid.resources")))
    for folder, bundled, root in folders:
        if not folder.is_dir():
            continue  # a missing folder on the path is skipped, as PATH does
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if _CODE.fullmatch(entry.name) and entry.is_dir() and entry.joinpath(PACK_FILE).is_file():
                found.setdefault(entry.name, (entry, bundled, root))
    return MappingProxyType(found)


def available_languages() -> tuple[str, ...]:
    """The codes of every pack found, sorted."""
    return tuple(sorted(_discover(language_folders())))


@cache
def _load_pack(code: str, extra: tuple[str, ...]) -> LanguagePack:
    found = _discover(extra)
    if code not in found:
        raise ValueError(f"unknown language {code!r}; available: {', '.join(sorted(found)) or 'none'}")
    folder, bundled, root = found[code]
    origin = f"languages/{code}/{PACK_FILE}" if bundled else str(Path(str(folder)) / PACK_FILE)
    try:
        data = tomllib.loads(folder.joinpath(PACK_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{origin}: cannot be read ({type(exc).__name__})") from None
    unknown = sorted(set(data) - _PACK_KEYS)
    if unknown:
        raise ValueError(f"{origin}: unknown keys {unknown}; known: {sorted(_PACK_KEYS)}")
    for key in ("name", "taxonomy"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ValueError(f"{origin}: needs a non-empty string {key!r}")
    scripts = data.get("scripts", DEFAULT_SCRIPTS)
    if (
        not isinstance(scripts, (list, tuple))
        or not scripts
        or not all(isinstance(s, str) and _CODE.fullmatch(s) for s in scripts)
    ):
        raise ValueError(f'{origin}: \'scripts\' must be a list of Unicode script names, e.g. ["Latin", "Greek"]')
    try:
        regex.compile("".join(rf"\p{{Script={name}}}" for name in scripts))
    except regex.error:
        raise ValueError(f"{origin}: 'scripts' names an unknown Unicode script ({', '.join(scripts)})") from None
    taxonomy_file = data["taxonomy"].replace("-", "_").lower() + ".toml"  # as hybriddeid.core.taxonomy names them
    if not shared_resource("taxonomy", taxonomy_file).is_file():
        bundled_taxonomies = sorted(
            entry.name[:-5] for entry in shared_resource("taxonomy").iterdir() if entry.name.endswith(".toml")
        )
        raise ValueError(f"{origin}: unknown taxonomy {data['taxonomy']!r}; bundled: {', '.join(bundled_taxonomies)}")
    return LanguagePack(code, folder, MappingProxyType(data), bundled, root)


def language_pack(code: str) -> LanguagePack:
    """The pack of language ``code``; ``ValueError`` naming it and the available ones if none."""
    if not isinstance(code, str):
        raise ValueError(f"a language code must be a string, not {type(code).__name__}")
    return _load_pack(code, language_folders())


_WORD = re.compile(r"[^\W\d_]+")
DETECT_MIN_SHARE = 0.05  # below this share of stop words no pack is taken to fit the text
DETECT_MAX_CHARS = 2_000_000  # enough text to decide; a big corpus is not read in full


@dataclass(frozen=True)
class LanguageGuess:
    """What :func:`detect_language` found: the chosen ``code`` (None when no pack fits), each
    pack's share of words that are its stop words, and the number of words read."""

    code: str | None
    shares: Mapping[str, float]
    words: int

    def reason(self) -> str:
        """Why, for logs: counts only, never text."""
        shares = ", ".join(f"{code} {share:.1%}" for code, share in sorted(self.shares.items(), key=lambda kv: -kv[1]))
        return f"share of {self.words} words that are each pack's stop words: {shares or 'no pack has stopwords.txt'}"


def stop_words(code: str) -> frozenset[str]:
    """The lower-case words of ``code``'s ``stopwords.txt`` (empty when the pack has none)."""
    pack = language_pack(code)
    if not pack.has("stopwords"):
        return frozenset()
    return frozenset(
        line.strip().lower()
        for line in pack.read_text("stopwords").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


def detect_language(
    texts: Iterable[str], languages: Iterable[str] | None = None, max_chars: int = DETECT_MAX_CHARS
) -> LanguageGuess:
    """The pack (of ``languages``, default every available one) whose stop words make up the
    largest share of the words in ``texts`` (read up to ``max_chars``); ``code`` is None when no
    pack reaches ``DETECT_MIN_SHARE`` (e.g. none has a ``stopwords.txt``)."""
    codes = list(available_languages() if languages is None else languages)
    lists = {code: stop_words(code) for code in codes}
    lists = {code: words for code, words in lists.items() if words}
    hits = dict.fromkeys(lists, 0)
    n_words = read = 0
    for text in texts:
        text = text[: max_chars - read]
        read += len(text)
        for match in _WORD.finditer(text):
            word = match.group().lower()
            n_words += 1
            for code, words in lists.items():
                hits[code] += word in words
        if read >= max_chars:
            break
    shares = {code: hits[code] / n_words if n_words else 0.0 for code in lists}
    best = max(shares, key=lambda code: (shares[code], code), default=None)
    guess = best if best is not None and shares[best] >= DETECT_MIN_SHARE else None
    return LanguageGuess(guess, MappingProxyType(shares), n_words)


def add_language_folder(path: str | os.PathLike[str]) -> None:
    """Search ``path`` (a folder holding pack folders) before the others; its packs override
    bundled packs and packs of earlier-added folders with the same code. Clears the caches."""
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    if str(folder) in _added:
        _added.remove(str(folder))
    _added.append(str(folder))
    clear_caches()


def remove_language_folder(path: str | os.PathLike[str]) -> None:
    """Stop searching a folder given to :func:`add_language_folder` (no error if it was not). Clears the caches."""
    folder = str(Path(path).resolve())
    if folder in _added:
        _added.remove(folder)
    clear_caches()


def register_cache(func: F) -> F:
    """Decorator for an ``lru_cache``'d function keyed on a language: :func:`clear_caches` clears it."""
    _caches.append(func)
    return func


def clear_caches() -> None:
    """Forget every pack lookup and every registered per-language cache (after packs or
    ``HYBRIDDEID_LANGUAGE_PATH`` changed)."""
    _discover.cache_clear()
    _load_pack.cache_clear()
    for func in _caches:
        func.cache_clear()


def _unread_char(code: str) -> str:
    """One character language ``code``'s models do not read: a letter of a script its pack does not
    list, or an emoji."""
    scripts = "".join(rf"\p{{Script={name}}}" for name in language_pack(code).scripts)
    return rf"(?:[^\P{{L}}{scripts}]|\p{{Emoji_Presentation}})"


@register_cache
@cache
def unread_pattern(code: str) -> regex.Pattern[str]:
    """Runs of text that language ``code``'s models do not read: letters of scripts its pack does not
    list, and emoji (with the spaces, digits and punctuation between them)."""
    char = _unread_char(code)
    return regex.compile(rf"{char}+(?:[\s\p{{P}}\p{{N}}]*{char}+)*")


@register_cache
@cache
def unread_letters(code: str) -> regex.Pattern[str]:
    """Runs of ``unread_pattern``'s characters alone (no spaces, digits or punctuation between them):
    a stretch holds text language ``code``'s models do not read exactly when it meets one of these."""
    return regex.compile(rf"{_unread_char(code)}+")


def unread_characters(text: str, code: str) -> int:
    """How many characters of ``text`` language ``code``'s models do not read (``unread_pattern``)."""
    return sum(match.end() - match.start() for match in unread_pattern(code).finditer(text))
