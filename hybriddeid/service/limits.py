"""The limits of ``hybriddeid serve`` and their defaults (kept apart from the app, so that the command
line can show them without FastAPI installed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_MAX_BODY_MB = 32.0
DEFAULT_MAX_NOTE_CHARS = 20_000_000  # as the batch readers' 20 MB file limit
DEFAULT_MAX_NOTES = 1000
DEFAULT_REQUEST_TIMEOUT = 120.0
DEFAULT_RATE_LIMIT = 600  # requests per minute per key
DEFAULT_BURST = 60
DEFAULT_MAX_WAITING = 256
DEFAULT_BULK_WORKERS = 1  # workers of the bulk lane (service.pool): big requests never hold a regular one
DEFAULT_BULK_OVER_MB = 0.5  # request bodies above this go to the bulk lane (~7 s of work on one core)
DEFAULT_KEEP_ALIVE = 5.0  # seconds an idle connection is kept after an answer
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds a connection has to send a request's headers (from opening or an answer)
DEFAULT_MAX_CONNECTIONS = 512  # open connections; each is a file descriptor
OPEN_FILES_RESERVE = 128  # descriptors the server keeps for itself beside its connections (and 2 a worker)


@dataclass(frozen=True)
class ServiceLimits:
    """What one request may cost: ``max_body_bytes`` (413), ``request_timeout`` seconds, waiting for a
    worker included (504), and each key's ``rate_limit`` requests per minute with bursts of ``burst``
    (429; 0: no limit)."""

    max_body_bytes: int = int(DEFAULT_MAX_BODY_MB * 2**20)
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    rate_limit: float = DEFAULT_RATE_LIMIT
    burst: int = DEFAULT_BURST
    keep_alive: float = DEFAULT_KEEP_ALIVE
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError("--max-body-mb must be above 0")
        if not self.request_timeout > 0:
            raise ValueError("--request-timeout must be a positive number of seconds")
        if self.rate_limit < 0 or self.burst < 1:
            raise ValueError("--rate-limit must be 0 (none) or more, --burst at least 1")
        if not (self.keep_alive > 0 and self.header_timeout > 0):
            raise ValueError("--keep-alive-timeout and --header-timeout must be positive numbers of seconds")
        if self.max_connections < 1:
            raise ValueError("--max-connections must be at least 1")


def fit_open_files(max_connections: int | None, workers: int) -> tuple[int, str | None]:
    """The connection cap the process's open-file limit allows: ``max_connections`` (None: the default, or
    as many as fit) plus ``OPEN_FILES_RESERVE`` and two a worker, the soft limit raised toward the hard one
    if need be. Returns the cap and a warning when the default was lowered to fit; a ValueError when a cap
    given does not fit. Past the limit, accept() fails and no one, with a key or without, gets in."""
    import resource

    reserve = OPEN_FILES_RESERVE + 2 * workers
    wanted = (DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections) + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    room = wanted if soft == resource.RLIM_INFINITY else min(wanted, soft)
    if room >= wanted:
        return wanted - reserve, None
    if max_connections is not None or room - reserve < 1:
        raise ValueError(
            f"--max-connections {wanted - reserve} needs {wanted} open files, and this process may open "
            f"{soft} (ulimit -n): raise the limit or lower --max-connections"
        )
    return room - reserve, (
        f"at most {room - reserve} connections at once (--max-connections), the open-file "
        f"limit (ulimit -n {soft}) allows no more"
    )


class RateLimiter:
    """A token bucket per key: ``per_minute`` requests a minute (or the key's own rate), up to ``burst``
    at once."""

    def __init__(self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute, self.burst, self.clock = per_minute, float(burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, per_minute: float | None = None) -> float:
        """0 when the request may go, else the seconds until it may (the request is not counted).
        ``per_minute``: this key's own rate (None: the server's; 0: none)."""
        rate = (self.per_minute if per_minute is None else per_minute) / 60.0
        if rate <= 0:
            return 0.0
        now = self.clock()
        tokens, then = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / rate
        self._buckets[key] = (tokens - 1.0, now)
        return 0.0
