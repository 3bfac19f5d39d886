"""Index writes: one KB = one collection generation behind an alias; one document version = its chunks.

A re-index builds a new generation while the live one serves (writes given `generation=`), switches the
alias to it, and can switch back (roll back) until the old generation is dropped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ragkb_core.contracts import (
    ChunkPoint,
    DocumentBatch,
    DocumentChunks,
    DocumentPoints,
    DocumentWriteResult,
    IndexedChunk,
    KbGenerations,
    KbIndexInfo,
    KbPointCensus,
)
from ragkb_core.errors import InvalidInput, NotFound
from ragkb_core.ids import point_id
from ragkb_core.kb_settings import KbIndexLayout
from ragkb_retriever.index.filters import document_filter, kb_filter, ordinal_window_filter
from ragkb_retriever.index.port import IdKindChanged, IndexHit, IndexPoint, VectorIndex

# Points per page when a census or an export walks through a KB's index.
SCROLL_PAGE = 1000
# Metadata-only changes touch these payload fields; the rest (text, version, ordinal, …) needs a re-index.
PATCHABLE_PAYLOAD_FIELDS = frozenset({"title", "source_id", "labels", "metadata"})


class Dimensioned(Protocol):
    dimension: int


class EmbeddingModels(Protocol):
    """The embedding models this retriever runs (ragkb_models.EmbedderPool): the default, and others by name."""

    default_model: str

    def get(self, model: str | None = None) -> Dimensioned: ...


class IndexService:
    def __init__(self, index: VectorIndex, models: EmbeddingModels) -> None:
        self._index = index
        self._models = models

    def create_kb(
        self, kb_id: str, layout: KbIndexLayout | None = None, second_model: str | None = None
    ) -> KbIndexInfo:
        """A new KB is embedded with the default model; `layout` places it on a Qdrant cluster; `second_model`
        (KbChunking.second_model) gives its index room for that model's vectors too (loaded here, so that a
        model this retriever cannot run is refused before the KB exists)."""
        dense_size = self._models.get().dimension
        second_size = self._second_size(second_model)
        applied = self._index.create_kb(kb_id, dense_size=dense_size, layout=layout, second_size=second_size)
        return KbIndexInfo(
            kb_id=kb_id,
            embedding_model=self._models.default_model,
            dense_size=dense_size,
            layout=applied,
            second_model=second_model,
            second_size=second_size,
        )

    def _second_size(self, second_model: str | None) -> int | None:
        return None if second_model is None else self._models.get(second_model).dimension

    def drop_kb(self, kb_id: str) -> None:
        self._index.drop_kb(kb_id)

    def create_generation(
        self,
        kb_id: str,
        dense_size: int | None = None,
        embedding_model: str | None = None,
        second_model: str | None = None,
    ) -> int:
        """A new, empty, not yet live generation for `embedding_model`'s vectors (loading it here, so that a
        model this retriever cannot run is refused before a job starts), or of `dense_size`; neither: the
        default model's. `second_model`: with room for that model's vectors too (KbChunking.second_model)."""
        if embedding_model is not None or dense_size is None:
            dense_size = self._models.get(embedding_model).dimension
        return self._index.create_generation(kb_id, dense_size, second_size=self._second_size(second_model))

    def generations(self, kb_id: str) -> KbGenerations:
        info = self._index.generations(kb_id)
        return KbGenerations(live=info.live, all=info.all)

    def switch_generation(self, kb_id: str, generation: int) -> int:
        """Make `generation` live; returns the one live before (to switch back to, for a rollback)."""
        return self._index.switch_generation(kb_id, generation)

    def drop_generation(self, kb_id: str, generation: int) -> None:
        self._index.drop_generation(kb_id, generation)

    def write_document(self, document: DocumentPoints, *, generation: int | None = None) -> DocumentWriteResult:
        self._require_kb(document.kb_id)
        # Generations of one KB may hold different models' vectors: the engine checks each one's own size.
        written = self._upsert_documents(document.kb_id, [document], generation)
        return DocumentWriteResult(written=written, deleted_old=0)

    def write_documents(self, kb_id: str, batch: DocumentBatch) -> DocumentWriteResult:
        """All chunks of several documents of one KB in one upsert."""
        self._require_kb(kb_id)
        if any(document.kb_id != kb_id for document in batch.documents):
            raise InvalidInput("every document of the batch must belong to the path's knowledge base")
        return DocumentWriteResult(written=self._upsert_documents(kb_id, batch.documents, None), deleted_old=0)

    def _upsert_documents(self, kb_id: str, documents: Sequence[DocumentPoints], generation: int | None) -> int:
        """Every chunk of the documents as a point, with an id of the kind the generation holds."""
        points = self._points(kb_id, documents, generation)
        try:
            self._index.upsert(kb_id, points, generation=generation)
        except IdKindChanged:
            # A re-index switched the live generation between reading its kind and the write: mint the ids for
            # the one live now.
            points = self._points(kb_id, documents, generation)
            self._index.upsert(kb_id, points, generation=generation)
        return len(points)

    def _points(self, kb_id: str, documents: Sequence[DocumentPoints], generation: int | None) -> list[IndexPoint]:
        numbered = self._index.numbered_point_ids(kb_id, generation=generation)
        return [_point(document, index, numbered) for document in documents for index in range(len(document.chunks))]

    def delete_document(
        self,
        kb_id: str,
        document_id: str,
        keep_version: int | None,
        only_version: int | None,
        *,
        generation: int | None = None,
    ) -> None:
        self._require_kb(kb_id)
        if keep_version is not None and only_version is not None:
            raise InvalidInput("give keep_version or only_version, not both")
        self._index.delete_document(
            kb_id, document_id, keep_version=keep_version, only_version=only_version, generation=generation
        )

    def set_document_payload(
        self, kb_id: str, document_id: str, fields: dict[str, Any], *, generation: int | None = None
    ) -> None:
        self._require_kb(kb_id)
        unknown = set(fields) - PATCHABLE_PAYLOAD_FIELDS
        if unknown:
            raise InvalidInput(f"these payload fields cannot be changed in place: {', '.join(sorted(unknown))}")
        self._index.set_document_payload(kb_id, document_id, fields, generation=generation)

    def count(self, kb_id: str, document_id: str | None, *, generation: int | None = None) -> int:
        self._require_kb(kb_id)
        return self._index.count(kb_id, document_id=document_id, generation=generation)

    def document_chunks(self, kb_id: str, document_id: str, version: int, offset: int, limit: int) -> DocumentChunks:
        self._require_kb(kb_id)
        return read_document_chunks(self._index, kb_id, document_id, version, offset=offset, limit=limit)

    def point_census(self, kb_id: str) -> KbPointCensus:
        """Every point of the live generation counted per document and version (one pass over the KB)."""
        self._require_kb(kb_id)
        documents: dict[str, dict[int, int]] = {}
        offset: str | None = None
        while True:
            page = self._index.scroll_page(kb_id, kb_filter(kb_id), SCROLL_PAGE, offset)
            for point in page.points:
                versions = documents.setdefault(str(point.payload["document_id"]), {})
                version = int(point.payload["version"])
                versions[version] = versions.get(version, 0) + 1
            if page.next_offset is None:
                break
            offset = page.next_offset
        live = self._index.generations(kb_id).live
        return KbPointCensus(kb_id=kb_id, generation=live, documents=documents)

    def export_document(self, kb_id: str, document_id: str, version: int) -> DocumentPoints:
        """One document version as the worker wrote it, vectors included, in ordinal order (a backup);
        NotFound when the live generation holds none of its points."""
        self._require_kb(kb_id)
        spec = document_filter(kb_id, document_id, version=version)
        points: list[IndexPoint] = []
        offset: str | None = None
        while True:
            page = self._index.scroll_page(kb_id, spec, SCROLL_PAGE, offset, with_vectors=True)
            points.extend(page.points)
            if page.next_offset is None:
                break
            offset = page.next_offset
        if not points:
            raise NotFound(f"no points of document {document_id} version {version}", document_id=document_id)
        return _document_points(sorted(points, key=lambda point: int(point.payload["ordinal"])))

    def probe(self) -> None:
        """A real call through the engine (this KB never exists): raises when the index is unusable."""
        self._index.kb_exists("readiness-probe")

    def _require_kb(self, kb_id: str) -> None:
        if not self._index.kb_exists(kb_id):
            raise NotFound(f"no index for knowledge base {kb_id}")


def _point(document: DocumentPoints, index: int, numbered: bool) -> IndexPoint:
    chunk = document.chunks[index]
    payload: dict[str, Any] = {
        "kb_id": document.kb_id,
        "document_id": document.document_id,
        "source_id": document.source_id,
        "version": document.version,
        "ordinal": chunk.ordinal,
        "text": chunk.text,
        "title": document.title,
        "heading_path": chunk.heading_path,
        "page": chunk.page,
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "labels": document.labels,
        "doc_type": document.doc_type,
        "metadata": document.metadata,
        "analyzer_version": document.analyzer_version,
    }
    return IndexPoint(
        id=point_id(document.kb_id, document.source_id, document.version, chunk.ordinal, numbered=numbered),
        dense=chunk.dense,
        sparse=chunk.sparse,
        payload=payload,
        second=chunk.second,
    )


def _document_points(points: list[IndexPoint]) -> DocumentPoints:
    """The write a document version's points came from: document fields from its first point's payload."""
    first = points[0].payload
    return DocumentPoints(
        kb_id=str(first["kb_id"]),
        document_id=str(first["document_id"]),
        source_id=str(first["source_id"]),
        version=int(first["version"]),
        title=str(first["title"]),
        labels=list(first.get("labels") or []),
        doc_type=first.get("doc_type") or "knowledge",
        metadata=dict(first.get("metadata") or {}),
        analyzer_version=str(first["analyzer_version"]),
        chunks=[_chunk_point(point) for point in points],
    )


def _chunk_point(point: IndexPoint) -> ChunkPoint:
    payload = point.payload
    return ChunkPoint(
        ordinal=int(payload["ordinal"]),
        text=str(payload["text"]),
        dense=point.dense,
        sparse=point.sparse,
        second=point.second,
        heading_path=list(payload.get("heading_path") or []),
        page=payload.get("page"),
        char_start=int(payload.get("char_start") or 0),
        char_end=int(payload.get("char_end") or 0),
    )


def read_document_chunks(
    index: VectorIndex, kb_id: str, document_id: str, version: int, *, offset: int, limit: int
) -> DocumentChunks:
    """Passages `offset` .. `offset + limit - 1` of one document version in the live generation, in order.

    A version's ordinals run 0 .. n-1 (the worker numbers its chunks so), so a page is an ordinal window: one
    filtered scroll through the port, the same on both engines, however large the document."""
    total = index.count(kb_id, document_id=document_id, version=version)
    window = range(offset, min(offset + limit, total))
    spec = ordinal_window_filter(kb_id, document_id, version, window)
    hits = index.scroll(kb_id, spec, len(window)) if window else []
    chunks = sorted((_indexed_chunk(hit) for hit in hits), key=lambda chunk: chunk.ordinal)
    return DocumentChunks(document_id=document_id, version=version, total=total, offset=offset, chunks=chunks)


def _indexed_chunk(hit: IndexHit) -> IndexedChunk:
    payload = hit.payload
    return IndexedChunk(
        chunk_id=hit.id,
        ordinal=int(payload["ordinal"]),
        text=str(payload["text"]),
        heading_path=list(payload.get("heading_path") or []),
        page=payload.get("page"),
        char_start=int(payload.get("char_start") or 0),
        char_end=int(payload.get("char_end") or 0),
    )
