"""Fair queueing on the real broker: documents recorded and sent as the api sends them (ledger + IngestQueue), taken
by a real Celery worker consuming the two lanes as the ragkb worker does; the sweeper sending a document
whose worker died back to the lane it came from, and one whose message died with a restarted Redis at its next
sweep."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_core.settings import RedisSettings
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import KnowledgeBase
from ragkb_store.ledger import DocumentLedger, LaneCounts, NewVersion, RecordedVersion
from ragkb_store.ledger.jobs import add_items, start_job
from ragkb_store.queue import (
    BULK_QUEUE,
    DOCUMENTS_PER_MESSAGE,
    INGEST_DOCUMENTS,
    WORKER_QUEUES,
    IngestQueue,
    broker_lists,
    make_celery,
)
from ragkb_store.states import ItemAction, JobKind, Lane
from ragkb_worker.settings import TaskSettings
from ragkb_worker.sweeper import Sweeper
from tests.support.in_process import migrated_sessions
from tests.support.redis_db import HOST, PORT, private_redis_db
from tests.support.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.integration

TAKEN = "test:taken"  # the Redis list the recording task appends each document id to, in the order it ran


@dataclass
class Lanes:
    sessions: sessionmaker[Session]
    ledger: DocumentLedger
    broker: redis.Redis
    app: Celery
    queue: IngestQueue

    def add_kb(self) -> str:
        kb_id = new_id()
        with transaction(self.sessions) as session:
            session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
        return kb_id

    def upload(self, kb_id: str, count: int, lane: Lane) -> list[str]:
        """`count` new documents recorded and sent on `lane`, as the api does; their ids."""
        ids = []
        for _ in range(count):
            document = self.ledger.record_version(new_version(kb_id, lane)).document
            self.queue.send(document.id, kb_id, Lane(document.lane))
            ids.append(document.id)
        return ids

    def run_worker_until(self, count: int) -> list[str]:
        """A Celery worker on both lanes (interactive first), one task at a time, until `count` ran; their ids."""
        with start_worker(self.app, pool="solo", concurrency=1, perform_ping_check=False, queues=list(WORKER_QUEUES)):
            for _ in range(count):
                assert self.broker.blpop([f"{TAKEN}:signal"], timeout=60) is not None, "the worker took nothing"
        return [raw.decode() for raw in self.broker.lrange(TAKEN, 0, -1)]


def new_version(kb_id: str, lane: Lane) -> NewVersion:
    source_id = new_id()
    return NewVersion(
        kb_id=kb_id,
        source_id=source_id,
        title=None,
        default_title=source_id,
        filename=None,
        media_type="text/markdown",
        size_bytes=1,
        blob_sha256=source_id.ljust(64, "0"),
        labels=[],
        metadata={},
        doc_type="knowledge",
        lane=lane,
    )


@pytest.fixture
def lanes(database_url: str) -> Iterator[Lanes]:
    try:
        redis.Redis(host=HOST, port=PORT).ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {HOST}:{PORT}: {exc}")
    with migrated_sessions(database_url) as sessions, private_redis_db() as broker:
        db = broker.connection_pool.connection_kwargs["db"]
        lanes = lanes_on(sessions, broker, f"redis://{HOST}:{PORT}/{db}")
        yield lanes
        lanes.app.close()


@pytest.fixture
def restartable(database_url: str, tmp_path: Path) -> Iterator[tuple[Lanes, RedisServer]]:
    """Lanes on a redis-server of the test's own, which it may restart (losing every message)."""
    with migrated_sessions(database_url) as sessions, redis_server(tmp_path / "redis") as server:
        lanes = lanes_on(sessions, server.client(), server.url)
        yield lanes, server
        lanes.app.close()


def lanes_on(sessions: sessionmaker[Session], broker: redis.Redis, url: str) -> Lanes:
    app = make_celery(RedisSettings(url=url))

    # Stands in for the ingest task: records the order documents are taken in (the pipeline is not the point).
    @app.task(name=INGEST_DOCUMENTS, shared=False)  # type: ignore[untyped-decorator]
    def record(document_ids: list[str]) -> None:
        for document_id in document_ids:
            broker.rpush(TAKEN, document_id)
            broker.rpush(f"{TAKEN}:signal", 1)

    ledger = DocumentLedger(sessions, lease_s=60)
    return Lanes(sessions, ledger, broker, app, IngestQueue(app, ledger, fair=True))


def waiting_messages(broker: redis.Redis, lane: Lane) -> list[tuple[list[str], int]]:
    """(document ids, priority) of the messages waiting in the lane's lists."""
    found = []
    for name in broker_lists(lane):
        for raw in reversed(broker.lrange(name, 0, -1)):  # kombu pushes on the left: the oldest is last
            message = json.loads(raw)
            (document_ids,) = json.loads(base64.b64decode(message["body"]))[0]
            found.append((document_ids, message["properties"]["priority"]))
    return found


def waiting(broker: redis.Redis, lane: Lane) -> list[tuple[str, int]]:
    """(document id, priority of its message) of the documents waiting in the lane's lists."""
    return [(document_id, priority) for ids, priority in waiting_messages(broker, lane) for document_id in ids]


def test_an_upload_is_taken_before_another_kbs_import_queued_earlier(lanes: Lanes) -> None:
    importing, uploading = lanes.add_kb(), lanes.add_kb()
    imported = lanes.upload(importing, 30, Lane.BULK)
    uploaded = lanes.upload(uploading, 2, Lane.INTERACTIVE)
    assert lanes.ledger.queue_counts(importing)[Lane.BULK] == LaneCounts(pending=30)
    assert lanes.ledger.queue_counts(uploading)[Lane.INTERACTIVE] == LaneCounts(pending=2)
    taken = lanes.run_worker_until(32)
    assert taken[:2] == uploaded
    assert sorted(taken[2:]) == sorted(imported)  # every document of the import ran, none twice


def test_a_small_bulk_job_goes_ahead_of_a_large_ones_tail(lanes: Lanes) -> None:
    large, small = lanes.add_kb(), lanes.add_kb()
    large_ids = lanes.upload(large, 120, Lane.BULK)
    small_ids = lanes.upload(small, 5, Lane.BULK)
    taken = lanes.run_worker_until(125)
    # The large KB's first 50 share priority 0 with the small KB's 5; its other 70 come after all of them.
    assert max(taken.index(document_id) for document_id in small_ids) < 55
    assert taken[55:] == [document_id for document_id in taken if document_id in large_ids[50:]]


def test_a_batch_sent_at_once_is_a_message_per_eight_documents_at_the_priority_of_its_first(lanes: Lanes) -> None:
    one_by_one, at_once = lanes.add_kb(), lanes.add_kb()
    lanes.upload(one_by_one, 40, Lane.BULK)
    lanes.upload(at_once, 40, Lane.BULK)
    singles = lanes.upload(one_by_one, 70, Lane.BULK)
    outcomes = lanes.ledger.record_versions([new_version(at_once, Lane.BULK) for _ in range(70)])
    batch = [outcome.document.id for outcome in outcomes if isinstance(outcome, RecordedVersion)]
    lanes.queue.send_batch(at_once, [(document_id, Lane.BULK) for document_id in batch])

    single_priority = dict(waiting(lanes.broker, Lane.BULK))
    messages = [(ids, priority) for ids, priority in waiting_messages(lanes.broker, Lane.BULK) if ids[0] in batch]
    assert sorted(ids for ids, _ in messages) == sorted(
        batch[start : start + DOCUMENTS_PER_MESSAGE] for start in range(0, len(batch), DOCUMENTS_PER_MESSAGE)
    )
    # A message waits at the priority its first document would have had, sent alone: the KB's 41st to 50th
    # documents at 0 (fewer than 50 waiting before them), the next 50 at 3, the rest at 6.
    for ids, priority in messages:
        assert priority == single_priority[singles[batch.index(ids[0])]]
    assert sorted(priority for _, priority in messages) == [0, 0, 3, 3, 3, 3, 3, 3, 6]


def test_the_uploads_a_sync_waits_for_are_bulk_work(lanes: Lanes) -> None:
    kb_id = lanes.add_kb()
    with transaction(lanes.sessions) as session:
        job_id = start_job(session, JobKind.SYNC, kb_id)
        add_items(session, job_id, kb_id, ItemAction.UPLOAD, ["folder/a.md"])
    # Both sent as single uploads are; the one the sync's plan asked for goes to the bulk lane.
    synced = lanes.ledger.record_version(replace(new_version(kb_id, Lane.INTERACTIVE), source_id="folder/a.md"))
    other = lanes.ledger.record_version(new_version(kb_id, Lane.INTERACTIVE))
    assert (synced.document.lane, other.document.lane) == (Lane.BULK, Lane.INTERACTIVE)
    assert lanes.ledger.queue_counts(kb_id) == {
        Lane.INTERACTIVE: LaneCounts(pending=1),
        Lane.BULK: LaneCounts(pending=1),
    }


def test_without_fair_queueing_every_document_waits_in_one_queue_in_order(lanes: Lanes) -> None:
    fifo = IngestQueue(lanes.app, lanes.ledger, fair=False)
    kb_id = lanes.add_kb()
    ids = []
    for lane in (Lane.BULK, Lane.INTERACTIVE, Lane.BULK):
        document = lanes.ledger.record_version(new_version(kb_id, lane)).document
        fifo.send(document.id, kb_id, lane)
        ids.append(document.id)
    assert lanes.broker.llen(BULK_QUEUE) == 0
    assert lanes.run_worker_until(3) == ids


def test_the_sweeper_queues_a_document_whose_worker_died_on_its_own_lane(lanes: Lanes, tmp_path: Path) -> None:
    kb_id = lanes.add_kb()
    # Recorded without being sent, then claimed by a worker that died at once (its lease is already over).
    dying = DocumentLedger(lanes.sessions, lease_s=0)
    by_lane = {}
    for lane in Lane:
        document_id = lanes.ledger.record_version(new_version(kb_id, lane)).document.id
        assert dying.claim(document_id) is not None
        by_lane[lane] = document_id
    sweeper = sweeper_of(lanes, tmp_path)
    assert sorted(sweeper.sweep_once()) == sorted(by_lane.values())
    assert waiting(lanes.broker, Lane.INTERACTIVE) == [(by_lane[Lane.INTERACTIVE], 0)]
    assert waiting(lanes.broker, Lane.BULK) == [(by_lane[Lane.BULK], 0)]


def test_a_document_sent_just_before_redis_restarted_is_sent_again_at_the_next_sweep(
    restartable: tuple[Lanes, RedisServer], tmp_path: Path
) -> None:
    lanes, server = restartable
    sweeper = sweeper_of(lanes, tmp_path)
    kb_id = lanes.add_kb()
    assert sweeper.sweep_once() == []  # the first broker: its message waits
    lost = lost_in_a_restart_within_its_second(lanes, server, kb_id)
    # Early in the next second: Redis's uptime (whole seconds, from the start's second) says 1 s, which put the
    # start before the document and kept it waiting for the sweeps' drift or the pending re-queue (300 s).
    sleep_until_fraction(0.1)
    assert sorted(sweeper.sweep_once()) == sorted(lost)
    assert sorted(waiting(lanes.broker, Lane.INTERACTIVE)) == sorted((document_id, 0) for document_id in lost)
    assert sweeper.sweep_once() == []  # once per broker start


def lost_in_a_restart_within_its_second(lanes: Lanes, server: RedisServer, kb_id: str) -> list[str]:
    """Send a document at 0.3 s into a second and restart Redis within that second (a few tries on a loaded
    machine); the documents whose message went with it (the last one among them)."""
    lost: list[str] = []
    for _ in range(5):
        sleep_until_fraction(0.3)
        second = int(time.time())
        lost += lanes.upload(kb_id, 1, Lane.INTERACTIVE)
        server.restart()
        assert waiting(lanes.broker, Lane.INTERACTIVE) == []
        if int(time.time()) == second:
            return lost
    raise AssertionError("Redis never restarted within the second of the upload")


def sleep_until_fraction(fraction: float) -> None:
    """Sleep until `fraction` of a second past a whole second of the wall clock (which Redis counts in)."""
    time.sleep((fraction - time.time() % 1) % 1)


def sweeper_of(lanes: Lanes, blob_root: Path) -> Sweeper:
    return Sweeper(
        ledger=lanes.ledger,
        blobs=BlobStore(blob_root),
        queue=lanes.queue,
        redis=lanes.broker,
        settings=TaskSettings(),
        upload_wait_s=3600,
    )
