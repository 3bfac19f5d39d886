"""Deleting a KB, as a job (kind `kb_delete`) that the worker runs (ragkb_worker.kb_deletion).

Accepting the deletion marks the KB `deleting` in the same transaction that records the job and its items
(one `delete` item per document): from then on uploads, syncs, re-indexes and searches naming it answer 409,
and the worker claims none of its documents. A deletion that failed, or whose task was lost, is started
again by another DELETE: a failed job runs again from where it stopped; an unfinished one is queued again
(every step of the task is idempotent, so a second copy of it does no harm)."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.jobs.service import job_item, running_job
from ragkb_api.knowledge_bases.service import load_kb
from ragkb_core.errors import Conflict
from ragkb_core.ids import new_id
from ragkb_store import jobs as progress
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, JobStatus, KnowledgeBase, utcnow
from ragkb_store.queue import enqueue_delete_kb
from ragkb_store.reindexing import ACTIVE_JOB_STATUSES, active_reindex

_log = logging.getLogger("ragkb.api")


class KbDeletionService:
    def __init__(self, sessions: sessionmaker[Session], queue: Celery) -> None:
        self._sessions = sessions
        self._queue = queue

    def start(self, kb_id: str) -> str:
        """Mark the KB deleting and queue its deletion job; returns the job's id (the KB's earlier one, if a
        deletion was already accepted: resumed if it failed, queued again if it is under way)."""
        with transaction(self._sessions) as session:
            kb = _locked_kb(session, kb_id)
            job_id = _resumed_deletion(session, kb) or self._record_job(session, kb)
        enqueue_delete_kb(self._queue, job_id)
        return job_id

    def _record_job(self, session: Session, kb: KnowledgeBase) -> str:
        if (reindex := active_reindex(session, kb.id)) is not None:
            # A re-index switching the alias while the index is being dropped could leave a generation behind.
            raise Conflict(
                f"a re-index of this knowledge base is running (job {reindex.id}): cancel it, then delete",
                job_id=reindex.id,
            )
        job_id = new_id()
        session.add(running_job(job_id, progress.KB_DELETE, kb.id, utcnow()))
        session.flush()
        source_ids = session.scalars(select(Document.source_id).where(Document.kb_id == kb.id))
        session.add_all(job_item(job_id, kb.id, source_id, progress.DELETE) for source_id in source_ids)
        kb.deletion_job_id = job_id
        _cancel_waiting_jobs(session, kb.id)
        _log.info("KB %s: deletion job %s accepted", kb.id, job_id)
        return job_id


def _locked_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB row, written first so that two DELETEs (or a DELETE and a re-index) run one after the other."""
    session.execute(update(KnowledgeBase).where(KnowledgeBase.id == kb_id).values(updated_at=utcnow()))
    return load_kb(session, kb_id)


def _resumed_deletion(session: Session, kb: KnowledgeBase) -> str | None:
    """The KB's deletion job, running again if it had failed; None when there is none to resume. Its done
    items stay done: the progress goes on from where the failed run stopped."""
    job = session.get(Job, kb.deletion_job_id) if kb.deletion_job_id else None
    if job is None or job.status not in (*ACTIVE_JOB_STATUSES, JobStatus.FAILED):
        return None
    if job.status == JobStatus.FAILED:
        _log.info("KB %s: deletion job %s resumed after: %s", kb.id, job.id, "; ".join(job.errors))
        job.status, job.finished_at, job.errors = JobStatus.RUNNING, None, []
    return job.id


def _cancel_waiting_jobs(session: Session, kb_id: str) -> None:
    """Sync and retry jobs of the KB stop waiting for uploads that will be refused."""
    waiting = session.scalars(
        select(Job).where(
            Job.kb_id == kb_id,
            Job.kind.not_in(["ingest", progress.KB_DELETE]),
            Job.status.in_(ACTIVE_JOB_STATUSES),
        )
    )
    for job in list(waiting):
        progress.cancel_job(session, job)
