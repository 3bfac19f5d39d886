"""Documents: accept uploads and batches, read, change, retry and delete them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from celery import Celery
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.documents.schemas import (
    BatchAccepted,
    BatchItemError,
    BatchItemResult,
    DocumentAccepted,
    DocumentFields,
    DocumentOut,
    DocumentPatch,
)
from ragkb_api.knowledge_bases.service import load_kb, load_writable_kb
from ragkb_core.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, RagkbError
from ragkb_core.formats import PLAIN_TEXT, detect_media_type
from ragkb_core.ids import new_id
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import LimitSettings
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, DocumentStatus, Job, JobStatus, KnowledgeBase
from ragkb_store.queue import enqueue_ingest

_log = logging.getLogger("ragkb.api")


@dataclass(frozen=True)
class Upload:
    """The content of one document upload, already read within the size limit."""

    data: bytes
    filename: str | None
    declared_type: str | None


# One document's fields and content, read and validated, ready for DocumentService.accept.
PreparedUpload = tuple[DocumentFields, Upload]


class DocumentService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        queue: Celery,
        retriever: RetrieverClient,
        limits: LimitSettings,
    ) -> None:
        self._sessions = sessions
        self._blobs = blobs
        self._queue = queue
        self._retriever = retriever
        self._limits = limits

    def accept(self, kb_id: str, fields: DocumentFields, upload: Upload) -> DocumentAccepted:
        """Store the original, record a new version (or recognise an unchanged one), then enqueue."""
        self._check_size(upload)
        media_type = detect_media_type(upload.filename, upload.data[:8192], upload.declared_type)
        with self._sessions() as session:
            load_writable_kb(session, kb_id)
        sha = self._blobs.put(upload.data)
        document, replaced_blob, changed = self._record_version_retrying(kb_id, fields, upload, media_type, sha)
        if changed:
            self._enqueue(document.id)
        if replaced_blob:
            _delete_unreferenced_blobs(self._sessions, self._blobs, {replaced_blob})
        return DocumentAccepted(**document_out(document).model_dump(), unchanged=not changed)

    def accept_batch(self, kb_id: str, items: Sequence[PreparedUpload | RagkbError]) -> BatchAccepted:
        """Accept each item on its own, in order: an item that was refused (here, or already when it was read)
        is reported with its error and the others still go in. The KB itself must exist and take writes."""
        if len(items) > self._limits.max_batch_documents:
            raise InvalidInput(
                f"a batch carries at most {self._limits.max_batch_documents} documents, not {len(items)}"
            )
        with self._sessions() as session:
            load_writable_kb(session, kb_id)
        results = [self._accept_item(kb_id, index, item) for index, item in enumerate(items)]
        failed = sum(1 for result in results if result.error is not None)
        return BatchAccepted(accepted=len(results) - failed, failed=failed, results=results)

    def _accept_item(self, kb_id: str, index: int, item: PreparedUpload | RagkbError) -> BatchItemResult:
        if isinstance(item, RagkbError):  # refused already when it was read
            return _refused(index, None, item)
        fields, upload = item
        try:
            document = self.accept(kb_id, fields, upload)
        except RagkbError as exc:
            return _refused(index, fields.source_id, exc)
        return BatchItemResult(index=index, source_id=fields.source_id, document=document)

    def list(self, kb_id: str, status: str | None) -> list[DocumentOut]:
        with self._sessions() as session:
            load_kb(session, kb_id)
            query = select(Document).where(Document.kb_id == kb_id).order_by(Document.created_at)
            if status is not None:
                query = query.where(Document.status == status)
            return [document_out(doc) for doc in session.scalars(query)]

    def get(self, kb_id: str, document_id: str) -> DocumentOut:
        with self._sessions() as session:
            return document_out(_load_document(session, kb_id, document_id))

    def update(self, kb_id: str, document_id: str, patch: DocumentPatch) -> DocumentOut:
        changes = patch.changes()
        if not changes and patch.requested_doc_type is None:
            raise InvalidInput("nothing to change: give title, source_id, labels or metadata")
        with transaction(self._sessions) as session:
            document = _load_writable_document(session, kb_id, document_id)
            _ensure_doc_type_kept(document, patch.requested_doc_type)
            if not changes:
                return document_out(document)
            if "source_id" in changes:
                _ensure_source_id_free(session, kb_id, changes["source_id"], document_id)
            if "labels" in changes:
                _ensure_labels_on_one_side(session, kb_id, document.doc_type, changes["labels"])
            _apply_patch(document, changes)
            session.flush()
            # Inside the transaction: if the index refuses, the database keeps the old values too.
            if document.indexed_version is not None:
                self._retriever.set_document_payload(kb_id, document_id, changes)
            return document_out(document)

    def retry(self, kb_id: str, document_id: str) -> DocumentOut:
        """Queue a failed document again, from its stored original."""
        with transaction(self._sessions) as session:
            document = _load_writable_document(session, kb_id, document_id)
            if document.status != DocumentStatus.FAILED:
                raise Conflict(f"only a failed document can be retried; this one is {document.status}")
            document.status = DocumentStatus.PENDING
            document.error = None
            document.attempts = 0
            session.add(Job(id=new_id(), kind="ingest", kb_id=kb_id, document_id=document_id, status=JobStatus.QUEUED))
            out = document_out(document)
        self._enqueue(document_id)
        return out

    def delete(self, kb_id: str, document_id: str) -> None:
        with self._sessions() as session:
            _load_writable_document(session, kb_id, document_id)
        # Index first, so that a failure leaves the document listed and the call repeatable. Every generation:
        # one being built by a re-index must not bring it back, nor a rollback to the previous one.
        generations = self._retriever.generations(kb_id)
        for generation in generations.all:
            self._retriever.delete_document(kb_id, document_id, generation=generation)
        with transaction(self._sessions) as session:
            document = _load_document(session, kb_id, document_id)
            blobs = {document.blob_sha256, document.text_sha256} - {None}
            session.delete(document)
        _delete_unreferenced_blobs(self._sessions, self._blobs, {sha for sha in blobs if sha})

    def _check_size(self, upload: Upload) -> None:
        if len(upload.data) > self._limits.max_upload_bytes:
            raise PayloadTooLarge(f"the document is larger than {self._limits.max_upload_bytes} bytes")
        if not upload.data.strip():
            raise InvalidInput("the document is empty")

    def _enqueue(self, document_id: str) -> None:
        try:
            enqueue_ingest(self._queue, document_id)
        except Exception:  # the broker is down: the document is recorded, the worker's sweeper queues it later
            _log.warning("could not queue document %s now; the sweeper will queue it", document_id, exc_info=True)

    def _record_version_retrying(
        self, kb_id: str, fields: DocumentFields, upload: Upload, media_type: str, sha: str
    ) -> tuple[Document, str | None, bool]:
        """Two first uploads of one source_id may race to insert it: the loser retries as an update."""
        try:
            return self._record_version(kb_id, fields, upload, media_type, sha)
        except IntegrityError:
            return self._record_version(kb_id, fields, upload, media_type, sha)

    def _record_version(
        self, kb_id: str, fields: DocumentFields, upload: Upload, media_type: str, sha: str
    ) -> tuple[Document, str | None, bool]:
        """Returns the document, the blob it no longer uses (if any) and whether work was queued."""
        source_id = fields.source_id or upload.filename or sha
        with transaction(self._sessions) as session:
            # Again, in the transaction that records the version: a deletion accepted since the check above
            # must not get a new document.
            load_writable_kb(session, kb_id)
            existing = session.scalars(
                select(Document).where(Document.kb_id == kb_id, Document.source_id == source_id).with_for_update()
            ).one_or_none()
            if existing is not None:
                _ensure_version_allowed(existing, fields, sha)
                if _is_unchanged(existing, sha, fields):
                    return existing, None, False
            _ensure_labels_on_one_side(session, kb_id, fields.doc_type, fields.labels)
            document, replaced = _upsert_version(
                session,
                existing=existing,
                kb_id=kb_id,
                source_id=source_id,
                fields=fields,
                upload=upload,
                media_type=media_type,
                sha=sha,
            )
            session.add(Job(id=new_id(), kind="ingest", kb_id=kb_id, document_id=document.id, status=JobStatus.QUEUED))
        return document, replaced, True


def _load_writable_document(session: Session, kb_id: str, document_id: str) -> Document:
    load_writable_kb(session, kb_id)
    return _load_document(session, kb_id, document_id)


def _ensure_source_id_free(session: Session, kb_id: str, source_id: str, document_id: str) -> None:
    other = session.scalars(
        select(Document.id).where(Document.kb_id == kb_id, Document.source_id == source_id, Document.id != document_id)
    ).first()
    if other is not None:
        raise Conflict(f"source_id {source_id!r} already names document {other} in this knowledge base")


def _ensure_version_allowed(existing: Document, fields: DocumentFields, sha: str) -> None:
    """A new version never changes a document's doc_type, and a reference's content is never replaced: it is
    the authoritative original. (The same content again is fine: that is how a failed reference is retried.)"""
    if existing.doc_type != fields.doc_type:
        raise Conflict(
            f"source_id {existing.source_id!r} names a {existing.doc_type} document, which cannot become "
            f"{fields.doc_type}: delete it and register it again",
            document_id=existing.id,
        )
    if existing.doc_type == "reference" and existing.blob_sha256 != sha:
        raise Conflict(
            f"source_id {existing.source_id!r} names a reference document, whose content cannot be replaced: "
            "delete it and register it again",
            document_id=existing.id,
        )


def _ensure_doc_type_kept(document: Document, requested: Any) -> None:
    if requested is not None and requested != document.doc_type:
        raise Conflict(
            f"document {document.id} is a {document.doc_type} document and cannot become {requested}: "
            "delete it and register it again",
            document_id=document.id,
        )


def _ensure_labels_on_one_side(session: Session, kb_id: str, doc_type: str, labels: list[str]) -> None:
    """Labels of reference documents and labels of knowledge documents are disjoint within a KB, so that a
    label filter selects one kind or the other, never a mix."""
    if not labels:
        return
    _serialize_label_writes(session, kb_id)
    used = session.scalars(select(Document.labels).where(Document.kb_id == kb_id, Document.doc_type != doc_type))
    conflicting = sorted(set(labels) & {label for row in used for label in row})
    if conflicting:
        other = "knowledge" if doc_type == "reference" else "reference"
        raise Conflict(
            f"labels already used by {other} documents in this knowledge base: {', '.join(conflicting)}; "
            "reference and knowledge documents cannot share labels",
            conflicting_labels=conflicting,
        )


def _serialize_label_writes(session: Session, kb_id: str) -> None:
    """A write to the KB row before reading labels: PostgreSQL locks that row and SQLite takes its write
    lock, so two concurrent writers (one reference, one knowledge, same new label) check one after the other."""
    session.execute(update(KnowledgeBase).where(KnowledgeBase.id == kb_id).values(updated_at=KnowledgeBase.updated_at))


def _apply_patch(document: Document, changes: dict[str, Any]) -> None:
    for field, value in changes.items():
        setattr(document, "metadata_" if field == "metadata" else field, value)


def _load_document(session: Session, kb_id: str, document_id: str) -> Document:
    document = session.get(Document, document_id)
    if document is None or document.kb_id != kb_id:
        raise NotFound(f"document {document_id} does not exist in knowledge base {kb_id}")
    return document


def _is_unchanged(document: Document, sha: str, fields: DocumentFields) -> bool:
    # A failed version is worth another try; anything else with the same bytes needs no work.
    same_content = document.blob_sha256 == sha and document.status != DocumentStatus.FAILED
    return same_content and document.labels == fields.labels and document.metadata_ == fields.metadata


def _upsert_version(
    session: Session,
    *,
    existing: Document | None,
    kb_id: str,
    source_id: str,
    fields: DocumentFields,
    upload: Upload,
    media_type: str,
    sha: str,
) -> tuple[Document, str | None]:
    document = existing or Document(id=new_id(), kb_id=kb_id, source_id=source_id)
    replaced = existing.blob_sha256 if existing is not None and existing.blob_sha256 != sha else None
    document.title = fields.title or (existing.title if existing else None) or _default_title(source_id, upload)
    document.filename = upload.filename
    document.media_type = media_type
    document.size_bytes = len(upload.data)
    document.blob_sha256 = sha
    document.labels = fields.labels
    document.metadata_ = fields.metadata
    document.doc_type = fields.doc_type
    # Incremented in SQL, in the same UPDATE that sets the new blob: concurrent uploads of one document each
    # get their own version, and a version number always names the content it was given with (SQLite has
    # no row locks, so a read-then-write here would lose updates).
    document.version = Document.version + 1 if existing is not None else 1
    document.status = DocumentStatus.PENDING
    document.error = None
    document.attempts = 0
    document.lease_until = None
    session.add(document)
    session.flush()
    session.refresh(document, ["version"])
    return document, replaced


def _default_title(source_id: str, upload: Upload) -> str:
    name = upload.filename or source_id
    return PurePath(name).stem or name


def _text_blobs(session: Session, where: Any) -> set[str]:
    return {sha for sha in session.scalars(select(Document.text_sha256).where(where)) if sha}


def _refused(index: int, source_id: str | None, exc: RagkbError) -> BatchItemResult:
    error = BatchItemError(status=exc.status, title=exc.title, detail=exc.detail, errors=exc.extra.get("errors"))
    return BatchItemResult(index=index, source_id=source_id, error=error)


def _delete_unreferenced_blobs(sessions: sessionmaker[Session], blobs: BlobStore, shas: set[str]) -> None:
    """Delete those of `shas` that no document uses as its original or as its extracted text (one plain-text
    document's text may have the same bytes, hence the same blob, as another's original)."""
    with sessions() as session:
        used = set(session.scalars(select(Document.blob_sha256).where(Document.blob_sha256.in_(shas))))
        used |= _text_blobs(session, Document.text_sha256.in_(shas))
    for sha in shas - used:
        blobs.delete(sha)


def document_out(document: Document) -> DocumentOut:
    return DocumentOut(
        id=document.id,
        knowledge_base_id=document.kb_id,
        source_id=document.source_id,
        title=document.title,
        filename=document.filename,
        media_type=document.media_type or PLAIN_TEXT,
        size_bytes=document.size_bytes,
        sha256=document.blob_sha256,
        labels=document.labels,
        metadata=document.metadata_,
        doc_type=document.doc_type,
        status=document.status,
        version=document.version,
        indexed_version=document.indexed_version,
        chunk_count=document.chunk_count,
        error=document.error,
        attempts=document.attempts,
        stage_timings=document.stage_timings,
        ingest_report=document.ingest_report,
        created_at=document.created_at,
        updated_at=document.updated_at,
        indexed_at=document.indexed_at,
    )
