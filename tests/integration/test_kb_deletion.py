"""A KB deletion job on the metadata database (SQLite and PostgreSQL), with real parts only: accepted by the
api's service, which queues its task through Celery on Redis; run by the worker's deleter in batches against
the retriever's internal API (its Litestar routes on a Qdrant Edge index, served in-process) through
RetrieverClient; failed with its reason while that client finds no retriever, and resumed by DELETE again.
The same behaviour over the real processes: tests/e2e/test_kb_delete.py."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.knowledge_bases.deletion import KbDeletionService
from ragkb_core.contracts import ChunkPoint, DocumentPoints, SparseTerms
from ragkb_core.errors import Conflict, NotFound, Unavailable
from ragkb_core.ids import new_id
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import (
    EmbeddingSettings,
    QdrantSettings,
    RedisSettings,
    RetrieverClientSettings,
)
from ragkb_models import EmbedderPool
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.indexing import IndexService
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, JobItem, KnowledgeBase
from ragkb_store.ledger import DocumentLedger
from ragkb_store.ledger.jobs import add_items, start_job
from ragkb_store.queue import BULK_QUEUE, DELETE_KB, make_celery
from ragkb_store.states import ItemAction, JobItemStatus, JobKind, JobStatus
from ragkb_worker.failures import failure_reason
from ragkb_worker.kb_deletion import KbDeleter
from tests.support.in_process import in_process_retriever
from tests.support.redis_db import private_redis_db

pytestmark = [
    pytest.mark.integration,
    # The retriever's handlers use Litestar 2's inferred parameter and dependency styles (deprecated for 3);
    # building the app inside the test process makes that visible to pytest's warnings-as-errors.
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
]

TOKEN = "kb-deletion-test-token"
DIM = 8  # the test's KB indexes are created with this vector size: no embedding model is loaded


@pytest.fixture
def index(tmp_path: Path) -> Iterator[EdgeIndex]:
    edge = EdgeIndex(QdrantSettings(path=tmp_path / "index"))
    yield edge
    edge.close()


@pytest.fixture
def retriever(index: EdgeIndex) -> Iterator[RetrieverClient]:
    """RetrieverClient answered in-process by the retriever's internal index routes."""
    # The packaged embedding models load on first use only; nothing here asks for one.
    service = IndexService(index, EmbedderPool(EmbeddingSettings()))
    with in_process_retriever(service, TOKEN) as client:
        yield client


@dataclass(frozen=True)
class Stores:
    """Where a KB's documents live: metadata rows, originals, and the index behind the retriever."""

    sessions: sessionmaker[Session]
    blobs: BlobStore
    index: EdgeIndex
    retriever: RetrieverClient


@pytest.fixture
def stores(sessions: sessionmaker[Session], index: EdgeIndex, retriever: RetrieverClient, tmp_path: Path) -> Stores:
    return Stores(sessions, BlobStore(tmp_path / "blobs"), index, retriever)


@pytest.fixture
def no_retriever() -> Iterator[RetrieverClient]:
    """RetrieverClient for a retriever that is down: nothing listens on its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RetrieverClient(RetrieverClientSettings(url=f"http://127.0.0.1:{port}", timeout_s=5), SecretStr(TOKEN))
    yield client
    client.close()


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """A Redis database of this test's own: no running stack's worker takes the tasks it inspects."""
    try:
        redis.Redis(host="127.0.0.1", port=6379).ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at 127.0.0.1:6379: {exc}")
    with private_redis_db() as connection:
        yield connection


def queued(broker: redis.Redis, job_ids: set[str]) -> list[tuple[str, list[Any]]]:
    """The tasks in the queue (name, args) that name one of `job_ids`, oldest first, as Celery sent them."""
    tasks = []
    for raw in reversed(broker.lrange(BULK_QUEUE, 0, -1)):  # kombu pushes on the left
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        if set(map(str, args)) & job_ids:
            tasks.append((message["headers"]["task"], args))
    return tasks


def deletion_service(sessions: sessionmaker[Session], broker: redis.Redis) -> KbDeletionService:
    db = broker.connection_pool.connection_kwargs["db"]
    return KbDeletionService(sessions, make_celery(RedisSettings(url=f"redis://127.0.0.1:6379/{db}")))


def add_kb(stores: Stores) -> str:
    kb_id = new_id()
    with transaction(stores.sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    stores.index.create_kb(kb_id, dense_size=DIM)
    return kb_id


def add_document(stores: Stores, kb_id: str, source_id: str, text: str) -> str:
    """A document as an ingest leaves it: its row, its original in the blob store and its chunk in the index."""
    document_id, sha = new_id(), stores.blobs.put(text.encode())
    with transaction(stores.sessions) as session:
        session.add(
            Document(
                id=document_id,
                kb_id=kb_id,
                source_id=source_id,
                title=source_id,
                media_type="text/markdown",
                size_bytes=len(text),
                blob_sha256=sha,
            )
        )
    chunk = ChunkPoint(
        ordinal=0,
        text=text,
        dense=[1.0] * DIM,
        sparse=SparseTerms(indices=[1], values=[1.0]),
    )
    stores.retriever.write_document(
        DocumentPoints(
            kb_id=kb_id,
            document_id=document_id,
            source_id=source_id,
            version=1,
            title=source_id,
            analyzer_version="test/1",
            chunks=[chunk],
        )
    )
    return document_id


def test_a_failed_deletion_leaves_the_kb_deleting_and_delete_again_finishes_it(
    stores: Stores, no_retriever: RetrieverClient, broker: redis.Redis
) -> None:
    sessions, blobs, retriever = stores.sessions, stores.blobs, stores.retriever
    doomed, kept = add_kb(stores), add_kb(stores)
    documents = [add_document(stores, doomed, f"doc-{n}.md", f"only in the doomed KB {n}") for n in range(5)]
    add_document(stores, doomed, "shared.md", "in both KBs")
    kept_document = add_document(stores, kept, "shared.md", "in both KBs")
    waiting_sync = _sync_job_waiting_for_an_upload(sessions, doomed)
    service = deletion_service(sessions, broker)

    job_id = service.start(doomed)
    assert queued(broker, {job_id}) == [(DELETE_KB, [job_id])]
    assert _job(sessions, job_id).status == JobStatus.RUNNING
    assert _job(sessions, waiting_sync).status == JobStatus.CANCELLED
    # The worker takes none of its documents from now on.
    assert DocumentLedger(sessions, lease_s=60).claim(documents[0]) is None

    # The retriever is down: the job fails with that reason before anything is deleted; the KB stays deleting.
    # (The task's failure policy: raised, then the job failed with the user-facing reason.)
    down = KbDeleter(sessions, no_retriever, blobs, batch=2)
    with pytest.raises(Unavailable) as raised:
        down.run(job_id)
    assert down.fail(job_id, failure_reason(raised.value, "deleting the knowledge base")) == "failed"
    failed = _job(sessions, job_id)
    assert failed.status == JobStatus.FAILED
    assert "retriever unreachable" in failed.errors[0] and "DELETE it again" in failed.errors[0]
    with sessions() as session:
        assert session.get_one(KnowledgeBase, doomed).deletion_job_id == job_id  # still deleting
        assert len(session.scalars(select(Document.id).where(Document.kb_id == doomed)).all()) == 6
    assert retriever.count_points(doomed) == 6

    # DELETE again: the same job runs again (queued once more), and finishes with the retriever up.
    assert service.start(doomed) == job_id  # resumed, not a second job
    assert _job(sessions, job_id).status == JobStatus.RUNNING
    assert queued(broker, {job_id}) == [(DELETE_KB, [job_id])] * 2
    deleter = KbDeleter(sessions, retriever, blobs, batch=2)
    assert deleter.run(job_id) == "deleted"
    assert deleter.run(job_id) == "skipped"  # the second copy of the task finds nothing to do

    finished = _job(sessions, job_id)
    assert (finished.status, finished.errors) == (JobStatus.SUCCEEDED, [])
    with sessions() as session:
        assert session.get(KnowledgeBase, doomed) is None
        assert session.scalars(select(Document.id).where(Document.kb_id == doomed)).all() == []
        items = session.scalars(select(JobItem.status).where(JobItem.job_id == job_id)).all()
        shared_sha = session.get_one(Document, kept_document).blob_sha256
    assert sorted(items) == [JobItemStatus.DONE] * 6
    with pytest.raises(NotFound):
        retriever.count_points(doomed)
    assert retriever.count_points(kept) == 1
    assert blobs.exists(shared_sha)
    assert [sha for sha in _blob_files(blobs) if sha != shared_sha] == []


def test_a_deletion_waits_for_a_running_reindex(stores: Stores, broker: redis.Redis) -> None:
    sessions, kb_id = stores.sessions, add_kb(stores)
    with transaction(sessions) as session:
        reindex = start_job(session, JobKind.REINDEX, kb_id)
    queue_length = broker.llen(BULK_QUEUE)
    with pytest.raises(Conflict, match=f"re-index .*{reindex}"):
        deletion_service(sessions, broker).start(kb_id)
    with sessions() as session:
        assert session.get_one(KnowledgeBase, kb_id).deletion_job_id is None
        assert session.scalars(select(Job.kind).where(Job.kb_id == kb_id)).all() == ["reindex"]
    assert broker.llen(BULK_QUEUE) == queue_length  # no task was sent


def _sync_job_waiting_for_an_upload(sessions: sessionmaker[Session], kb_id: str) -> str:
    with transaction(sessions) as session:
        job_id = start_job(session, JobKind.SYNC, kb_id)
        add_items(session, job_id, kb_id, ItemAction.UPLOAD, ["new.md"], shas={"new.md": "0" * 64})
    return job_id


def _job(sessions: sessionmaker[Session], job_id: str) -> Job:
    with sessions() as session:
        return session.get_one(Job, job_id)


def _blob_files(blobs: BlobStore) -> list[str]:
    return [path.name for path in blobs.root.rglob("*") if path.is_file()]
