"""FHIR R4 DocumentReference and DiagnosticReport resources: a Bundle (``.json``) or Bulk Data NDJSON
(``.ndjson``, one resource a line) read as notes, and written back as the same resources.

Each resource gives several documents, all named ``{resourceType}-{id}`` plus a part:

* ``.content{i}`` / ``.presentedForm{i}``: an attachment's inline ``data`` (base64; ``text/plain``,
  or ``text/html`` read as its text, tags left out and block tags as line breaks);
* ``.content{i}.title`` / ``.presentedForm{i}.title``, ``.description``, ``.conclusion``: free-text
  strings;
* ``.text``: the narrative (``text.div``, XHTML, read as HTML is);
* ``.elements``: the PHI-bearing elements of the resource itself (subject, author and performer
  displays, identifiers, dates; ``ELEMENTS``), one value a line, each with its own span labelled as
  the i2b2 2014 taxonomy does (a date's span is its date part: a time of day stays). Its spans are
  given, not found: runs replace them with the same surrogates and date shift as the patient's text.

Every resource is validated with the ``fhir.resources`` models (R4B, whose DocumentReference and
DiagnosticReport are R4's; ``pip install 'hybriddeid[fhir]'``) when read and again when written. A
resource that cannot be de-identified (invalid, of another type, a non-text attachment, contained
resources) is left out and recorded in the file's first ``.elements`` document
(``FhirPart.rejected``), by its place in the file and its type and id, never its content; the rest
of the file goes on. Writing (``render_fhir``) puts each part's text back: attachments re-encoded in
UTF-8 with ``size`` and ``hash`` (base64 SHA-1) recomputed, HTML and narratives with the markup kept
and the replacements escaped into its text (HTML comments are dropped: they are text no reader sees),
and ``meta.security`` labelled (``SECURITY_LABELS``). A date element whose replacement is no FHIR
date (a tag, a mask, an aggregated year) is left out with a data-absent-reason extension.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import html
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hybriddeid.core.document import Document, Span
from hybriddeid.io._common import InputError, read_text

FHIR_FORMAT = "fhir"
FHIR_SUFFIXES = (".json", ".ndjson")
SUPPORTED_TYPES = ("DocumentReference", "DiagnosticReport")
ELEMENTS_PART = "elements"
# meta.security of a written resource, by de-identification mode (HL7 v3 ObservationValue: the
# alteration integrity codes for pseudonymized, masked and redacted data).
SECURITY_SYSTEM = "http://terminology.hl7.org/CodeSystem/v3-ObservationValue"
SECURITY_LABELS = {
    "surrogate": ("PSEUDED", "pseudonymized"),
    "mask": ("MASKED", "masked"),
    "tag": ("REDACTED", "redacted"),
}
DATA_ABSENT_REASON = "http://hl7.org/fhir/StructureDefinition/data-absent-reason"
TEXT_TYPES = ("text/plain", "text/html")
INSTALL_HINT = "reading FHIR needs the fhir.resources models: pip install 'hybriddeid[fhir]'"

# The PHI-bearing elements of each type: (path, label). "*" stands for every item of a list.
_COMMON: tuple[tuple[tuple[str, ...], str], ...] = (
    (("meta", "lastUpdated"), "DATE"),
    (("subject", "display"), "PATIENT"),
    (("subject", "identifier", "value"), "MEDICALRECORD"),
    (("identifier", "*", "value"), "IDNUM"),
)
ELEMENTS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "DocumentReference": _COMMON
    + (
        (("masterIdentifier", "value"), "IDNUM"),
        (("date",), "DATE"),
        (("author", "*", "display"), "DOCTOR"),
        (("authenticator", "display"), "DOCTOR"),
        (("custodian", "display"), "HOSPITAL"),
        (("context", "period", "start"), "DATE"),
        (("context", "period", "end"), "DATE"),
        (("content", "*", "attachment", "creation"), "DATE"),
    ),
    "DiagnosticReport": _COMMON
    + (
        (("effectiveDateTime",), "DATE"),
        (("effectivePeriod", "start"), "DATE"),
        (("effectivePeriod", "end"), "DATE"),
        (("issued",), "DATE"),
        (("performer", "*", "display"), "DOCTOR"),
        (("resultsInterpreter", "*", "display"), "DOCTOR"),
        (("presentedForm", "*", "creation"), "DATE"),
    ),
}
# Free-text strings read as notes, and where the attachments are.
_STRINGS = {"DocumentReference": ("description",), "DiagnosticReport": ("conclusion",)}
_ATTACHMENTS = {"DocumentReference": ("content", "*", "attachment"), "DiagnosticReport": ("presentedForm", "*")}

_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")
_DATE_PART = re.compile(r"\d{4}(?:-\d{2}(?:-\d{2})?)?")
# FHIR's date, dateTime and instant forms (the instant's is the dateTime's with every part).
_FHIR_DATE = re.compile(
    r"([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)(-(0[1-9]|1[0-2])(-(0[1-9]|[1-2][0-9]|3[0-1])"
    r"(T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?(Z|(\+|-)((0[0-9]|1[0-3]):[0-5][0-9]"
    r"|14:00)))?)?)?"
)
Path_ = tuple[Any, ...]  # a concrete path into a resource: keys and list indices


@dataclass(frozen=True)
class FhirPart:
    """Where a document's text lives in its resource, and what writing it back needs.

    ``index``: the resource's place among the file's resources; ``kind``: "plain", "html" (an
    attachment), "narrative", "string" or "elements"; ``path``: the element (for attachments, the
    Attachment). ``source``: the markup an HTML text was read from. ``patient``: the resource's subject
    (its reference), else the resource's own name; ``suffix``: its file's. An ``elements`` part also
    holds the resource as read (``resource``), the file's Bundle without its entries (``shell``; None
    for NDJSON), the resource's Bundle entry without it (``entry``: fullUrl, request), each element's
    path and offsets in the text (``elements``) and, in the file's first one, the resources left out
    (``rejected``: (where, type/id, problem))."""

    index: int
    kind: str
    path: Path_ = ()
    source: str | None = None
    resource: dict | None = field(default=None, repr=False)
    shell: dict | None = field(default=None, repr=False)
    entry: dict | None = field(default=None, repr=False)
    patient: str = ""
    suffix: str = ".ndjson"
    elements: tuple[tuple[Path_, int, int, bool], ...] = ()
    rejected: tuple[tuple[str, str, str], ...] = ()


def part_of(doc: Document) -> FhirPart:
    """The ``FhirPart`` of a document read by ``read_fhir``."""
    part = doc.meta.get("fhir")
    if not isinstance(part, FhirPart):
        raise ValueError(f"{doc.name}: not a document read from a FHIR resource")
    return part


def is_elements(doc: Document) -> bool:
    """Whether ``doc`` holds a resource's own PHI-bearing elements (spans given, not found)."""
    part = doc.meta.get("fhir")
    return isinstance(part, FhirPart) and part.kind == ELEMENTS_PART


# -- validation --------------------------------------------------------------------------------------


@cache
def _model(resource_type: str) -> Any:
    try:
        from fhir.resources.R4B import get_fhir_model_class
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return get_fhir_model_class(resource_type)


def require_models() -> None:
    """Raise ``ImportError`` (with the install command) unless the FHIR models can be loaded."""
    _model("DocumentReference")


def validation_problem(resource: dict) -> str | None:
    """Why ``resource`` is no valid FHIR resource of a supported type, in words that name elements and
    error types only (never a value); None when it is valid."""
    resource_type = resource.get("resourceType")
    if resource_type not in SUPPORTED_TYPES:
        return (
            f"resource type {resource_type!r} is not de-identified here (only {', '.join(SUPPORTED_TYPES)}); left out"
            if isinstance(resource_type, str) and _ID.fullmatch(resource_type)
            else "no resourceType"
        )
    from pydantic import ValidationError

    try:
        _model(resource_type).model_validate(resource)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        shown = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'resource'}: {error['type']}" for error in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        return f"not a valid {resource_type}: {shown}{more}"
    return None


# -- reading -----------------------------------------------------------------------------------------


def read_fhir(path: Path, max_bytes: int, encoding: str = "utf-8", spans: bool = True) -> list[Document]:
    """The documents of every resource in a Bundle or NDJSON file (see the module's docstring)."""
    path = Path(path)
    shell, entries = _resources(path, read_text(path, max_bytes, encoding=encoding).removeprefix("\ufeff"))
    docs: list[Document] = []
    rejected: list[tuple[str, str, str]] = []
    names: set[str] = set()
    for index, (where, resource, entry) in enumerate(entries):
        label = _label(resource)
        try:
            resource_docs = _documents(path, index, resource, shell, entry)
        except InputError as exc:
            rejected.append((where, label, exc.problem))
            continue
        if resource_docs[0].name in names:
            rejected.append((where, label, "the same resource is given twice in this file"))
            continue
        names.update(doc.name for doc in resource_docs)
        docs += resource_docs
    if not docs:
        first = f"; {rejected[0][0]} ({rejected[0][1]}): {rejected[0][2]}" if rejected else ""
        raise InputError(path, f"no resource to de-identify ({len(rejected)} left out{first})")
    if rejected:
        head = next(doc for doc in docs if is_elements(doc))  # the first resource's
        part = part_of(head)
        docs[docs.index(head)] = Document(
            head.name, head.text, head.spans, {**head.meta, "fhir": _replace(part, rejected=tuple(rejected))}
        )
    return docs


def _replace(part: FhirPart, **changes: Any) -> FhirPart:
    from dataclasses import replace

    return replace(part, **changes)


def _label(resource: Any) -> str:
    """``Type/id`` of a resource for messages, with whatever parts are usable."""
    if not isinstance(resource, dict):
        return "not a resource"
    rtype, rid = resource.get("resourceType"), resource.get("id")
    rtype = rtype if isinstance(rtype, str) and _ID.fullmatch(rtype) else "?"
    return f"{rtype}/{rid}" if isinstance(rid, str) and _ID.fullmatch(rid) else f"{rtype} without a usable id"


def _resources(path: Path, text: str) -> tuple[dict | None, list[tuple[str, Any, dict | None]]]:
    """(the Bundle without its entries or None, [(where, resource, its Bundle entry without it or None)])
    of a Bundle, one resource, or NDJSON."""
    stripped = text.strip()
    if path.suffix.lower() != ".ndjson":
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})") from None
        if not isinstance(whole, dict):
            raise InputError(path, "not a FHIR resource (a JSON object)")
        if whole.get("resourceType") != "Bundle":
            return None, [("resource", whole, None)]
        entries = whole.get("entry", [])
        if not isinstance(entries, list):
            raise InputError(path, "Bundle.entry is not a list")
        # what the Bundle says beside its entries; search links and totals would tell what was left out
        shell = {key: value for key, value in whole.items() if key not in ("entry", "link", "total")}
        found: list[tuple[str, Any, dict | None]] = []
        for number, entry in enumerate(entries, 1):
            resource = entry.get("resource") if isinstance(entry, dict) else None
            # the entry's other fields (fullUrl, request, search) go back beside the resource
            rest = {key: value for key, value in entry.items() if key != "resource"} if isinstance(entry, dict) else {}
            found.append((f"entry {number}", resource, rest))
        return shell, found
    found = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            found.append((f"line {lineno}", json.loads(line), None))
        except json.JSONDecodeError as exc:
            found.append((f"line {lineno}", InputError(path, f"invalid JSON at column {exc.colno} ({exc.msg})"), None))
    return None, found


def _documents(path: Path, index: int, resource: Any, shell: dict | None, entry: dict | None) -> list[Document]:
    """The documents of one resource, or an ``InputError`` saying why it cannot be de-identified."""
    if isinstance(resource, InputError):
        raise resource
    if not isinstance(resource, dict):
        raise InputError(path, "not a FHIR resource (a JSON object)")
    problem = validation_problem(resource)
    if problem is not None:
        raise InputError(path, problem)
    if resource.get("contained"):
        raise InputError(path, "holds contained resources, which are not de-identified; left out")
    rtype, rid = resource["resourceType"], resource.get("id")
    base = f"{rtype}-{rid}" if isinstance(rid, str) else f"{rtype}-{path.stem}-{index + 1}"
    meta = {"path": str(path), "format": FHIR_FORMAT, "file": path.stem}
    subject = resource.get("subject")
    patient = subject.get("reference") if isinstance(subject, dict) else None
    patient = patient if isinstance(patient, str) and patient else base
    docs = []

    def add(part_name: str, text: str, part: FhirPart) -> None:
        located = _replace(part, patient=patient, suffix=path.suffix.lower())
        docs.append(Document(f"{base}.{part_name}", text, (), {**meta, "fhir": located}))

    for where, attachment in _walk(resource, _ATTACHMENTS[rtype]):
        name = f"{where[0]}{where[1]}"  # content0, presentedForm2
        if isinstance(attachment.get("title"), str):
            add(f"{name}.title", attachment["title"], FhirPart(index, "string", (*where, "title")))
        if "data" not in attachment:
            continue  # a url, or nothing: no text here to de-identify
        kind, text = _attachment_text(path, name, attachment)
        if kind == "plain":
            add(name, text, FhirPart(index, kind, where))
        else:
            add(name, html_text(text), FhirPart(index, kind, where, source=text))
    for key in _STRINGS[rtype]:
        if isinstance(resource.get(key), str):
            add(key, resource[key], FhirPart(index, "string", (key,)))
    narrative = resource.get("text")
    if isinstance(narrative, dict) and isinstance(narrative.get("div"), str):
        add("text", html_text(narrative["div"]), FhirPart(index, "narrative", ("text", "div"), narrative["div"]))
    text, spans, elements = _elements(resource)
    part = FhirPart(
        index,
        ELEMENTS_PART,
        resource=resource,
        shell=shell,
        entry=entry,
        patient=patient,
        suffix=path.suffix.lower(),
        elements=elements,
    )
    docs.insert(0, Document(f"{base}.{ELEMENTS_PART}", text, spans, {**meta, "fhir": part}))
    return docs


def _walk(node: Any, pattern: tuple[str, ...], where: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """(concrete path, value) of every element ``pattern`` reaches in ``node`` ("*": each list item)."""
    if not pattern:
        yield where, node
        return
    step, rest = pattern[0], pattern[1:]
    if step == "*":
        if isinstance(node, list):
            for number, item in enumerate(node):
                yield from _walk(item, rest, (*where, number))
    elif isinstance(node, dict) and step in node:
        yield from _walk(node[step], rest, (*where, step))


def _attachment_text(path: Path, name: str, attachment: dict) -> tuple[str, str]:
    """("plain" or "html", the decoded text) of an attachment with inline data."""
    media, charset = _content_type(attachment.get("contentType"))
    if media not in TEXT_TYPES:
        raise InputError(
            path,
            f"{name}: {media or 'no contentType'} cannot be de-identified (only {', '.join(TEXT_TYPES)}); left out",
        )
    try:
        data = base64.b64decode(attachment["data"], validate=True)
        text = data.decode(charset or "utf-8")
    except (ValueError, LookupError, TypeError):
        raise InputError(path, f"{name}: data is not base64 text in {charset or 'utf-8'}") from None
    if "\x00" in text:
        raise InputError(path, f"{name}: data holds a NUL byte (binary)")
    return ("plain" if media == "text/plain" else "html"), text


def _content_type(value: Any) -> tuple[str, str | None]:
    """(media type, charset or None) of a contentType."""
    if not isinstance(value, str):
        return "", None
    media, *params = (piece.strip() for piece in value.split(";"))
    charset = next((p.split("=", 1)[1].strip().strip('"') for p in params if p.lower().startswith("charset=")), None)
    return media.lower(), charset


def _elements(resource: dict) -> tuple[str, tuple[Span, ...], tuple[tuple[Path_, int, int, bool], ...]]:
    """The elements text (one value a line), its spans and each element's (path, start, end, is a date)."""
    pieces, spans, elements, cursor = [], [], [], 0
    for pattern, label in ELEMENTS[resource["resourceType"]]:
        for where, value in _walk(resource, pattern):
            if not isinstance(value, str) or not value.strip():
                continue
            is_date = label == "DATE"
            date_part = _DATE_PART.match(value) if is_date else None
            end = cursor + (date_part.end() if date_part else len(value))
            spans.append(Span(cursor, end, label))
            elements.append((where, cursor, cursor + len(value), is_date))
            pieces.append(value + "\n")
            cursor += len(value) + 1
    return "".join(pieces), tuple(spans), tuple(elements)


# -- HTML as text ------------------------------------------------------------------------------------
# Markup is left out of the text; block-level tags (and <br>) stand as one line break; entities are
# read as the character they write. Each text character keeps where it came from, so replacements go
# back into the markup.

_MARKUP = re.compile(
    r"<!--.*?(?:-->|$)|<(script|style)\b.*?(?:</\1\s*>|$)|<!\[CDATA\[.*?(?:\]\]>|$)"
    r"|</?[A-Za-z][^>]*>|<[!?][^>]*>",
    re.S | re.I,
)
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_BLOCK = frozenset(
    "address article aside blockquote br dd div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 "
    "header hr li main nav ol p pre section table tbody td tfoot th thead tr ul".split()
)
_TAG_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)")


@dataclass(frozen=True)
class _Piece:
    """A stretch of the text: ``text[start:end]`` comes from ``source[src_start:src_end]``; ``kind`` is
    "raw" (character for character), "entity" (one character from an entity) or "break" (a line break
    standing for a tag; no source of its own)."""

    start: int
    end: int
    src_start: int
    src_end: int
    kind: str


def _html_pieces(source: str) -> tuple[str, list[_Piece], list[tuple[int, int]]]:
    """(text, its pieces, the comments' source ranges) of HTML ``source``."""
    out: list[str] = []
    pieces: list[_Piece] = []
    comments: list[tuple[int, int]] = []
    length = 0

    def text_run(a: int, b: int) -> None:
        nonlocal length
        cursor = a
        for match in _ENTITY.finditer(source, a, b):
            if match.start() > cursor:
                chunk = source[cursor : match.start()]
                pieces.append(_Piece(length, length + len(chunk), cursor, match.start(), "raw"))
                out.append(chunk)
                length += len(chunk)
            char = html.unescape(match.group())
            if len(char) == 1 and char != match.group():
                pieces.append(_Piece(length, length + 1, match.start(), match.end(), "entity"))
                out.append(char)
                length += 1
            else:  # an unknown entity: its characters as they stand
                pieces.append(_Piece(length, length + len(match.group()), match.start(), match.end(), "raw"))
                out.append(match.group())
                length += len(match.group())
            cursor = match.end()
        if b > cursor:
            pieces.append(_Piece(length, length + b - cursor, cursor, b, "raw"))
            out.append(source[cursor:b])
            length += b - cursor

    cursor = 0
    for match in _MARKUP.finditer(source):
        text_run(cursor, match.start())
        cursor = match.end()
        tag = match.group()
        if tag.startswith("<!--"):
            comments.append((match.start(), match.end()))
            continue
        name = _TAG_NAME.match(tag)
        if name is not None and name.group(1).lower() in _BLOCK and not (out and out[-1].endswith("\n")):
            pieces.append(_Piece(length, length + 1, match.start(), match.start(), "break"))
            out.append("\n")
            length += 1
    text_run(cursor, len(source))
    return "".join(out), pieces, comments


def html_text(source: str) -> str:
    """The text HTML (or an XHTML narrative) shows, as de-identification reads it."""
    return _html_pieces(source)[0]


def html_with_edits(source: str, edits: Sequence[tuple[int, int, str]]) -> str:
    """``source`` with each (start, end, replacement) of its text (``html_text`` offsets) replaced in
    its markup: the replacement, escaped, where the stretch's first character came from, and the rest
    of the stretch's characters removed (tags inside it stay). Comments are removed."""
    text, pieces, comments = _html_pieces(source)
    changes: list[tuple[int, int, str]] = [(a, b, "") for a, b in comments]
    for start, end, new in edits:
        covered = []
        for piece in pieces:
            if piece.end <= start or piece.start >= end or piece.kind == "break":
                continue
            if piece.kind == "entity":
                covered.append((piece.src_start, piece.src_end))
            else:
                covered.append(
                    (
                        piece.src_start + max(start, piece.start) - piece.start,
                        piece.src_start + min(end, piece.end) - piece.start,
                    )
                )
        if not covered:  # only line breaks that stand for tags: the replacement goes before the next text
            nxt = next((p.src_start for p in pieces if p.start >= end and p.kind != "break"), len(source))
            covered = [(nxt, nxt)]
        changes.append((*covered[0], html.escape(new, quote=False)))
        changes += [(a, b, "") for a, b in covered[1:]]
    out, cursor = [], 0
    for a, b, new in sorted(changes, key=lambda change: (change[0], change[1])):
        out += [source[cursor:a], new]
        cursor = max(cursor, b)
    out.append(source[cursor:])
    return "".join(out)


# -- writing -----------------------------------------------------------------------------------------


def with_output(doc: Document, edits: Sequence[tuple[int, int, str]], mode: str) -> Document:
    """``doc`` (de-identified) carrying what ``render_fhir`` needs to write its resource: the
    replacements made in its input text (``edits``: input offsets) and the de-identification ``mode``."""
    return Document(doc.name, doc.text, doc.spans, {**doc.meta, "fhir_output": {"edits": list(edits), "mode": mode}})


def render_fhir(docs: Sequence[Document]) -> dict[str, str]:
    """The file holding the resources of ``docs`` (documents read by ``read_fhir`` from one file and
    de-identified, each with ``with_output``), as it was: a Bundle or NDJSON."""
    by_resource: dict[int, list[Document]] = {}
    suffixes, paths = set(), set()
    for doc in docs:
        by_resource.setdefault(part_of(doc).index, []).append(doc)
        paths.add(doc.meta.get("path"))
    if len(paths) > 1:
        raise ValueError("documents of several input files would be written into one file; name the files apart")
    resources, shell, entries = [], None, []
    for index in sorted(by_resource):
        group = by_resource[index]
        elements = next((doc for doc in group if is_elements(doc)), None)
        if elements is None:
            raise ValueError(f"{group[0].name}: the resource's elements document is missing")
        part = part_of(elements)
        suffixes.add(part.suffix)
        shell = part.shell
        resources.append(_rendered(part, group))
        entries.append(part.entry or {})
    (suffix,) = suffixes or {".ndjson"}
    if suffix == ".ndjson":
        return {suffix: "".join(json.dumps(resource, ensure_ascii=False) + "\n" for resource in resources)}
    if shell is None:
        (resource,) = resources
        return {suffix: json.dumps(resource, ensure_ascii=False, indent=2) + "\n"}
    bundle = {**shell, "entry": [{**entry, "resource": resource} for entry, resource in zip(entries, resources)]}
    return {suffix: json.dumps(bundle, ensure_ascii=False, indent=2) + "\n"}


def _rendered(part: FhirPart, group: Sequence[Document]) -> dict:
    """One resource with its documents' de-identified texts in place, validated."""
    assert part.resource is not None
    resource = copy.deepcopy(part.resource)
    mode = None
    for doc in group:
        output = doc.meta.get("fhir_output") or {}
        mode = output.get("mode", mode)
        edits = [tuple(edit) for edit in output.get("edits", ())]
        this = part_of(doc)
        if this.kind == ELEMENTS_PART:
            _put_elements(resource, this, doc, edits)
        elif this.kind == "plain":
            _put_attachment(_get(resource, this.path), doc.text, "text/plain")
        elif this.kind == "html":
            _put_attachment(_get(resource, this.path), html_with_edits(this.source or "", edits), "text/html")
        elif this.kind == "narrative":
            _get(resource, ("text",))["div"] = html_with_edits(this.source or "", edits)
        else:
            _set(resource, this.path, doc.text)
    if mode is not None:
        code, display = SECURITY_LABELS[mode]
        meta = resource.setdefault("meta", {})
        labels = meta.setdefault("security", [])
        if not any(label.get("system") == SECURITY_SYSTEM and label.get("code") == code for label in labels):
            labels.append({"system": SECURITY_SYSTEM, "code": code, "display": display})
    problem = validation_problem(resource)
    if problem is not None:
        raise ValueError(f"{group[0].name}: the de-identified resource is {problem.removeprefix('not ')}")
    return resource


def _put_attachment(attachment: dict, text: str, media: str) -> None:
    data = text.encode("utf-8")
    _, charset = _content_type(attachment.get("contentType"))
    if charset is not None:
        attachment["contentType"] = f"{media}; charset=utf-8"
    attachment["data"] = base64.b64encode(data).decode("ascii")
    attachment["size"] = len(data)
    attachment["hash"] = base64.b64encode(hashlib.sha1(data).digest()).decode("ascii")


def _put_elements(resource: dict, part: FhirPart, doc: Document, edits: Sequence[tuple[int, int, str]]) -> None:
    """Each element's value with the edits inside it applied; a date that is no longer one is left out."""
    original = part_of(doc)
    for where, start, end, is_date in original.elements:
        inside = [(a - start, b - start, new) for a, b, new in edits if start <= a and b <= end]
        value = _get(resource, where)
        for a, b, new in sorted(inside, reverse=True):
            value = value[:a] + new + value[b:]
        if is_date and not _FHIR_DATE.fullmatch(value):
            parent = _get(resource, where[:-1])
            del parent[where[-1]]
            parent[f"_{where[-1]}"] = {"extension": [{"url": DATA_ABSENT_REASON, "valueCode": "masked"}]}
        else:
            _set(resource, where, value)


def _get(node: Any, where: Path_) -> Any:
    for step in where:
        node = node[step]
    return node


def _set(node: Any, where: Path_, value: Any) -> None:
    _get(node, where[:-1])[where[-1]] = value
