"""`python -m ragkb_retriever` / `ragkb-retriever`: serve the internal index and search API."""

from __future__ import annotations

import uvicorn

from ragkb_core.retriever_client import RETRIEVER_KEEP_ALIVE_S
from ragkb_retriever.app import create_app
from ragkb_retriever.settings import RetrieverSettings
from ragkb_telemetry.logs import configure_logging
from ragkb_telemetry.tracing import start_tracing


def main() -> None:
    settings = RetrieverSettings()
    configure_logging("retriever", settings.log)
    start_tracing("retriever")
    # One process: Qdrant Edge allows one owner per shard directory.
    uvicorn.run(
        create_app(settings),
        host=settings.retriever.host,
        port=settings.retriever.port,
        # Named, not "auto" (which silently falls back to h11 and asyncio): why, and the fallback where no wheel
        # exists, in ragkb_api.__main__.
        http="httptools",
        loop="uvloop",
        log_config=None,
        access_log=False,
        # Longer than its clients keep an idle connection (ragkb_core.retriever_client): they close it first.
        timeout_keep_alive=RETRIEVER_KEEP_ALIVE_S,
        # SIGTERM: stop accepting, let searches and writes in flight finish, then close the index.
        timeout_graceful_shutdown=settings.retriever.drain_s,
    )


if __name__ == "__main__":
    main()
