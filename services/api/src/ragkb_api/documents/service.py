"""Documents: accept uploads and batches, read, change, retry and delete them. The state changes are the
ledger's (ragkb_store.ledger.documents); this is the orchestration around them: size and type checks, the
blob store, the queue and the index."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.documents.schemas import (
    BatchAccepted,
    BatchItemError,
    BatchItemResult,
    DocumentAccepted,
    DocumentFields,
    DocumentOut,
    DocumentPatch,
    RangeProgress,
)
from ragkb_api.paging import Page, PageRequest, page_of
from ragkb_core.errors import InvalidInput, PayloadTooLarge, RagkbError
from ragkb_core.formats import PLAIN_TEXT, detect_media_type
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import JobSettings, LimitSettings
from ragkb_store.blobs import BlobStore, sha256_of
from ragkb_store.db.models import Document
from ragkb_store.knowledge_bases import load_kb, load_writable_kb
from ragkb_store.ledger import EVERY_DOCUMENT, DocumentLedger, NewVersion, RecordedVersion
from ragkb_store.queue import IngestQueue
from ragkb_store.states import Lane, lane_of_batch

_log = logging.getLogger("ragkb.api")


@dataclass(frozen=True)
class Upload:
    """The content of one document upload, already read within the size limit."""

    data: bytes
    filename: str | None
    declared_type: str | None


@dataclass(frozen=True)
class DocumentFilters:
    """Which documents a listing shows (None: any)."""

    status: str | None = None
    label: str | None = None
    doc_type: str | None = None


# One document's fields and content, read and validated, ready for DocumentService.accept.
PreparedUpload = tuple[DocumentFields, Upload]


@dataclass(frozen=True)
class _BatchItem:
    """An item of a batch on its way in: its place, the source_id it was sent with, its version and content."""

    index: int
    source_id: str | None
    new: NewVersion
    data: bytes


class DocumentService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        queue: IngestQueue,
        retriever: RetrieverClient,
        *,
        limits: LimitSettings,
        jobs: JobSettings,
    ) -> None:
        self._sessions = sessions
        self._ledger = DocumentLedger(sessions)
        self._blobs = blobs
        self._queue = queue
        self._retriever = retriever
        self._limits = limits
        self._interactive_max_documents = jobs.interactive_max_documents

    def accept(
        self, kb_id: str, fields: DocumentFields, upload: Upload, caller: Caller, lane: Lane = Lane.INTERACTIVE
    ) -> DocumentAccepted:
        """Check the version, store the original, record the version (or recognise an unchanged one), then
        enqueue on `lane`. Every refusal comes before the original is stored, so a refused upload leaves
        nothing."""
        new = self._new_version(kb_id, fields, upload, lane)
        self._ledger.check_version(new, caller.document_scope)
        self._blobs.put(upload.data)
        try:
            recorded = self._ledger.record_version(new, caller.document_scope)
        except Exception:
            # Refused by a change that raced the check: the original goes unless another document has it.
            self._delete_unreferenced({new.blob_sha256})
            raise
        # Recorded: a deletion racing the upload can no longer take the original, but may have just before.
        self._blobs.ensure_stored(new.blob_sha256, upload.data)
        if recorded.changed:
            self._enqueue(recorded.document)
        if recorded.replaced_blob:
            self._delete_unreferenced({recorded.replaced_blob})
        return DocumentAccepted(**document_out(recorded.document).model_dump(), unchanged=not recorded.changed)

    def accept_batch(self, kb_id: str, items: Sequence[PreparedUpload | RagkbError], caller: Caller) -> BatchAccepted:
        """Accept each item as `accept` would have, one after the other, but checked in one session and recorded
        in one transaction: an item that was refused (here, or already when it was read) is reported with its
        error and the others still go in. The KB itself must exist and take writes."""
        if len(items) > self._limits.max_batch_documents:
            raise InvalidInput(
                f"a batch carries at most {self._limits.max_batch_documents} documents, not {len(items)}"
            )
        with self._sessions() as session:
            load_writable_kb(session, kb_id)
        lane = lane_of_batch(len(items), self._interactive_max_documents)
        results: dict[int, BatchItemResult] = {}
        prepared = self._prepared_items(kb_id, items, lane, results)
        checked = self._checked_items(prepared, caller, results)
        self._record_items(kb_id, checked, caller, results)
        ordered = [results[index] for index in range(len(items))]
        failed = sum(1 for result in ordered if result.error is not None)
        return BatchAccepted(accepted=len(ordered) - failed, failed=failed, results=ordered)

    def _prepared_items(
        self, kb_id: str, items: Sequence[PreparedUpload | RagkbError], lane: Lane, results: dict[int, BatchItemResult]
    ) -> list[_BatchItem]:
        """The items that pass the size and type checks, as versions; the others' errors go in `results`."""
        prepared = []
        for index, item in enumerate(items):
            if isinstance(item, RagkbError):  # refused already when it was read
                results[index] = _refused(index, None, item)
                continue
            fields, upload = item
            try:
                new = self._new_version(kb_id, fields, upload, lane)
            except RagkbError as exc:
                results[index] = _refused(index, fields.source_id, exc)
                continue
            prepared.append(_BatchItem(index, fields.source_id, new, upload.data))
        return prepared

    def _checked_items(
        self, items: list[_BatchItem], caller: Caller, results: dict[int, BatchItemResult]
    ) -> list[_BatchItem]:
        """The items the ledger would record, their originals stored; the others' errors go in `results`."""
        refusals = self._ledger.check_versions([item.new for item in items], caller.document_scope)
        checked = []
        for item, refusal in zip(items, refusals, strict=True):
            if refusal is None:
                checked.append(item)
            else:
                results[item.index] = _refused(item.index, item.source_id, refusal)
        for item in checked:
            self._blobs.put(item.data)
        return checked

    def _record_items(
        self, kb_id: str, items: list[_BatchItem], caller: Caller, results: dict[int, BatchItemResult]
    ) -> None:
        """Record the checked items and enqueue the changed ones; the originals of refused items and those the
        documents no longer use are deleted unless another document has them."""
        try:
            outcomes = self._ledger.record_versions([item.new for item in items], caller.document_scope)
        except Exception:
            self._delete_unreferenced({item.new.blob_sha256 for item in items})
            raise
        unused: set[str] = set()
        for item, outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, RagkbError):
                results[item.index] = _refused(item.index, item.source_id, outcome)
                unused.add(item.new.blob_sha256)
                continue
            self._blobs.ensure_stored(item.new.blob_sha256, item.data)  # as in `accept`
            document = DocumentAccepted(**document_out(outcome.document).model_dump(), unchanged=not outcome.changed)
            results[item.index] = BatchItemResult(index=item.index, source_id=item.source_id, document=document)
            unused.update({outcome.replaced_blob} if outcome.replaced_blob else set())
        changed = [outcome.document for outcome in outcomes if isinstance(outcome, RecordedVersion) and outcome.changed]
        self._enqueue_batch(kb_id, changed)
        self._delete_unreferenced(unused)

    def list(self, kb_id: str, filters: DocumentFilters, caller: Caller, page: PageRequest) -> Page[DocumentOut]:
        """A page of the KB's documents, oldest first, of those inside the caller's search filter and the
        request's filters (status and doc_type in SQL; labels, and a key's filter, on the rows)."""
        scope = caller.document_scope
        with self._sessions() as session:
            load_kb(session, kb_id)
            query = select(Document).where(Document.kb_id == kb_id).order_by(Document.created_at, Document.id)
            if filters.status is not None:
                query = query.where(Document.status == filters.status)
            if filters.doc_type is not None:
                query = query.where(Document.doc_type == filters.doc_type)
            if scope == EVERY_DOCUMENT and filters.label is None:  # the database pages
                total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
                rows = session.scalars(query.limit(page.limit).offset(page.offset))
                return Page([document_out(doc) for doc in rows], total, page)
            matching = [
                document_out(doc)
                for doc in session.scalars(query)
                if scope.admits(doc.labels, doc.doc_type) and (filters.label is None or filters.label in doc.labels)
            ]
        return page_of(matching, page)

    def get(self, kb_id: str, document_id: str, caller: Caller) -> DocumentOut:
        return document_out(self._ledger.get(kb_id, document_id, caller.document_scope))

    def update(self, kb_id: str, document_id: str, patch: DocumentPatch, caller: Caller) -> DocumentOut:
        changes = patch.changes()
        if not changes and patch.requested_doc_type is None:
            raise InvalidInput("nothing to change: give title, source_id, labels or metadata")
        changed = self._ledger.change_fields(
            kb_id,
            document_id,
            changes,
            requested_doc_type=patch.requested_doc_type,
            scope=caller.document_scope,
            publish=lambda document, values: self._retriever.set_document_payload(kb_id, document.id, values),
        )
        if changed.requeued:  # a new title: the original is indexed again with it
            self._enqueue(changed.document)
        return document_out(changed.document)

    def retry(self, kb_id: str, document_id: str, caller: Caller) -> DocumentOut:
        """Queue a failed document again, from its stored original."""
        document = self._ledger.retry(kb_id, document_id, caller.document_scope)
        self._enqueue(document)
        return document_out(document)

    def delete(self, kb_id: str, document_id: str, caller: Caller) -> None:
        self._ledger.writable(kb_id, document_id, caller.document_scope)
        # Index first, so that a failure leaves the document listed and the call repeatable. Every generation:
        # one being built by a re-index must not bring it back, nor a rollback to the previous one.
        generations = self._retriever.generations(kb_id)
        for generation in generations.all:
            self._retriever.delete_document(kb_id, document_id, generation=generation)
        self._delete_unreferenced(self._ledger.delete(kb_id, document_id))

    def _new_version(self, kb_id: str, fields: DocumentFields, upload: Upload, lane: Lane) -> NewVersion:
        """The upload as a version to record, once its size passes; its media type read from its content."""
        self._check_size(upload)
        media_type = detect_media_type(upload.filename, upload.data[:8192], upload.declared_type)
        return _new_version(kb_id, fields, upload, media_type, lane)

    def _check_size(self, upload: Upload) -> None:
        if len(upload.data) > self._limits.max_upload_bytes:
            raise PayloadTooLarge(f"the document is larger than {self._limits.max_upload_bytes} bytes")
        if not upload.data.strip():
            raise InvalidInput("the document is empty")

    def _enqueue(self, document: Document) -> None:
        try:
            self._queue.send(document.id, document.kb_id, Lane(document.lane))
        except Exception:  # the broker is down: the document is recorded, the worker's sweeper queues it later
            _log.warning("could not queue document %s now; the sweeper will queue it", document.id, exc_info=True)

    def _enqueue_batch(self, kb_id: str, documents: Sequence[Document]) -> None:
        try:
            self._queue.send_batch(kb_id, [(document.id, Lane(document.lane)) for document in documents])
        except Exception:  # the broker is down: the documents are recorded, the worker's sweeper queues them later
            _log.warning("could not queue a batch's documents now; the sweeper will queue them", exc_info=True)

    def _delete_unreferenced(self, shas: set[str]) -> None:
        self._blobs.delete_unused(shas, self._ledger.unreferenced_blobs)


def _new_version(kb_id: str, fields: DocumentFields, upload: Upload, media_type: str, lane: Lane) -> NewVersion:
    sha = sha256_of(upload.data)
    source_id = fields.source_id or upload.filename or sha
    return NewVersion(
        kb_id=kb_id,
        source_id=source_id,
        title=fields.title,
        default_title=_default_title(source_id, upload),
        filename=upload.filename,
        media_type=media_type,
        size_bytes=len(upload.data),
        blob_sha256=sha,
        labels=fields.labels,
        metadata=fields.metadata,
        doc_type=fields.doc_type,
        lane=lane,
    )


def _default_title(source_id: str, upload: Upload) -> str:
    name = upload.filename or source_id
    return PurePath(name).stem or name


def _refused(index: int, source_id: str | None, exc: RagkbError) -> BatchItemResult:
    error = BatchItemError(status=exc.status, title=exc.title, detail=exc.detail, errors=exc.extra.get("errors"))
    return BatchItemResult(index=index, source_id=source_id, error=error)


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
        ranges=RangeProgress(done=document.ranges_done, total=document.ranges_total) if document.ranges_total else None,
        created_at=document.created_at,
        updated_at=document.updated_at,
        indexed_at=document.indexed_at,
    )
