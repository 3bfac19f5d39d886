"""`python -m ragkb_api` / `ragkb-api`: serve the public API with uvicorn."""

from __future__ import annotations

import uvicorn

from ragkb_api.app import create_app
from ragkb_api.settings import ApiSettings
from ragkb_telemetry.logs import configure_logging
from ragkb_telemetry.tracing import start_tracing


def main() -> None:
    settings = ApiSettings()
    configure_logging("api", settings.log)
    # Before the app builds its engine and its retriever client, which the instrumentation must see made.
    start_tracing("api")
    uvicorn.run(
        create_app(settings),
        host=settings.api.host,
        port=settings.api.port,
        # Named, not uvicorn's "auto", which silently falls back to h11 and asyncio when these are missing and
        # costs every request (README, Latency). Both are dependencies of this package, so a missing one is a
        # broken install and fails the start. Fallback, where no wheel exists (uvloop has none for Windows):
        # http="h11", loop="asyncio" behave the same, only slower.
        http="httptools",
        loop="uvloop",
        # Our logging, not uvicorn's; each request is logged once, with its id (ragkb_http.observability).
        log_config=None,
        access_log=False,
        # SIGTERM: stop accepting, let requests in flight finish (an event stream ends at the bound).
        timeout_graceful_shutdown=settings.api.drain_s,
    )


if __name__ == "__main__":
    main()
