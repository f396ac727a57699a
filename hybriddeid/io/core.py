"""Format detection, the format registry, and the public read/write functions.

A folder is read non-recursively. Suffixes are matched whatever their case (``NOTE.TXT``); every
entry a run does not take (another or no extension, a name starting with "." or ending with "~",
a sub-folder) is listed with the reason in ``Inputs.left_out``, so that a run can count and name it.
Each format is a reader (file -> documents) and a renderer (documents -> file contents by
extension), so adding one is one registry entry.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hybriddeid.core.document import Document
from hybriddeid.io._common import (
    DEFAULT_MAX_BYTES,
    LOG,
    InputError,
    atomic_write_text,
    fit_file_name,
    name_problem,
    read_regular_file,
    read_text,
    refuse_own_input,
)
from hybriddeid.io.brat import read_brat, render_brat
from hybriddeid.io.fhir import FHIR_FORMAT, FHIR_SUFFIXES, FhirPart, read_fhir, render_fhir
from hybriddeid.io.i2b2 import read_i2b2, read_i2b2_2006, render_i2b2, render_i2b2_2006, sniff_xml
from hybriddeid.io.jsonl import read_jsonl, render_jsonl

FORMATS = ("text", "brat", "i2b2", "i2b2-2006", "jsonl")
INPUT_FORMATS = ("auto", *FORMATS)  # what a reader may be asked for: "auto" detects it
ANNOTATION_FORMATS = ("brat", "i2b2", "jsonl")  # hold any note's spans, whatever it was read from
# Tables of notes (a note id and a text column) as Spark reads and writes them
# (hybriddeid.integrations.spark): Parquet, JSON Lines, or notes as .txt files / text records.
TABLE_FORMATS = ("parquet", "json", "text")
_TABLE_SUFFIXES = (("parquet", (".parquet",)), ("json", (".json", ".jsonl")), ("text", (".txt",)))
_SNIFF_BYTES = 65_536


def _read_plain(path: Path, max_bytes: int, encoding: str = "utf-8", spans: bool = True) -> list[Document]:
    text = read_text(path, max_bytes, encoding=encoding)
    return [Document(path.stem, text, (), {"path": str(path), "format": "text", "file": path.stem})]


def _render_plain(docs: Sequence[Document]) -> dict[str, str]:
    (doc,) = docs
    return {".txt": doc.text}


def _sibling(path: Path, suffix: str) -> Path:
    """``path`` with ``suffix``, or the file beside it whose suffix is ``suffix`` in another case
    (``NOTE.TXT`` beside ``NOTE.ANN``); the first when there is none."""
    wanted = path.with_suffix(suffix)
    if wanted.exists():
        return wanted
    try:
        return next(p for p in path.parent.iterdir() if p.stem == path.stem and p.suffix.lower() == suffix)
    except (OSError, StopIteration):
        return wanted


def _read_brat_pair(path: Path, max_bytes: int, encoding: str = "utf-8", spans: bool = True) -> list[Document]:
    txt, ann = _sibling(path, ".txt"), _sibling(path, ".ann")
    for missing, present in ((txt, ann), (ann, txt)) if spans else ((txt, ann),):
        if not missing.exists():
            raise InputError(present, f"no {missing.suffix} file beside it")
    return [read_brat(txt, ann, max_bytes, encoding=encoding, spans=spans)]


@dataclass(frozen=True)
class _Format:
    suffix: str  # the file readers take and write_document returns
    read: Callable[..., list[Document]]  # (path, max_bytes, encoding=, spans=); XML readers also take text=
    render: Callable[[Sequence[Document]], dict[str, str]]  # extension -> content of one output
    multi: bool = False  # one file may hold several documents
    reads: tuple[str, ...] = ()  # the input suffixes when they are more than ``suffix``
    out_suffix: Callable[[Document], str] | None = None  # a document's output suffix, when it is its input's


def _fhir_suffix(doc: Document) -> str:
    part = doc.meta.get("fhir")
    return part.suffix if isinstance(part, FhirPart) else ".ndjson"


_REGISTRY = {
    "text": _Format(".txt", _read_plain, _render_plain),
    "brat": _Format(".ann", _read_brat_pair, render_brat),
    "i2b2": _Format(".xml", read_i2b2, render_i2b2),
    "i2b2-2006": _Format(".xml", read_i2b2_2006, render_i2b2_2006, multi=True),
    "jsonl": _Format(".jsonl", read_jsonl, render_jsonl, multi=True),
    # Not in FORMATS: only ``deid --input-format fhir`` reads and writes it (hybriddeid.runs.fhir).
    FHIR_FORMAT: _Format(".ndjson", read_fhir, render_fhir, multi=True, reads=FHIR_SUFFIXES, out_suffix=_fhir_suffix),
}


def detect_table_format(path: str) -> str:
    """One of ``TABLE_FORMATS`` from the file names at a local path (a folder is searched through);
    other locations (``hdfs://``...) must say which. A ValueError when it cannot be told."""
    local = Path(path[len("file://") :] if path.startswith("file://") else path)
    if "://" in path and not path.startswith("file://") or not local.exists():
        raise ValueError(
            f"{path}: cannot detect the input format here; give --input-format "
            f"{', '.join(TABLE_FORMATS[:-1])} or {TABLE_FORMATS[-1]}"
        )
    files = (
        [local]
        if local.is_file()
        else [p for p in local.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    )
    suffixes = {p.suffix.lower() for p in files}
    for fmt, known in _TABLE_SUFFIXES:
        if suffixes.intersection(known):
            return fmt
    names = [suffix for _, known in _TABLE_SUFFIXES for suffix in known]
    raise ValueError(f"{path}: no {', '.join(names[:-1])} or {names[-1]} files; give --input-format")


def _format(fmt: str) -> _Format:
    if fmt not in _REGISTRY:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return _REGISTRY[fmt]


def _detect_file(path: Path) -> str:
    """The format of one file, from its extension (in any case) and, for XML, its first elements."""
    suffix = path.suffix.lower()
    if suffix == ".ann" or (suffix == ".txt" and _sibling(path, ".ann").is_file()):
        return "brat"
    if suffix in (".txt", ".jsonl"):
        return "text" if suffix == ".txt" else "jsonl"
    if suffix != ".xml":
        raise InputError(path, "unknown file type (expected .txt, .ann, .xml or .jsonl)")
    head = read_regular_file(path)[:_SNIFF_BYTES].decode("utf-8", errors="replace")  # never blocks on a FIFO
    fmt = sniff_xml(head)
    if fmt is None:
        raise InputError(path, "neither i2b2 2014 (<TEXT>, <TAGS>) nor i2b2 2006 (<RECORD>) XML")
    return fmt


def _detect_xml_reading(path: Path, max_bytes: int, read_ahead: dict[Path, str], encoding: str = "utf-8") -> str:
    """The XML format of ``path`` as ``_detect_file`` tells it, from a full reading of the file that is
    kept in ``read_ahead`` for its reader, so that the file is read once. A file that cannot be read
    as a note is sniffed from its head as ``_detect_file`` does (its reader reports the problem)."""
    try:
        text = read_text(path, max_bytes, encoding=encoding)
    except InputError:
        return _detect_file(path)
    head = text[:_SNIFF_BYTES].encode("utf-8")[:_SNIFF_BYTES].decode("utf-8", errors="replace")
    fmt = sniff_xml(head)
    if fmt is None:
        raise InputError(path, "neither i2b2 2014 (<TEXT>, <TAGS>) nor i2b2 2006 (<RECORD>) XML")
    read_ahead[path.absolute()] = text
    return fmt


def _listing(in_dir: Path, recursive: bool = False) -> list[Path]:
    """Every entry of ``in_dir`` a run may take: all but hidden ones and backups (``_left_out``); folders,
    FIFOs and links are kept so that a reader can report them (``read_regular_file``, ``check_link``),
    except, when ``recursive``, the sub-folders read as folders of their own (``input_folders``)."""
    if not in_dir.is_dir():
        raise InputError(in_dir, "not a folder" if in_dir.exists() else "does not exist")
    return sorted(p for p in in_dir.iterdir() if _hidden_or_backup(p) is None and not (recursive and _is_folder(p)))


def _is_folder(path: Path) -> bool:
    """A folder itself, not a link to one (a recursive run never follows those: a link could loop)."""
    return path.is_dir() and not path.is_symlink()


def input_folders(in_dir: Path) -> list[Path]:
    """``in_dir`` and every folder below it that a ``--recursive`` run reads, relative to it (``Path(".")``
    first, then in sorted order): all but hidden folders, backups and links to folders, which the
    folder holding them lists as not taken."""
    found, pending = [], [Path(".")]
    while pending:
        rel = pending.pop()
        found.append(rel)
        below = _listing(in_dir / rel)
        pending.extend(sorted((rel / p.name for p in below if _is_folder(p)), reverse=True))
    return found


def _hidden_or_backup(path: Path) -> str | None:
    """Why ``path`` is never an input (a hidden file or folder, an editor's backup), or None."""
    if path.name.startswith("."):
        return "hidden (its name starts with '.')"
    if path.name.endswith("~"):
        return "a backup file (its name ends with '~')"
    return None


def _left_out(in_dir: Path, taken: Sequence[Path], fmt: str, recursive: bool = False) -> list[tuple[Path, str]]:
    """Every entry of ``in_dir`` that is not among ``taken`` (the inputs of a run in ``fmt``), with why
    (a BRAT pair's ``.ann`` counts as taken with its ``.txt``)."""
    spec = _format(fmt)
    suffixes = (".txt", ".ann") if fmt == "brat" else (spec.reads or (spec.suffix,))
    kept = {p.with_suffix("") if fmt == "brat" else p for p in taken}
    left = []
    for path in sorted(in_dir.iterdir()):
        if (path.with_suffix("") if fmt == "brat" else path) in kept and path.suffix.lower() in suffixes:
            continue
        why = _hidden_or_backup(path)
        if why is None and recursive and _is_folder(path):
            continue  # read as a folder of its own
        if why is None and path.is_dir():
            why = (
                "a link to a folder (--recursive does not follow them)"
                if recursive
                else "a sub-folder (--recursive reads sub-folders)"
            )
        elif why is None:
            expected = " or ".join(suffixes)
            why = (
                f"no extension (this run reads {expected} files)"
                if not path.suffix
                else f"not a {expected} file (this run reads {fmt})"
            )
        left.append((path, why))
    return left


def check_link(path: Path, folder: Path, follow_symlinks: bool = False) -> None:
    """Raise when ``path`` is a symbolic link leading out of ``folder`` (unless ``follow_symlinks``): a
    link must not make a run read, and copy into its output, a file that was never put in its input."""
    if follow_symlinks or not path.is_symlink():
        return
    if not path.resolve().is_relative_to(Path(folder).resolve()):
        raise InputError(
            path, "is a symbolic link leading out of the input folder; refused (--follow-symlinks reads such links)"
        )


def _sniffable(path: Path, folder: Path, follow_symlinks: bool) -> bool:
    """Whether detection may open ``path``: a regular file (never a FIFO) that no link rule refuses."""
    try:
        check_link(path, folder, follow_symlinks)
        return path.is_file() and stat.S_ISREG(path.stat().st_mode)
    except (InputError, OSError):
        return False


def detect_format(in_dir: Path) -> str:
    """The one format of the files in ``in_dir`` (or of ``in_dir`` itself when it is a file).

    ``.ann`` beside ``.txt`` is BRAT, bare ``.txt`` plain text, ``.jsonl`` JSON Lines, and ``.xml`` i2b2
    2014 or 2006 by its first elements. A folder mixing formats is an ``InputError``: guessing would
    silently read half of it.
    """
    return _detect_format(Path(in_dir))


def _detect_format(
    in_dir: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    read_ahead: dict[Path, str] | None = None,
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
) -> str:
    """``detect_format``; with ``read_ahead``, the XML file it looks into is read whole and kept there."""
    if in_dir.is_file():
        return _detect_file(in_dir)
    return _one_format(in_dir, _kinds(in_dir, max_bytes, read_ahead, encoding, follow_symlinks))


def _one_format(in_dir: Path, kinds: set[str]) -> str:
    """The format of a folder (or tree) whose files are of ``kinds``; an ``InputError`` for none or several."""
    if not kinds:
        others = sum(1 for _ in in_dir.iterdir())
        raise InputError(
            in_dir,
            "no input files (.txt, .ann, .xml or .jsonl)"
            + (f"; {others} other entries (other extensions, hidden files, backups, sub-folders)" if others else ""),
        )
    if len(kinds) > 1:
        raise InputError(in_dir, f"holds several formats ({', '.join(sorted(kinds))}); name the one to read")
    return kinds.pop()


def _kinds(
    in_dir: Path,
    max_bytes: int,
    read_ahead: dict[Path, str] | None,
    encoding: str,
    follow_symlinks: bool,
    recursive: bool = False,
) -> set[str]:
    """The formats of the files in the folder ``in_dir`` (empty when it holds none)."""
    files = _listing(in_dir, recursive)
    suffixes = {p.suffix.lower() for p in files}
    kinds = {"brat" if ".ann" in suffixes else "text"} if suffixes & {".ann", ".txt"} else set()
    if ".jsonl" in suffixes:
        kinds.add("jsonl")
    xmls = [p for p in files if p.suffix.lower() == ".xml"]
    xml = next((p for p in xmls if _sniffable(p, in_dir, follow_symlinks)), None)
    if xml is not None:
        kinds.add(
            _detect_file(xml) if read_ahead is None else _detect_xml_reading(xml, max_bytes, read_ahead, encoding)
        )
    elif xmls:
        kinds.add("i2b2")  # no XML file can be opened: each is reported by its reader
    return kinds


def _inputs(in_dir: Path, fmt: str, recursive: bool = False) -> list[Path]:
    """The files to read for ``fmt``; for BRAT one path per stem, the ``.txt`` when there is one."""
    files = _listing(in_dir, recursive)
    if fmt != "brat":
        spec = _format(fmt)
        return [p for p in files if p.suffix.lower() in (spec.reads or (spec.suffix,))]
    pairs: dict[Path, Path] = {}
    for path in files:
        if path.suffix.lower() in (".txt", ".ann"):
            stem = path.with_suffix("")
            if stem not in pairs or path.suffix.lower() == ".txt":
                pairs[stem] = path
    return [pairs[stem] for stem in sorted(pairs)]


def read_document(
    path: Path, fmt: str = "auto", max_bytes: int = DEFAULT_MAX_BYTES, encoding: str = "utf-8", spans: bool = True
) -> list[Document]:
    """The documents in one file (several for i2b2 2006 and JSONL); BRAT takes the ``.txt`` or ``.ann``.

    ``encoding`` decodes the file (outputs are always UTF-8); ``spans=False`` reads the notes' text only,
    leaving any annotations unread (BRAT: the ``.txt`` alone)."""
    path = Path(path).absolute()  # meta["path"] must still point at the input if the cwd changes
    return _format(_detect_file(path) if fmt == "auto" else fmt).read(path, max_bytes, encoding=encoding, spans=spans)


@dataclass
class Inputs:
    """The input files of a folder, in one format, each read once when iterated (``scan_inputs``).

    Iterating gives ``(path, documents)`` per file in sorted order, or ``(path, InputError)`` for a file
    that cannot be read, so that a batch carries on. ``encoding`` decodes every file; a symbolic link
    leading out of ``folder`` is an error unless ``follow_symlinks``. With ``spans=False`` (runs that
    replace the spans, ``annotate``) a file whose annotations cannot be read gives its text alone, with
    a warning naming the file.
    """

    folder: Path
    format: str
    paths: list[Path]
    max_bytes: int = DEFAULT_MAX_BYTES
    # Files format detection has read already (absolute path -> text): their readers get the text.
    read_ahead: dict[Path, str] = field(default_factory=dict, repr=False)
    encoding: str = "utf-8"
    follow_symlinks: bool = False
    spans: bool = True
    # The folder's entries not taken, each with why (another extension, hidden, a backup, a sub-folder).
    left_out: list[tuple[Path, str]] = field(default_factory=list)
    root: Path | None = None  # the folder a --recursive run reads (``scan_tree``), which holds ``folder``

    def read(self, path: Path) -> list[Document]:
        """The documents of one input file (``read_document``), without reading it a second time."""
        path = Path(path).absolute()
        siblings = (_sibling(path, ".txt"), _sibling(path, ".ann")) if self.format == "brat" else (path,)
        for file in siblings:
            check_link(file, self.folder, self.follow_symlinks)
        text = self.read_ahead.pop(path, None)
        try:
            if text is not None:  # only XML files are read ahead, and their readers take the text
                return _format(self.format).read(path, self.max_bytes, text=text, encoding=self.encoding)
            return read_document(path, self.format, self.max_bytes, self.encoding)
        except InputError as exc:
            if self.spans:
                raise
            docs = _format(self.format).read(path, self.max_bytes, encoding=self.encoding, spans=False)
            LOG.warning("%s: annotations ignored (%s); the notes are read for their text only", exc.path, exc.problem)
            return docs

    def __iter__(self) -> Iterator[tuple[Path, list[Document] | InputError]]:
        for path in self.paths:
            try:
                yield path, self.read(path)
            except InputError as exc:
                yield path, exc


def scan_inputs(
    in_dir: Path,
    fmt: str = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
    spans: bool = True,
) -> Inputs:
    """The input files of ``in_dir`` in ``fmt`` (``"auto"``: ``detect_format``), not read yet (see ``Inputs``),
    and the entries not taken (``Inputs.left_out``).

    Detecting an XML folder's format reads one file whole; ``Inputs`` hands that reading to the file's
    reader, so every file is read once. A folder that cannot be listed or whose format cannot be told
    raises ``InputError``.
    """
    in_dir = Path(in_dir)
    read_ahead: dict[Path, str] = {}
    fmt = _detect_format(in_dir, max_bytes, read_ahead, encoding, follow_symlinks) if fmt == "auto" else fmt
    _format(fmt)
    taken = _inputs(in_dir, fmt)
    return Inputs(
        in_dir, fmt, taken, max_bytes, read_ahead, encoding, follow_symlinks, spans, _left_out(in_dir, taken, fmt)
    )


def scan_tree(
    in_dir: Path,
    fmt: str = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
    encoding: str = "utf-8",
    follow_symlinks: bool = False,
    spans: bool = True,
) -> list[Inputs]:
    """``scan_inputs`` of ``in_dir`` and of every folder below it (``input_folders``), in that order, all in
    one format (``"auto"``: detected over the whole tree, an ``InputError`` when it holds several or none).
    Each ``Inputs`` has ``root`` = ``in_dir``; sub-folders are never among its files or ``left_out``."""
    in_dir = Path(in_dir)
    folders = [in_dir / rel for rel in input_folders(in_dir)]
    read_ahead: dict[Path, str] = {}
    if fmt == "auto":
        fmt = _one_format(
            in_dir,
            set().union(
                *(_kinds(folder, max_bytes, read_ahead, encoding, follow_symlinks, True) for folder in folders)
            ),
        )
    _format(fmt)
    trees = []
    for folder in folders:
        taken = _inputs(folder, fmt, recursive=True)
        trees.append(
            Inputs(
                folder,
                fmt,
                taken,
                max_bytes,
                read_ahead,
                encoding,
                follow_symlinks,
                spans,
                _left_out(folder, taken, fmt, recursive=True),
                root=in_dir,
            )
        )
    return trees


def iter_documents(
    in_dir: Path, fmt: str = "auto", max_bytes: int = DEFAULT_MAX_BYTES, encoding: str = "utf-8"
) -> Iterator[tuple[Path, Document | InputError]]:
    """``(path, document)`` for every document of every input file, files in sorted order, each read once.

    A file that cannot be read yields ``(path, InputError)`` once and the batch carries on. A folder
    that cannot be listed or whose format cannot be told raises at once.
    """
    for path, docs in scan_inputs(in_dir, fmt, max_bytes, encoding):
        if isinstance(docs, InputError):
            yield path, docs
            continue
        for doc in docs:
            yield path, doc


def read_corpus(
    in_dir: Path, fmt: str = "auto", max_bytes: int = DEFAULT_MAX_BYTES, encoding: str = "utf-8"
) -> list[Document]:
    """Every document in ``in_dir``; raises the first ``InputError``, or one for a name used twice."""
    docs: dict[str, Document] = {}
    for path, item in iter_documents(in_dir, fmt, max_bytes, encoding):
        if isinstance(item, InputError):
            raise item
        if item.name in docs:
            raise InputError(path, f"document name {item.name!r} is already used by {docs[item.name].meta.get('path')}")
        docs[item.name] = item
    return list(docs.values())


def _write(spec: _Format, docs: Sequence[Document], out_dir: Path, stem: str) -> Path:
    problem = name_problem(stem)
    if problem is not None:
        raise InputError(out_dir / stem, problem)
    contents = spec.render(docs)
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = {out_dir / fit_file_name(stem, suffix): text for suffix, text in contents.items()}
    for target in targets:
        for doc in docs:
            refuse_own_input(target, doc)
    for target, text in targets.items():
        atomic_write_text(target, text)
    return out_dir / fit_file_name(stem, _suffix(spec, docs[0]))


def _suffix(spec: _Format, doc: Document) -> str:
    """The suffix of ``doc``'s output file in format ``spec``."""
    return spec.suffix if spec.out_suffix is None else spec.out_suffix(doc)


def write_document(doc: Document, out_dir: Path, fmt: str) -> Path:
    """Write ``doc`` as ``out_dir/<doc.name><extension>`` and return that path (BRAT: the ``.ann``).

    Each file is replaced atomically. Writing over the document's own input is refused. Multi-document
    formats (i2b2 2006, JSONL) get a file holding just this document; use ``write_documents`` to rebuild
    the input's files.
    """
    return _write(_format(fmt), [doc], Path(out_dir), doc.name)


def output_path(doc: Document, out_dir: Path, fmt: str) -> Path:
    """The file ``write_documents`` writes ``doc`` into (lets batch runs skip finished inputs)."""
    spec = _format(fmt)
    stem = str(doc.meta.get("file") or doc.name) if spec.multi else doc.name
    return Path(out_dir) / fit_file_name(stem, _suffix(spec, doc))


def write_documents(docs: Iterable[Document], out_dir: Path, fmt: str) -> list[Path]:
    """Write ``docs``; for i2b2 2006 and JSONL, documents sharing ``meta["file"]`` go into one file again."""
    spec = _format(fmt)
    if not spec.multi:
        return [write_document(doc, out_dir, fmt) for doc in docs]
    groups: dict[str, list[Document]] = {}
    for doc in docs:
        groups.setdefault(str(doc.meta.get("file") or doc.name), []).append(doc)
    return [_write(spec, group, Path(out_dir), stem) for stem, group in groups.items()]
