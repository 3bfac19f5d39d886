"""A KB deletion job against the real metadata database and blob store: accepted by the api's service, run by
the worker's deleter in batches, failed with its reason and resumed by DELETE again. The index is a small
hand-written fake that can refuse once (the retriever has its own tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.jobs import job_item, running_job
from ragkb_api.kb_deletion import KbDeletionService
from ragkb_core.blobs import BlobStore
from ragkb_core.db.engine import build_engine, build_session_factory, migrate_to_head, transaction
from ragkb_core.db.models import Document, Job, JobItem, JobItemStatus, JobStatus, KnowledgeBase, utcnow
from ragkb_core.errors import Conflict, Unavailable
from ragkb_core.ids import new_id
from ragkb_core.jobs import UPLOAD
from ragkb_core.queue import DELETE_KB
from ragkb_core.settings import DatabaseSettings
from ragkb_worker.documents import DocumentLedger
from ragkb_worker.kb_deletion import KbDeleter

pytestmark = pytest.mark.integration


class FlakyIndex:
    """Drops KBs; refuses the first `failures` calls as an unreachable retriever would."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.dropped: list[str] = []

    def drop_kb(self, kb_id: str) -> None:
        if self.failures:
            self.failures -= 1
            raise Unavailable("the retriever did not answer")
        self.dropped.append(kb_id)


class RecordingQueue:
    """Stands in for the Celery app: records the tasks sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any]]] = []

    def send_task(self, name: str, args: list[Any], queue: str) -> None:
        self.sent.append((name, args))


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to_head(engine)
    factory = build_session_factory(engine)
    yield factory
    with transaction(factory) as session:  # PostgreSQL's database is shared by the session's tests
        session.execute(delete(JobItem))
        session.execute(delete(Job))
        session.execute(delete(Document))
        session.execute(delete(KnowledgeBase))
    engine.dispose()


def add_kb(sessions: sessionmaker[Session]) -> str:
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    return kb_id


def add_document(sessions: sessionmaker[Session], blobs: BlobStore, kb_id: str, source_id: str, text: str) -> str:
    document_id, sha = new_id(), blobs.put(text.encode())
    with transaction(sessions) as session:
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
    return document_id


def test_a_failed_deletion_leaves_the_kb_deleting_and_delete_again_finishes_it(
    sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    blobs, index, queue = BlobStore(tmp_path / "blobs"), FlakyIndex(failures=1), RecordingQueue()
    doomed, kept = add_kb(sessions), add_kb(sessions)
    documents = [add_document(sessions, blobs, doomed, f"doc-{n}.md", f"only in the doomed KB {n}") for n in range(5)]
    add_document(sessions, blobs, doomed, "shared.md", "in both KBs")
    kept_document = add_document(sessions, blobs, kept, "shared.md", "in both KBs")
    waiting_sync = _sync_job_waiting_for_an_upload(sessions, doomed)
    service = KbDeletionService(sessions, queue)
    deleter = KbDeleter(sessions, index, blobs, batch=2)

    job_id = service.start(doomed)
    assert queue.sent == [(DELETE_KB, [job_id])]
    assert _job(sessions, waiting_sync).status == JobStatus.CANCELLED
    # The worker takes none of its documents from now on.
    assert DocumentLedger(sessions, lease_s=60).claim(documents[0]) is None

    assert deleter.run(job_id) == "failed"
    failed = _job(sessions, job_id)
    assert failed.status == JobStatus.FAILED
    assert "the retriever did not answer" in failed.errors[0]
    with sessions() as session:
        assert session.get_one(KnowledgeBase, doomed).deletion_job_id == job_id  # still deleting
    assert service.start(doomed) == job_id  # resumed, not a second job
    assert _job(sessions, job_id).status == JobStatus.RUNNING
    assert deleter.run(job_id) == "deleted"
    assert deleter.run(job_id) == "skipped"  # a second copy of the task finds nothing to do

    finished = _job(sessions, job_id)
    assert (finished.status, finished.errors) == (JobStatus.SUCCEEDED, [])
    with sessions() as session:
        assert session.get(KnowledgeBase, doomed) is None
        assert session.scalars(select(Document.id).where(Document.kb_id == doomed)).all() == []
        items = session.scalars(select(JobItem.status).where(JobItem.job_id == job_id)).all()
        shared_sha = session.get_one(Document, kept_document).blob_sha256
    assert sorted(items) == [JobItemStatus.DONE] * 6
    assert index.dropped == [doomed]  # the first call was refused
    assert blobs.exists(shared_sha)
    assert [sha for sha in _blob_files(blobs) if sha != shared_sha] == []


def test_a_deletion_waits_for_a_running_reindex(sessions: sessionmaker[Session]) -> None:
    kb_id = add_kb(sessions)
    with transaction(sessions) as session:
        session.add(running_job(new_id(), "reindex", kb_id, utcnow()))
    with pytest.raises(Conflict, match="re-index"):
        KbDeletionService(sessions, RecordingQueue()).start(kb_id)
    with sessions() as session:
        assert session.get_one(KnowledgeBase, kb_id).deletion_job_id is None


def _sync_job_waiting_for_an_upload(sessions: sessionmaker[Session], kb_id: str) -> str:
    job_id = new_id()
    with transaction(sessions) as session:
        session.add(running_job(job_id, "sync", kb_id, utcnow()))
        session.flush()
        session.add(job_item(job_id, kb_id, "new.md", UPLOAD, sha="0" * 64))
    return job_id


def _job(sessions: sessionmaker[Session], job_id: str) -> Job:
    with sessions() as session:
        return session.get_one(Job, job_id)


def _blob_files(blobs: BlobStore) -> list[str]:
    return [path.name for path in blobs.root.rglob("*") if path.is_file()]
