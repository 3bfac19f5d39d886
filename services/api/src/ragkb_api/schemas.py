"""Public request and response shapes of the v1 API (private to the api; wire contracts live in ragkb_core)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, StringConstraints, field_validator, model_validator
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

from ragkb_core.contracts import DocType, MetadataValue, SearchHit, SearchMode, SearchResult
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, KbSync, RetrievalOverrides
from ragkb_core.quality_gate import QualityCheck

MAX_LABELS = 50
MAX_LABEL_CHARS = 100
# Ids are 32-character hex (ragkb_core.ids); the bound leaves room and keeps hostile input small.
MAX_ID_CHARS = 64
MAX_KBS_PER_SEARCH = 50
MAX_DOCUMENT_IDS_PER_SEARCH = 1000
MAX_METADATA_FILTERS = 20
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]


def _as_utc(value: datetime) -> datetime:
    # Times are stored in UTC; SQLite hands them back without their offset, and RFC 3339 (OpenAPI's
    # date-time) requires one.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


UtcDateTime = Annotated[datetime, AfterValidator(_as_utc)]
FilterLabel = Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS)]


class KnowledgeBaseCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    chunking: KbChunking = Field(default_factory=KbChunking)
    retrieval: KbRetrieval = Field(default_factory=KbRetrieval)
    # Fixed for the KB's life: changing how text becomes terms needs a re-index.
    analyzer: KbAnalyzer = Field(default_factory=KbAnalyzer)
    # Which files of a synced folder belong in the KB (include prefixes, exclude patterns, extensions).
    sync: KbSync = Field(default_factory=KbSync)

    @field_validator("name")
    @classmethod
    def _name_is_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name must not be blank")
        return value.strip()


class RetrievalPatch(RetrievalOverrides):
    """Fields of a KB's retrieval settings to change; a field sent as null goes back to its default."""

    reranker_model: str | None = Field(default=None, min_length=1, max_length=500)


class KnowledgeBaseUpdate(BaseModel):
    """Rename or re-describe a KB, change how documents ingested from now on are chunked, or how it is
    searched (takes effect on the next search). `analyzer` is refused: it changes only by re-indexing."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    chunking: KbChunking | None = None
    retrieval: RetrievalPatch | None = None
    analyzer: KbAnalyzer | None = None
    # Replaces the sync rules whole (fields left out take their defaults); applies from the next sync.
    sync: KbSync | None = None


class KnowledgeBaseOut(BaseModel):
    id: str
    name: str
    description: str
    embedding_model: str
    analyzer_version: str
    chunking: KbChunking
    retrieval: KbRetrieval
    analyzer: KbAnalyzer
    sync: KbSync
    document_counts: dict[str, int]
    # `deleting` from the moment DELETE accepted its job (`deletion_job_id`) until that job removes the KB;
    # meanwhile writes and searches naming it answer 409.
    status: Literal["active", "deleting"] = "active"
    deletion_job_id: str | None = None
    created_at: UtcDateTime
    updated_at: UtcDateTime


class DocumentFields(BaseModel):
    """Fields shared by JSON and multipart uploads."""

    source_id: str | None = Field(default=None, min_length=1, max_length=1024)
    title: str | None = Field(default=None, max_length=1024)
    labels: list[str] = Field(default_factory=list, max_length=MAX_LABELS)
    metadata: dict[str, Any] = Field(default_factory=dict)
    doc_type: DocType = "knowledge"

    @field_validator("labels")
    @classmethod
    def _labels_are_short(cls, labels: list[str]) -> list[str]:
        if any(not label.strip() or len(label) > MAX_LABEL_CHARS for label in labels):
            raise ValueError(f"labels must be non-blank and at most {MAX_LABEL_CHARS} characters")
        return labels


class DocumentPatch(BaseModel):
    """Metadata-only change: applied to the index payload in place, nothing is re-embedded.

    `doc_type` is deliberately not a field: a document never changes between knowledge and reference in
    place (a reference is the authoritative original). A `doc_type` that differs from the document's own
    is answered 409 (delete and register again); the same value is accepted and changes nothing."""

    title: str | None = Field(default=None, min_length=1, max_length=1024)
    source_id: str | None = Field(default=None, min_length=1, max_length=1024)
    labels: list[str] | None = Field(default=None, max_length=MAX_LABELS)
    metadata: dict[str, Any] | None = None

    @field_validator("labels")
    @classmethod
    def _labels_are_short(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None:
            DocumentFields._labels_are_short(labels)
        return labels

    # The `doc_type` the request carried, if any: not a field (see above), only kept to refuse it clearly.
    _requested_doc_type: Any = None

    @model_validator(mode="wrap")
    @classmethod
    def _remember_doc_type(cls, raw: Any, handler: ValidatorFunctionWrapHandler) -> DocumentPatch:
        patch: DocumentPatch = handler(raw)
        if isinstance(raw, dict):
            patch._requested_doc_type = raw.get("doc_type")
        return patch

    @property
    def requested_doc_type(self) -> Any:
        return self._requested_doc_type

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TextDocumentCreate(DocumentFields):
    text: str = Field(min_length=1)


class DocumentOut(BaseModel):
    id: str
    knowledge_base_id: str
    source_id: str
    title: str
    filename: str | None
    media_type: str
    size_bytes: int
    sha256: str
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    status: str
    version: int
    indexed_version: int | None
    chunk_count: int
    error: str | None
    attempts: int
    stage_timings: dict[str, Any]
    ingest_report: dict[str, Any]
    created_at: UtcDateTime
    updated_at: UtcDateTime
    indexed_at: UtcDateTime | None


class DocumentAccepted(DocumentOut):
    # True when the upload equals the live version: nothing was queued.
    unchanged: bool = False


class TextDocumentBatch(BaseModel):
    """Several JSON documents (each as the JSON upload takes one) in one request. Items are validated one by
    one, so that one bad item is refused alone."""

    documents: list[Any] = Field(min_length=1)


class BatchItemError(BaseModel):
    """Why one item of a batch was refused: the problem details a single upload would have answered."""

    status: int
    title: str
    detail: str
    errors: list[dict[str, Any]] | None = None


class BatchItemResult(BaseModel):
    index: int
    source_id: str | None
    document: DocumentAccepted | None = None
    error: BatchItemError | None = None


class BatchAccepted(BaseModel):
    accepted: int
    failed: int
    # One per item, in the request's order: a document (accepted, or unchanged) or an error.
    results: list[BatchItemResult]


class KeySearchFilter(BaseModel):
    """A key's mandatory search filter: ANDed into every search the key makes (same fields as `filters`)."""

    labels_any: list[FilterLabel] | None = Field(default=None, max_length=MAX_LABELS)
    doc_types: list[DocType] | None = Field(default=None, max_length=2)


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
    # hybrid: dense + BM25 fused by the KB's `retrieval.fusion` (DBSF by default); semantic: dense only; keyword:
    # BM25 only. Default: each KB's own (hybrid unless its `retrieval.hybrid` is off).
    mode: SearchMode | None = None
    # Shorthand: passages per KB and in the answer (sets settings.top_k and settings.max_blocks).
    top_k: int | None = Field(default=None, ge=1, le=100)
    # Overrides of the KBs' retrieval settings for this request, within the same bounds.
    settings: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    filters: SearchFilters = Field(default_factory=SearchFilters)
    # Also return the candidates left out (and the stage that left them out) and the legs' own rankings.
    explain: bool = False

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


Role = Literal["admin", "client"]
Grants = dict[Id, Literal["read", "write"]]


class ApiKeyCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    role: Role = "client"
    # KB id → "read" or "write" (write implies read). Client keys only: an admin sees every KB.
    grants: Grants = Field(default_factory=dict, max_length=1000)
    search_filter: KeySearchFilter | None = None


class ApiKeyPatch(BaseModel):
    """Replace a key's grants and/or its search filter; `"search_filter": null` removes the filter."""

    grants: Grants | None = Field(default=None, max_length=1000)
    search_filter: KeySearchFilter | None = None


class ApiKeyOut(BaseModel):
    id: str
    name: str
    role: Role
    # The key's non-secret part (`rk_<prefix>_…`), to recognise it; the secret is never shown again.
    prefix: str
    grants: Grants
    search_filter: KeySearchFilter | None
    created_at: UtcDateTime
    revoked_at: UtcDateTime | None


class ApiKeyCreated(ApiKeyOut):
    # Shown once, now: only its hash is stored.
    key: str


# -- agent tools (/v1/tools/..., and the same tools over MCP) ---------------------------------------------

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


class ContextResponse(BaseModel):
    query: str
    # "[1] Title > Heading (p. 3)\npassage…" blocks separated by blank lines; cite them as [n].
    context: str
    citations: list[ContextCitation]
    estimated_tokens: int
    # Passages the search found that did not fit the budget.
    omitted: int


# -- sync and jobs -------------------------------------------------------------------------------------

MAX_MANIFEST_FILES = 100_000
Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$", to_lower=True)]


class ManifestFile(BaseModel):
    """One file of the client's folder: its path (the document's source_id) and content checksum."""

    source_id: str = Field(min_length=1, max_length=1024)
    sha256: Sha256Hex
    size: int = Field(ge=0)
    mtime: float


class SyncRequest(BaseModel):
    files: list[ManifestFile] = Field(max_length=MAX_MANIFEST_FILES)
    # Only answer the plan: no job, nothing deleted.
    dry_run: bool = False

    @field_validator("files")
    @classmethod
    def _source_ids_are_unique(cls, files: list[ManifestFile]) -> list[ManifestFile]:
        counts = Counter(file.source_id for file in files)
        repeated = sorted(source_id for source_id, n in counts.items() if n > 1)
        if repeated:
            raise ValueError(f"source_ids appear more than once: {', '.join(repeated[:10])}")
        return files


class SyncUpload(BaseModel):
    source_id: str
    # new: no such document; changed: other content; retry: same content, but its last ingest failed.
    reason: Literal["new", "changed", "retry"]


class SyncDelete(BaseModel):
    source_id: str
    document_id: str


class SyncExcluded(BaseModel):
    source_id: str
    reason: str


class SyncCounts(BaseModel):
    upload: int
    unchanged: int
    delete: int
    excluded: int


class SyncPlanOut(BaseModel):
    """What the client uploads (each with POST .../documents), what is unchanged, which orphans the server
    deleted (or would delete, on a dry run), and which files the KB's sync rules leave out."""

    job_id: str | None
    upload: list[SyncUpload]
    unchanged: list[str]
    delete: list[SyncDelete]
    excluded: list[SyncExcluded]
    counts: SyncCounts


class JobProgress(BaseModel):
    current: int
    total: int


class JobCounts(BaseModel):
    uploaded: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0
    reindexed: int = 0


class JobError(BaseModel):
    source_id: str | None
    message: str


class JobOut(BaseModel):
    id: str
    kind: str
    knowledge_base_id: str | None
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: JobProgress
    counts: JobCounts
    errors: list[JobError]
    created_at: UtcDateTime
    started_at: UtcDateTime | None
    finished_at: UtcDateTime | None
    # A re-index that reached its check: the quality gate's figures (or why there was no comparison).
    quality_check: QualityCheck | None = None


class ReindexRequest(BaseModel):
    """Rebuild a KB's index from its stored originals, optionally with new chunking or analyzer settings
        (what is not given stays as it is). `embedding_model` must be one this server runs (the default model, or
    one of RAGKB_EMBEDDING__ALLOWED_MODELS)."""

    chunking: KbChunking | None = None
    analyzer: KbAnalyzer | None = None
    embedding_model: str | None = Field(default=None, min_length=1, max_length=200)
    # Switch even when the new generation scores worse on the KB's quality-gate question set (the check still
    # runs the document checks; the job records that the gate was skipped).
    skip_quality_gate: bool = False
