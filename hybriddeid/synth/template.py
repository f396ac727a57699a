"""The template language of the synthetic-note resources, and a writer that keeps PHI offsets.

Templates are plain strings with brace fields (nesting allowed):

- ``{slot}``: a PHI value of the note's cast (``{patient}``, ``{doctor_last}``, ``{date}``, ``{mrn}``);
- ``{~name}``: a non-PHI phrase drawn from the resource's ``[vocab]`` list ``name``;
- ``{a|b|c}``: one of the alternatives, each itself a template (``{|, }``: nothing or ", ");
- ``{@A|B}``: a field label, one of A or B, written in the note's label style ("MRN: ", "MRN#");
- ``{^he}``: a word in the form for the patient's sex ("he"/"she", "Mr."/"Ms.");
- ``{#60-120}``: a non-PHI whole number in that range (vital signs, lab values, doses);
- ``{slot:case}``: the slot's value in another case, as real notes write PHI: ``lower``, ``upper``,
  ``title``, or ``any`` (one of as written, lower, upper, drawn); the cast keeps one value, so
  "Kessler" and "KESSLER" are the same place in one note.

Rendering never computes an offset after the fact: every PHI value is appended through
``NoteWriter.phi``, which records its span as it writes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from hybriddeid.core.document import Span


class TemplateError(ValueError):
    """A template with unbalanced braces or an unknown field; the message quotes the template."""


@dataclass
class NoteWriter:
    """Appends text and PHI values, recording each value's span and the value itself."""

    parts: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    length: int = 0

    def text(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self.length += len(text)

    def phi(self, value: str, label: str) -> None:
        """Write ``value`` as PHI of type ``label`` (leading/trailing space is written as plain text)."""
        stripped = value.strip()
        if not stripped:
            self.text(value)
            return
        lead = value[: len(value) - len(value.lstrip())]
        self.text(lead)
        self.spans.append(Span(self.length, self.length + len(stripped), label, "gold"))
        self.values.append(stripped)
        self.text(stripped)
        self.text(value[len(lead) + len(stripped) :])

    def append(self, other: NoteWriter) -> None:
        """Append everything ``other`` wrote, shifting its spans."""
        shift = self.length
        self.spans.extend(Span(s.start + shift, s.end + shift, s.label, s.source) for s in other.spans)
        self.values.extend(other.values)
        for part in other.parts:
            self.text(part)

    def getvalue(self) -> str:
        return "".join(self.parts)

    def ends_with_newline(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")


class Context(Protocol):
    """What rendering needs from a note being generated."""

    def choose(self, options: list[str]) -> str: ...

    def slot(self, name: str) -> tuple[str, str]: ...

    def vocab(self, name: str) -> str: ...

    def gendered(self, word: str) -> str: ...

    def number(self, low: int, high: int) -> int: ...

    def field_label(self, label: str) -> str: ...


def _closing(template: str, start: int) -> int:
    """Index of the brace closing the one at ``start``."""
    depth = 0
    for i in range(start, len(template)):
        if template[i] == "{":
            depth += 1
        elif template[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise TemplateError(f"unbalanced braces in template {template!r}")


def split_alternatives(body: str) -> list[str]:
    """``body`` split at the ``|`` that are not inside nested braces."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in body:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if char == "|" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def alternative_fields(template: str) -> Iterator[list[str]]:
    """The alternatives of every ``{a|b}`` field of ``template``, nested ones too, parsed as ``render``
    reads them (label fields ``{@A|B}`` are not alternatives of text): for checks of a resource file."""
    i = 0
    while (start := template.find("{", i)) >= 0:
        end = _closing(template, start)
        body = template[start + 1 : end]
        if body[:1] not in ("@", "^", "#", "~"):
            alternatives = split_alternatives(body)
            if len(alternatives) > 1:
                yield alternatives
                for alternative in alternatives:
                    yield from alternative_fields(alternative)
        i = end + 1


def render(template: str, context: Context, out: NoteWriter) -> None:
    """Write ``template`` with its fields filled from ``context`` into ``out``."""
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            out.text(template[i:])
            return
        out.text(template[i:start])
        end = _closing(template, start)
        _field(template[start + 1 : end], context, out)
        i = end + 1


def _field(body: str, context: Context, out: NoteWriter) -> None:
    if body.startswith("@"):
        out.text(context.field_label(context.choose(split_alternatives(body[1:]))))
    elif body.startswith("^"):
        out.text(context.gendered(body[1:]))
    elif body.startswith("#"):
        low, _, high = body[1:].partition("-")
        try:
            out.text(str(context.number(int(low), int(high))))
        except ValueError:
            raise TemplateError(f"{{{body}}}: expected {{#low-high}} with whole numbers") from None
    elif body.startswith("~"):
        render(context.vocab(body[1:]), context, out)
    else:
        alternatives = split_alternatives(body)
        if len(alternatives) > 1:
            render(context.choose(alternatives), context, out)
        else:
            name, _, case = body.partition(":")
            value, label = context.slot(name)
            out.phi(recase(value, case if case != "any" else context.choose(list(CASES))), label)


# ``{slot:case}`` modifiers (``any`` draws one of these); "" writes the value as the cast holds it.
CASES = {"": lambda v: v, "lower": str.lower, "upper": str.upper, "title": lambda v: v.title()}


def recase(value: str, case: str) -> str:
    """``value`` in ``case`` (a key of ``CASES``); a ``TemplateError`` names an unknown one."""
    try:
        return CASES[case](value)
    except KeyError:
        raise TemplateError(f"unknown case {case!r} in a slot field; known: lower, upper, title, any") from None
