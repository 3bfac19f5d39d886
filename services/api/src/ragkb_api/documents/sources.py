"""What a document came from and what the index made of it: its stored original, its indexed passages, and
the size of a KB's index. Read-only views for the console (and any client), scoped like reading a document."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePath
from urllib.parse import quote

from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_core.contracts import IndexedChunk
from ragkb_core.errors import NotFound
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.knowledge_bases import load_kb
from ragkb_store.ledger import DocumentLedger

MAX_CHUNKS_PAGE = 200
FALLBACK_FILENAME = "document"


@dataclass(frozen=True)
class Original:
    path: Path
    filename: str
    media_type: str
    size_bytes: int


class DocumentChunksOut(BaseModel):
    document_id: str
    knowledge_base_id: str
    # The version the index serves (None: nothing indexed yet, e.g. pending or failed at its first version).
    indexed_version: int | None
    total: int
    offset: int
    limit: int
    next_offset: int | None
    chunks: list[IndexedChunk]


class KbIndexOut(BaseModel):
    knowledge_base_id: str
    # Passages in the live generation (every indexed version of every document; old versions leave it once
    # their replacement is written).
    chunks: int
    live_generation: int | None
    generations: list[int]


class DocumentSourceService:
    def __init__(self, sessions: sessionmaker[Session], blobs: BlobStore, retriever: RetrieverClient) -> None:
        self._sessions = sessions
        self._ledger = DocumentLedger(sessions)
        self._blobs = blobs
        self._retriever = retriever

    def original(self, kb_id: str, document_id: str, caller: Caller) -> Original:
        """The newest accepted upload of a document the caller may see (its search filter applies)."""
        document = self._ledger.get(kb_id, document_id, caller.document_scope)
        name = download_name(document.filename, document.source_id)
        media_type, sha, size = document.media_type, document.blob_sha256, document.size_bytes
        return Original(
            path=self._blobs.path_of(sha),
            filename=name,
            media_type=media_type or "application/octet-stream",
            size_bytes=size,
        )

    def chunks(self, kb_id: str, document_id: str, caller: Caller, *, offset: int, limit: int) -> DocumentChunksOut:
        version = self._ledger.get(kb_id, document_id, caller.document_scope).indexed_version
        if version is None:
            total, chunks = 0, []
        else:
            page = self._retriever.document_chunks(kb_id, document_id, version, offset=offset, limit=limit)
            total, chunks = page.total, page.chunks
        following = offset + len(chunks)
        return DocumentChunksOut(
            document_id=document_id,
            knowledge_base_id=kb_id,
            indexed_version=version,
            total=total,
            offset=offset,
            limit=limit,
            next_offset=following if chunks and following < total else None,
            chunks=chunks,
        )

    def index(self, kb_id: str) -> KbIndexOut:
        with self._sessions() as session:
            load_kb(session, kb_id)
        try:
            generations = self._retriever.generations(kb_id)
            chunks = self._retriever.count_points(kb_id)
        except NotFound:  # a KB being deleted has lost its index already
            return KbIndexOut(knowledge_base_id=kb_id, chunks=0, live_generation=None, generations=[])
        return KbIndexOut(
            knowledge_base_id=kb_id, chunks=chunks, live_generation=generations.live, generations=generations.all
        )


def download_name(filename: str | None, source_id: str) -> str:
    """The name a download is saved under: the uploaded file's name, else the last part of its source_id."""
    name = filename or PurePath(source_id.replace("\\", "/")).name
    return name.strip() or FALLBACK_FILENAME


def content_disposition(filename: str) -> str:
    """`attachment` with the name twice (RFC 6266): `filename*` percent-encoded UTF-8 (RFC 5987/8187) for
    clients that read it, and an ASCII `filename` for those that do not. Quotes, backslashes, separators and
    control characters never reach the header as themselves, whatever the name holds."""
    fallback = (
        "".join(c if " " <= c <= "~" and c not in '"\\%;' else "_" for c in filename).strip() or FALLBACK_FILENAME
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
