"""Running the app on uvicorn: one process serving HTTP on its event loop, its workers forked from it
(``service.pool``). SIGTERM or SIGINT (Ctrl-C) stop it gracefully: no new connections, the requests in
flight finish (within ``graceful_timeout``), then the workers end.

Connections are bounded, so that idle ones cannot lock clients out: a connection has ``header_timeout``
seconds to send a request's headers (from its opening, or from its last answer), an idle one is closed
``keep_alive`` seconds after its answer, and at most ``max_connections`` are open: a new one past the cap
closes the connection that has waited longest for its next request, or is itself refused (503) when
every one is busy. Warnings and errors of the connections (uvicorn, asyncio, this module) are logged at
most once a minute per kind, without tracebacks (``OncePerMinute``): a flood of bad connections never
floods the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from hybriddeid.runs.batch import Interrupted, stop_on_signals
from hybriddeid.service.limits import OPEN_FILES_RESERVE, ServiceLimits
from hybriddeid.service.work import error_body

log = logging.getLogger("hybriddeid.service")
connection_log = logging.getLogger("hybriddeid.service.connections")
THROTTLED_LOGGERS = ("asyncio", "uvicorn.error", connection_log.name)
_REFUSED_BODY = error_body("overloaded", "too many connections are open (--max-connections); retry later")
_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_REFUSED_BODY), _REFUSED_BODY)
)


class OncePerMinute(logging.Filter):
    """Lets one record of a kind (its logger, its message's first line, its exception's type) through per
    ``period`` seconds, without its traceback; the next one let through says how many were left out."""

    def __init__(self, period: float = 60.0) -> None:
        super().__init__()
        self.period = period
        self._seen: dict[tuple[str, str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        error = record.exc_info[1] if record.exc_info else None
        kind = (record.name, str(record.msg).split("\n", 1)[0], type(error).__name__ if error else "")
        now = time.monotonic()
        last, left_out = self._seen.get(kind, (-self.period, 0))
        if now - last < self.period:
            self._seen[kind] = (last, left_out + 1)
            return False
        if len(self._seen) > 1000:  # kinds are few; a flood of distinct ones must not grow this forever
            self._seen.clear()
        self._seen[kind] = (now, 0)
        if error is not None:  # the type, never the traceback (nor the message, which may quote a request)
            record.msg = f"{record.msg} ({type(error).__name__})"
            record.exc_info, record.exc_text = None, None
        if left_out:
            record.msg = f"{record.msg} [{left_out} more like this in the last {self.period:g} s]"
        return True


class _GuardedProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a header timeout and a cap on open connections (the class
    attributes are set per server by ``_protocol``)."""

    header_timeout: float = 10.0
    max_connections: int = 512

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn declares it
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()
        if len(self.connections) > self.max_connections:
            self._make_room()

    def _waiting(self) -> bool:
        """Between requests: opened, or answered, and the next request's headers not all in."""
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._waiting() and not self.transport.is_closing():
            self._close()

    def _close(self) -> None:
        self.transport.close()  # between requests: nothing is cut short

    def _make_room(self) -> None:
        """Past the cap: close the connection that has waited longest for its next request (this one is
        the newest), or refuse this one when every other is busy."""
        waiting = [
            c
            for c in self.connections
            if isinstance(c, _GuardedProtocol) and c is not self and c._waiting() and not c.transport.is_closing()
        ]
        if waiting:
            min(waiting, key=lambda c: c._idle_since)._close()
            connection_log.warning(
                "more than %d connections open (--max-connections): closed the one idle longest", self.max_connections
            )
        else:
            self.transport.write(_REFUSED)
            self.transport.close()
            connection_log.warning(
                "more than %d connections open (--max-connections), all busy: refused a new one with 503",
                self.max_connections,
            )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._idle_since = self.loop.time()
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)


def _protocol(limits: ServiceLimits) -> type[H11Protocol]:
    return type(
        "GuardedProtocol",
        (_GuardedProtocol,),
        {"header_timeout": limits.header_timeout, "max_connections": limits.max_connections},
    )


def run_server(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    ssl_certfile: Path | None = None,
    ssl_keyfile: Path | None = None,
    graceful_timeout: float | None = None,
    limits: ServiceLimits | None = None,
) -> int:
    """Serve ``app`` until stopped by a signal; 0 after a graceful stop, 2 when it cannot start.
    ``limits``: the connections' timeouts and cap (the request limits are the app's). The listen backlog
    is also how many connections asyncio accepts at once, before the cap can close any, and a busy event loop
    can accept a few such batches before their protocols start: it is a quarter of the open files reserved
    beside the cap (``limits.fit_open_files``), so three batches in flight still fit."""
    limits = limits or ServiceLimits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        timeout_graceful_shutdown=int(graceful_timeout) if graceful_timeout else None,
        server_header=False,
        http=_protocol(limits),
        timeout_keep_alive=limits.keep_alive,  # type: ignore[arg-type] # a float works
        backlog=min(limits.max_connections, OPEN_FILES_RESERVE // 4),
    )
    server = uvicorn.Server(config)
    throttle = OncePerMinute()
    for name in THROTTLED_LOGGERS:
        logging.getLogger(name).addFilter(throttle)
    try:
        with stop_on_signals():  # uvicorn handles the signal, then raises it again once it has stopped
            server.run()
    except Interrupted as stop:
        log.info("%s; the requests in flight were answered first", stop)
        return 0
    except SystemExit as exc:  # uvicorn could not bind or start the app; it has logged why
        return 2 if exc.code else 0
    finally:
        for name in THROTTLED_LOGGERS:
            logging.getLogger(name).removeFilter(throttle)
    return 0 if server.started else 2
