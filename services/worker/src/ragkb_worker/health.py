"""`GET /health` and `GET /ready` for the worker, which otherwise has no HTTP server: a small stdlib
server in a daemon thread of the main process (no web framework needed for two JSON answers)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ragkb_core.health import ReadinessChecks, run_checks


def start_health_server(host: str, port: int, checks: ReadinessChecks) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), _handler_for(checks))
    threading.Thread(target=server.serve_forever, name="ragkb-worker-health", daemon=True).start()
    return server


def _handler_for(checks: ReadinessChecks) -> type[BaseHTTPRequestHandler]:
    class HealthHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self._answer(200, {"status": "ok"})
            elif self.path == "/ready":
                results = run_checks(checks)
                ready = all(results.values())
                self._answer(200 if ready else 503, {"status": "ready" if ready else "not ready", "checks": results})
            else:
                self._answer(404, {"title": "Not found", "status": 404, "detail": f"no route {self.path}"})

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
