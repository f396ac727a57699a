"""What a worker of ``hybriddeid serve`` does with one request body: check it, run its notes through
``processing.process_notes`` (as ``hybriddeid annotate`` and ``deid`` do, so the answers are the same),
and write the answer. Runs in the worker process, so that parsing a large body never holds up the
server's event loop. Messages name fields, ids and sizes, never note text.
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hybriddeid.core.document import Document, Span
from hybriddeid.pipeline.operating_point import NO_THRESHOLD
from hybriddeid.runs.batch import describe_error
from hybriddeid.runs.processing import NoteSettings, process_notes
from hybriddeid.service.schemas import REQUEST_FIELDS, AnnotateRequest, DeidRequest, Note
from hybriddeid.surrogates import DeidOptions
from hybriddeid.surrogates.keys import derive_key

KINDS = ("annotate", "deid")


@dataclass(frozen=True)
class WorkSettings:
    """What the server fixes for every request: the largest note (characters) and the most notes per
    request, and the de-identification options (``--mode`` and the rest; the key, never sent by clients,
    is in them only when the server has one). Each client's surrogates come from a key of its own drawn
    from that key (``client_key``), unless ``share_batch_key``: then from the key itself, as batch runs."""

    max_note_chars: int
    max_notes: int
    deid: DeidOptions
    share_batch_key: bool = False


def client_key(key: bytes, client: str) -> bytes:
    """The surrogate key of one client (an API key's name) of ``serve``, derived from the server's key
    (``surrogates.keys.derive_key``). A client's probes then tell the mapping of its own requests only,
    never the date shifts and surrogates of batch runs made with ``key``, nor another client's."""
    return derive_key(key, "serve client", client)


@dataclass(frozen=True)
class Answer:
    """A worker's answer: HTTP status, the JSON body, and for metrics the notes and characters done."""

    status: int
    body: bytes
    notes: int = 0
    characters: int = 0
    error: str | None = None  # the error kind when status is not 200


def error_body(kind: str, message: str, **extra: Any) -> bytes:
    """The JSON body of every error answer (``schemas.ErrorResponse``)."""
    return _json({"error": kind, "message": message, **{k: v for k, v in extra.items() if v is not None}})


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def _error(status: int, kind: str, message: str, **extra: Any) -> Answer:
    return Answer(status, error_body(kind, message, **extra), error=kind)


def handle(kind: str, body: bytes, pipeline: Any, settings: WorkSettings, error_id: str, client: str = "") -> Answer:
    """The answer to one request of ``kind`` (annotate or deid) from ``client`` (its API key's name).
    ``error_id`` names a failure in the server's log; the failure's message may quote note text, so only
    its type is told."""
    model = DeidRequest if kind == "deid" else AnnotateRequest
    try:
        request = model.model_validate_json(body)
    except ValidationError as exc:
        return invalid(exc.errors(include_input=False, include_url=False, include_context=False))
    notes = request.all_notes()
    problem = _limits(notes, settings)
    if problem is not None:
        return _error(413, "too_large", problem)
    ids = [note.id for note in notes]
    if len(set(ids)) != len(ids):
        return _error(422, "invalid", "note ids must be unique within a request")
    try:
        note_settings = _note_settings(request, settings, client)
    except ValueError as exc:  # an option the server cannot honour: names settings, never text
        return _error(422, "invalid", str(exc))
    try:
        if isinstance(request, DeidRequest):
            out = _deid(pipeline, notes, request, note_settings)
        else:
            out = _annotate(pipeline, notes, note_settings)
    except MemoryError:
        raise  # the worker's state cannot be trusted: it is replaced
    except Exception as exc:  # noqa: BLE001 - one request fails, the worker goes on; never its text
        return _error(500, "worker_failed", f"processing failed ({describe_error(exc)})", error_id=error_id)
    return Answer(200, _json({"notes": out}), len(notes), sum(len(note.text) for note in notes))


def warm_up(pipeline: Any) -> None:
    """Prepare ``pipeline`` and run one made-up note through it before the workers are forked, so that the caches built
    on a first note are built once, shared by every worker (replacements included), and not charged to
    the first request of each; then move every object alive (the model) out of the cycle collector's
    reach (``gc.freeze``). The model never becomes garbage in a server, but each full collection walked
    all of it: 80-110 ms, once every ~150 requests in a worker, the p99 of small notes; and its walk
    wrote to every object, copying the forked workers' shared pages. A component on a GPU warms up on
    the CPU: CUDA started here could not be used by the forked workers."""
    pipeline.prepare()  # every rule compiled, as a note that reaches it would
    with pipeline.cpu_only():  # CUDA, if a component uses it, starts in each worker, never here
        process_notes(
            pipeline,
            [
                Document(
                    "warm-up",
                    "Seen by Dr. Alder Quill on 03/04/2021 at Fenmoor Clinic, Boston MA 02115; call 617-555-0142.\n",
                )
            ],
        )
    gc.collect()
    gc.freeze()


def invalid(errors: Sequence[Mapping[str, Any]]) -> Answer:
    """422 for a body that is not JSON or whose fields are wrong: where and what, never the value, nor the
    name of a field the schema does not have (a client may put note text in a key)."""
    details = [
        {
            "loc": [_location(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg", "")),
            "type": str(error.get("type", "")),
        }
        for error in errors
    ]
    return _error(422, "invalid", "the request body is not valid JSON or has invalid fields", details=details)


def _location(part: Any) -> Any:
    """One step of an error's location as a 422 may tell it: a position, a field of the schema, or a
    placeholder for a key the client made up."""
    if isinstance(part, int) or part in REQUEST_FIELDS or part == "body":
        return part
    return "(unknown field)"


def _limits(notes: Sequence[Note], settings: WorkSettings) -> str | None:
    if len(notes) > settings.max_notes:
        return f"{len(notes)} notes in one request; at most {settings.max_notes} (--max-notes)"
    for note in notes:
        if len(note.text) > settings.max_note_chars:
            return (
                f"note {note.id!r} holds {len(note.text)} characters; at most {settings.max_note_chars} "
                "(--max-note-chars)"
            )
    return None


def _note_settings(request: AnnotateRequest, settings: WorkSettings, client: str) -> NoteSettings:
    threshold = None if request.threshold is None else (NO_THRESHOLD if request.threshold == 0 else request.threshold)
    deid = None
    if isinstance(request, DeidRequest):
        options = settings.deid
        mode = request.mode or options.mode
        key = None
        if mode == "surrogate":
            if options.key is None:
                raise ValueError("surrogate mode needs a key held by the server: start it with --key-file")
            key = options.key if settings.share_batch_key else client_key(options.key, client)
        deid = dataclasses.replace(options, mode=mode, key=key)
    return NoteSettings(phi_set=request.phi_set, threshold=threshold, deid=deid)


_SPAN_FIELDS = tuple(field.name for field in dataclasses.fields(Span))


def _spans(doc: Document) -> list[dict[str, Any]]:
    """A note's spans as ``hybriddeid annotate --format jsonl`` writes them (a ``Span``'s fields in order;
    read directly: ``dataclasses.asdict`` copies each value recursively, for the same values)."""
    return [{name: getattr(span, name) for name in _SPAN_FIELDS} for span in doc.spans]


def _annotate(pipeline: Any, notes: Sequence[Note], settings: NoteSettings) -> list[dict[str, Any]]:
    docs = [Document(note.id or "", note.text) for note in notes]
    return [
        {"id": note.document.name, "spans": _spans(note.document)} for note in process_notes(pipeline, docs, settings)
    ]


def _deid(pipeline: Any, notes: Sequence[Note], request: DeidRequest, settings: NoteSettings) -> list[dict[str, Any]]:
    """Each patient's notes de-identified together, as ``hybriddeid deid`` groups a patient's files."""
    by_patient: dict[str, list[Document]] = {}
    for note in notes:
        patient = note.patient or request.patient or note.id or ""
        by_patient.setdefault(patient, []).append(Document(note.id or "", note.text))
    done: dict[str, dict[str, Any]] = {}
    for patient, docs in by_patient.items():
        for processed in process_notes(pipeline, docs, settings, patient):
            result = processed.deid
            assert result is not None
            done[processed.document.name] = {
                "id": processed.document.name,
                "patient": patient,
                "text": result.text,
                "spans": _spans(result.document),
                "replacements": [rep.to_dict() for rep in result.replacements],
                "unread_characters": result.unread_characters,
            }
    return [done[note.id or ""] for note in notes]
