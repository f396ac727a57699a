"""A small client of ``hybriddeid serve`` (httpx; pip install 'hybriddeid[service]').

    from hybriddeid.client import Client
    with Client("http://127.0.0.1:8000", key) as client:
        spans = client.annotate("Seen by Dr. Quill on 03/04/2021.")[0]["spans"]
        notes = client.deid([{"id": "n1", "text": "..."}], mode="surrogate", patient="p-17")

Answers are the server's JSON (``notes``: one dict per note, in the order given). An error answer raises
``ServiceError`` with its status, kind and message (which never quote note text); a 429 or 503 is
retried after its Retry-After, up to ``retries`` times.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

NoteInput = str | Mapping[str, Any]


class ServiceError(Exception):
    """An error answer: ``status`` (HTTP), ``kind`` (unauthorized, too_large, timeout, ...), ``message``
    and, for 500s and 504s, the ``error_id`` the server's log gives the failure."""

    def __init__(self, status: int, kind: str, message: str, error_id: str | None = None) -> None:
        super().__init__(f"{status} {kind}: {message}" + (f" (error id {error_id})" if error_id else ""))
        self.status, self.kind, self.message, self.error_id = status, kind, message, error_id


class Client:
    """``hybriddeid serve`` at ``url`` with API key ``key``."""

    def __init__(
        self, url: str, key: str, timeout: float = 130.0, retries: int = 3, verify: bool | str | ssl.SSLContext = True
    ) -> None:
        """``verify``: check the server's TLS certificate (True), not (False), against this CA or
        certificate file (a path), or with this SSL context."""
        self.retries = retries
        if isinstance(verify, str):
            verify = ssl.create_default_context(cafile=verify)
        self._http = httpx.Client(
            base_url=url.rstrip("/"), timeout=timeout, verify=verify, headers={"Authorization": f"Bearer {key}"}
        )

    def annotate(
        self, notes: NoteInput | Iterable[NoteInput], phi_set: str | None = None, threshold: float | None = None
    ) -> list[dict[str, Any]]:
        """Each note's PHI spans: ``[{"id", "spans": [{"start", "end", "label", "source", "score"}]}]``.
        ``notes``: one text, or texts and ``{"id", "text"}`` dicts."""
        return self._post("/v1/annotate", _body(notes, phi_set=phi_set, threshold=threshold))["notes"]

    def deid(
        self,
        notes: NoteInput | Iterable[NoteInput],
        mode: str | None = None,
        patient: str | None = None,
        phi_set: str | None = None,
        threshold: float | None = None,
    ) -> list[dict[str, Any]]:
        """Each note de-identified: ``[{"id", "patient", "text", "spans", "replacements",
        "unread_characters"}]``. ``mode``: tag, mask or surrogate (default: the server's); ``patient``: the
        patient of notes without their own ``"patient"``."""
        return self._post("/v1/deid", _body(notes, phi_set=phi_set, threshold=threshold, mode=mode, patient=patient))[
            "notes"
        ]

    def models(self) -> dict[str, Any]:
        """What the server has loaded: model, language, labels, PHI sets, modes, version."""
        return self._answer(lambda: self._http.get("/v1/models"))

    def ready(self) -> bool:
        """Whether the server has its model loaded and every worker alive."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._answer(lambda: self._http.post(path, json=body))

    def _answer(self, send: Any) -> Any:
        for attempt in range(self.retries + 1):
            response = send()
            if response.status_code in (429, 503) and attempt < self.retries:
                time.sleep(_retry_after(response))
                continue
            break
        if response.status_code != 200:
            try:
                error = response.json()
            except ValueError:
                error = {}
            raise ServiceError(
                response.status_code,
                str(error.get("error", "http_error")),
                str(error.get("message", response.reason_phrase)),
                error.get("error_id"),
            )
        return response.json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(60.0, max(0.0, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


def _body(notes: NoteInput | Iterable[NoteInput], **options: Any) -> dict[str, Any]:
    """A request body: one text, or a batch of texts and note dicts; unset options left out."""
    chosen = {name: value for name, value in options.items() if value is not None}
    if isinstance(notes, str):
        return {"text": notes, **chosen}
    return {"notes": [{"text": note} if isinstance(note, str) else dict(note) for note in notes], **chosen}
