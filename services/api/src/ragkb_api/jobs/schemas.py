"""Request and response shapes of sync, jobs and re-index."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

from ragkb_api.fields import UtcDateTime
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_store.quality_gate import QualityCheck
from ragkb_store.states import JobKind, JobStatus

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
    kind: JobKind
    knowledge_base_id: str | None
    # The document an `ingest` job ran through the pipeline (None for every other kind).
    document_id: str | None = None
    status: JobStatus
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


class LaneOut(BaseModel):
    pending: int = Field(description="documents waiting in the lane's queue")
    processing: int = Field(description="documents a worker is building now")


class QueueOut(BaseModel):
    """A KB's documents not yet done, per lane: `interactive` (single uploads, batches of at most
    RAGKB_JOBS__INTERACTIVE_MAX_DOCUMENTS) is taken before `bulk` (larger batches, a sync's uploads, retries of
    many failed documents)."""

    knowledge_base_id: str
    interactive: LaneOut
    bulk: LaneOut
