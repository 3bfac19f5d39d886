"""Wire contracts: the pydantic models that cross a process boundary (worker → retriever, api → retriever).

Versioned by the URL prefix of the retriever's internal API (`/internal/v1`); a breaking change adds v2.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

DocType = Literal["knowledge", "reference"]
SearchMode = Literal["hybrid", "semantic", "keyword"]


class SparseTerms(BaseModel):
    """BM25 term weights of one text: term ids (stable hash) and their weights."""

    indices: list[int]
    values: list[float]


class ChunkPoint(BaseModel):
    """One chunk, embedded and analysed, ready to be written to the index."""

    ordinal: int = Field(ge=0)
    text: str
    dense: list[float]
    sparse: SparseTerms
    heading_path: list[str] = Field(default_factory=list)
    page: int | None = None
    char_start: int = 0
    char_end: int = 0


class DocumentPoints(BaseModel):
    """All chunks of one version of one document (worker → retriever)."""

    kb_id: str
    document_id: str
    source_id: str
    version: int = Field(ge=1)
    title: str
    labels: list[str] = Field(default_factory=list)
    doc_type: DocType = "knowledge"
    metadata: dict[str, Any] = Field(default_factory=dict)
    analyzer_version: str
    chunks: list[ChunkPoint]


class KbIndexInfo(BaseModel):
    """What the retriever built for a KB: recorded on the KB so that a later change needs a re-index."""

    kb_id: str
    embedding_model: str
    dense_size: int
    analyzer_version: str


class DocumentWriteResult(BaseModel):
    written: int
    deleted_old: int


class ScopeFilter(BaseModel):
    """What a search may see. Applied inside every leg in the engine, before ranking."""

    document_ids: list[str] | None = None
    labels_any: list[str] | None = None
    doc_types: list[DocType] | None = None
    # A second label condition ANDed with `labels_any`: the caller's key's mandatory filter, which the
    # request's own filter may narrow but never widen.
    required_labels_any: list[str] | None = None


class SearchQuery(BaseModel):
    """api → retriever: one question over one or more KBs."""

    query: str = Field(min_length=1)
    knowledge_base_ids: list[str] = Field(min_length=1)
    top_k: int = Field(default=12, ge=1, le=200)
    mode: SearchMode = "hybrid"
    scope: ScopeFilter = Field(default_factory=ScopeFilter)


class SearchHit(BaseModel):
    chunk_id: str
    text: str
    score: float
    knowledge_base_id: str
    document_id: str
    source_id: str
    title: str
    version: int
    ordinal: int
    heading_path: list[str] = Field(default_factory=list)
    page: int | None = None
    char_start: int = 0
    char_end: int = 0
    labels: list[str] = Field(default_factory=list)
    doc_type: DocType = "knowledge"
    dense_rank: int | None = None
    dense_score: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None


class SearchResult(BaseModel):
    results: list[SearchHit]
    took_ms: float


class ContextQuery(BaseModel):
    """api → retriever: a passage of one KB and how many passages of its document version to add around it."""

    chunk_id: str = Field(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
    before: int = Field(default=1, ge=0, le=20)
    after: int = Field(default=1, ge=0, le=20)


class ContextResult(BaseModel):
    """The passage and its neighbours, in document order (`score` is 0: nothing was ranked)."""

    passages: list[SearchHit]
