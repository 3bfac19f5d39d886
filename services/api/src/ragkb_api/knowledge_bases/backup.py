"""Backup of a KB into one archive (ragkb_api.knowledge_bases.archive) and its restore as a new KB.

A backup holds what the KB serves: its settings, every document's metadata, the indexed version's points with
their vectors (nothing is embedded again on restore, so searches answer exactly as before), and the stored
originals and extracted texts. A document whose points could not be read (it was being replaced while the
backup ran) is kept as pending: the restore builds it again from its original; a failed one stays failed.

A restore creates a new KB (the backup's name, or another) with new ids for it and its documents, stores the
blobs, writes the points, and records the documents last, in one transaction: until then nothing of it is
searchable, and a restore that fails removes the KB and its index again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.knowledge_bases.archive import (
    DOCUMENTS,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    ArchiveReader,
    ArchiveWriter,
    BackedUpDocument,
    BackedUpKb,
    BackupManifest,
    BlobMember,
    not_a_backup,
)
from ragkb_api.knowledge_bases.schemas import KnowledgeBaseCreate, KnowledgeBaseOut
from ragkb_api.knowledge_bases.service import KnowledgeBaseService
from ragkb_core.contracts import DocumentPoints
from ragkb_core.errors import InvalidInput, NotFound, ReadOnlyKnowledgeBase
from ragkb_core.ids import new_id
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, KnowledgeBase
from ragkb_store.ledger import DocumentLedger, RestoredDocument
from ragkb_store.queue import IngestQueue
from ragkb_store.states import Lane

_log = logging.getLogger("ragkb.api")


@dataclass(frozen=True)
class RestoreReport:
    knowledge_base: KnowledgeBaseOut
    documents: int
    points: int
    queued: int


class BackupService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        blobs: BlobStore,
        retriever: RetrieverClient,
        queue: IngestQueue,
        knowledge_bases: KnowledgeBaseService,
        *,
        max_restore_bytes: int,
    ) -> None:
        self._sessions = sessions
        self._blobs = blobs
        self._retriever = retriever
        self._queue = queue
        self._knowledge_bases = knowledge_bases
        self._ledger = DocumentLedger(sessions)
        # What an archive of at most max_restore_bytes may unpack to: vectors and JSON compress about 3:1.
        self._max_unpacked_bytes = 10 * max_restore_bytes

    # -- backup -------------------------------------------------------------------------------------------

    def backup(self, kb_id: str, target: IO[bytes]) -> str:
        """Write the KB's archive to `target`; returns the KB's name."""
        kb = self._knowledge_bases.get(kb_id)
        if kb.kind == "external":
            # Its passages live where it is managed: an archive of it would restore as an empty native KB.
            raise ReadOnlyKnowledgeBase(
                f"knowledge base {kb_id} is external: ragkb holds none of its passages to back up",
                knowledge_base_id=kb_id,
            )
        with self._sessions() as session:
            query = select(Document).where(Document.kb_id == kb_id).order_by(Document.created_at, Document.id)
            rows = list(session.scalars(query))
        documents, exported = self._documents_with_points(kb_id, rows)
        manifest = BackupManifest(
            format=FORMAT,
            format_version=FORMAT_VERSION,
            created_at=time.time(),
            knowledge_base=BackedUpKb.model_validate(kb.model_dump()),
            documents=len(documents),
            points=sum(len(points.chunks) for points in exported.values()),
        )
        writer = ArchiveWriter(target)
        writer.add_json(MANIFEST, manifest)
        writer.add_lines(DOCUMENTS, documents)
        shas = {sha for document in documents for sha in (document.blob_sha256, document.text_sha256) if sha}
        for sha in sorted(shas):
            if self._blobs.exists(sha):
                writer.add_blob(sha, self._blobs.read(sha))
        for document_id, points in exported.items():
            writer.add_points(document_id, points)
        writer.close()
        _log.info("KB %s backed up: %d documents, %d points", kb_id, manifest.documents, manifest.points)
        return kb.name

    def _documents_with_points(
        self, kb_id: str, rows: list[Document]
    ) -> tuple[list[BackedUpDocument], dict[str, DocumentPoints]]:
        documents: list[BackedUpDocument] = []
        exported: dict[str, DocumentPoints] = {}
        for row in rows:
            points = self._indexed_points(kb_id, row)
            if points is not None:
                exported[row.id] = points
            documents.append(_backed_up(row, points))
        return documents, exported

    def _indexed_points(self, kb_id: str, row: Document) -> DocumentPoints | None:
        if row.indexed_version is None:
            return None
        try:
            return self._retriever.export_document(kb_id, row.id, row.indexed_version)
        except NotFound:
            return None  # replaced or deleted meanwhile: restored as pending, built again from its original

    # -- restore ------------------------------------------------------------------------------------------

    def restore(self, source: IO[bytes], name: str | None) -> RestoreReport:
        reader = ArchiveReader(source, self._max_unpacked_bytes)
        try:
            manifest, documents = reader.head()
            kb = self._create_kb(manifest, name)
            try:
                return self._fill(kb, reader, manifest, documents)
            except Exception:
                self._remove(kb.id)
                raise
        finally:
            reader.close()

    def _create_kb(self, manifest: BackupManifest, name: str | None) -> KnowledgeBaseOut:
        backed_up = manifest.knowledge_base
        create = KnowledgeBaseCreate.model_validate(
            {**backed_up.model_dump(exclude={"embedding_model"}), "name": name or backed_up.name}
        )
        kb = self._knowledge_bases.create(create)
        if kb.embedding_model != backed_up.embedding_model:
            self._remove(kb.id)
            raise InvalidInput(
                f"the backup's vectors are of {backed_up.embedding_model!r}; this server embeds new knowledge "
                f"bases with {kb.embedding_model!r}: restore it on a server with the same default model"
            )
        return kb

    def _fill(
        self, kb: KnowledgeBaseOut, reader: ArchiveReader, manifest: BackupManifest, documents: list[BackedUpDocument]
    ) -> RestoreReport:
        new_ids = {document.id: new_id() for document in documents}
        indexed: set[str] = set()
        points = 0
        # Pinned: another KB's deletion of the same bytes may take a stored blob before the rows are committed.
        with self._blobs.pinned() as pins:
            for member in reader.rest():
                if isinstance(member, BlobMember):
                    pins.put(member.data)
                    continue
                if member.document_id not in new_ids:
                    raise not_a_backup(f"points of a document the backup does not list: {member.document_id}")
                written = member.points.model_copy(update={"kb_id": kb.id, "document_id": new_ids[member.document_id]})
                points += self._retriever.write_document(written).written
                indexed.add(member.document_id)
            _require_blobs(documents, pins.holds)
            restored = [
                _restored(document, new_ids[document.id], document.id in indexed, pins.holds) for document in documents
            ]
            queued = self._ledger.restore(kb.id, restored)
            pins.ensure_stored()
        self._queue.send_batch(kb.id, [(document_id, Lane.BULK) for document_id in queued])
        _log.info(
            "KB %s restored as %s: %d documents, %d points", manifest.knowledge_base.name, kb.id, len(documents), points
        )
        return RestoreReport(self._knowledge_bases.get(kb.id), len(documents), points, len(queued))

    def _remove(self, kb_id: str) -> None:
        """Undo a restore that failed: its index and its KB row (no document row was written yet)."""
        self._retriever.drop_kb(kb_id)
        with transaction(self._sessions) as session:
            session.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb_id))


def _require_blobs(documents: list[BackedUpDocument], restored_blob: Callable[[str], bool]) -> None:
    """Every document's original must have come with the archive: a document without it could never be built
    again."""
    missing = sorted({document.blob_sha256 for document in documents if not restored_blob(document.blob_sha256)})
    if missing:
        raise not_a_backup(f"the originals of {len(missing)} documents are missing (first: {missing[0]})")


def _backed_up(row: Document, points: DocumentPoints | None) -> BackedUpDocument:
    if points is not None:
        status, version, chunk_count, error = "done", points.version, len(points.chunks), None
    elif row.status == "failed" and row.indexed_version is None:
        status, version, chunk_count, error = "failed", row.version, 0, row.error
    else:
        status, version, chunk_count, error = "pending", row.version, 0, None
    return BackedUpDocument(
        id=row.id,
        source_id=row.source_id,
        title=row.title,
        filename=row.filename,
        media_type=row.media_type,
        size_bytes=row.size_bytes,
        blob_sha256=row.blob_sha256,
        text_sha256=row.text_sha256,
        labels=row.labels,
        metadata=row.metadata_,
        doc_type="reference" if row.doc_type == "reference" else "knowledge",
        version=version,
        chunk_count=chunk_count,
        status=status,
        error=error,
    )


def _restored(
    document: BackedUpDocument, document_id: str, indexed: bool, restored_blob: Callable[[str], bool]
) -> RestoredDocument:
    return RestoredDocument(
        id=document_id,
        source_id=document.source_id,
        title=document.title,
        filename=document.filename,
        media_type=document.media_type,
        size_bytes=document.size_bytes,
        blob_sha256=document.blob_sha256,
        # An extracted text the archive did not carry is made again by the next ingest.
        text_sha256=document.text_sha256 if document.text_sha256 and restored_blob(document.text_sha256) else None,
        labels=document.labels,
        metadata=document.metadata,
        doc_type=document.doc_type,
        version=document.version,
        chunk_count=document.chunk_count,
        indexed=indexed,
        error=document.error if document.status == "failed" else None,
    )
