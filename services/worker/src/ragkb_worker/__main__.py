"""`python -m ragkb_worker` / `ragkb-worker`: run the Celery worker with the sweeper beside it."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from celery.signals import setup_logging, worker_shutting_down

from ragkb_store.queue import WORKER_QUEUES
from ragkb_telemetry.logs import configure_logging
from ragkb_telemetry.multiprocess import prepare_multiprocess_dir
from ragkb_worker.fork_gate import FORK_GATE
from ragkb_worker.settings import WorkerSettings


def main() -> None:
    settings = WorkerSettings()
    configure_logging("worker", settings.log)
    # Celery keeps this process's logging as configured above instead of installing its own format.
    setup_logging.connect(lambda **_: None, weak=False)
    # Before prometheus_client is first imported (it reads the variable then): the task processes write their
    # metrics there, and the health port's /metrics adds them up.
    prepare_multiprocess_dir(settings.worker.metrics_dir)
    from ragkb_worker.app import build_sweeper, create_worker_app, start_health

    app = create_worker_app(settings)
    # Before the threads below start: every fork of the task pool waits for their work in progress.
    FORK_GATE.install()
    start_health(settings)
    bound_warm_shutdown(settings.worker.drain_s)
    sweeper = build_sweeper(settings, app)
    sweeper.start()
    # Before the pool forks: every task process inherits it. Reads (searches) must not queue behind ingestion.
    os.nice(settings.tasks.nice)
    try:
        app.worker_main(
            [
                "worker",
                "--loglevel=INFO",
                # Interactive first (ragkb_store.queue): the order matters.
                f"--queues={','.join(WORKER_QUEUES)}",
                f"--concurrency={settings.tasks.concurrency}",
                # Prefork (not solo) so that hard time limits can kill a stuck task.
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        sweeper.stop()


def bound_warm_shutdown(drain_s: float) -> None:
    """SIGTERM starts Celery's warm shutdown, which waits for running tasks however long they take. Past
    `drain_s` the worker asks itself for a cold one (SIGQUIT): the tasks still running are cancelled, and their
    documents are queued again (their message is not acknowledged, their lease runs out)."""
    shutting_down = threading.Event()

    def cut_short() -> None:
        shutting_down.wait()
        time.sleep(drain_s)
        # Still alive: tasks are still running (a finished warm shutdown ends the process, this thread with it).
        os.kill(os.getpid(), signal.SIGQUIT)

    def on_shutting_down(how: str, **_: Any) -> None:
        # Runs inside Celery's signal handler: only set a flag; the thread waiting for it does the rest.
        if how == "Warm":
            shutting_down.set()

    threading.Thread(target=cut_short, name="ragkb-drain-bound", daemon=True).start()
    worker_shutting_down.connect(on_shutting_down, weak=False)


if __name__ == "__main__":
    main()
