"""Request and response shapes of knowledge bases."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from ragkb_api.fields import UtcDateTime
from ragkb_core.external import ExternalConfig
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbIndexLayout, KbRetrieval, KbSync, RetrievalOverrides

KbKind = Literal["native", "external"]


class ExternalKnowledgeBaseCreate(BaseModel):
    """An index managed elsewhere that ragkb only searches: a Qdrant collection (`config.kind` "qdrant") or a
    Dify External Knowledge API endpoint ("dify", another ragkb included)."""

    config: ExternalConfig
    # A Qdrant API key (sent as `api-key`) or the Dify endpoint's Bearer key. Stored sealed with
    # RAGKB_SOURCES__CREDENTIALS_KEY (as sources' credentials are), never shown again, never logged.
    api_key: SecretStr | None = Field(default=None, min_length=1, max_length=4096)
    # Qdrant: the model the collection's dense vectors were written with (one this server runs: the default or
    # RAGKB_EMBEDDING__ALLOWED_MODELS, with its query prefix, e.g. e5's "query: "); null: the default model.
    # Not for a Dify endpoint, which embeds the question itself.
    embedding_model: str | None = Field(default=None, min_length=1, max_length=200)

    @model_validator(mode="after")
    def _model_only_for_qdrant(self) -> ExternalKnowledgeBaseCreate:
        if self.embedding_model is not None and self.config.kind != "qdrant":
            raise ValueError("embedding_model applies to a Qdrant collection: a Dify endpoint embeds the question")
        return self


class ExternalKnowledgeBaseOut(BaseModel):
    """An external KB's configuration as stored; its API key is never shown, only whether one is stored."""

    config: ExternalConfig
    has_api_key: bool


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
    # Set: an external KB, searched where it lives and never written by ragkb (no documents, sources, syncs,
    # re-indexes; chunking, sync and index do not apply). Left out: a native KB.
    external: ExternalKnowledgeBaseCreate | None = Field(
        default=None,
        description="An index managed elsewhere that ragkb only reads (a Qdrant collection or a Dify External "
        "Knowledge API endpoint); reached once through the retriever when registered (422 when it cannot be "
        "searched). Left out: a native KB.",
    )

    @model_validator(mode="after")
    def _external_has_no_index_settings(self) -> KnowledgeBaseCreate:
        if self.external is not None:
            given = sorted({"chunking", "sync", "index"} & self.model_fields_set)
            if given:
                raise ValueError(
                    f"{', '.join(given)} do not apply to an external knowledge base: ragkb indexes nothing"
                )
        return self

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
    # "external": searched where it lives (`external`), read only; its chunking, sync and document_counts do not
    # apply, and `embedding_model` is the one its questions are embedded with ("" for a Dify endpoint).
    kind: KbKind = Field(default="native", description="external: searched where it lives, read only")
    external: ExternalKnowledgeBaseOut | None = Field(
        default=None, description="an external KB's configuration (its API key is never shown)"
    )
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
