"""Composition root of the worker: the only place that names concrete classes (with ragkb_worker.runtime,
which builds a task process's share)."""

from __future__ import annotations

import faulthandler
import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown
from redis import Redis

from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import build_engine, build_session_factory, database_answers
from ragkb_store.ledger import DocumentLedger
from ragkb_store.queue import IngestQueue, enqueue_finish_reindex, make_celery
from ragkb_telemetry.exposition import scrape_registry
from ragkb_telemetry.multiprocess import forget_process
from ragkb_telemetry.tasks import carry_request_id_in_tasks, observe_tasks
from ragkb_telemetry.tracing import start_tracing
from ragkb_worker.health import start_health_server
from ragkb_worker.runtime import WorkerRuntime, build_runtime
from ragkb_worker.settings import WorkerSettings
from ragkb_worker.sweeper import Sweeper
from ragkb_worker.tasks import register_tasks

_log = logging.getLogger("ragkb.worker")
T = TypeVar("T")
# The default model loads in seconds (~8 s of CPU, longer on a loaded machine): a build that has not ended after
# this long never will.
PRELOAD_STUCK_AFTER_S = 300.0
STDERR_FD = 2  # the worker's log


def create_worker_app(settings: WorkerSettings) -> Celery:
    app = make_celery(settings.redis)
    # Built once in each task process (after the fork: models and connections are not shared across processes),
    # as the process starts (preload_runtime), then reused.
    runtime = once_per_process(lambda: _build_runtime(settings, app))
    register_tasks(app, settings.tasks, runtime)
    observe_worker_processes()
    preload_runtime(runtime)
    return app


def once_per_process(build: Callable[[], T]) -> Callable[[], T]:
    """`build`'s result, built on the first call and then reused; calls meanwhile (a task arriving while the
    preload thread builds) wait for that one build instead of starting a second. A build that raised is tried
    again by the next call."""
    lock = threading.Lock()
    cached = functools.cache(build)

    def get() -> T:
        with lock:
            return cached()

    return get


def preload_runtime(runtime: Callable[[], object], stuck_after_s: float = PRELOAD_STUCK_AFTER_S) -> None:
    """Each task process builds its runtime, the default embedding model loaded, as it starts, in a thread of its
    own: the first documents after a worker (re)start do not wait seconds for the model (the whole JSQuAD corpus
    on a fresh stack spent ~8 s of each process's CPU on it), and the process takes tasks meanwhile (a task that
    arrives first waits for the same build). A build that fails is logged; the first task builds again and fails
    with the reason, as before.

    A build still running after `stuck_after_s` is stuck, not slow: the process writes every thread's stack to
    its stderr (the worker's log) and exits, and the pool starts another. Tasks would otherwise wait for that
    build until the hard time limit, with nothing in the log to say why (ragkb_worker.fork_gate)."""

    def build() -> None:
        # The descriptor: Celery replaces sys.stderr in a task process with a logger, which has none.
        faulthandler.dump_traceback_later(stuck_after_s, exit=True, file=STDERR_FD)
        try:
            runtime()
        except Exception:
            _log.warning("could not preload the task process's runtime; its first task builds it", exc_info=True)
        finally:
            faulthandler.cancel_dump_traceback_later()

    def start(**_: Any) -> None:
        threading.Thread(target=build, name="ragkb-preload", daemon=True).start()

    worker_process_init.connect(start, weak=False, dispatch_uid="ragkb-preload")


def _build_runtime(settings: WorkerSettings, app: Celery) -> WorkerRuntime:
    # A long document's ranges, and documents handed back by a batch, go through the same queue rules as
    # uploads (IngestQueue).
    ledger = DocumentLedger(build_session_factory(build_engine(settings.database)), settings.tasks.lease_s)
    queue = IngestQueue(app, ledger, settings.jobs.fair_queueing)
    finish_reindex = functools.partial(enqueue_finish_reindex, app)
    return build_runtime(settings, finish_reindex, queue.send_range, queue.send_again)


def observe_worker_processes() -> None:
    """Each task process logs its task's request id, records task metrics and, when tracing is on, exports
    spans: started after the fork, since an exporter's thread does not survive it."""
    carry_request_id_in_tasks()
    observe_tasks()
    worker_process_init.connect(lambda **_: start_tracing("worker"), weak=False, dispatch_uid="ragkb-tracing")
    worker_process_shutdown.connect(_forget_process, weak=False, dispatch_uid="ragkb-metrics-process")


def _forget_process(pid: int | None = None, **_: Any) -> None:
    forget_process(pid or os.getpid())


def build_sweeper(settings: WorkerSettings, app: Celery) -> Sweeper:
    ledger = DocumentLedger(build_session_factory(build_engine(settings.database)), settings.tasks.lease_s)
    # The sweeper only asks the queue's length: a hung Redis must fail that tick, not block it forever.
    redis = Redis.from_url(settings.redis.url, socket_timeout=5, socket_connect_timeout=5)
    return Sweeper(
        ledger=ledger,
        blobs=BlobStore(settings.blobs.root),
        queue=IngestQueue(app, ledger, settings.jobs.fair_queueing),
        redis=redis,
        settings=settings.tasks,
        upload_wait_s=settings.jobs.upload_wait_s,
    )


def start_health(settings: WorkerSettings) -> None:
    engine = build_engine(settings.database)
    redis = Redis.from_url(settings.redis.url, socket_timeout=2)
    retriever = RetrieverClient(settings.retriever, settings.service_token)
    checks = {
        "database": lambda: database_answers(engine),
        "redis": lambda: bool(redis.ping()),
        "retriever": retriever.ready,
    }
    metrics = scrape_registry() if settings.metrics.enabled else None
    start_health_server(settings.worker.host, settings.worker.port, checks, metrics, settings.metrics.token)
