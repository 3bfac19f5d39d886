"""Routes back to a document's source: its stored original, its chunks as indexed, and a KB's index size."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get
from litestar.params import Parameter
from litestar.response import File

from ragkb_api.access import Caller
from ragkb_api.documents.sources import (
    MAX_CHUNKS_PAGE,
    DocumentChunksOut,
    DocumentSourceService,
    KbIndexOut,
    content_disposition,
)
from ragkb_http import access

# A stored original is served as a download only: never rendered by the browser on this origin.
DOWNLOAD_HEADERS = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox; default-src 'none'"}


class DocumentSourceController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}"
    tags = ["documents"]

    @get(
        "/documents/{document_id:str}/original",
        sync_to_thread=True,
        summary="Download the stored original of a document (the live version's upload)",
        opt=access("read"),
    )
    def original(
        self, kb_id: str, document_id: str, document_source_service: DocumentSourceService, caller: Caller
    ) -> File:
        found = document_source_service.original(kb_id, document_id, caller)
        return File(
            path=found.path,
            filename=found.filename,
            media_type=found.media_type,
            headers={**DOWNLOAD_HEADERS, "Content-Disposition": content_disposition(found.filename)},
        )

    @get(
        "/documents/{document_id:str}/chunks",
        sync_to_thread=True,
        summary="A document's passages as indexed (the served version), in document order, a page at a time",
        opt=access("read"),
    )
    def chunks(
        self,
        kb_id: str,
        document_id: str,
        document_source_service: DocumentSourceService,
        caller: Caller,
        *,
        offset: Annotated[int, Parameter(ge=0)] = 0,
        limit: Annotated[int, Parameter(ge=1, le=MAX_CHUNKS_PAGE)] = 50,
    ) -> DocumentChunksOut:
        return document_source_service.chunks(kb_id, document_id, caller, offset=offset, limit=limit)

    @get(
        "/index",
        sync_to_thread=True,
        summary="The size of a KB's index (passages in the live generation) and its generations",
        opt=access("read"),
    )
    def index(self, kb_id: str, document_source_service: DocumentSourceService) -> KbIndexOut:
        return document_source_service.index(kb_id)
