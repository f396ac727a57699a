"""Running the app on uvicorn: one process serving HTTP on its event loop, its workers forked from it
(``service.pool``). SIGTERM or SIGINT (Ctrl-C) stop it gracefully: no new connections, the requests in
flight finish (within ``graceful_timeout``), then the workers end."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import uvicorn

from hybriddeid.batch import Interrupted, stop_on_signals

log = logging.getLogger("hybriddeid.service")


def run_server(app: Any, host: str = "127.0.0.1", port: int = 8000, ssl_certfile: Path | None = None,
               ssl_keyfile: Path | None = None, graceful_timeout: float | None = None) -> int:
    """Serve ``app`` until stopped by a signal; 0 after a graceful stop, 2 when it cannot start."""
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on",
                            ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
                            ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
                            timeout_graceful_shutdown=int(graceful_timeout) if graceful_timeout else None,
                            server_header=False)
    server = uvicorn.Server(config)
    try:
        with stop_on_signals():  # uvicorn handles the signal, then raises it again once it has stopped
            server.run()
    except Interrupted as stop:
        log.info("%s; the requests in flight were answered first", stop)
        return 0
    except SystemExit as exc:  # uvicorn could not bind or start the app; it has logged why
        return 2 if exc.code else 0
    return 0 if server.started else 2
