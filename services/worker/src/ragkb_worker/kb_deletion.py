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

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job
from ragkb_store.ledger import DocumentLedger
from ragkb_store.ledger.jobs import delete_document_rows, finish_kb_deletion, record_params
from ragkb_store.progress import fail_job
from ragkb_store.states import JobKind, JobStatus

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
        self._ledger = DocumentLedger(sessions)
        self._retriever = retriever
        self._blobs = blobs
        self._batch = batch

    def run(self, job_id: str) -> str:
        """Delete the job's KB; "deleted" or "skipped" (nothing to do). A failure raises: the task's failure
        policy ends the job failed with the reason (fail), and DELETE again resumes it."""
        kb_id = self._running_job_kb(job_id)
        if kb_id is None:
            return "skipped"
        self._delete(job_id, kb_id)
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
            if job is None or job.kind != JobKind.KB_DELETE or job.status != JobStatus.RUNNING:
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
            delete_document_rows(session, job_id, {row.document_id: row.source_id for row in batch})
            record_params(session, job_id, **{BLOBS_TO_CHECK: sorted(shas)})
        self._delete_unreferenced(shas)
        with transaction(self._sessions) as session:
            record_params(session, job_id, **{BLOBS_TO_CHECK: []})

    def _remove_kb(self, job_id: str, kb_id: str) -> None:
        with transaction(self._sessions) as session:
            finish_kb_deletion(session, job_id, kb_id)

    def _check_blobs_left_from_last_run(self, job_id: str) -> None:
        with self._sessions() as session:
            params = session.get_one(Job, job_id).params
        self._delete_unreferenced(set(params.get(BLOBS_TO_CHECK, [])))

    def _delete_unreferenced(self, shas: set[str]) -> None:
        """A file uploaded to two KBs is one blob: it stays while the other KB's document has it."""
        self._blobs.delete_unused(shas, self._ledger.unreferenced_blobs)

    def fail(self, job_id: str, reason: str) -> str:
        """End the job failed: the KB stays `deleting`, and DELETE again resumes the steps."""
        message = f"could not delete the knowledge base: {reason}; DELETE it again to finish"
        with transaction(self._sessions) as session:
            fail_job(session, job_id, message)
        _log.warning("KB deletion job %s failed: %s", job_id, message)
        return "failed"
