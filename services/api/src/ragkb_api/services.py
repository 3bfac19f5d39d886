"""The api's service layer: handlers call these; these call the database, blob store, queue and retriever."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from celery import Celery
from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import (
    Caller,
    SearchRestriction,
    generate_key,
    hash_key,
    hashes_match,
    kb_not_found,
    key_prefix,
)
from ragkb_api.schemas import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyOut,
    ApiKeyPatch,
    BatchAccepted,
    BatchItemError,
    BatchItemResult,
    DocumentAccepted,
    DocumentFields,
    DocumentOut,
    DocumentPatch,
    KeySearchFilter,
    KnowledgeBaseCreate,
    KnowledgeBaseOut,
    KnowledgeBaseUpdate,
    RetrievalPatch,
)
from ragkb_api.sync import compile_exclude
from ragkb_core.blobs import BlobStore
from ragkb_core.db.engine import transaction
from ragkb_core.db.models import ApiKey, Document, DocumentStatus, Job, JobStatus, KnowledgeBase, utcnow
from ragkb_core.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, RagkbError, Unauthorized
from ragkb_core.formats import PLAIN_TEXT, detect_media_type
from ragkb_core.ids import new_id
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, KbSync
from ragkb_core.queue import enqueue_ingest
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import LimitSettings

_log = logging.getLogger("ragkb.api")
BOOTSTRAP_KEY_ID = "bootstrap"


@dataclass(frozen=True)
class Upload:
    """The content of one document upload, already read within the size limit."""

    data: bytes
    filename: str | None
    declared_type: str | None


# One document's fields and content, read and validated, ready for DocumentService.accept.
PreparedUpload = tuple[DocumentFields, Upload]


class KnowledgeBaseService:
    """Create, read and change KBs. Deleting one is a job (ragkb_api.kb_deletion)."""

    def __init__(self, sessions: sessionmaker[Session], retriever: RetrieverClient) -> None:
        self._sessions = sessions
        self._retriever = retriever

    def create(self, data: KnowledgeBaseCreate) -> KnowledgeBaseOut:
        _check_sync_patterns(data.sync)
        kb_id = new_id()
        try:
            with transaction(self._sessions) as session:
                _ensure_name_free(session, data.name)
                # Inside the transaction: if the index cannot be created, no KB row is left behind.
                index = self._retriever.create_kb(kb_id, data.index)
                session.add(
                    KnowledgeBase(
                        id=kb_id,
                        name=data.name,
                        description=data.description,
                        embedding_model=index.embedding_model,
                        analyzer_version=data.analyzer.version,
                        chunking=data.chunking.model_dump(),
                        retrieval=data.retrieval.model_dump(exclude_defaults=True),
                        # In full: the analyzer's defaults may change, the terms this KB was built with may not.
                        analyzer=data.analyzer.model_dump(),
                        sync=data.sync.model_dump(exclude_defaults=True),
                    )
                )
        except IntegrityError as exc:
            # Lost a race for the name after the index was made: remove that empty index again.
            self._retriever.drop_kb(kb_id)
            raise Conflict(f"a knowledge base named {data.name!r} already exists") from exc
        return self.get(kb_id)

    def list(self, caller: Caller) -> list[KnowledgeBaseOut]:
        query = select(KnowledgeBase).order_by(KnowledgeBase.created_at)
        if not caller.is_admin:
            query = query.where(KnowledgeBase.id.in_(caller.readable(caller.grants)))
        with self._sessions() as session:
            kbs = session.scalars(query).all()
            counts = _status_counts(session, [kb.id for kb in kbs])
            return [_kb_out(kb, counts.get(kb.id, {})) for kb in kbs]

    def get(self, kb_id: str) -> KnowledgeBaseOut:
        with self._sessions() as session:
            kb = load_kb(session, kb_id)
            return _kb_out(kb, _status_counts(session, [kb_id]).get(kb_id, {}))

    def update(self, kb_id: str, data: KnowledgeBaseUpdate) -> KnowledgeBaseOut:
        changes = data.model_dump(exclude_none=True, exclude={"retrieval", "analyzer", "sync"})
        if not changes and data.retrieval is None and data.analyzer is None and data.sync is None:
            raise InvalidInput("nothing to change: give name, description, chunking, retrieval or sync")
        if data.sync is not None:
            _check_sync_patterns(data.sync)
        try:
            with transaction(self._sessions) as session:
                kb = load_writable_kb(session, kb_id)
                _refuse_analyzer_change(kb, data.analyzer)
                if data.name is not None and data.name != kb.name:
                    _ensure_name_free(session, data.name)
                for field, value in changes.items():
                    setattr(kb, field, value)
                if data.retrieval is not None:
                    kb.retrieval = _patched_retrieval(kb.retrieval, data.retrieval)
                if data.sync is not None:
                    kb.sync = data.sync.model_dump(exclude_defaults=True)
        except IntegrityError as exc:
            raise Conflict(f"a knowledge base named {data.name!r} already exists") from exc
        return self.get(kb_id)


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


class ApiKeyService:
    """Issues, lists, changes and revokes API keys, and resolves a presented key to its caller."""

    def __init__(self, sessions: sessionmaker[Session], bootstrap_admin_key: str | None) -> None:
        self._sessions = sessions
        # Kept hashed in memory only, and compared like any other key.
        self._bootstrap_hash = hash_key(bootstrap_admin_key) if bootstrap_admin_key else None

    def authenticate(self, presented: str | None) -> Caller:
        if presented is None:
            raise Unauthorized("send an API key: `Authorization: Bearer <key>`")
        if self._bootstrap_hash is not None and hashes_match(presented, self._bootstrap_hash):
            return Caller(key_id=BOOTSTRAP_KEY_ID, role="admin")
        key = self._find_live(presented)
        if key is None:
            # One answer for malformed, unknown and revoked keys: nothing to learn by trying.
            raise Unauthorized("the API key is not valid")
        return _caller(key)

    def create(self, data: ApiKeyCreate) -> ApiKeyCreated:
        new = generate_key()
        with transaction(self._sessions) as session:
            _check_key_fields(session, data.role, data.grants, data.search_filter)
            key = ApiKey(
                id=new_id(),
                name=data.name,
                role=data.role,
                prefix=new.prefix,
                key_hash=new.key_hash,
                grants=dict(data.grants),
                search_filter=data.search_filter.model_dump() if data.search_filter else None,
            )
            session.add(key)
            session.flush()
            return ApiKeyCreated(**_api_key_out(key).model_dump(), key=new.plaintext)

    def list(self) -> list[ApiKeyOut]:
        with self._sessions() as session:
            return [_api_key_out(key) for key in session.scalars(select(ApiKey).order_by(ApiKey.created_at))]

    def update(self, key_id: str, patch: ApiKeyPatch) -> ApiKeyOut:
        changes = patch.model_fields_set
        if not changes:
            raise InvalidInput("nothing to change: give grants and/or search_filter")
        with transaction(self._sessions) as session:
            key = _load_api_key(session, key_id)
            grants = patch.grants if "grants" in changes and patch.grants is not None else key.grants
            search_filter = patch.search_filter if "search_filter" in changes else _key_filter(key)
            _check_key_fields(session, key.role, grants, search_filter)
            key.grants = dict(grants)
            key.search_filter = search_filter.model_dump() if search_filter else None
            session.flush()
            return _api_key_out(key)

    def revoke(self, key_id: str) -> None:
        with transaction(self._sessions) as session:
            key = _load_api_key(session, key_id)
            key.revoked_at = key.revoked_at or utcnow()

    def _find_live(self, presented: str) -> ApiKey | None:
        prefix = key_prefix(presented)
        if prefix is None:
            return None
        with self._sessions() as session:
            key = session.scalars(select(ApiKey).where(ApiKey.prefix == prefix)).one_or_none()
        if key is None or key.revoked_at is not None or not hashes_match(presented, key.key_hash):
            return None
        return key


def _check_key_fields(
    session: Session, role: str, grants: dict[str, Any], search_filter: KeySearchFilter | None
) -> None:
    if role == "admin" and (grants or search_filter):
        raise InvalidInput("grants and search_filter apply to client keys; an admin key sees every KB")
    known = set(session.scalars(select(KnowledgeBase.id).where(KnowledgeBase.id.in_(list(grants)))))
    unknown = sorted(set(grants) - known)
    if unknown:
        raise InvalidInput(f"grants name unknown knowledge bases: {', '.join(unknown)}", unknown=unknown)


def _load_api_key(session: Session, key_id: str) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"API key {key_id} does not exist")
    return key


def _key_filter(key: ApiKey) -> KeySearchFilter | None:
    return KeySearchFilter.model_validate(key.search_filter) if key.search_filter is not None else None


def _caller(key: ApiKey) -> Caller:
    restriction = _key_filter(key) or KeySearchFilter()
    return Caller(
        key_id=key.id,
        role="admin" if key.role == "admin" else "client",
        grants=dict(key.grants),
        restriction=SearchRestriction(labels_any=restriction.labels_any, doc_types=restriction.doc_types),
    )


def _api_key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=key.id,
        name=key.name,
        role="admin" if key.role == "admin" else "client",
        prefix=key.prefix,
        grants=dict(key.grants),
        search_filter=_key_filter(key),
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )


def _ensure_name_free(session: Session, name: str) -> None:
    if session.scalars(select(KnowledgeBase.id).where(KnowledgeBase.name == name)).first():
        raise Conflict(f"a knowledge base named {name!r} already exists")


def _refuse_analyzer_change(kb: KnowledgeBase, requested: KbAnalyzer | None) -> None:
    if requested is not None and requested != KbAnalyzer.model_validate(kb.analyzer):
        raise Conflict(
            "a knowledge base's analyzer changes only by re-indexing it: every passage's terms must be made again",
            analyzer=KbAnalyzer.model_validate(kb.analyzer).model_dump(),
        )


def _check_sync_patterns(sync: KbSync) -> None:
    """The exclude patterns compile as the sync matcher runs them (the `regex` module), not only as `re` does:
    a pattern that cannot run is refused now (422), never skipped at sync time."""
    for pattern in sync.exclude_patterns:
        compile_exclude(pattern)


def _patched_retrieval(stored: dict[str, Any], patch: RetrievalPatch) -> dict[str, Any]:
    """The stored settings with the patch's fields applied (null: back to the default), validated whole."""
    merged = KbRetrieval.model_validate(stored).model_dump() | patch.model_dump(exclude_unset=True)
    defaults = KbRetrieval().model_dump()
    unset_to_default = {field: defaults[field] if value is None else value for field, value in merged.items()}
    try:
        return KbRetrieval.model_validate(unset_to_default).model_dump(exclude_defaults=True)
    except ValidationError as exc:
        raise InvalidInput(f"invalid retrieval settings: {exc.errors()[0]['msg']}") from exc


def load_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB, or the same NotFound for unknown and ungranted ids."""
    kb = session.get(KnowledgeBase, kb_id)
    if kb is None:
        raise kb_not_found(kb_id)
    return kb


def load_writable_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB, unless it is being deleted (409: see ensure_not_deleting)."""
    kb = load_kb(session, kb_id)
    ensure_not_deleting(kb)
    return kb


def ensure_not_deleting(kb: KnowledgeBase) -> None:
    """409, not 404, for a KB whose deletion job runs (or failed and waits for DELETE again): the KB still
    exists (GET shows it `deleting`, with its job) and a 404 would say it is gone when a retried deletion may
    still have to finish. Once the job has removed it, it answers 404 like any unknown id."""
    if kb.deletion_job_id is not None:
        raise Conflict(
            f"knowledge base {kb.id} is being deleted (job {kb.deletion_job_id})",
            knowledge_base_id=kb.id,
            job_id=kb.deletion_job_id,
        )


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


def _status_counts(session: Session, kb_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    rows = session.execute(
        select(Document.kb_id, Document.status, func.count())
        .where(Document.kb_id.in_(kb_ids))
        .group_by(Document.kb_id, Document.status)
    )
    counts: dict[str, dict[str, int]] = {}
    for kb_id, status, count in rows:
        counts.setdefault(kb_id, {})[status] = count
    return counts


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


def _kb_out(kb: KnowledgeBase, counts: dict[str, int]) -> KnowledgeBaseOut:
    all_counts = {status.value: counts.get(status.value, 0) for status in DocumentStatus}
    return KnowledgeBaseOut(
        id=kb.id,
        name=kb.name,
        description=kb.description,
        embedding_model=kb.embedding_model,
        analyzer_version=kb.analyzer_version,
        chunking=KbChunking.model_validate(kb.chunking),
        retrieval=KbRetrieval.model_validate(kb.retrieval),
        analyzer=KbAnalyzer.model_validate(kb.analyzer),
        sync=KbSync.model_validate(kb.sync),
        document_counts=all_counts,
        status="deleting" if kb.deletion_job_id else "active",
        deletion_job_id=kb.deletion_job_id,
        created_at=kb.created_at,
        updated_at=kb.updated_at,
    )


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
