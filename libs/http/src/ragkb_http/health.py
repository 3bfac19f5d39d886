"""`GET /health` (the process answers) and `GET /ready` (its dependencies answer) for every service."""

from __future__ import annotations

from typing import Any

from litestar import Response, Router, get

from ragkb_core.health import ReadinessChecks, run_checks
from ragkb_http.guards import PUBLIC, access


def health_router(checks: ReadinessChecks) -> Router:
    @get("/health", sync_to_thread=False, include_in_schema=True, tags=["health"], opt=access(PUBLIC), security=[{}])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @get("/ready", sync_to_thread=True, tags=["health"], opt=access(PUBLIC), security=[{}])
    def ready() -> Response[dict[str, Any]]:
        results = run_checks(checks)
        status = 200 if all(results.values()) else 503
        body = {"status": "ready" if status == 200 else "not ready", "checks": results}
        return Response(content=body, status_code=status)

    return Router(path="/", route_handlers=[health, ready])
