"""Deleting a KB, as a job (kind `kb_delete`) that the worker runs (ragkb_worker.kb_deletion).

Accepting the deletion marks the KB `deleting` in the same transaction that records the job and its items
(one `delete` item per document: ragkb_store.ledger.jobs.accept_kb_deletion): from then on uploads, syncs,
re-indexes and searches naming it answer 409, and the worker claims none of its documents. A deletion that
failed, or whose task was lost, is started again by another DELETE: a failed job runs again from where it
stopped; an unfinished one is queued again (every step of the task is idempotent, so a second copy of it does
no harm)."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import Conflict
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Job, KnowledgeBase
from ragkb_store.knowledge_bases import lock_kb
from ragkb_store.ledger.jobs import accept_kb_deletion, resume_failed_job
from ragkb_store.queue import enqueue_delete_kb
from ragkb_store.reindexing import active_reindex
from ragkb_store.states import ACTIVE_JOB_STATUSES, JobStatus

_log = logging.getLogger("ragkb.api")


class KbDeletionService:
    def __init__(self, sessions: sessionmaker[Session], queue: Celery) -> None:
        self._sessions = sessions
        self._queue = queue

    def start(self, kb_id: str) -> str:
        """Mark the KB deleting and queue its deletion job; returns the job's id (the KB's earlier one, if a
        deletion was already accepted: resumed if it failed, queued again if it is under way)."""
        with transaction(self._sessions) as session:
            kb = lock_kb(session, kb_id)
            job_id = _resumed_deletion(session, kb) or _accept(session, kb)
        enqueue_delete_kb(self._queue, job_id)
        return job_id


def _accept(session: Session, kb: KnowledgeBase) -> str:
    if (reindex := active_reindex(session, kb.id)) is not None:
        # A re-index switching the alias while the index is being dropped could leave a generation behind.
        raise Conflict(
            f"a re-index of this knowledge base is running (job {reindex.id}): cancel it, then delete",
            job_id=reindex.id,
        )
    job_id = accept_kb_deletion(session, kb)
    _log.info("KB %s: deletion job %s accepted", kb.id, job_id)
    return job_id


def _resumed_deletion(session: Session, kb: KnowledgeBase) -> str | None:
    """The KB's deletion job, running again if it had failed; None when there is none to resume. Its done
    items stay done: the progress goes on from where the failed run stopped."""
    job = session.get(Job, kb.deletion_job_id) if kb.deletion_job_id else None
    if job is None or job.status not in (*ACTIVE_JOB_STATUSES, JobStatus.FAILED):
        return None
    if job.status == JobStatus.FAILED:
        _log.info("KB %s: deletion job %s resumed after: %s", kb.id, job.id, "; ".join(job.errors))
        resume_failed_job(session, job)
    return job.id
