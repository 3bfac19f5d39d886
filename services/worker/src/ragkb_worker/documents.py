"""The worker's view of document state in SQL: claim with a lease, renew it, finish or fail — each a
compare-and-set, so that two workers never both process one version, and a stale one never wins."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, DocumentStatus, Job, JobStatus, KnowledgeBase, utcnow
from ragkb_store.jobs import refresh_overdue_jobs, settle_items_of_document


@dataclass(frozen=True)
class Claim:
    """A snapshot of the document version a worker is processing."""

    document_id: str
    kb_id: str
    source_id: str
    version: int
    title: str
    media_type: str
    blob_sha256: str
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    attempt: int
    chunking: KbChunking
    # How the KB's text becomes BM25 terms; fixed for a KB until it is re-indexed.
    analyzer: KbAnalyzer
    # The model that embeds (and counts the tokens of) its chunks: the KB's, or a re-index target's.
    embedding_model: str


class DocumentLedger:
    def __init__(self, sessions: sessionmaker[Session], lease_s: int) -> None:
        self._sessions = sessions
        self._lease = timedelta(seconds=lease_s)

    def claim(self, document_id: str) -> Claim | None:
        """Take the document for processing; None when it is done, gone, held by a live worker, or of a KB
        being deleted (its row goes soon: building it would only be thrown away)."""
        now = utcnow()
        with transaction(self._sessions) as session:
            claimable = or_(
                Document.status == DocumentStatus.PENDING,
                (Document.status == DocumentStatus.PROCESSING) & (Document.lease_until < now),
            )
            taken = session.execute(
                update(Document)
                .where(Document.id == document_id, claimable, _kb_not_deleting())
                .values(
                    status=DocumentStatus.PROCESSING,
                    lease_until=now + self._lease,
                    attempts=Document.attempts + 1,
                    error=None,
                )
            ).rowcount  # type: ignore[attr-defined]
            if not taken:
                return None
            document = session.get_one(Document, document_id)
            _mark_job(session, document_id, JobStatus.RUNNING)
            return _claim_of(session, document)

    def renew(self, claim: Claim) -> Claim | None:
        """Extend the lease and return the document's current title, labels and metadata (a PATCH may have
        changed them meanwhile); None when the version changed, the document is gone or its KB is being
        deleted: stop working on it."""
        with transaction(self._sessions) as session:
            renewed = session.execute(
                update(Document)
                .where(Document.id == claim.document_id, Document.version == claim.version, _kb_not_deleting())
                .values(lease_until=utcnow() + self._lease)
            ).rowcount  # type: ignore[attr-defined]
            if not renewed:
                return None
            return _claim_of(session, session.get_one(Document, claim.document_id))

    def finish(
        self,
        claim: Claim,
        chunk_count: int,
        timings: dict[str, float],
        report: dict[str, Any],
        text_sha256: str | None = None,
    ) -> bool:
        """Mark the claimed version live, with its extracted text. False when a newer version arrived
        meanwhile (this one is stale)."""
        with transaction(self._sessions) as session:
            finished = session.execute(
                update(Document)
                .where(Document.id == claim.document_id, Document.version == claim.version)
                .values(
                    status=DocumentStatus.DONE,
                    indexed_version=claim.version,
                    chunk_count=chunk_count,
                    stage_timings=timings,
                    ingest_report=report,
                    lease_until=None,
                    indexed_at=utcnow(),
                    text_sha256=text_sha256,
                )
            ).rowcount  # type: ignore[attr-defined]
            if finished:
                _mark_job(session, claim.document_id, JobStatus.SUCCEEDED)
                # A sync or retry job waiting for this document advances now, watched or not.
                settle_items_of_document(session, claim.kb_id, claim.source_id)
        return bool(finished)

    def text_sha256_of(self, document_id: str) -> str | None:
        with self._sessions() as session:
            return session.scalar(select(Document.text_sha256).where(Document.id == document_id))

    def unreferenced_blobs(self, shas: set[str]) -> set[str]:
        """Those of `shas` that no document uses, as original or as extracted text: safe to delete."""
        if not shas:
            return set()
        with self._sessions() as session:
            originals = select(Document.blob_sha256).where(Document.blob_sha256.in_(shas))
            texts = select(Document.text_sha256).where(Document.text_sha256.in_(shas))
            used = set(session.scalars(originals)) | set(session.scalars(texts))
        return shas - used

    def fail(self, claim: Claim, reason: str) -> None:
        with transaction(self._sessions) as session:
            session.execute(
                update(Document)
                .where(Document.id == claim.document_id, Document.version == claim.version)
                .values(status=DocumentStatus.FAILED, error=reason, lease_until=None)
            )
            _mark_job(session, claim.document_id, JobStatus.FAILED, error=reason)
            settle_items_of_document(session, claim.kb_id, claim.source_id)

    def release_for_retry(self, claim: Claim, reason: str) -> None:
        """Hand the document back to the queue after a transient error (the retry re-claims it)."""
        with transaction(self._sessions) as session:
            session.execute(
                update(Document)
                .where(Document.id == claim.document_id, Document.version == claim.version)
                .values(status=DocumentStatus.PENDING, error=f"retrying: {reason}", lease_until=None)
            )

    def exists(self, document_id: str) -> bool:
        with self._sessions() as session:
            return session.get(Document, document_id) is not None

    def release_expired_leases(self) -> list[str]:
        """Documents whose worker died mid-way (lease run out) go back to pending; returns their ids."""
        now = utcnow()
        with transaction(self._sessions) as session:
            expired = (Document.status == DocumentStatus.PROCESSING) & (Document.lease_until < now)
            ids = list(session.scalars(select(Document.id).where(expired).limit(500)))
            if ids:
                session.execute(
                    update(Document)
                    .where(Document.id.in_(ids), expired)
                    .values(status=DocumentStatus.PENDING, lease_until=None, updated_at=now)
                )
            return ids

    def finish_overdue_jobs(self, upload_wait_s: float) -> list[str]:
        """Jobs past their deadline fail the items still open and finish (nobody may be watching them)."""
        with transaction(self._sessions) as session:
            return refresh_overdue_jobs(session, upload_wait_s)

    def pending_older_than(self, age: timedelta) -> list[str]:
        """Pending documents untouched for `age`: their queue message may have been lost."""
        with self._sessions() as session:
            query = select(Document.id).where(
                Document.status == DocumentStatus.PENDING, Document.updated_at < utcnow() - age
            )
            return list(session.scalars(query.limit(500)))


def _kb_not_deleting() -> ColumnElement[bool]:
    deleting = select(KnowledgeBase.id).where(KnowledgeBase.deletion_job_id.is_not(None))
    return Document.kb_id.not_in(deleting)


def _claim_of(session: Session, document: Document) -> Claim:
    kb = session.get_one(KnowledgeBase, document.kb_id)
    chunking, analyzer = KbChunking.model_validate(kb.chunking), KbAnalyzer.model_validate(kb.analyzer)
    return claim_of(document, chunking, analyzer, kb.embedding_model)


def claim_of(document: Document, chunking: KbChunking, analyzer: KbAnalyzer, embedding_model: str) -> Claim:
    """A snapshot of the document's newest version, to be built with these settings (the KB's own, or a
    re-index's)."""
    return Claim(
        document_id=document.id,
        kb_id=document.kb_id,
        source_id=document.source_id,
        version=document.version,
        title=document.title,
        media_type=document.media_type,
        blob_sha256=document.blob_sha256,
        labels=list(document.labels),
        metadata=dict(document.metadata_),
        doc_type=document.doc_type,
        attempt=document.attempts,
        chunking=chunking,
        analyzer=analyzer,
        embedding_model=embedding_model,
    )


def _mark_job(session: Session, document_id: str, status: JobStatus, error: str | None = None) -> None:
    """Update the newest ingest job of the document, which records this run for operators."""
    job = session.scalars(
        select(Job).where(Job.document_id == document_id, Job.kind == "ingest").order_by(Job.created_at.desc())
    ).first()
    if job is None:
        return
    now: datetime = utcnow()
    job.status = status
    if status == JobStatus.RUNNING:
        job.started_at = job.started_at or now
    else:
        job.finished_at = now
    if error:
        job.errors = [*job.errors, error]
