"""Word-level lexical facts shared by the token and character feature sets.

Each function is pure and cached: the same word forms recur constantly in clinical notes, so
memoising them makes feature extraction a dictionary lookup for most tokens.
"""

from __future__ import annotations

from functools import lru_cache

import regex

# Per-word memos: words repeat, but ids and numbers keep adding new ones. 32,768 entries tag
# 3,000 notes as fast as 200,000 did (42.7 s vs 42.6 s) and stop a deid worker growing by
# ~370 MB as the larger memos filled (benchmarks/soak.py).
WORD_MEMO_SIZE = 1 << 15

_ROMAN = regex.compile(r"^(?=[MDCLXVI])M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})$")


def _char_class(ch: str) -> str:
    if ch.isupper():
        return "A"
    if ch.islower():
        return "a"
    if ch.isdigit():
        return "#"
    return "-"


class _CharClasses(dict[int, str]):
    """``str.translate``'s table of ``_char_class``: each character's class, worked out on first sight
    (at most ``_CLASSES_KEPT`` kept), so a word's classes come from one C loop, not a call per character."""

    def __missing__(self, code: int) -> str:
        found = _char_class(chr(code))
        if len(self) < _CLASSES_KEPT:
            self[code] = found
        return found


_CLASSES_KEPT = 1 << 16
_CLASSES = _CharClasses()


@lru_cache(maxsize=WORD_MEMO_SIZE)
def shape(word: str) -> str:
    """Every character mapped to A/a/#/- ("PO/5mg" -> "AA-#aa"), the paper's first word shape."""
    return word[:20].translate(_CLASSES)


@lru_cache(maxsize=WORD_MEMO_SIZE)
def short_shape(word: str) -> str:
    """Runs of one class collapsed ("PO/5mg" -> "A-#a"), the paper's second word shape."""
    out: list[str] = []
    last = ""
    for cls in word.translate(_CLASSES):
        if cls != last:
            out.append(cls)
            last = cls
    return "".join(out)


@lru_cache(maxsize=WORD_MEMO_SIZE)
def orthography(word: str) -> tuple[str, ...]:
    """Orthographic flags of a word (case, digits, punctuation, Roman numerals, length)."""
    flags: list[str] = []
    if word.isupper():
        flags.append("allcaps")
    elif word[:1].isupper():
        flags.append("title")
    if any(map(str.isupper, word[1:])) and not word.isupper():
        flags.append("innercap")
    if word.isdigit():
        flags.append("digits")
        flags.append(f"ndigits={min(len(word), 9)}")
    elif any(map(str.isdigit, word)):
        flags.append("hasdigit")
    if not word.isalnum():
        flags.append("punct" if len(word) == 1 else "haspunct")
    if len(word) > 1 and _ROMAN.match(word):
        flags.append("roman")
    flags.append(f"len={min(len(word), 10)}")
    return tuple(flags)


@lru_cache(maxsize=WORD_MEMO_SIZE)
def affixes(lower: str) -> tuple[str, ...]:
    """Prefix and suffix features of length 1-5 of a lower-cased word."""
    out: list[str] = []
    for n in range(1, min(5, len(lower)) + 1):
        out.append(f"p{n}={lower[:n]}")
        out.append(f"s{n}={lower[-n:]}")
    return tuple(out)
