"""Progress of the jobs that wait for documents (sync, retry-failed), and the shared shapes of every job
with items (re-index and KB deletion too: their worker settles the items).

A job's items settle from the state of their documents, never from events: the worker settles the items of
a document as soon as it finishes or fails it, and the api (a GET, the event stream) and the worker's sweeper
settle the rest and fail what waited past the deadline, so a job finishes whether or not anyone watches it.
Shared by the api, which makes, reads and cancels jobs, and the worker, which advances them."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ragkb_store.db.models import Document, Job, JobItem, utcnow
from ragkb_store.states import (
    ACTIVE_JOB_STATUSES,
    FINISHED_JOB_STATUSES,
    ITEMLESS_KINDS,
    WORKER_SETTLED_KINDS,
    DocumentStatus,
    ItemAction,
    JobItemStatus,
    JobKind,
    JobStatus,
)

# Documents looked up per query: well under SQLite's bound on parameters.
_LOOKUP_BATCH = 500
MAX_ERRORS_SHOWN = 1000


@dataclass(frozen=True)
class JobTally:
    current: int
    total: int
    uploaded: int
    unchanged: int
    deleted: int
    failed: int
    reindexed: int


def item_outcome(item: JobItem, document: Document | None) -> tuple[JobItemStatus, str | None] | None:
    """What the document says of an upload or retry item: done, failed with the reason, or None (not yet)."""
    if item.action not in (ItemAction.UPLOAD, ItemAction.RETRY):
        return None
    if document is None or document.blob_sha256 != item.sha256:
        return None
    if item.base_version is not None and document.version <= item.base_version:
        return None
    if document.status == DocumentStatus.DONE and document.indexed_version == document.version:
        return JobItemStatus.DONE, None
    if document.status == DocumentStatus.FAILED:
        return JobItemStatus.FAILED, document.error or "ingest failed"
    return None


def settle_items_of_documents(session: Session, kb_id: str, source_ids: Collection[str]) -> None:
    """Settle the open items that wait for these documents of a KB, and finish the jobs left with none open: one
    read of their open items (most documents have none: an upload that no sync or retry job waits for)."""
    items = session.scalars(
        select(JobItem).where(
            JobItem.kb_id == kb_id, JobItem.source_id.in_(source_ids), JobItem.status == JobItemStatus.PENDING
        )
    ).all()
    if not items:
        return
    documents = documents_by_source(session, kb_id, {item.source_id for item in items})
    settled = {item.job_id for item in items if _settle(item, item_outcome(item, documents.get(item.source_id)))}
    session.flush()
    for job_id in settled:
        finish_if_settled(session, job_id)


def refresh_job(session: Session, job: Job, upload_wait_s: float, now: datetime | None = None) -> None:
    """Settle the job's open items from their documents, fail those open past the deadline, and finish the
    job when none is left open."""
    # A re-index or a KB deletion is settled and finished by the worker that runs it (finishing a re-index
    # means switching generations; a deletion's items are done when their rows are gone).
    if job.status in FINISHED_JOB_STATUSES or job.kb_id is None or job.kind in WORKER_SETTLED_KINDS:
        return
    now = now or utcnow()
    # A queued source run has no plan yet (ragkb_store.ledger.sources): nothing to settle; one that never
    # started (its process died) fails at the deadline like any item.
    if job.status == JobStatus.QUEUED:
        if now > as_utc(job.created_at) + timedelta(seconds=upload_wait_s):
            fail_job(session, job.id, f"the source run did not start within {upload_wait_s:g} s")
        return
    items = session.scalars(select(JobItem).where(JobItem.job_id == job.id, JobItem.status == JobItemStatus.PENDING))
    open_items = list(items)
    documents = documents_by_source(session, job.kb_id, {item.source_id for item in open_items})
    overdue = now > as_utc(job.created_at) + timedelta(seconds=upload_wait_s)
    for item in open_items:
        document = documents.get(item.source_id)
        outcome = item_outcome(item, document)
        if outcome is None and overdue:
            outcome = JobItemStatus.FAILED, _overdue_message(item, document, upload_wait_s)
        _settle(item, outcome)
    session.flush()
    finish_if_settled(session, job.id)


def refresh_overdue_jobs(session: Session, upload_wait_s: float) -> list[str]:
    """Refresh every unfinished job older than the deadline (the worker's sweeper calls this); their ids."""
    cutoff = utcnow() - timedelta(seconds=upload_wait_s)
    jobs = session.scalars(
        select(Job).where(Job.status.in_(ACTIVE_JOB_STATUSES), Job.kind != JobKind.INGEST, Job.created_at < cutoff)
    ).all()
    for job in jobs:
        refresh_job(session, job, upload_wait_s)
    return [job.id for job in jobs]


def finish_if_settled(session: Session, job_id: str) -> bool:
    """Finish the job when none of its items is open: failed when any item failed, else succeeded."""
    if _open_items(session, job_id):
        return False
    job = session.get_one(Job, job_id, populate_existing=True)
    tally = tally_job(session, job)
    finished = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(
            status=JobStatus.FAILED if tally.failed else JobStatus.SUCCEEDED,
            progress_current=tally.current,
            progress_total=tally.total,
            counts=counts_of(tally),
            finished_at=utcnow(),
        )
    ).rowcount  # type: ignore[attr-defined]
    session.refresh(job)
    return bool(finished)


def cancel_job(session: Session, job: Job) -> bool:
    """Cancel an unfinished job: its open items are no longer waited for (what was uploaded stays)."""
    cancelled = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(status=JobStatus.CANCELLED, finished_at=utcnow())
    ).rowcount  # type: ignore[attr-defined]
    if not cancelled:
        return False
    session.execute(
        update(JobItem)
        .where(JobItem.job_id == job.id, JobItem.status == JobItemStatus.PENDING)
        .values(status=JobItemStatus.CANCELLED, message="the job was cancelled", updated_at=utcnow())
    )
    if job.kind not in ITEMLESS_KINDS:
        tally = tally_job(session, job)
        job.progress_current, job.progress_total, job.counts = tally.current, tally.total, counts_of(tally)
    session.flush()
    session.refresh(job)
    return True


def fail_job(session: Session, job_id: str, message: str) -> None:
    """End a job as failed, its reason added to its errors (what it did before failing stays done)."""
    job = session.get_one(Job, job_id)
    job.status, job.finished_at = JobStatus.FAILED, utcnow()
    job.errors = [*job.errors, message]


def tally_job(session: Session, job: Job) -> JobTally:
    rows = session.execute(
        select(JobItem.action, JobItem.status, func.count())
        .where(JobItem.job_id == job.id)
        .group_by(JobItem.action, JobItem.status)
    ).all()
    count = {(action, status): n for action, status, n in rows}

    def total_of(actions: Iterable[str], status: str) -> int:
        return sum(count.get((action, status), 0) for action in actions)

    every_action = {action for action, _ in count}
    return JobTally(
        current=sum(n for (_, status), n in count.items() if status != JobItemStatus.PENDING),
        total=sum(count.values()),
        uploaded=total_of((ItemAction.UPLOAD, ItemAction.RETRY), JobItemStatus.DONE),
        unchanged=int(job.counts.get("unchanged", 0)),
        deleted=total_of((ItemAction.DELETE,), JobItemStatus.DONE),
        failed=total_of(every_action, JobItemStatus.FAILED),
        reindexed=total_of((ItemAction.REINDEX,), JobItemStatus.DONE),
    )


def counts_of(tally: JobTally) -> dict[str, int]:
    return {
        "uploaded": tally.uploaded,
        "unchanged": tally.unchanged,
        "deleted": tally.deleted,
        "failed": tally.failed,
        "reindexed": tally.reindexed,
    }


def settled_items(session: Session, job_id: str) -> Sequence[JobItem]:
    """The job's items that are no longer open, in the order they settled."""
    query = select(JobItem).where(JobItem.job_id == job_id, JobItem.status != JobItemStatus.PENDING)
    return session.scalars(query.order_by(JobItem.updated_at, JobItem.id)).all()


def item_errors(session: Session, job_id: str) -> list[dict[str, str | None]]:
    query = select(JobItem.source_id, JobItem.message).where(
        JobItem.job_id == job_id, JobItem.status == JobItemStatus.FAILED
    )
    return [
        {"source_id": source_id, "message": message or "failed"}
        for source_id, message in session.execute(query.order_by(JobItem.id).limit(MAX_ERRORS_SHOWN))
    ]


def as_utc(value: datetime) -> datetime:
    # SQLite hands stored times back without their offset; they are UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _settle(item: JobItem, outcome: tuple[JobItemStatus, str | None] | None) -> bool:
    if outcome is None:
        return False
    item.status, item.message = outcome
    item.updated_at = utcnow()
    return True


def _open_items(session: Session, job_id: str) -> int:
    query = select(func.count()).where(JobItem.job_id == job_id, JobItem.status == JobItemStatus.PENDING)
    return int(session.scalar(query) or 0)


def documents_by_source(session: Session, kb_id: str, source_ids: set[str]) -> dict[str, Document]:
    """The KB's documents of `source_ids`, by source_id, read in slices that stay within every database's
    parameter limit."""
    ordered = sorted(source_ids)
    documents: dict[str, Document] = {}
    for start in range(0, len(ordered), _LOOKUP_BATCH):
        batch = ordered[start : start + _LOOKUP_BATCH]
        query = select(Document).where(Document.kb_id == kb_id, Document.source_id.in_(batch))
        documents.update(
            (doc.source_id, doc) for doc in session.scalars(query.execution_options(populate_existing=True))
        )
    return documents


def _overdue_message(item: JobItem, document: Document | None, upload_wait_s: float) -> str:
    waited = f"{upload_wait_s:g} s (RAGKB_JOBS__UPLOAD_WAIT_S)"
    arrived = (
        document is not None
        and document.blob_sha256 == item.sha256
        and (item.base_version is None or document.version > item.base_version)
    )
    if item.action == ItemAction.UPLOAD and not arrived:
        return f"never uploaded: the file did not arrive within {waited}"
    return f"not processed within {waited}"
