"""`GET /health`, `GET /ready` and `GET /metrics` for the worker, which otherwise has no HTTP server: a small
stdlib server in a daemon thread of the main process (no web framework needed for three answers). Its
/metrics adds up what every task process wrote (Prometheus multi-process mode)."""

from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from ragkb_core.health import ReadinessChecks, run_checks
from ragkb_telemetry.exposition import CONTENT_TYPE, render
from ragkb_worker.fork_gate import FORK_GATE


def start_health_server(
    host: str,
    port: int,
    checks: ReadinessChecks,
    metrics: CollectorRegistry | None = None,
    metrics_token: SecretStr | None = None,
) -> ThreadingHTTPServer:
    """`metrics`: what GET /metrics answers (None: no /metrics); behind `metrics_token` when given."""
    server = ThreadingHTTPServer((host, port), _handler_for(checks, metrics, metrics_token))
    threading.Thread(target=server.serve_forever, name="ragkb-worker-health", daemon=True).start()
    return server


def _handler_for(
    checks: ReadinessChecks, metrics: CollectorRegistry | None, metrics_token: SecretStr | None
) -> type[BaseHTTPRequestHandler]:
    expected = metrics_token.get_secret_value().encode() if metrics_token else None

    class HealthHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            # Its first answers import modules lazily: a pool fork must not copy their import locks held.
            with FORK_GATE.working():
                self._route()

        def _route(self) -> None:
            if self.path == "/metrics" and metrics is not None:
                self._scrape(metrics)
            elif self.path == "/health":
                self._answer(200, {"status": "ok"})
            elif self.path == "/ready":
                results = run_checks(checks)
                ready = all(results.values())
                self._answer(200 if ready else 503, {"status": "ready" if ready else "not ready", "checks": results})
            else:
                self._answer(404, {"title": "Not found", "status": 404, "detail": f"no route {self.path}"})

        def _scrape(self, registry: CollectorRegistry) -> None:
            presented = (self.headers.get("authorization") or "").removeprefix("Bearer ").encode()
            if expected is not None and not hmac.compare_digest(presented, expected):
                detail = "metrics: send the scrape token as `Authorization: Bearer <token>`"
                self._answer(401, {"title": "Unauthorized", "status": 401, "detail": detail})
                return
            payload = render(registry)
            self.send_response(200)
            self.send_header("content-type", CONTENT_TYPE)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _answer(self, status: int, body: dict[str, object]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json" if status < 400 else "application/problem+json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the worker's log

    return HealthHandler
