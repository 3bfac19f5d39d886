"""Request and response shapes of search, search-test and analyze."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

from ragkb_api.fields import (
    MAX_DOCUMENT_IDS_PER_SEARCH,
    MAX_KBS_PER_SEARCH,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    MAX_METADATA_FILTERS,
    FilterLabel,
    Id,
)
from ragkb_api.keys.schemas import KeySearchFilter
from ragkb_core.contracts import Collapse, MetadataValue, SearchMode, SearchResult
from ragkb_core.kb_settings import RetrievalOverrides

MetadataKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class SearchFilters(KeySearchFilter):
    """Scope applied inside the engine before ranking: a passage outside it is never a candidate."""

    document_ids: list[Id] | None = Field(default=None, max_length=MAX_DOCUMENT_IDS_PER_SEARCH)
    # Documents holding every one of these labels (`labels_any`: at least one).
    labels_all: list[FilterLabel] | None = Field(default=None, max_length=MAX_LABELS)
    # Document metadata equality (keys: letters, digits, _ and -; values: strings, integers, booleans).
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=MAX_METADATA_FILTERS)

    @field_validator("metadata")
    @classmethod
    def _metadata_strings_are_short(cls, metadata: dict[str, MetadataValue] | None) -> dict[str, MetadataValue] | None:
        for value in (metadata or {}).values():
            if isinstance(value, str) and len(value) > MAX_LABEL_CHARS * 5:
                raise ValueError(f"metadata filter values may have at most {MAX_LABEL_CHARS * 5} characters")
        return metadata


class SearchRequest(BaseModel):
    # The configured bound (RAGKB_LIMITS__MAX_QUERY_CHARS) is checked by the service.
    query: str = Field(min_length=1)
    knowledge_base_ids: list[Id] = Field(min_length=1, max_length=MAX_KBS_PER_SEARCH)
    # hybrid: dense + BM25 fused by the KB's `fusion` (DBSF unless the KB chose RRF); semantic: dense only;
    # keyword: BM25 only. Default: each KB's own
    # (hybrid unless its `retrieval.hybrid` is off).
    mode: SearchMode | None = None
    # Shorthand: passages per KB and in the answer (sets settings.top_k and settings.max_blocks).
    top_k: int | None = Field(default=None, ge=1, le=100)
    # Overrides of the KBs' retrieval settings for this request, within the same bounds.
    settings: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    filters: SearchFilters = Field(default_factory=SearchFilters)
    # Also return the candidates left out (and the stage that left them out) and the legs' own rankings.
    explain: bool = False
    # "document": one passage per document, its best (for a list of documents rather than of passages).
    collapse: Collapse | None = None

    @field_validator("query")
    @classmethod
    def _query_is_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be blank")
        return value


class SearchResponse(SearchResult):
    query: str


class SearchTestRequest(BaseModel):
    """One query in every mode side by side, for tuning a KB; `expected_document_ids` are traced through."""

    query: str = Field(min_length=1)
    settings: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    filters: SearchFilters = Field(default_factory=SearchFilters)
    expected_document_ids: list[Id] = Field(default_factory=list, max_length=50)

    @field_validator("query")
    @classmethod
    def _query_is_not_blank(cls, value: str) -> str:
        return SearchRequest._query_is_not_blank(value)


class ExpectedDocumentTrace(BaseModel):
    """Where one expected document stood in one run: its best rank in the answer and in each leg, or the
    stage that dropped it, or that no leg retrieved it."""

    document_id: str
    answer_rank: int | None
    dense_rank: int | None
    keyword_rank: int | None
    fused_rank: int | None
    dropped_by: str | None
    explanation: str


class SearchTestRun(BaseModel):
    name: Literal["semantic", "keyword", "hybrid", "hybrid+rerank"]
    result: SearchResult
    expected: list[ExpectedDocumentTrace]


class SearchTestResponse(BaseModel):
    query: str
    knowledge_base_id: str
    runs: list[SearchTestRun]


class AnalyzeRequest(BaseModel):
    knowledge_base_id: Id
    text: str = Field(min_length=1, max_length=20_000)
