"""`python -m ragkb_api` / `ragkb-api`: serve the public API with uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from ragkb_api.app import create_app
from ragkb_api.settings import ApiSettings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s api %(levelname)s %(name)s: %(message)s")
    # httpx logs every call to the retriever at INFO: a second line per search beside the access log, and
    # time on the request's path.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = ApiSettings()
    uvicorn.run(
        create_app(settings),
        host=settings.api.host,
        port=settings.api.port,
        log_level="info",
        # SIGTERM: stop accepting, let requests in flight finish (an event stream ends at the bound).
        timeout_graceful_shutdown=settings.api.drain_s,
    )


if __name__ == "__main__":
    main()
