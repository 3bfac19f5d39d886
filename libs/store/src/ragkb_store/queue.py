"""The Celery application shared by the api (which sends tasks by name) and the worker (which runs them).

The api never imports worker code: it only knows task names and their arguments, listed here.
"""

from __future__ import annotations

from celery import Celery

from ragkb_core.settings import RedisSettings

INGEST_DOCUMENT = "ragkb.ingest_document"
# A re-index: every document into the new generation, then the check and the switch.
REINDEX_DOCUMENT = "ragkb.reindex_document"
FINISH_REINDEX = "ragkb.finish_reindex"
# A KB deletion job: index, documents in batches, blobs only they used, then the KB row.
DELETE_KB = "ragkb.delete_kb"
INGEST_QUEUE = "ingest"
TASK_NAMES = (INGEST_DOCUMENT, REINDEX_DOCUMENT, FINISH_REINDEX, DELETE_KB)


def make_celery(settings: RedisSettings) -> Celery:
    app = Celery("ragkb", broker=settings.url, backend=None)
    app.conf.update(
        # Route by name so that producers need no task objects.
        task_routes={name: {"queue": INGEST_QUEUE} for name in TASK_NAMES},
        task_default_queue=INGEST_QUEUE,
        # Ack after the task ran: a worker killed mid-task leaves the message to be redelivered.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message at a time per process: ingest tasks are long, prefetching would starve other workers.
        worker_prefetch_multiplier=1,
        # Redelivery after a lost worker waits this long; ingest tasks are bounded well below it.
        broker_transport_options={
            "visibility_timeout": 3600,
            # A hung Redis must not hang an upload or a worker: socket operations give up (kombu's own
            # blocking reads poll for 1 s, well below this).
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
        },
        task_serializer="json",
        accept_content=["json"],
        # Retry connecting to the broker when publishing instead of failing the upload at once.
        broker_connection_retry_on_startup=True,
        task_publish_retry=True,
        # ...but boundedly: an upload waits at most ~3 s for the broker, then the sweeper queues the document.
        task_publish_retry_policy={"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
    )
    return app


def enqueue_ingest(app: Celery, document_id: str) -> None:
    app.send_task(INGEST_DOCUMENT, args=[document_id], queue=INGEST_QUEUE)


def enqueue_reindex_document(app: Celery, job_id: str, document_id: str) -> None:
    app.send_task(REINDEX_DOCUMENT, args=[job_id, document_id], queue=INGEST_QUEUE)


def enqueue_finish_reindex(app: Celery, job_id: str) -> None:
    app.send_task(FINISH_REINDEX, args=[job_id], queue=INGEST_QUEUE)


def enqueue_delete_kb(app: Celery, job_id: str) -> None:
    app.send_task(DELETE_KB, args=[job_id], queue=INGEST_QUEUE)
