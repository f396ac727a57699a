"""i2b2 XML in its two shapes.

* 2014 (``"i2b2"``, also MEDDOCAN): ``<ROOT><TEXT><![CDATA[note]]></TEXT><TAGS><NAME id start end
  text TYPE comment/>...</TAGS></ROOT>``; the tag is the category, ``TYPE`` the fine label.
* 2006 (``"i2b2-2006"``): ``<ROOT><RECORD ID="..."><TEXT>note with <PHI TYPE="...">inline</PHI>
  spans</TEXT></RECORD>...</ROOT>``; one file, many notes. Record ``ID`` in file ``stem.xml`` becomes
  the document name ``f"{stem}-{ID}"`` (``f"{stem}-{n}"``, n counting records from 1, when the ID is
  missing or unfit for a file name); ``meta["file"]`` and ``meta["record"]`` let writers rebuild the file.

Offsets count the characters of the raw note. XML parsers turn ``"\\r\\n"`` and ``"\\r"`` into ``"\\n"``,
even inside CDATA, which would shift every offset after the first line break; the reader drives expat
itself and, for each line break it reports, looks at the raw bytes to restore the carriage return, so
the note comes out exactly as stored. Writers put ``"\\r"`` back verbatim, keeping files byte-true.
"""

from __future__ import annotations

import codecs
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from xml.parsers import expat

from hybriddeid.core.document import Document, Span
from hybriddeid.core.taxonomy import guess_taxonomy
from hybriddeid.io._common import (
    InputError,
    check_text,
    is_safe_name,
    make_document,
    make_span,
    parse_offset,
    read_text,
    safe_id,
)

_DECLARED_ENCODING = re.compile(r"""\s*<\?xml[^>]*?\bencoding\s*=\s*["']([^"']*)["']""")
_UTF8_NAMES = {"utf-8", "utf8", "us-ascii", "ascii"}
_FIRST_ELEMENT = re.compile(r"<(TEXT|RECORD)\b")
_XML_NAME = re.compile(r"[A-Za-z_][\w.-]*")
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ATTR_ESCAPES = {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}
# What XML text needs escaped ("&" first). xml.sax.saxutils.escape does the same, but importing it
# imports urllib.request (about 12 ms of every run's start, issue 45).
_TEXT_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))


def escape(text: str, entities: dict[str, str] | None = None) -> str:
    """``text`` with "&", "<" and ">" escaped for XML, then each key of ``entities`` by its value."""
    for char, entity in _TEXT_ESCAPES:
        text = text.replace(char, entity)
    for char, entity in (entities or {}).items():
        text = text.replace(char, entity)
    return text


_DECLARATION = "<?xml version='1.0' encoding='UTF-8'?>\n"


def sniff_xml(head: str) -> str | None:
    """``"i2b2"`` or ``"i2b2-2006"`` from the first ``<TEXT>`` or ``<RECORD>`` in ``head``, else None."""
    match = _FIRST_ELEMENT.search(head)
    if match is None:
        return None
    return "i2b2" if match.group(1) == "TEXT" else "i2b2-2006"


def parse_xml(path: Path, max_bytes: int, text: str | None = None, encoding: str = "utf-8") -> ET.Element:
    """The root element of an XML file in ``encoding``, its character data holding every ``"\\r"`` of the file.

    ``text``: the file as ``read_text`` gave it, when it was read already (format detection). A file
    declaring another encoding than the one it is read in is refused (name it with ``--encoding``)."""
    text = (read_text(path, max_bytes, encoding=encoding) if text is None else text).removeprefix("\ufeff")
    declared = _DECLARED_ENCODING.match(text)
    if declared and declared.group(1).lower() not in _UTF8_NAMES and _codec(declared.group(1)) != _codec(encoding):
        named = declared.group(1) if _XML_NAME.fullmatch(declared.group(1)[:40]) else "?"
        raise InputError(path, f"declares encoding {named!r} but is read as {encoding}; name it with --encoding")
    raw = text.encode("utf-8")
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate("utf-8")

    def data(chunk: str) -> None:
        # expat reports each line break on its own as "\n"; the raw bytes say whether it was a CR.
        if chunk == "\n":
            at = parser.CurrentByteIndex
            if raw[at : at + 1] == b"\r":
                chunk = "\r\n" if raw[at + 1 : at + 2] == b"\n" else "\r"
        builder.data(chunk)

    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = data
    try:
        parser.Parse(raw, True)
    except expat.ExpatError as exc:
        raise InputError(
            path, f"malformed XML at line {exc.lineno}, column {exc.offset} ({expat.ErrorString(exc.code)})"
        ) from None
    return builder.close()


def _codec(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return name.lower()


def _meta(path: Path, fmt: str, root: ET.Element, **extra: str) -> dict[str, str]:
    return {"path": str(path), "format": fmt, "file": path.stem, "xml_root": root.tag, **extra}


def read_i2b2(
    path: Path, max_bytes: int, text: str | None = None, encoding: str = "utf-8", spans: bool = True
) -> list[Document]:
    """The single note of an i2b2 2014 (or MEDDOCAN) XML file, its ``TAGS`` as gold spans (``spans=False``:
    ``TAGS`` unread)."""
    root = parse_xml(path, max_bytes, text, encoding)
    text_element = root.find("TEXT")
    if text_element is None:
        raise InputError(path, "no <TEXT> element under the root (i2b2 2006 files hold <RECORD>s)")
    if len(text_element):
        raise InputError(path, "<TEXT> holds elements (inline <PHI> markup is the i2b2 2006 format)")
    text = text_element.text or ""
    tags = root.find("TAGS") if spans else None
    found: list[tuple[str, Span]] = []
    for index, tag in enumerate(tags if tags is not None else (), 1):
        sid = safe_id(tag.get("id"), index)
        start, end = parse_offset(path, sid, tag.get("start")), parse_offset(path, sid, tag.get("end"))
        span = make_span(path, sid, start, end, tag.get("TYPE") or tag.tag, len(text))
        check_text(path, sid, start, end, tag.get("text"), text[start:end])
        found.append((sid, span))
    return [make_document(path, path.stem, text, found, _meta(path, "i2b2", root))]


def read_i2b2_2006(
    path: Path, max_bytes: int, text: str | None = None, encoding: str = "utf-8", spans: bool = True
) -> list[Document]:
    """One document per ``<RECORD>``, its inline ``<PHI TYPE>`` elements as gold spans (``spans=False``:
    their text only; the markup must still be well formed)."""
    root = parse_xml(path, max_bytes, text, encoding)
    docs: list[Document] = []
    names: set[str] = set()
    for number, record in enumerate(root, 1):
        where = f"record {number}"
        if record.tag != "RECORD":
            raise InputError(path, f"{where}: expected <RECORD>, found <{record.tag}>")
        text_elements = record.findall("TEXT")
        if len(text_elements) != 1:
            raise InputError(path, f"{where}: expected one <TEXT>, found {len(text_elements)}")
        record_id = record.get("ID") or str(number)
        name = f"{path.stem}-{record_id if is_safe_name(record_id) else number}"
        if name in names:
            raise InputError(path, f"{where}: duplicate record ID")
        names.add(name)
        parts = [text_elements[0].text or ""]
        found: list[tuple[str, Span]] = []
        length = len(parts[0])
        for index, phi in enumerate(text_elements[0], 1):
            if phi.tag != "PHI" or len(phi):
                raise InputError(path, f"{where}: <TEXT> may hold only flat <PHI> elements (element {index})")
            end = length + len(phi.text or "")
            sid = f"{index} of {where}"
            if spans:
                found.append((sid, make_span(path, sid, length, end, phi.get("TYPE"), end)))
            parts += [phi.text or "", phi.tail or ""]
            length = end + len(phi.tail or "")
        docs.append(make_document(path, name, "".join(parts), found, _meta(path, "i2b2-2006", root, record=record_id)))
    if not docs:
        raise InputError(path, "no <RECORD> elements under the root")
    return docs


def _xml_name(doc: Document, name: str) -> str:
    if not _XML_NAME.fullmatch(name):
        raise ValueError(f"{doc.name}: {name!r} cannot be an XML tag name")
    return name


def _check_chars(doc: Document) -> None:
    bad = _NOT_XML_CHAR.search(doc.text)
    if bad:
        raise ValueError(
            f"{doc.name}: character U+{ord(bad.group()):04X} at offset {bad.start()} cannot be written to XML"
        )
    for span in doc.spans:
        if _NOT_XML_CHAR.search(span.label):
            raise ValueError(f"{doc.name}: label {span.label!r} cannot be written to XML")


def _attr(value: str) -> str:
    return '"' + escape(value, _ATTR_ESCAPES) + '"'


def render_i2b2(docs: Sequence[Document]) -> dict[str, str]:
    """An i2b2 2014 file for one document; tag names are the categories of the best-fitting taxonomy."""
    (doc,) = docs
    _check_chars(doc)
    root = _xml_name(doc, str(doc.meta.get("xml_root") or "deIdi2b2"))
    taxonomy = guess_taxonomy(span.label for span in doc.spans)
    tags = "".join(
        f'    <{_xml_name(doc, taxonomy.category(span.label))} id="T{number}" start="{span.start}" '
        f'end="{span.end}" text={_attr(doc.span_text(span))} TYPE={_attr(span.label)} comment=""/>\n'
        for number, span in enumerate(doc.spans, 1)
    )
    cdata = doc.text.replace("]]>", "]]]]><![CDATA[>")  # "]]>" cannot sit inside one CDATA section
    body = f"  <TEXT><![CDATA[{cdata}]]></TEXT>\n  <TAGS>\n{tags}  </TAGS>\n"
    return {".xml": f"{_DECLARATION}<{root}>\n{body}</{root}>\n"}


def render_i2b2_2006(docs: Sequence[Document]) -> dict[str, str]:
    """An i2b2 2006 file holding ``docs`` as records, in order, spans written inline."""
    root = _xml_name(docs[0], str(docs[0].meta.get("xml_root") or "ROOT"))
    records, ids = [], set()
    for doc in docs:
        _check_chars(doc)
        record_id = str(doc.meta.get("record", doc.name))
        if record_id in ids:
            raise ValueError(f"{doc.name}: record ID {record_id!r} is used twice in one file")
        ids.add(record_id)
        pieces, cursor = [], 0
        for span in doc.spans:
            if span.start < cursor:
                raise ValueError(f"{doc.name}: overlapping spans cannot be written inline ([{span.start}, {span.end}))")
            pieces += [
                escape(doc.text[cursor : span.start]),
                f"<PHI TYPE={_attr(span.label)}>",
                escape(doc.span_text(span)),
                "</PHI>",
            ]
            cursor = span.end
        pieces.append(escape(doc.text[cursor:]))
        records.append(f"<RECORD ID={_attr(record_id)}>\n<TEXT>{''.join(pieces)}</TEXT>\n</RECORD>\n")
    return {".xml": f"{_DECLARATION}<{root}>\n{''.join(records)}</{root}>\n"}
