"""Delete a KB (a `kb_delete` job, accepted by the api, which marked the KB `deleting`).

In order: the index (searches and index writes find no KB from then on, so an ingest still under way cannot
bring points back), the document rows in batches (each batch settles its `delete` items: the job's
progress), after each batch the blobs that no document uses any more, and last the KB row (its question sets
go with it). Every step is idempotent: a failure fails the job with its reason and leaves the KB `deleting`;
DELETE again runs the steps again and they pick up where the last run stopped."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import RagkbError
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, JobItem, JobItemStatus, JobStatus, KnowledgeBase, utcnow
from ragkb_store.jobs import DELETE, KB_DELETE, fail_job, finish_if_settled
from ragkb_store.reindexing import ACTIVE_JOB_STATUSES

_log = logging.getLogger("ragkb.worker")
# Documents deleted per transaction: each batch is one progress step, and short enough that uploads and
# ingests of other KBs are not held up by the database's write lock (SQLite).
DELETE_BATCH = 200
# Job.params key: blobs of a committed batch not yet checked and deleted; a run that died in between
# checks them first, since the rows that named them are gone.
BLOBS_TO_CHECK = "blobs_to_check"


class KbIndex(Protocol):
    """What the deleter needs of the retriever (ragkb_core.retriever_client.RetrieverClient)."""

    def drop_kb(self, kb_id: str) -> None:
        """Every generation of the KB's index; nothing when there is none."""
        ...


@dataclass(frozen=True)
class DocumentRow:
    document_id: str
    source_id: str
    blobs: frozenset[str]


class KbDeleter:
    def __init__(
        self, sessions: sessionmaker[Session], retriever: KbIndex, blobs: BlobStore, batch: int = DELETE_BATCH
    ) -> None:
        self._sessions = sessions
        self._retriever = retriever
        self._blobs = blobs
        self._batch = batch

    def run(self, job_id: str) -> str:
        """Delete the job's KB; "deleted", "failed" (the job says why) or "skipped" (nothing to do)."""
        kb_id = self._running_job_kb(job_id)
        if kb_id is None:
            return "skipped"
        try:
            self._delete(job_id, kb_id)
        except Exception as exc:  # every failure ends the job failed with a reason; DELETE again resumes
            return self._fail(job_id, _reason(exc))
        _log.info("KB %s deleted (job %s)", kb_id, job_id)
        return "deleted"

    def _delete(self, job_id: str, kb_id: str) -> None:
        self._check_blobs_left_from_last_run(job_id)
        self._retriever.drop_kb(kb_id)
        while batch := self._next_batch(kb_id):
            self._delete_batch(job_id, kb_id, batch)
        self._remove_kb(job_id, kb_id)

    def _running_job_kb(self, job_id: str) -> str | None:
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.kind != KB_DELETE or job.status != JobStatus.RUNNING:
                return None
            return job.kb_id

    def _next_batch(self, kb_id: str) -> list[DocumentRow]:
        query = select(Document.id, Document.source_id, Document.blob_sha256, Document.text_sha256).where(
            Document.kb_id == kb_id
        )
        with self._sessions() as session:
            rows = session.execute(query.order_by(Document.id).limit(self._batch)).all()
        return [DocumentRow(i, source, frozenset(sha for sha in (blob, text) if sha)) for i, source, blob, text in rows]

    def _delete_batch(self, job_id: str, kb_id: str, batch: Sequence[DocumentRow]) -> None:
        """Rows gone and their items done in one transaction, which also records their blobs to check."""
        shas = set().union(*(row.blobs for row in batch))
        with transaction(self._sessions) as session:
            session.execute(delete(Document).where(Document.id.in_([row.document_id for row in batch])))
            _settle_items(session, job_id, [row.source_id for row in batch])
            _record_blobs_to_check(session, job_id, shas)
        self._delete_unreferenced(shas)
        with transaction(self._sessions) as session:
            _record_blobs_to_check(session, job_id, set())

    def _remove_kb(self, job_id: str, kb_id: str) -> None:
        """The KB row, and the job done: items of documents deleted another way meanwhile count as deleted."""
        with transaction(self._sessions) as session:
            session.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb_id))
            _settle_items(session, job_id, None)
            # The records of ingests that will never run (documents queued when the deletion was accepted).
            session.execute(
                update(Job)
                .where(Job.kb_id == kb_id, Job.kind == "ingest", Job.status.in_(ACTIVE_JOB_STATUSES))
                .values(status=JobStatus.CANCELLED, finished_at=utcnow(), errors=["the knowledge base was deleted"])
            )
            finish_if_settled(session, job_id)

    def _check_blobs_left_from_last_run(self, job_id: str) -> None:
        with self._sessions() as session:
            params = session.get_one(Job, job_id).params
        self._delete_unreferenced(set(params.get(BLOBS_TO_CHECK, [])))

    def _delete_unreferenced(self, shas: set[str]) -> None:
        """Delete those of `shas` no document uses, as its original or as its extracted text (a file uploaded
        to two KBs is one blob: it stays while the other KB's document has it)."""
        if not shas:
            return
        with self._sessions() as session:
            used = set(session.scalars(select(Document.blob_sha256).where(Document.blob_sha256.in_(shas))))
            used |= set(session.scalars(select(Document.text_sha256).where(Document.text_sha256.in_(shas))))
        for sha in shas - used:
            self._blobs.delete(sha)

    def _fail(self, job_id: str, message: str) -> str:
        with transaction(self._sessions) as session:
            fail_job(session, job_id, message)
        _log.warning("KB deletion job %s failed: %s", job_id, message)
        return "failed"


def _settle_items(session: Session, job_id: str, source_ids: list[str] | None) -> None:
    """Mark the job's open `delete` items done: those of `source_ids`, or all (None)."""
    which = () if source_ids is None else (JobItem.source_id.in_(source_ids),)
    session.execute(
        update(JobItem)
        .where(JobItem.job_id == job_id, JobItem.action == DELETE, JobItem.status == JobItemStatus.PENDING, *which)
        .values(status=JobItemStatus.DONE, updated_at=utcnow())
    )


def _record_blobs_to_check(session: Session, job_id: str, shas: set[str]) -> None:
    job = session.get_one(Job, job_id)
    # A new dict: the JSON column notices a replaced value, not one changed in place.
    params = {key: value for key, value in job.params.items() if key != BLOBS_TO_CHECK}
    job.params = {**params, BLOBS_TO_CHECK: sorted(shas)} if shas else params


def _reason(exc: Exception) -> str:
    if isinstance(exc, RagkbError):
        return f"could not delete the knowledge base: {exc.detail}; DELETE it again to finish"
    _log.error("unexpected error while deleting a knowledge base", exc_info=exc)
    return f"could not delete the knowledge base ({type(exc).__name__}); DELETE it again to finish"
