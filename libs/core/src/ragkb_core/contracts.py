"""Wire contracts: the pydantic models that cross a process boundary (worker → retriever, api → retriever).

Versioned by the URL prefix of the retriever's internal API (`/internal/v1`); a breaking change adds v2. Fields
added with a default that keeps the old meaning (KbSearch.external) stay in v1: a retriever that predates one
ignores it and answers 404 for a KB it has no index of, never a wrong answer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ragkb_core.external import ExternalTarget
from ragkb_core.kb_settings import DocType, KbAnalyzer, KbIndexLayout, KbRetrieval

__all__ = ["DocType"]  # re-exported: wire contracts name it, kb_settings defines it

SearchMode = Literal["hybrid", "semantic", "keyword"]
# How an answer may be collapsed: "document" keeps each document's best passage only.
Collapse = Literal["document"]
# A metadata value a search may filter on by equality (strings, integers, booleans; no floats: equality on
# floats is a trap).
MetadataValue = str | int | bool


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
    # The KB's second model's vector of the same text (KbChunking.second_model); None: the KB has none.
    second: list[float] | None = None
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


class DocumentBatch(BaseModel):
    """Several documents of one KB written in one call (worker → retriever): short documents built together."""

    documents: list[DocumentPoints] = Field(min_length=1)


class KbIndexInfo(BaseModel):
    """What the retriever built for a KB: recorded on the KB so that a later change needs a re-index (the
    analyzer is the KB's own setting, chosen by the api, not by the index)."""

    kb_id: str
    embedding_model: str
    dense_size: int
    # The layout on a Qdrant cluster as applied (defaults filled in); None for the embedded index (Edge).
    layout: KbIndexLayout | None = None
    # The KB's second model (KbChunking.second_model) and its vectors' size; None: its index has none.
    second_model: str | None = None
    second_size: int | None = None


class KbGenerations(BaseModel):
    """A KB's index generations: `live` is the one searches and default writes use; `all` sorted."""

    live: int
    all: list[int]


class KbPointCensus(BaseModel):
    """How many points of each version of each document a KB's live index generation holds: what the
    consistency check compares with the metadata database."""

    kb_id: str
    generation: int
    documents: dict[str, dict[int, int]] = Field(default_factory=dict, description="document id → version → points")


class DocumentWriteResult(BaseModel):
    written: int
    deleted_old: int


class IndexedChunk(BaseModel):
    """One passage of a document as the index holds it (what a search would return, without scores)."""

    chunk_id: str
    ordinal: int
    text: str
    heading_path: list[str] = Field(default_factory=list)
    page: int | None = None
    char_start: int = 0
    char_end: int = 0


class DocumentChunks(BaseModel):
    """A page of one document version's passages in the live generation, in document order (retriever → api).
    `total` counts the version's passages, so `offset + len(chunks) < total` means there are more."""

    document_id: str
    version: int
    total: int
    offset: int
    chunks: list[IndexedChunk]


class ScopeFilter(BaseModel):
    """What a search may see. Applied inside every leg in the engine, before ranking."""

    document_ids: list[str] | None = None
    labels_any: list[str] | None = None
    # Every one of these labels (an empty list requires nothing).
    labels_all: list[str] | None = None
    doc_types: list[DocType] | None = None
    # Document metadata equality: every key must hold exactly its value.
    metadata: dict[str, MetadataValue] | None = None
    # A second label condition ANDed with `labels_any`: the caller's key's mandatory filter, which the
    # request's own filter may narrow but never widen.
    required_labels_any: list[str] | None = None


class KbSearch(BaseModel):
    """One KB of a search, with its effective settings (the KB's own, request overrides applied)."""

    kb_id: str
    # Its name, which each hit carries (the api knows it; the retriever only passes it on).
    name: str = ""
    retrieval: KbRetrieval = Field(default_factory=KbRetrieval)
    analyzer: KbAnalyzer = Field(default_factory=KbAnalyzer)
    # The model the searched generation's vectors come from (the KB's `embedding_model`, or a re-index
    # target's): the query is embedded with it. None: the retriever's default model.
    embedding_model: str | None = Field(default=None, min_length=1, max_length=200)
    # The second model the searched generation was built with (KbChunking.second_model): hybrid searches run its
    # leg too. None: no third leg.
    second_model: str | None = Field(default=None, min_length=1, max_length=200)
    # The index generation to search; None: the live one. Internal only (the public search never sets it):
    # the re-index quality gate searches the new generation before it serves, and the old one beside it.
    generation: int | None = Field(default=None, ge=1)
    # An external KB (ragkb_core.external): searched where it lives, not in ragkb's index. None: a native KB.
    external: ExternalTarget | None = None


class SearchQuery(BaseModel):
    """api → retriever: one question over one or more KBs."""

    query: str = Field(min_length=1)
    knowledge_bases: list[KbSearch] = Field(min_length=1)
    # None: each KB's own choice (hybrid, or semantic where its `hybrid` is off).
    mode: SearchMode | None = None
    scope: ScopeFilter = Field(default_factory=ScopeFilter)
    # Across KBs: the answer's size and per-doc_type quotas (the api resolves them from the KBs' settings).
    max_blocks: int = Field(default=12, ge=1, le=200)
    doc_type_quotas: dict[DocType, int] | None = None
    # Also return what was dropped after retrieval, and by which stage.
    explain: bool = False
    # "document": at most one passage per document (its best) in the answer.
    collapse: Collapse | None = None

    @property
    def kb_ids(self) -> list[str]:
        return [kb.kb_id for kb in self.knowledge_bases]


DropStage = Literal["top_k", "dedupe", "collapse", "threshold", "relevance", "quota", "max_blocks"]


def original_link(kb_id: str, document_id: str, page: int | None = None) -> str:
    """The public path of a document's stored original (the api serves it, grants enforced); a PDF's page as
    the `#page=` fragment PDF viewers open at."""
    path = f"/v1/knowledge-bases/{kb_id}/documents/{document_id}/original"
    return f"{path}#page={page}" if page else path


class SearchHit(BaseModel):
    chunk_id: str
    text: str
    # The score the answer is ordered by. When the reranker ran: its score blended with the scaled fused
    # score by the KB's rerank_weight (0–1; at weight 1 the reranker's own). Else the fused score (RRF or
    # DBSF, or the single leg's cosine / BM25 in semantic / keyword mode).
    score: float
    # How relevant the passage is, 0–1, comparable across questions and KBs of one embedding model: its dense
    # cosine with the question through the KB's calibration (RelevanceCalibration; a passage only the keyword
    # leg found is given the lowest cosine of the dense leg's candidates, which bounds its own). None when the
    # search had no dense leg (keyword mode) or the model has no calibration. The KB's min_relevance cuts on it.
    relevance: float | None = None
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
    # The document's metadata as uploaded, the KB's name, and the citation's way back to the source: the
    # stored original's path (relative to the api), at the passage's page when it has one.
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)
    knowledge_base_name: str = ""
    original_url: str = ""
    # Per stage: rank (from 1) and score in the dense leg (cosine) and keyword leg (BM25), the fused
    # rank and score, and the reranker's score; None where the stage did not run or did not see the passage.
    dense_rank: int | None = None
    dense_score: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None
    # The second model's leg (cosine), in KBs that have one (KbChunking.second_model).
    second_rank: int | None = None
    second_score: float | None = None
    fused_rank: int | None = None
    fused_score: float | None = None
    rerank_score: float | None = None


class DroppedHit(BaseModel):
    """A candidate that was retrieved but left out of the answer (explain), and the stage that left it out."""

    stage: DropStage
    reason: str
    hit: SearchHit


class LegRankingEntry(BaseModel):
    chunk_id: str
    document_id: str
    rank: int
    score: float


class LegRanking(BaseModel):
    """One leg's own ranking in one KB (explain): where each candidate stood before fusion."""

    knowledge_base_id: str
    # The KB, or "<kb>/<doc_type>" when per-doc_type quotas made each type a search of its own.
    part: str
    leg: Literal["dense", "keyword", "second"]
    entries: list[LegRankingEntry]


class SearchResult(BaseModel):
    results: list[SearchHit]
    took_ms: float
    # The mode the KBs were searched in; "mixed" when KBs differ (some have `hybrid` off).
    mode: SearchMode | Literal["mixed"]
    reranked: bool = False
    reranker_model: str | None = None
    # True when the answer is not what the settings asked for (the reranker was skipped); the reason says why.
    degraded: bool = False
    degraded_reason: str | None = None
    # Wall time per stage: embed, analyze, retrieve (all KBs, in parallel), rerank, assemble.
    timings_ms: dict[str, float] = Field(default_factory=dict)
    # The settings each KB was searched with, after request overrides.
    effective_settings: dict[str, KbRetrieval] = Field(default_factory=dict)
    # explain only: candidates left out and the stage that left them out; the legs' own rankings.
    dropped: list[DroppedHit] | None = None
    legs: list[LegRanking] | None = None


class AnalyzeQuery(BaseModel):
    """api → retriever: the terms a KB's analyzer makes of a text."""

    analyzer: KbAnalyzer
    text: str = Field(min_length=1)


class AnalyzedTerm(BaseModel):
    term: str
    # The stable id the index stores the term under.
    term_id: int
    count: int
    # The term's BM25 weight in a passage of this text (before the index's IDF).
    document_weight: float


class AnalyzeResult(BaseModel):
    analyzer: KbAnalyzer
    analyzer_version: str
    # In order of first appearance; `tokens` is the full sequence, repeats included.
    terms: list[AnalyzedTerm]
    tokens: list[str]


class ContextQuery(BaseModel):
    """api → retriever: a passage of one KB and how many passages of its document version to add around it."""

    chunk_id: str = Field(pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
    before: int = Field(default=1, ge=0, le=20)
    after: int = Field(default=1, ge=0, le=20)


class ContextResult(BaseModel):
    """The passage and its neighbours, in document order (`score` is 0: nothing was ranked)."""

    passages: list[SearchHit]
