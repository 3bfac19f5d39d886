"""What the Litestar services (api, retriever) add for operators: the request id (taken from or given in
`X-Request-ID`, bound for the request's log lines and calls), one log line and one metrics observation per
request by its route template, `GET /metrics`, and OpenTelemetry's middleware when tracing is on."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

from litestar import Request, Response, Router, get
from litestar.enums import ScopeType
from litestar.middleware.base import DefineMiddleware
from litestar.plugins import InitPluginProtocol
from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from ragkb_core import request_context
from ragkb_core.errors import Unauthorized
from ragkb_core.request_context import REQUEST_ID_HEADER
from ragkb_core.settings import MetricsSettings
from ragkb_http.guards import PUBLIC, access
from ragkb_telemetry import metrics
from ragkb_telemetry.exposition import CONTENT_TYPE, render
from ragkb_telemetry.metrics import child

_log = logging.getLogger("ragkb.http")
# Probes and scrapes every few seconds: counted, but logged only at DEBUG.
QUIET_ROUTES = frozenset({"/health", "/ready", "/metrics"})
# One access line per request: method, route, status, milliseconds (ragkb_cli.stack.ACCESS_LINE recognises it).
ACCESS_LOG_FORMAT = "%s %s %d %.1f ms"
_REQUEST_ID_HEADER_BYTES = REQUEST_ID_HEADER.lower().encode()


class RequestObservation:
    """ASGI middleware, inside Litestar's routing (so the route template is known) and outside the exception
    handler's answer (so the status is the one sent)."""

    def __init__(self, app: ASGIApp, service: str) -> None:
        self._app = app
        self._service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self._app(scope, receive, send)
            return
        _name_span(scope)
        request_id = request_context.accepted_request_id(_header(scope, _REQUEST_ID_HEADER_BYTES))
        token = request_context.request_id.set(request_id)
        started = time.perf_counter()
        status = 500  # unless an answer starts: a failure below Litestar's exception handler

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (_REQUEST_ID_HEADER_BYTES, request_id.encode())]
            await send(message)

        try:
            await self._app(scope, receive, send_with_id)
        finally:
            self._observe(scope, status, time.perf_counter() - started)
            request_context.request_id.reset(token)

    def _observe(self, scope: HTTPScope, status: int, seconds: float) -> None:
        route = scope.get("path_template") or "unmatched"
        labels = (self._service, scope["method"], route, str(status))
        child(metrics.http_requests, *labels).inc()
        child(metrics.http_request_duration, *labels).observe(seconds)
        level = logging.DEBUG if route in QUIET_ROUTES else logging.INFO
        if not _log.isEnabledFor(level):
            return
        _log.log(
            level,
            ACCESS_LOG_FORMAT,
            scope["method"],
            route,
            status,
            seconds * 1000,
            extra={
                "method": scope["method"],
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


def _name_span(scope: HTTPScope) -> None:
    """The server span (when tracing is on) by its route template, as OpenTelemetry's conventions want."""
    span = trace.get_current_span()
    if span.is_recording():
        route = scope.get("path_template") or "unmatched"
        span.update_name(f"{scope['method']} {route}")
        span.set_attribute("http.route", route)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def metrics_router(registry: CollectorRegistry, settings: MetricsSettings) -> Router:
    """`GET /metrics` in the Prometheus text format: public like /health, or behind `settings.token`."""
    expected = settings.token.get_secret_value().encode() if settings.token else None

    @get("/metrics", sync_to_thread=True, include_in_schema=False, opt=access(PUBLIC))
    def scrape(request: Request[Any, Any, Any]) -> Response[bytes]:
        if expected is not None:
            presented = request.headers.get("authorization", "").removeprefix("Bearer ").encode()
            if not hmac.compare_digest(presented, expected):
                raise Unauthorized("metrics: send the scrape token as `Authorization: Bearer <token>`")
        return Response(render(registry), media_type=CONTENT_TYPE)

    return Router(path="/", route_handlers=[scrape] if settings.enabled else [])


def observation_middleware(service: str) -> list[DefineMiddleware]:
    return [DefineMiddleware(RequestObservation, service=service)]


def tracing_plugins(enabled: bool) -> list[InitPluginProtocol]:
    """Litestar's OpenTelemetry plugin when tracing is on (ragkb_telemetry.tracing.start_tracing): a server
    span around each request that continues the caller's trace. Its span starts before routing, so it is
    named by the method alone until RequestObservation names it by the route template (never by a path with
    ids in it). Nothing when tracing is off."""
    if not enabled:
        return []
    from litestar.plugins.opentelemetry import OpenTelemetryConfig, OpenTelemetryPlugin

    config = OpenTelemetryConfig(
        exclude=sorted(QUIET_ROUTES),
        scope_span_details_extractor=_span_details,
        # One span per request, not one more per ASGI message sent or received.
        exclude_spans=["receive", "send"],
    )
    return [OpenTelemetryPlugin(config)]


def _span_details(scope: Scope) -> tuple[str, dict[Any, str]]:
    return str(scope.get("method", "HTTP")), {}
