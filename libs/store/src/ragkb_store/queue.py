"""The Celery application shared by the api (which sends tasks by name) and the worker (which runs them).

The api never imports worker code: it only knows task names and their arguments, listed here.

Two lanes (ragkb_store.states.Lane), each a queue: the worker takes from `ingest` (interactive) before
`ingest-bulk`, one message per free process, so a single upload waits at most for a running task, never
behind another KB's import. Within the bulk lane, a message's priority grows with its KB's backlog: a KB with
a few bulk documents goes ahead of one with a hundred thousand.

A message names up to `DOCUMENTS_PER_MESSAGE` documents of one KB and lane, the batch a task builds together
(ragkb_worker.tasks): an import of N documents is N / 8 messages, not N messages of which seven in eight found
their document already built by another's batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from celery import Celery

from ragkb_core.settings import RedisSettings
from ragkb_store.ledger import DocumentLedger
from ragkb_store.states import Lane

# Documents of one KB and lane, built in one batch (args: a list of ids).
INGEST_DOCUMENTS = "ragkb.ingest_documents"
# One document (args: its id): what every ingest message was before INGEST_DOCUMENTS; still served, for the
# messages a broker holds across an upgrade.
INGEST_DOCUMENT = "ragkb.ingest_document"
# One page range of a long document split across worker processes (ragkb_store.ledger.ranges).
INGEST_RANGE = "ragkb.ingest_range"
# A re-index: every document into the new generation, then the check and the switch.
REINDEX_DOCUMENT = "ragkb.reindex_document"
FINISH_REINDEX = "ragkb.finish_reindex"
# A KB deletion job: index, documents in batches, blobs only they used, then the KB row.
DELETE_KB = "ragkb.delete_kb"
# A tune job: a KB's question set's legs fetched, every candidate setting scored, cross-validated.
TUNE_KB = "ragkb.tune_kb"
INGEST_QUEUE = "ingest"
BULK_QUEUE = "ingest-bulk"
QUEUE_OF_LANE = {Lane.INTERACTIVE: INGEST_QUEUE, Lane.BULK: BULK_QUEUE}
# The order the worker consumes them in (queue_order_strategy "priority"): interactive first.
WORKER_QUEUES = (INGEST_QUEUE, BULK_QUEUE)
TASK_NAMES = (INGEST_DOCUMENTS, INGEST_DOCUMENT, INGEST_RANGE, REINDEX_DOCUMENT, FINISH_REINDEX, DELETE_KB, TUNE_KB)
# Kombu keeps one Redis list per priority step (0 is taken first): `ingest-bulk`, `ingest-bulk\x06\x163`, ...
PRIORITY_STEPS = (0, 3, 6, 9)
PRIORITY_KEY_SEPARATOR = "\x06\x16"
# A bulk message's priority goes down one step for every this many documents of its KB already waiting.
BACKLOG_PER_PRIORITY = 50
# Documents named by one ingest message: the worker's batch (RAGKB_BATCHING__DOCUMENTS defaults to it). A worker
# set to larger batches tops a message's documents up with other pending ones of the KB; to smaller ones, it
# queues the rest of the message again.
DOCUMENTS_PER_MESSAGE = 8


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
            # Interactive before bulk: the queues are polled in the order the worker names them (WORKER_QUEUES),
            # not in turns; and within a queue, priority 0 first.
            "queue_order_strategy": "priority",
            "priority_steps": list(PRIORITY_STEPS),
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


def bulk_priority(backlog: int) -> int:
    """The priority of a bulk message whose KB has `backlog` documents waiting in the bulk lane (0 is first):
    a KB's first 50 at 0, the next 50 at 3, then 6, and the rest of a large import at 9."""
    return PRIORITY_STEPS[min(backlog // BACKLOG_PER_PRIORITY, len(PRIORITY_STEPS) - 1)]


def broker_lists(lane: Lane) -> list[str]:
    """The Redis lists that hold the lane's waiting messages, one per priority step."""
    queue = QUEUE_OF_LANE[lane]
    return [queue] + [f"{queue}{PRIORITY_KEY_SEPARATOR}{step}" for step in PRIORITY_STEPS if step]


def enqueue_ingest(app: Celery, document_ids: list[str], lane: Lane = Lane.INTERACTIVE, priority: int = 0) -> None:
    app.send_task(INGEST_DOCUMENTS, args=[document_ids], queue=QUEUE_OF_LANE[lane], priority=priority)


def enqueue_ingest_range(
    app: Celery, document_id: str, version: int, position: int, *, lane: Lane, priority: int
) -> None:
    app.send_task(INGEST_RANGE, args=[document_id, version, position], queue=QUEUE_OF_LANE[lane], priority=priority)


def enqueue_reindex_document(app: Celery, job_id: str, document_id: str, priority: int = 0) -> None:
    """A re-index rebuilds a whole KB: bulk work."""
    app.send_task(REINDEX_DOCUMENT, args=[job_id, document_id], queue=BULK_QUEUE, priority=priority)


def enqueue_finish_reindex(app: Celery, job_id: str) -> None:
    # Ahead of other KBs' bulk work: the KB's new generation waits only for this check and switch.
    app.send_task(FINISH_REINDEX, args=[job_id], queue=BULK_QUEUE, priority=0)


def enqueue_delete_kb(app: Celery, job_id: str) -> None:
    # One long task (every document of the KB): in the bulk lane, so that uploads do not wait for it.
    app.send_task(DELETE_KB, args=[job_id], queue=BULK_QUEUE, priority=0)


def enqueue_tune(app: Celery, job_id: str) -> None:
    # One task of seconds to minutes (every question of the set): in the bulk lane, ahead of bulk documents, so
    # that uploads do not wait for it.
    app.send_task(TUNE_KB, args=[job_id], queue=BULK_QUEUE, priority=0)


class IngestQueue:
    """Sends documents to be ingested on their lane, a bulk one at its KB's backlog's priority; or, without
    fair queueing, every one to the one queue in arrival order."""

    def __init__(self, app: Celery, ledger: DocumentLedger, fair: bool) -> None:
        self._app = app
        self._ledger = ledger
        self._fair = fair

    def send(self, document_id: str, kb_id: str, lane: Lane) -> None:
        """One document: a batch of one (a bulk one at its KB's backlog's priority, itself included)."""
        self.send_batch(kb_id, [(document_id, lane)])

    def send_batch(self, kb_id: str, documents: Sequence[tuple[str, Lane]]) -> None:
        """Send a batch's documents of one KB, (id, lane) in order, all recorded already: consecutive documents of
        a lane share a message, `DOCUMENTS_PER_MESSAGE` at most. The KB's bulk backlog is counted once, and a bulk
        message gets the priority `send` would have given its first document had the documents been recorded and
        sent one by one (the backlog before the batch, plus its place in the batch). The first failure to send is
        raised: the rest are left to the sweeper too."""
        priorities = self._bulk_priorities(kb_id, [document_id for document_id, lane in documents if lane == Lane.BULK])
        for lane, run in groupby(documents, key=lambda document: self._queue_lane(document[1])):
            ids = [document_id for document_id, _ in run]
            for start in range(0, len(ids), DOCUMENTS_PER_MESSAGE):
                message = ids[start : start + DOCUMENTS_PER_MESSAGE]
                enqueue_ingest(self._app, message, lane, priorities.get(message[0], 0))

    def _queue_lane(self, lane: Lane) -> Lane:
        """The lane whose queue a document of `lane` waits in: its own, or without fair queueing the one queue."""
        return lane if self._fair else Lane.INTERACTIVE

    def _bulk_priorities(self, kb_id: str, bulk: list[str]) -> dict[str, int]:
        """The priority of each of a batch's bulk documents (none without fair queueing: one queue for all)."""
        if not self._fair or not bulk:
            return {}
        before_batch = max(self._ledger.bulk_backlog(kb_id) - len(bulk), 0)
        return {document_id: bulk_priority(before_batch + place) for place, document_id in enumerate(bulk, 1)}

    def send_again(self, document_ids: list[str]) -> list[str]:
        """Queue pending documents again, each on the lane it was queued on before (an upload handed back still
        goes ahead of imports), a KB's together; returns those that were still pending and were sent."""
        places = self._ledger.queue_places(document_ids)
        by_kb: dict[str, list[tuple[str, Lane]]] = {}
        for document_id, place in places.items():
            by_kb.setdefault(place.kb_id, []).append((document_id, place.lane))
        for kb_id, documents in by_kb.items():
            self.send_batch(kb_id, documents)
        return list(places)

    def send_range(self, document_id: str, version: int, position: int) -> None:
        """A long document's range is a share of one big document: bulk work, so that its tens of ranges do
        not stand before other KBs' single uploads; at the bulk lane's first priority step, so that they go
        ahead of the tail of large imports (the document itself was taken on its own lane)."""
        lane = Lane.BULK if self._fair else Lane.INTERACTIVE
        enqueue_ingest_range(self._app, document_id, version, position, lane=lane, priority=0)
