"""The ledger of jobs: how a job and its items are recorded and settled, for every kind (sync, retry,
re-index, KB deletion). The functions take the caller's session: each is one step of a transaction the
caller commits whole (a sync's job and items with its plan, a KB deletion's job with the KB marked
deleting, a batch of deleted rows with their items). How items settle from their documents is
ragkb_store.progress."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from ragkb_core.ids import new_id
from ragkb_store.db.models import Document, Job, JobItem, KnowledgeBase, utcnow
from ragkb_store.ledger.documents import DocumentScope, send_back_to_pending
from ragkb_store.progress import cancel_job, finish_if_settled
from ragkb_store.states import (
    ACTIVE_JOB_STATUSES,
    FINISHED_JOB_STATUSES,
    DocumentStatus,
    ItemAction,
    JobItemStatus,
    JobKind,
    JobStatus,
    Lane,
    lane_of_batch,
)


def start_job(
    session: Session, kind: JobKind, kb_id: str, *, unchanged: int = 0, params: dict[str, Any] | None = None
) -> str:
    """A job that runs from now (sync, retry, re-index, KB deletion); `params` is what it was asked to do.
    Returns its id; its items follow (add_items)."""
    job_id, now = new_id(), utcnow()
    session.add(
        Job(
            id=job_id,
            kind=kind,
            kb_id=kb_id,
            status=JobStatus.RUNNING,
            params=params or {},
            counts={"unchanged": unchanged},
            errors=[],
            created_at=now,
            started_at=now,
        )
    )
    session.flush()
    return job_id


def add_items(
    session: Session,
    job_id: str,
    kb_id: str,
    action: ItemAction,
    source_ids: Iterable[str],
    *,
    shas: dict[str, str] | None = None,
    base_versions: dict[str, int] | None = None,
) -> None:
    """One open item per document the job waits for or acts on (an upload item settles when a version newer
    than its base, with its sha256, is indexed or failed)."""
    now = utcnow()
    session.add_all(
        JobItem(
            job_id=job_id,
            kb_id=kb_id,
            source_id=source_id,
            action=action,
            sha256=(shas or {}).get(source_id),
            base_version=(base_versions or {}).get(source_id),
            status=JobItemStatus.PENDING,
            updated_at=now,
        )
        for source_id in source_ids
    )


def add_failed_item(
    session: Session, job_id: str, kb_id: str, source_id: str, *, action: ItemAction, message: str
) -> None:
    """An item that failed before it could start (a manifest entry the server could not judge)."""
    session.add(
        JobItem(
            job_id=job_id,
            kb_id=kb_id,
            source_id=source_id,
            action=action,
            status=JobItemStatus.FAILED,
            message=message,
            updated_at=utcnow(),
        )
    )


def settle_item(
    session: Session, job_id: str, source_id: str, action: ItemAction, message: str | None, *, only_open: bool = True
) -> None:
    """The document's item of the job done (no message) or failed (the reason). A document rebuilt after a
    failure settles again (`only_open=False`)."""
    open_only = (JobItem.status == JobItemStatus.PENDING,) if only_open else ()
    session.execute(
        update(JobItem)
        .where(JobItem.job_id == job_id, JobItem.source_id == source_id, JobItem.action == action, *open_only)
        .values(status=JobItemStatus.FAILED if message else JobItemStatus.DONE, message=message, updated_at=utcnow())
    )


def requeue_failed_documents(
    session: Session, job_id: str, kb_id: str, scope: DocumentScope, interactive_max_documents: int
) -> tuple[list[str], Lane]:
    """Every failed document of the KB inside the scope back to pending, each an item of the retry job; their
    ids, and the lane they wait in (bulk when there are more than `interactive_max_documents`)."""
    query = select(Document).where(Document.kb_id == kb_id, Document.status == DocumentStatus.FAILED)
    failed = [document for document in session.scalars(query) if scope.admits(document.labels, document.doc_type)]
    lane = lane_of_batch(len(failed), interactive_max_documents)
    for document in failed:
        send_back_to_pending(session, document, lane)
    add_items(
        session,
        job_id,
        kb_id,
        ItemAction.RETRY,
        [document.source_id for document in failed],
        shas={document.source_id: document.blob_sha256 for document in failed},
    )
    return [document.id for document in failed], lane


def record_params(session: Session, job_id: str, **values: Any) -> None:
    job = session.get_one(Job, job_id)
    # A new dict: the JSON column notices a replaced value, not one changed in place.
    job.params = {**job.params, **values}


def succeed_with_params(session: Session, job_id: str, params: dict[str, Any]) -> bool:
    """A job that computes its answer in one task (a tune) succeeds with its result in its params; False when it
    had already finished meanwhile (cancelled), and then nothing is written."""
    job = session.get_one(Job, job_id)
    if job.status in FINISHED_JOB_STATUSES:
        return False
    job.params = params
    job.status, job.finished_at = JobStatus.SUCCEEDED, utcnow()
    return True


# -- KB deletion -------------------------------------------------------------------------------------------


def accept_kb_deletion(session: Session, kb: KnowledgeBase) -> str:
    """Mark the KB deleting and record its deletion job, one `delete` item per document, and cancel the sync
    and retry jobs that wait for uploads the KB will refuse. Returns the job's id."""
    job_id = start_job(session, JobKind.KB_DELETE, kb.id)
    source_ids = session.scalars(select(Document.source_id).where(Document.kb_id == kb.id))
    add_items(session, job_id, kb.id, ItemAction.DELETE, list(source_ids))
    kb.deletion_job_id = job_id
    waiting = session.scalars(
        select(Job).where(
            Job.kb_id == kb.id,
            Job.kind.not_in([JobKind.INGEST, JobKind.KB_DELETE]),
            Job.status.in_(ACTIVE_JOB_STATUSES),
        )
    )
    for job in list(waiting):
        cancel_job(session, job)
    return job_id


def resume_failed_job(session: Session, job: Job) -> None:
    """A failed job runs again from where it stopped: its done items stay done."""
    job.status, job.finished_at, job.errors = JobStatus.RUNNING, None, []


def delete_document_rows(session: Session, job_id: str, documents: dict[str, str]) -> None:
    """Rows gone (`documents`: id → source_id) and their `delete` items of the job done, together."""
    session.execute(delete(Document).where(Document.id.in_(list(documents))))
    _settle_delete_items(session, job_id, list(documents.values()))


def finish_kb_deletion(session: Session, job_id: str, kb_id: str) -> None:
    """The KB row gone, and the job done: items of documents deleted another way meanwhile count as
    deleted, and the records of ingests that will never run are closed."""
    session.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb_id))
    _settle_delete_items(session, job_id, None)
    session.execute(
        update(Job)
        .where(Job.kb_id == kb_id, Job.kind == JobKind.INGEST, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(status=JobStatus.CANCELLED, finished_at=utcnow(), errors=["the knowledge base was deleted"])
    )
    finish_if_settled(session, job_id)


def _settle_delete_items(session: Session, job_id: str, source_ids: list[str] | None) -> None:
    """Mark the job's open `delete` items done: those of `source_ids`, or all (None)."""
    which = () if source_ids is None else (JobItem.source_id.in_(source_ids),)
    session.execute(
        update(JobItem)
        .where(
            JobItem.job_id == job_id,
            JobItem.action == ItemAction.DELETE,
            JobItem.status == JobItemStatus.PENDING,
            *which,
        )
        .values(status=JobItemStatus.DONE, updated_at=utcnow())
    )
