"""Shape-preserving surrogates and case copying, shared by every surrogate kind."""

from __future__ import annotations

import random
import string

_LOWER = string.ascii_lowercase
_UPPER = string.ascii_uppercase


def copy_case(original: str, surrogate: str) -> str:
    """``surrogate`` in the case pattern of ``original``: ALL CAPS, all lower, or as generated."""
    letters = [c for c in original if c.isalpha()]
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return surrogate.upper()
    if letters and all(c.islower() for c in letters):
        return surrogate.lower()
    if letters and letters[0].isupper() and surrogate[:1].islower():
        return surrogate[:1].upper() + surrogate[1:]
    return surrogate


def shape_surrogate(value: str, rng: random.Random) -> str:
    """Digits -> random digits, letters -> random letters of the same case, everything else kept.

    The first digit of a number stays non-zero when it was (so "0471" keeps a leading zero and
    "5208756" does not gain one). Retries until the result differs from ``value`` when it can.
    """
    if not any(c.isalnum() for c in value):
        return value
    for attempt in range(8):
        out = []
        previous_digit = False
        for char in value:
            if char.isdigit():
                if char == "0" and not previous_digit and attempt < 4:
                    out.append("0")
                else:
                    out.append(str(rng.randint(0 if previous_digit else 1, 9)))
                previous_digit = True
                continue
            previous_digit = False
            if char.isalpha():
                out.append(rng.choice(_UPPER if char.isupper() else _LOWER))
            else:
                out.append(char)
        surrogate = "".join(out)
        if surrogate != value:
            return surrogate
    return surrogate
