"""The ASGI app of ``hybriddeid serve`` (FastAPI): routes, API keys, rate limits, body limits, metrics
and the access log.

The app runs in one process on uvicorn's event loop and never touches note text: it checks the key and
the body's size, hands the body to a worker (``service.pool``) and relays the worker's answer. Every
log line carries method, route, status, sizes, duration and key name, never a body, a query string or
a raw path (a path no route matches is logged as ``unmatched``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.process_collector import ProcessCollector

from hybriddeid import __version__
from hybriddeid.core.profiles import PHI_SETS
from hybriddeid.service.keys import KeyStore
from hybriddeid.service.limits import RateLimiter, ServiceLimits
from hybriddeid.service.pool import WorkerPool
from hybriddeid.service.schemas import AnnotateRequest, AnnotateResponse, DeidRequest, DeidResponse, ErrorResponse
from hybriddeid.service.work import error_body, invalid

log = logging.getLogger("hybriddeid.service")
access_log = logging.getLogger("hybriddeid.access")


class ServiceError(Exception):
    """An error answer decided by the app itself (auth, rate, size): status, kind, message, headers."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


class Metrics:
    """The Prometheus metrics of one app, in a registry of their own."""

    def __init__(self, pool: WorkerPool) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "hybriddeid_requests", "HTTP requests by route and status", ["route", "status"], registry=registry
        )
        self.notes = Counter("hybriddeid_notes", "notes processed", ["route"], registry=registry)
        self.characters = Counter(
            "hybriddeid_characters", "characters of note text processed", ["route"], registry=registry
        )
        self.errors = Counter("hybriddeid_errors", "error answers by kind", ["kind"], registry=registry)
        self.latency = Histogram(
            "hybriddeid_request_duration_seconds",
            "request duration by route",
            ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=registry,
        )
        self.in_flight = Gauge("hybriddeid_requests_in_flight", "requests being answered", registry=registry)
        Gauge("hybriddeid_workers_alive", "worker processes alive", registry=registry).set_function(lambda: pool.alive)
        Gauge("hybriddeid_requests_waiting", "requests waiting for a worker", registry=registry).set_function(
            lambda: pool.waiting
        )
        registry.register(_Restarts(pool))
        ProcessCollector(registry=registry)  # the server process's memory, CPU, open files


class _Restarts:
    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool

    def collect(self) -> Any:
        yield CounterMetricFamily(
            "hybriddeid_worker_restarts", "workers replaced after a crash or a time-out", value=self.pool.restarts
        )
        yield CounterMetricFamily(
            "hybriddeid_bulk_requests",
            "requests sent to the bulk lane (bodies over --bulk-over-mb)",
            value=self.pool.bulk_requests,
        )


# Routes that need an API key unless the operator names them (serve --public-route): the API's
# description and the server's counters tell an anonymous caller more than it needs.
GUARDED_ROUTES = ("/docs", "/openapi.json", "/metrics")
# Swagger UI's files, served from a folder the operator gives (serve --docs-assets), never from a CDN.
DOCS_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css")
DOCS_FAVICON = "favicon-32x32.png"


def check_docs_assets(folder: Path) -> Path:
    """``folder`` if it holds Swagger UI's files (``DOCS_ASSETS``), else a ValueError naming what is missing."""
    missing = [name for name in DOCS_ASSETS if not (Path(folder) / name).is_file()]
    if missing:
        raise ValueError(
            f"{folder}: --docs-assets needs Swagger UI's {' and '.join(missing)} in this folder (the "
            "swagger-ui-dist package's files)"
        )
    return Path(folder)


@dataclass
class Service:
    """What the routes share: the pool, the keys, the limits, what the model is, the metrics; which of
    ``GUARDED_ROUTES`` are public, and where Swagger UI's files are (None: no ``/docs``)."""

    pool: WorkerPool
    keys: KeyStore
    limits: ServiceLimits
    model: dict[str, Any]
    public: frozenset[str] = frozenset()
    docs_assets: Path | None = None
    metrics: Metrics = field(init=False)
    rate: RateLimiter = field(init=False)

    def __post_init__(self) -> None:
        unknown = set(self.public) - set(GUARDED_ROUTES)
        if unknown:
            raise ValueError(f"--public-route takes {', '.join(GUARDED_ROUTES)}, not {', '.join(sorted(unknown))}")
        if self.docs_assets is not None:
            check_docs_assets(self.docs_assets)
        self.metrics = Metrics(self.pool)
        self.rate = RateLimiter(self.limits.rate_limit, self.limits.burst)


def model_info(pipeline: Any, name: str, modes: list[str]) -> dict[str, Any]:
    """What ``GET /v1/models`` tells of the loaded model."""
    return {
        "model": name,
        "language": pipeline.language,
        "labels": list(pipeline.labels),
        "components": list(pipeline.components),
        "phi_sets": list(PHI_SETS),
        "phi_set": pipeline.phi_set,
        "modes": modes,
        "version": __version__,
    }


_bearer = HTTPBearer(auto_error=False, description="an API key (hybriddeid serve keys add NAME)")


async def _caller(request: Request, credentials: HTTPAuthorizationCredentials | None = Security(_bearer)) -> str:
    """The name of the request's API key, once its key and its rate are checked (401, 403, 429)."""
    service: Service = request.app.state.service
    if credentials is None:
        raise ServiceError(
            401, "unauthorized", "send an API key: Authorization: Bearer <key>", {"WWW-Authenticate": "Bearer"}
        )
    status, record = service.keys.check(credentials.credentials)
    if record is None:
        raise ServiceError(401, "unauthorized", "unknown API key", {"WWW-Authenticate": "Bearer"})
    request.scope["hybriddeid.key"] = record.name  # logged, and the client whose surrogate key is drawn
    if status == 403:
        raise ServiceError(403, "forbidden", "this API key was revoked")
    wait = service.rate.take(record.id, record.rate_limit)
    if wait:
        rate = service.limits.rate_limit if record.rate_limit is None else record.rate_limit
        raise ServiceError(
            429,
            "rate_limited",
            f"more than {rate:g} requests a minute with this key",
            {"Retry-After": str(max(1, math.ceil(wait)))},
        )
    return record.name


async def _body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, refused (413) once it passes ``limit`` bytes, by its Content-Length or as it comes,
    and (408) when it has not all come in ``timeout`` seconds: a body sent slowly holds a connection."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise ServiceError(413, "too_large", f"the request body is larger than {limit} bytes (--max-body-mb)")
    chunks, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ServiceError(413, "too_large", f"the request body is larger than {limit} bytes (--max-body-mb)")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise ServiceError(
            408,
            "timeout",
            f"the request body did not arrive within {timeout:g} s (--request-timeout)",
            {"Connection": "close"},
        ) from None
    return b"".join(chunks)


def _request_body(model: type) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its body itself (the worker parses it)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    }


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (401, "no API key, or an unknown one"),
        (403, "a revoked API key"),
        (413, "body, note or note count too large"),
        (408, "the body was sent too slowly (--request-timeout)"),
        (422, "not JSON, or invalid fields"),
        (429, "rate limit: wait Retry-After seconds"),
        (500, "the worker failed (error_id in the server's log)"),
        (503, "too many requests waiting"),
        (504, "past the request time limit"),
    )
}


async def _run(request: Request, kind: str) -> Response:
    service: Service = request.app.state.service
    body = await _body(request, service.limits.max_body_bytes, service.limits.request_timeout)
    error_id = uuid.uuid4().hex[:12]
    client = request.scope["hybriddeid.key"]
    work = asyncio.create_task(service.pool.run(kind, body, service.limits.request_timeout, error_id, client))
    gone = asyncio.create_task(_disconnected(request))
    await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():  # the caller left: its worker is freed (replaced) rather than kept at work for no one
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        log.info("request %s: the client disconnected before its answer; its work was stopped", error_id)
        service.metrics.errors.labels("client_gone").inc()
        return Response(status_code=499)
    gone.cancel()
    answer = work.result()
    metrics = service.metrics
    metrics.notes.labels(f"/v1/{kind}").inc(answer.notes)
    metrics.characters.labels(f"/v1/{kind}").inc(answer.characters)
    if answer.error is not None:
        metrics.errors.labels(answer.error).inc()
    headers = {"Retry-After": "1"} if answer.status == 503 else None
    return Response(answer.body, status_code=answer.status, media_type="application/json", headers=headers)


async def _disconnected(request: Request) -> None:
    """Returns once the client has disconnected (the body is read: the next message can only be that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(service: Service) -> FastAPI:
    """The app: ``/v1/annotate``, ``/v1/deid``, ``/v1/models`` (Bearer key), ``/healthz``, ``/readyz``,
    ``/metrics`` and the OpenAPI document (``/openapi.json``; both need a key unless public), and with
    ``docs_assets`` its interactive page (``/docs``, Swagger UI from those local files)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.pool.start()  # forked here: the workers never inherit uvicorn's sockets at startup
        try:
            yield
        finally:
            await service.pool.close()

    app = FastAPI(
        title="hybriddeid",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, behind a key unless public; FastAPI's pages load a CDN
        description="Finds and removes PHI in clinical notes. Every /v1 route needs an API key "
        "(Authorization: Bearer <key>).",
    )
    app.state.service = service

    def guard(route: str) -> list[Any]:
        """The key check of a route of ``GUARDED_ROUTES``, unless the operator made it public."""
        return [] if route in service.public else [Depends(_caller)]

    @app.post(
        "/v1/annotate",
        response_model=AnnotateResponse,
        responses=_ERRORS,
        openapi_extra=_request_body(AnnotateRequest),
        summary="PHI spans of one note or a batch",
    )
    async def annotate(request: Request, key: str = Depends(_caller)) -> Response:
        return await _run(request, "annotate")

    @app.post(
        "/v1/deid",
        response_model=DeidResponse,
        responses=_ERRORS,
        openapi_extra=_request_body(DeidRequest),
        summary="de-identified text of one note or a batch",
    )
    async def deid(request: Request, key: str = Depends(_caller)) -> Response:
        return await _run(request, "deid")

    @app.get(
        "/v1/models",
        responses={k: v for k, v in _ERRORS.items() if k in (401, 403, 429)},
        summary="the loaded model: language, labels, PHI sets, version",
    )
    async def models(key: str = Depends(_caller)) -> dict[str, Any]:
        return service.model

    @app.get("/healthz", summary="the process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="the model is loaded and every worker alive")
    async def readyz() -> Response:
        pool = service.pool
        status = 200 if pool.ready else 503
        return JSONResponse(
            {
                "status": "ready" if status == 200 else "not ready",
                "workers": pool.size,
                "bulk_workers": pool.bulk_workers,
                "alive": pool.alive,
            },
            status_code=status,
        )

    @app.get("/metrics", summary="Prometheus metrics (text format)", dependencies=guard("/metrics"))
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", include_in_schema=False, dependencies=guard("/openapi.json"))
    async def openapi_document() -> JSONResponse:
        return JSONResponse(app.openapi())

    if service.docs_assets is not None:
        assets = service.docs_assets

        @app.get("/docs", include_in_schema=False, dependencies=guard("/docs"))
        async def docs() -> Response:
            return get_swagger_ui_html(
                openapi_url="/openapi.json",
                title="hybriddeid API",
                swagger_js_url=f"/docs/{DOCS_ASSETS[0]}",
                swagger_css_url=f"/docs/{DOCS_ASSETS[1]}",
                swagger_favicon_url=f"/docs/{DOCS_FAVICON}",
            )

        @app.get("/docs/{name}", include_in_schema=False)
        async def docs_asset(name: str) -> Response:  # Swagger UI's own files: public code, no key
            if name not in (*DOCS_ASSETS, DOCS_FAVICON) or not (assets / name).is_file():
                raise ServiceError(404, "not_found", "no such file")
            return FileResponse(assets / name)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> Response:
        service.metrics.errors.labels(exc.kind).inc()
        return Response(
            error_body(exc.kind, exc.message),
            status_code=exc.status,
            media_type="application/json",
            headers=exc.headers,
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        answer = invalid(exc.errors())  # never their input values
        service.metrics.errors.labels("invalid").inc()
        return Response(answer.body, status_code=answer.status, media_type="application/json")

    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original_openapi()  # kept as app.openapi_schema too: changed in place here
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (AnnotateRequest, DeidRequest):
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(body.pop("$defs", {}))
            schemas[model.__name__] = body
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
    app.add_middleware(AccessLog, metrics=service.metrics)
    return app


class AccessLog:
    """ASGI middleware: one log line and the metrics per request, and a 500 with an error id (the
    exception's type logged, never its message) for anything the routes let through."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen = {"in": 0, "out": 0, "status": 0}

        async def counted_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.request":
                seen["in"] += len(message.get("body", b""))
            return message

        async def counted_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["out"] += len(message.get("body", b""))
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, counted_receive, counted_send)
        except Exception as exc:  # noqa: BLE001 - its message may quote a body: only its type is logged
            error_id = uuid.uuid4().hex[:12]
            log.error("request %s failed: %s", error_id, type(exc).__name__)
            self.metrics.errors.labels("internal").inc()
            if not seen["status"]:
                body = error_body("internal", "the server failed to answer", error_id=error_id)
                await counted_send(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await counted_send({"type": "http.response.body", "body": body})
        finally:
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", "unmatched")
            status = seen["status"] or 500
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            access_log.info(
                "%s %s %d in=%dB out=%dB %.1fms key=%s",
                scope.get("method", "-"),
                route,
                status,
                seen["in"],
                seen["out"],
                seconds * 1000,
                scope.get("hybriddeid.key", "-"),
            )
