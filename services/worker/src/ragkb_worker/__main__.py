"""`python -m ragkb_worker` / `ragkb-worker`: run the Celery worker with the sweeper beside it."""

from __future__ import annotations

import logging

from ragkb_store.queue import INGEST_QUEUE
from ragkb_worker.app import build_sweeper, create_worker_app, start_health
from ragkb_worker.settings import WorkerSettings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(levelname)s %(name)s: %(message)s")
    settings = WorkerSettings()
    app = create_worker_app(settings)
    start_health(settings)
    sweeper = build_sweeper(settings, app)
    sweeper.start()
    try:
        app.worker_main(
            [
                "worker",
                "--loglevel=INFO",
                f"--queues={INGEST_QUEUE}",
                f"--concurrency={settings.tasks.concurrency}",
                # Prefork (not solo) so that hard time limits can kill a stuck task.
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        sweeper.stop()


if __name__ == "__main__":
    main()
