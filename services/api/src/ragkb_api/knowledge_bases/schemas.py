"""Request and response shapes of knowledge bases."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from ragkb_api.fields import UtcDateTime
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbIndexLayout, KbRetrieval, KbSync, RetrievalOverrides


class KnowledgeBaseCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    chunking: KbChunking = Field(default_factory=KbChunking)
    retrieval: KbRetrieval = Field(default_factory=KbRetrieval)
    # Fixed for the KB's life: changing how text becomes terms needs a re-index.
    analyzer: KbAnalyzer = Field(default_factory=KbAnalyzer)
    # Which files of a synced folder belong in the KB (include prefixes, exclude patterns, extensions).
    sync: KbSync = Field(default_factory=KbSync)
    # On a Qdrant cluster: shards, replicas and write consistency of the KB's index (left out: the defaults).
    index: KbIndexLayout | None = None

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
    # Why: recorded with the new retrieval settings version (GET .../settings/versions) when `retrieval` changes.
    reason: str | None = Field(default=None, max_length=500)


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


class FindingOut(BaseModel):
    """One disagreement between the database and the index (ragkb_store.consistency.FindingKind)."""

    kind: Literal["missing_points", "chunk_count_mismatch", "orphan_version", "orphan_document", "stuck"]
    document_id: str
    version: int | None = None
    expected: int | None = Field(default=None, description="chunks the database counts")
    found: int | None = Field(default=None, description="points the index holds")
    detail: str


class ConsistencyReportOut(BaseModel):
    kb_id: str
    consistent: bool
    generation: int = Field(description="the live index generation that was counted")
    documents: int
    points: int
    findings: list[FindingOut]


class OrphanVersionOut(BaseModel):
    document_id: str
    version: int


class ConsistencyRepairOut(BaseModel):
    """What the repair found, what it did, and the check right after (re-queued documents are pending then,
    and are built again by the worker)."""

    before: ConsistencyReportOut
    requeued: list[str]
    deleted_versions: list[OrphanVersionOut]
    deleted_documents: list[str]
    after: ConsistencyReportOut


class RestoreOut(BaseModel):
    """The KB a restore made; `queued` documents (held without points) are being built again."""

    knowledge_base: KnowledgeBaseOut
    documents: int
    points: int
    queued: int
