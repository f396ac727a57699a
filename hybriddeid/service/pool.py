"""The worker processes of ``hybriddeid serve``: forked from the server once it has loaded the model (as
batch runs fork theirs), so the model is loaded once and shared copy-on-write; each answers one request
at a time over a socket pair.

Two lanes: a request body larger than ``bulk_over`` bytes (a long note, a large batch: seconds to minutes
of work) goes to the bulk lane, whose workers run at a lower CPU priority (``BULK_NICE``); every other
request goes to the regular workers. A big note then never holds a worker that small requests wait for,
and on a busy machine the small requests get the CPU first (the big note takes longer). With no bulk
workers, every request shares the regular ones.

The server's event loop only moves bytes: a request body goes to an idle worker of its lane, which parses,
checks and processes it (``service.work``) and sends back the answer's status and JSON. A request waits for an
idle worker within its time limit. A worker that dies (a segfault, ``os._exit``, the memory limit) fails
its request alone with a 500; one that passes the request's time limit is killed (504); either is
replaced by a fresh fork. Workers ignore SIGINT, SIGTERM and SIGHUP, so that a signal to the whole process
group leaves the requests in flight to finish, and they die with the server (``batch.die_with_parent``).

Frames on the socket: 8 bytes of length, then a JSON header line and the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import stat
import struct
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

from hybriddeid.runs.batch import STOP_SIGNALS, describe_death, die_with_parent, limit_memory
from hybriddeid.service.work import Answer, WorkSettings, error_body, handle

log = logging.getLogger(__name__)
_LENGTH = struct.Struct("!Q")
BULK_NICE = 10  # added to the bulk workers' niceness: on a busy machine they get a small share of the CPU


def _frame(header: dict[str, Any], body: bytes) -> bytes:
    head = json.dumps(header).encode("ascii") + b"\n"
    return _LENGTH.pack(len(head) + len(body)) + head + body


def _split(message: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, body = message.partition(b"\n")
    return json.loads(head), body


# -- the worker's side (blocking) --------------------------------------------------------------------
def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buffer)


def _drop_inherited_sockets(own: socket.socket, others: list[socket.socket]) -> None:
    """Point every socket this fork inherited but its own (client connections, the listening socket, the
    other workers' server ends) at /dev/null, so that a connection the server closes is closed for its
    client, not held open by a worker. dup2 rather than close: the Python objects that still name those
    descriptors may close them later, harmlessly."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: the sockets this module knows of
        fds = [other.fileno() for other in others]
    for fd in fds:
        if fd in (own.fileno(), null):
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.dup2(null, fd)
        except OSError:
            continue
    os.close(null)


def _worker_main(
    sock: socket.socket,
    pipeline: Any,
    settings: WorkSettings,
    memory_mb: int | None,
    parent_pid: int,
    others: list[socket.socket],
    niceness: int = 0,
) -> None:
    """A worker: request after request until the server closes its end; it ends with the server."""
    _drop_inherited_sockets(sock, others)
    if niceness:
        os.nice(niceness)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)  # the server's event loop's, not this process's
    die_with_parent(parent_pid)
    limit_memory(memory_mb)
    while True:
        head = _recv_exact(sock, _LENGTH.size)
        if head is None:
            break
        message = _recv_exact(sock, _LENGTH.unpack(head)[0])
        if message is None:
            break
        header, body = _split(message)
        replace = False
        try:
            answer = handle(header["kind"], body, pipeline, settings, header["error_id"], header["client"])
        except MemoryError:
            del body
            answer = Answer(
                500,
                error_body(
                    "worker_failed", "out of memory (the server's --memory-limit-mb)", error_id=header["error_id"]
                ),
                error="worker_failed",
            )
            replace = True
        sock.sendall(
            _frame(
                {
                    "status": answer.status,
                    "notes": answer.notes,
                    "characters": answer.characters,
                    "error": answer.error,
                    "replace": replace,
                },
                answer.body,
            )
        )
        if replace:
            break
    sock.close()


# -- the server's side (asyncio) ---------------------------------------------------------------------
@dataclass
class _Worker:
    process: Any
    sock: socket.socket
    bulk: bool = False  # of the bulk lane
    busy: bool = field(default=False)


class WorkerDied(Exception):
    """A worker ended without answering; ``problem`` says how (its exit status, never note text)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def check_sizes(size: int, bulk_workers: int, bulk_over: int) -> None:
    """A ``ValueError`` naming the serve option when the pool's sizes cannot work (the CLI asks before
    it loads the model, the pool when it is made)."""
    if size < 1:
        raise ValueError("--workers must be at least 1")
    if bulk_workers < 0 or (bulk_workers and bulk_over < 1):
        raise ValueError("--bulk-workers must be 0 or more, and --bulk-over-mb above 0")


class WorkerPool:
    """``size`` regular and ``bulk_workers`` bulk forked workers holding ``pipeline``; ``run`` gives a
    request body to an idle one of its lane (bodies over ``bulk_over`` bytes: the bulk lane, when it has
    workers)."""

    def __init__(
        self,
        pipeline: Any,
        settings: WorkSettings,
        size: int = 2,
        memory_mb: int | None = None,
        max_waiting: int = 256,
        bulk_workers: int = 0,
        bulk_over: int = 0,
    ) -> None:
        check_sizes(size, bulk_workers, bulk_over)
        self.pipeline, self.settings, self.size, self.memory_mb = pipeline, settings, size, memory_mb
        self.bulk_workers, self.bulk_over = bulk_workers, bulk_over
        self.max_waiting = max_waiting
        self.restarts = 0  # workers replaced after a crash or a time-out
        self.waiting = 0
        self.bulk_requests = 0  # requests sent to the bulk lane
        self._workers: list[_Worker] = []
        self._idle: dict[bool, asyncio.Queue[_Worker]] | None = None  # per lane: bulk or not
        self._closing = False

    def start(self) -> None:
        """Fork the workers (from the event loop's thread, in the server's lifespan)."""
        self._idle = {False: asyncio.Queue(), True: asyncio.Queue()}
        for bulk, count in ((False, self.size), (True, self.bulk_workers)):
            for _ in range(count):
                self._idle[bulk].put_nowait(self._spawn(bulk))

    def _spawn(self, bulk: bool) -> _Worker:
        ours, theirs = socket.socketpair()
        others = [worker.sock for worker in self._workers]
        process = get_context("fork").Process(
            target=_worker_main,
            name="hybriddeid-serve-bulk" if bulk else "hybriddeid-serve-worker",
            daemon=True,
            args=(theirs, self.pipeline, self.settings, self.memory_mb, os.getpid(), others, BULK_NICE if bulk else 0),
        )
        process.start()
        theirs.close()
        ours.setblocking(False)
        worker = _Worker(process, ours, bulk)
        self._workers.append(worker)
        return worker

    def _retire(self, worker: _Worker, kill: bool) -> None:
        if kill and worker.process.is_alive():
            worker.process.kill()
        worker.sock.close()
        worker.process.join(5)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        if worker in self._workers:
            self._workers.remove(worker)

    def _replace(self, worker: _Worker) -> None:
        self._retire(worker, kill=True)
        if not self._closing and self._idle is not None:
            self.restarts += 1
            self._idle[worker.bulk].put_nowait(self._spawn(worker.bulk))

    @property
    def alive(self) -> int:
        return sum(worker.process.is_alive() for worker in self._workers)

    @property
    def ready(self) -> bool:
        return self._idle is not None and not self._closing and self.alive == self.size + self.bulk_workers

    async def run(self, kind: str, body: bytes, timeout: float, error_id: str, client: str = "") -> Answer:
        """The answer to one request of ``client`` (its API key's name), from a worker of its lane; 503 when too many wait, 504 past ``timeout``
        seconds (waiting for a worker included; a worker still working is killed and replaced), 500 when the
        worker dies."""
        assert self._idle is not None, "start() the pool first"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.waiting >= self.max_waiting:
            return Answer(
                503,
                error_body("overloaded", f"{self.waiting} requests are waiting for a worker; retry later"),
                error="overloaded",
            )
        bulk = bool(self.bulk_workers) and len(body) > self.bulk_over
        self.bulk_requests += bulk
        self.waiting += 1
        try:
            worker = await asyncio.wait_for(self._take(bulk), timeout)
        except TimeoutError:
            return _timeout(timeout, error_id, "no worker became free")
        finally:
            self.waiting -= 1
        frame = _frame({"kind": kind, "error_id": error_id, "client": client}, body)
        try:
            header, answer_body = await asyncio.wait_for(
                self._exchange(worker, frame), max(0.0, deadline - loop.time())
            )
        except TimeoutError:
            self._replace(worker)
            return _timeout(timeout, error_id, "the worker was stopped and replaced")
        except WorkerDied as died:
            self._replace(worker)
            log.error("request %s failed: %s", error_id, died.problem)
            return Answer(
                500,
                error_body(
                    "worker_failed",
                    f"the worker processing this request failed ({died.problem}); it was replaced",
                    error_id=error_id,
                ),
                error="worker_failed",
            )
        except BaseException:  # cancelled (the server stops): the worker is mid-request, never reused
            self._replace(worker)
            raise
        if header.get("replace"):
            log.error("request %s failed: the worker ran out of memory; it was replaced", error_id)
            self._replace(worker)
        else:
            worker.busy = False
            self._idle[worker.bulk].put_nowait(worker)
        return Answer(header["status"], answer_body, header["notes"], header["characters"], header["error"])

    async def _take(self, bulk: bool) -> _Worker:
        assert self._idle is not None
        while True:
            worker = await self._idle[bulk].get()
            if worker.process.is_alive():
                worker.busy = True
                return worker
            self._replace(worker)  # died while idle (killed from outside): a fresh one joins the queue

    async def _exchange(self, worker: _Worker, frame: bytes) -> tuple[dict[str, Any], bytes]:
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(worker.sock, frame)
            size = _LENGTH.unpack(await self._recv_exact(worker, _LENGTH.size))[0]
            return _split(await self._recv_exact(worker, size))
        except (ConnectionError, OSError):
            pass
        worker.process.join(5)
        raise WorkerDied(describe_death(worker.process.exitcode, self.memory_mb))

    async def _recv_exact(self, worker: _Worker, size: int) -> bytes:
        loop = asyncio.get_running_loop()
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            n = await loop.sock_recv_into(worker.sock, view[got:])
            if n == 0:
                raise ConnectionError("worker closed its socket")
            got += n
        return bytes(buffer)

    async def close(self) -> None:
        """End every worker: an idle one on closing its socket, a busy one (a request cut short) killed."""
        self._closing = True
        for worker in list(self._workers):
            self._retire(worker, kill=worker.busy)


def _timeout(timeout: float, error_id: str, what: str) -> Answer:
    log.error("request %s timed out after %g s (%s)", error_id, timeout, what)
    return Answer(
        504,
        error_body(
            "timeout", f"the request took longer than {timeout:g} s (--request-timeout); {what}", error_id=error_id
        ),
        error="timeout",
    )
