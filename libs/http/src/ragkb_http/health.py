"""`GET /health` (the process answers) and `GET /ready` (its dependencies answer) for every service."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from litestar import Response, Router, get

from ragkb_http.guards import PUBLIC, access

# name → a callable that returns True when that dependency answers.
ReadinessCheck = Mapping[str, Callable[[], bool]]


def health_router(checks: ReadinessCheck) -> Router:
    @get("/health", sync_to_thread=False, include_in_schema=True, tags=["health"], opt=access(PUBLIC), security=[{}])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @get("/ready", sync_to_thread=True, tags=["health"], opt=access(PUBLIC), security=[{}])
    def ready() -> Response[dict[str, Any]]:
        results = {name: _safe(check) for name, check in checks.items()}
        status = 200 if all(results.values()) else 503
        body = {"status": "ready" if status == 200 else "not ready", "checks": results}
        return Response(content=body, status_code=status)

    return Router(path="/", route_handlers=[health, ready])


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except Exception:  # a readiness probe reports failure, it never raises
        return False
