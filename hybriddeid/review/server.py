"""``hybriddeid review``: a local web page to review and correct a model's spans, note by note.

The server binds to 127.0.0.1 only and answers nobody who does not hold its one-time token: the
URL printed at start carries it (``/?token=...``, as Jupyter does); opening it sets a same-site,
HTTP-only cookie and every later request must carry that cookie (and, to change anything, the
token in an ``X-Review-Token`` header, which no other web page can send). A Host header other than
the loopback address is refused too (DNS rebinding). Every asset (``review/assets/``) ships in the
package: no CDN, so the page works on a network with no way out.

The notes are read once at start through ``folders.read_folder`` (``processing.process_notes``:
the spans ``annotate`` writes) and corrections go to ``folders.Corrections``. Note text only ever
travels to the page, never to the terminal or the log.
"""

from __future__ import annotations

import http.server
import json
import logging
import secrets
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from hybriddeid.core.document import Span
from hybriddeid.evaluation.risk import AUTO, Reviewed, RiskEstimate
from hybriddeid.io import InputError
from hybriddeid.review.folders import Corrections, ReadNote, StaleSave, folder_risk, most_informative

log = logging.getLogger("hybriddeid")

COOKIE = "hybriddeid_review"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
MIN_SHOWN_CHANCE = 0.001  # untagged tokens with P(PHI) below this are not sent (the page's level starts at 0.99)
MAX_BODY = 50_000_000  # bytes a save may send
READ_TIMEOUT_S = 30  # a connection that sends nothing (or less body than it announced) for this long is closed


def _asset(name: str) -> bytes:
    return resources.files("hybriddeid.review").joinpath("assets", name).read_bytes()


@dataclass
class ReviewState:
    """The notes under review, the corrections folder, and the risk estimate kept up to date."""

    notes: list[ReadNote]
    corrections: Corrections
    labels: list[str]
    categories: dict[str, str] = field(default_factory=dict)  # label -> category, for colours
    calibration: str = AUTO
    queue: list[str] = field(default_factory=list)  # names in the order the page lists them
    risk: RiskEstimate = field(init=False)  # refresh_risk's, from __post_init__ on
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.by_name = {note.name: note for note in self.notes}
        self.refresh_risk()

    def saved(self, note: ReadNote) -> list[Span] | None:
        return self.corrections.spans(note.doc)

    def refresh_risk(self) -> None:
        """Re-estimate with the notes marked reviewed as calibration (their corrections against the
        model's spans); for those notes the risk is what their corrections left: none counted."""
        reviewed = [note for note in self.notes if self.corrections.reviewed(note.name)]
        sample = Reviewed.collect([(note.chances, note.doc.spans, self.saved(note) or []) for note in reviewed])
        self.risk = folder_risk(
            self.notes, sample if reviewed else None, self.calibration, corrected={note.name for note in reviewed}
        )
        self.note_risks = {n.name: n for n in self.risk.notes}
        if not self.queue:
            order = sorted(self.notes, key=lambda note: -self.note_risks[note.name].expected_missed)
            self.queue = [note.name for note in order]

    def queue_view(self) -> dict[str, Any]:
        risks = self.note_risks
        items = []
        for name in self.queue:
            note = self.by_name[name]
            spans = note.doc.spans
            items.append(
                {
                    "name": name,
                    "risk": risks[name].expected_missed,
                    "per_1000": risks[name].per_1000,
                    "spans": len(spans),
                    "labels": sorted({s.label for s in spans}),
                    "min_score": min((s.score for s in spans), default=1.0),
                    "reviewed": self.corrections.reviewed(name),
                    "saved": name in self.corrections.reviews,
                }
            )
        risk = self.risk.to_dict()
        risk.pop("notes")
        return {"notes": items, "risk": risk, "labels": self.labels, "categories": self.categories}

    def note_view(self, name: str) -> dict[str, Any]:
        note = self.by_name[name]
        model = list(note.doc.spans)
        saved = self.saved(note)
        spans: list[dict[str, Any]] = []
        if saved is None:
            spans = [_span_view(s, "pending") for s in model]
        else:
            exact = {(s.start, s.end): s for s in model}
            for s in saved:
                original = exact.get((s.start, s.end))
                if original is not None:
                    view = _span_view(original, "accepted")
                    view["label"] = s.label
                    view["relabelled"] = s.label != original.label
                else:
                    view = _span_view(s, "added")
                spans.append(view)
            for s in model:
                if not any(s.overlaps(x) for x in saved):  # a span kept as it was overlaps itself
                    spans.append(_span_view(s, "rejected"))
            spans.sort(key=lambda view: view["start"])
        chances = [
            {"start": c.start, "end": c.end, "p_o": 1.0 - c.p_phi, "label": c.label}
            for c in note.untagged()
            if c.p_phi >= MIN_SHOWN_CHANCE
        ]
        record = self.corrections.reviews.get(name, {})
        risk = self.note_risks[name]
        return {
            "name": name,
            "text": note.doc.text,
            "spans": spans,
            "chances": chances,
            "reviewed": bool(record.get("reviewed")),
            "record": record,
            "version": self.corrections.version(name),
            "risk": {"expected_missed": risk.expected_missed, "per_1000": risk.per_1000, "per_type": risk.per_type},
        }

    def save(self, name: str, body: Any) -> dict[str, Any]:
        note = self.by_name[name]
        spans = _parse_spans(body.get("spans"), len(note.doc.text), self.labels)
        reviewer = body.get("reviewer") or "unknown"
        if not isinstance(reviewer, str) or len(reviewer) > 100:
            raise ValueError("reviewer must be a short string")
        decisions = body.get("decisions") or {}
        if not isinstance(decisions, dict) or not all(isinstance(v, int) for v in decisions.values()):
            raise ValueError("decisions must map names to counts")
        version = body.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ValueError("version (the note's version the page opened) must be an integer")
        record = self.corrections.save(note.doc, spans, reviewer, bool(body.get("reviewed")), decisions, version)
        self.refresh_risk()
        return record


def _span_view(span: Span, status: str) -> dict[str, Any]:
    return {**span.record(), "status": status}


def _parse_spans(raw: Any, length: int, labels: Sequence[str]) -> list[Span]:
    """The spans a page sent, checked: integers inside the text, a known label, no overlaps."""
    if not isinstance(raw, list):
        raise ValueError("spans must be a list")
    spans = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each span must be an object")
        start, end, label = item.get("start"), item.get("end"), item.get("label")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= length):
            raise ValueError("span offsets must be integers inside the note")
        if not isinstance(label, str) or label not in labels:
            raise ValueError(f"unknown label {label!r}")
        spans.append(Span(start, end, label, "review", 1.0))
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        if a.overlaps(b):
            raise ValueError("spans overlap")
    return spans


def _same(given: str, token: str) -> bool:
    """Whether ``given`` (from a header, cookie or query: any characters) is ``token``, in constant time."""
    return secrets.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8"))


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ReviewServer
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # paths hold note names: debug only, never by default
        log.debug("review: %s", format % args)

    # -- guards -------------------------------------------------------------------------------
    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        return host in ("127.0.0.1", "localhost")

    def _cookie_ok(self) -> bool:
        for part in (self.headers.get("Cookie") or "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == COOKIE and _same(value, self.server.token):
                return True
        return False

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:  # a body left unread: the client is told that this connection ends here
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode("utf-8"), "application/json; charset=utf-8")

    def _refuse(self) -> None:
        self._send(
            403,
            b"<!doctype html><title>hybriddeid review</title><h1>403: no valid token</h1>"
            b"<p>Open the address with its token that <code>hybriddeid review</code> printed.</p>",
            "text/html; charset=utf-8",
        )

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if not self._host_ok():
            return self._refuse()
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/" and "token" in query:
            if not _same(query["token"][0], self.server.token):
                return self._refuse()
            cookie = f"{COOKIE}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"
            return self._send(303, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie})
        if not self._cookie_ok():
            return self._refuse()
        if url.path == "/":
            page = _asset("index.html").replace(b"{{TOKEN}}", self.server.token.encode("ascii"))
            return self._send(200, page, "text/html; charset=utf-8")
        if url.path.startswith("/assets/") and url.path[8:] in ASSETS:
            return self._send(200, _asset(url.path[8:]), ASSETS[url.path[8:]] + "; charset=utf-8")
        state = self.server.state
        if url.path == "/api/queue":
            with state.lock:
                return self._json(200, state.queue_view())
        if url.path.startswith("/api/note/"):
            name = urllib.parse.unquote(url.path[10:])
            if name not in state.by_name:
                return self._json(404, {"error": "no such note"})
            with state.lock:
                try:
                    return self._json(200, state.note_view(name))
                except InputError as exc:
                    return self._json(409, {"error": str(exc)})
        return self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        token = self.headers.get("X-Review-Token") or ""
        if not (self._host_ok() and self._cookie_ok() and _same(token, self.server.token)):
            self.close_connection = True  # its body is left unread
            return self._refuse()
        url = urllib.parse.urlsplit(self.path)
        state = self.server.state
        name = urllib.parse.unquote(url.path[10:]) if url.path.startswith("/api/note/") else None
        if name not in state.by_name:
            self.close_connection = True
            return self._json(404, {"error": "no such note"})
        raw = (self.headers.get("Content-Length") or "").strip()
        if not raw.isascii() or not raw.isdigit():  # missing, negative, a sign, spaces, not a number
            self.close_connection = True
            return self._json(400 if raw else 411, {"error": "Content-Length must be the body's size in bytes"})
        length = int(raw)
        if length > MAX_BODY:
            self.close_connection = True
            return self._json(413, {"error": "request too large"})
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            data = b""
        if len(data) != length:  # the client stopped short of what it announced
            self.close_connection = True
            return self._json(400, {"error": f"the body is shorter than its Content-Length ({length} bytes)"})
        try:
            body = json.loads(data.decode("utf-8"))
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
            with state.lock:
                record = state.save(name, body)
        except StaleSave as exc:
            return self._json(409, {"error": str(exc), "version": state.corrections.version(name)})
        except (ValueError, UnicodeDecodeError) as exc:
            return self._json(400, {"error": str(exc)})
        except OSError as exc:
            log.error("review: saving a note failed (%s)", type(exc).__name__)
            return self._json(500, {"error": f"could not save ({type(exc).__name__})"})
        return self._json(200, {"record": record})


class ReviewServer(http.server.ThreadingHTTPServer):
    """The review page's HTTP server on 127.0.0.1 (``port`` 0: any free one)."""

    daemon_threads = True

    def __init__(self, state: ReviewState, port: int = 0, token: str | None = None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = state
        self.token = token or secrets.token_urlsafe(24)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line for a request that failed unexpectedly (no traceback: it could quote a note)."""
        import sys

        log.error("review: a request failed (%s)", type(sys.exc_info()[1]).__name__)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/?token={self.token}"


def build_state(
    pipeline: Any,
    notes: list[ReadNote],
    corrections: Corrections,
    calibration: str = AUTO,
    next_count: int | None = None,
) -> ReviewState:
    """The review of ``notes``: ordered by risk, or with ``next_count`` the notes not yet reviewed
    whose review would teach the model most (``folders.most_informative``), in that order."""
    labels = sorted(pipeline.labels)
    state = ReviewState(
        notes, corrections, labels, {label: pipeline.taxonomy.category(label) for label in labels}, calibration
    )
    if next_count is not None:
        pending = [note for note in notes if not corrections.reviewed(note.name)]
        state.queue = [note.name for note in most_informative(pending, next_count)]
    return state


def serve(server: ReviewServer) -> None:
    """Serve until interrupted."""
    try:
        server.serve_forever()
    finally:
        server.server_close()
