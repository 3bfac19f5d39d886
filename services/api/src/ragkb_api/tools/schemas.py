"""Request and response shapes of the agent tools (/v1/tools/..., and the same tools over MCP) and of
context assembly."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints, field_validator

from ragkb_api.fields import MAX_DOCUMENT_IDS_PER_SEARCH, MAX_KBS_PER_SEARCH, Id
from ragkb_api.search.schemas import SearchFilters, SearchRequest
from ragkb_core.contracts import SearchHit

ChunkId = Annotated[
    str, StringConstraints(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
]


class RetrieveTextNodesRequest(BaseModel):
    """Search the knowledge bases and return the best few passages (the search pipeline, small top_k)."""

    query: str = Field(min_length=1, description="What to look for, in natural language or keywords")
    knowledge_base_ids: list[Id] = Field(min_length=1, max_length=MAX_KBS_PER_SEARCH)
    top_k: int = Field(default=3, ge=1, le=50)
    filters: SearchFilters = Field(default_factory=SearchFilters)

    @field_validator("query")
    @classmethod
    def _query_is_not_blank(cls, value: str) -> str:
        return SearchRequest._query_is_not_blank(value)


class QueryFilesRequest(BaseModel):
    """List the documents of the knowledge bases that the filters select."""

    knowledge_base_ids: list[Id] = Field(min_length=1, max_length=MAX_KBS_PER_SEARCH)
    filters: SearchFilters = Field(default_factory=SearchFilters)


class FileOut(BaseModel):
    id: str
    knowledge_base_id: str
    source_id: str
    title: str
    media_type: str
    size_bytes: int
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    status: str
    version: int
    chunk_count: int
    # False for documents ingested before the text was kept: read_file and grep_files need a re-ingest.
    text_available: bool


class QueryFilesResponse(BaseModel):
    files: list[FileOut]
    truncated: bool


class GrepFilesRequest(BaseModel):
    """Search the extracted text of documents line by line, literally or by regular expression."""

    pattern: str = Field(min_length=1, max_length=500)
    regex: bool = Field(default=False, description="Treat the pattern as a regular expression (else literal)")
    ignore_case: bool = False
    knowledge_base_ids: list[Id] = Field(min_length=1, max_length=MAX_KBS_PER_SEARCH)
    document_ids: list[Id] | None = Field(default=None, max_length=MAX_DOCUMENT_IDS_PER_SEARCH)
    context_lines: int = Field(default=1, ge=0, le=10)
    max_matches: int = Field(default=100, ge=1, le=1000)


class GrepMatch(BaseModel):
    document_id: str
    knowledge_base_id: str
    title: str
    line_number: int
    line: str
    before: list[str]
    after: list[str]


class GrepFilesResponse(BaseModel):
    matches: list[GrepMatch]
    # More matches existed than max_matches, or the time budget ran out (a slow pattern): the list is partial.
    truncated: bool
    timed_out: bool
    documents_searched: int
    # Selected documents without stored text (ingested before it was kept): re-ingest them to grep them.
    documents_without_text: list[str]


class ReadFileRequest(BaseModel):
    """Read a document's full extracted text, a page of characters at a time."""

    document_id: Id
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=4000, ge=1, le=100_000)


class ReadFileResponse(BaseModel):
    document_id: str
    knowledge_base_id: str
    title: str
    offset: int
    text: str
    total_chars: int
    # Where the next page starts; None at the end.
    next_offset: int | None


class SurroundingContextRequest(BaseModel):
    """A passage (by the chunk_id a search returned) and its neighbours in document order."""

    chunk_id: ChunkId
    before: int = Field(default=1, ge=0, le=20)
    after: int = Field(default=1, ge=0, le=20)
    # Where to look; every readable KB when absent.
    knowledge_base_ids: list[Id] | None = Field(default=None, min_length=1, max_length=MAX_KBS_PER_SEARCH)


class SurroundingContextResponse(BaseModel):
    chunk_id: str
    passages: list[SearchHit]


class ContextRequest(RetrieveTextNodesRequest):
    """Search, then assemble the passages into one prompt-ready block within a token budget."""

    top_k: int = Field(default=8, ge=1, le=50)
    token_budget: int = Field(default=2000, ge=50, le=32000, description="Estimated tokens the block may use")


class ContextCitation(BaseModel):
    number: int
    chunk_id: str
    knowledge_base_id: str
    document_id: str
    source_id: str
    title: str
    heading_path: list[str]
    page: int | None
    char_start: int
    char_end: int
    score: float
    knowledge_base_name: str = ""
    # The stored original (a path on this api, `#page=N` for a PDF's page): the way back to the source.
    original_url: str = ""


class ContextResponse(BaseModel):
    query: str
    # "[1] Title > Heading (p. 3)\npassage…" blocks separated by blank lines; cite them as [n].
    context: str
    citations: list[ContextCitation]
    estimated_tokens: int
    # Passages the search found that did not fit the budget.
    omitted: int
