"""ORM tables. Schema changes go through Alembic migrations in ./migrations, never create_all()."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ragkb_store.states import DocumentStatus, JobItemStatus, JobStatus, Lane, RangeStatus


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[str]: JSON}


class KnowledgeBase(Base):
    __tablename__ = "knowledge_bases"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    embedding_model: Mapped[str] = mapped_column(String(200))
    analyzer_version: Mapped[str] = mapped_column(String(100))
    # ragkb_core.kb_settings.KbChunking as JSON.
    chunking: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # ragkb_core.kb_settings.KbRetrieval and KbAnalyzer as JSON ({} means the defaults).
    retrieval: Mapped[dict[str, Any]] = mapped_column(default=dict)
    analyzer: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # ragkb_core.kb_settings.KbSync as JSON ({} means the defaults).
    sync: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # ragkb_store.reindexing.IndexState as JSON: the live and previous generation and what they were built with.
    index_state: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The `kb_delete` job that removes this KB (JobKind.KB_DELETE): set when the deletion is accepted,
    # and from then on the KB is `deleting` (no uploads, syncs, re-indexes or searches) until the job deletes
    # the row. It stays set if that job fails: a KB whose index may be gone must not take writes again.
    deletion_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # An external KB (ragkb_core.external.ExternalConfig as JSON): its index is managed where it lives, ragkb
    # only searches it; None for a native KB. Its credential is sealed apart (CredentialVault), never shown.
    external: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    external_credentials: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)

    @property
    def is_external(self) -> bool:
        return self.external is not None


class Document(Base):
    """One document of a KB, keyed by its stable `source_id`.

    `version`/`sha256`/`blob_sha256` describe the newest accepted upload; `indexed_version` is the version
    whose chunks are live in the index (None until the first ingest succeeds). They differ while a new
    version is being processed or after it failed: the old one keeps serving.
    """

    __tablename__ = "documents"
    __table_args__ = (
        UniqueConstraint("kb_id", "source_id", name="uq_documents_kb_source"),
        Index("ix_documents_kb_status", "kb_id", "status"),
        Index("ix_documents_blob", "blob_sha256"),
        # The sweeper's every-30-s reads (expired leases, pending documents whose message may be lost) across
        # KBs: without it each read every document (migration 0018).
        Index("ix_documents_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kb_id: Mapped[str] = mapped_column(String(32), ForeignKey("knowledge_bases.id", ondelete="CASCADE"))
    source_id: Mapped[str] = mapped_column(String(1024))
    title: Mapped[str] = mapped_column(String(1024))
    filename: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    media_type: Mapped[str] = mapped_column(String(200))
    size_bytes: Mapped[int] = mapped_column(Integer)
    blob_sha256: Mapped[str] = mapped_column(String(64))
    # The live version's extracted text (UTF-8) in the blob store; None for documents ingested before 0004.
    text_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    labels: Mapped[list[str]] = mapped_column(default=list)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    doc_type: Mapped[str] = mapped_column(String(20), default="knowledge")
    status: Mapped[str] = mapped_column(String(20), default=DocumentStatus.PENDING)
    # The queue its ingestion waits in (ragkb_store.queue): the sweeper sends a lost message back to it.
    lane: Mapped[str] = mapped_column(String(20), default=Lane.INTERACTIVE, server_default=Lane.INTERACTIVE)
    version: Mapped[int] = mapped_column(Integer, default=1)
    indexed_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    stage_timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    ingest_report: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A worker that claims the document holds it until this time; past it, the claim may be taken over.
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # A long document's version is built in page ranges on every free worker process (DocumentRange): how many
    # of its ranges are built, of how many; 0 of 0 when its newest run was not split.
    ranges_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ranges_total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
    indexed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class DocumentSplit(Base):
    """A long document's version being built in ranges: what its parse and chunk stage produced for the range
    that completes it (the extracted text, the report, those stages' timings). Gone once the version is live or
    failed; while it exists, a worker claiming the document again resumes it instead of parsing anew."""

    __tablename__ = "document_splits"

    document_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer)
    # The model whose tokenizer cut the chunks: every range is embedded by it.
    embedding_model: Mapped[str] = mapped_column(String(200))
    text_sha256: Mapped[str] = mapped_column(String(64))
    ingest_report: Mapped[dict[str, Any]] = mapped_column(default=dict)
    stage_timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    chunk_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DocumentRange(Base):
    """One page range of a split document's version: its chunks (already cut from the whole document, with
    their ordinals from `first_ordinal`), embedded and written by whichever worker process takes it, under a
    lease of its own."""

    __tablename__ = "document_ranges"

    document_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("document_splits.document_id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    first_page: Mapped[int] = mapped_column(Integer)
    last_page: Mapped[int] = mapped_column(Integer)
    first_ordinal: Mapped[int] = mapped_column(Integer)
    chunks: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(20), default=RangeStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    stage_timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A built range's dense and BM25 vectors, kept here until the last range writes the whole version to the
    # index at once (a version's points are searchable from the moment they are written).
    vectors: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Job(Base):
    """A long operation. `ingest` jobs record one document's run; `sync`, `retry`, `reindex` and `kb_delete`
    jobs have items (JobItem), one per document they wait for or act on, and their progress and counts are
    those items'."""

    __tablename__ = "jobs"
    # ix_jobs_document: a batch's claim and its finish each look up their documents' open ingest jobs (all three
    # columns, so that SQLite's planner prefers it to ix_jobs_status: in a bulk import every job is queued);
    # ix_jobs_status: the sweeper looks for overdue open jobs every 30 s. Without them each read the whole table,
    # one row per upload ever made (migration 0018).
    __table_args__ = (
        Index("ix_jobs_kb", "kb_id"),
        Index("ix_jobs_document", "document_id", "kind", "status"),
        Index("ix_jobs_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    kb_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    document_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    status: Mapped[str] = mapped_column(String(20), default=JobStatus.QUEUED)
    progress_current: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    errors: Mapped[list[str]] = mapped_column(default=list)
    # What the job was asked to do (a re-index: ragkb_store.reindexing.ReindexTarget as JSON).
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class JobItem(Base):
    """One document a job waits for. An `upload` or `retry` item settles from its document's state: done when
    the document (a version newer than `base_version`, with content `sha256`) is indexed, failed when its
    ingest failed; a `delete` item is settled by the call that deletes."""

    __tablename__ = "job_items"
    __table_args__ = (
        Index("ix_job_items_job", "job_id"),
        Index("ix_job_items_open", "kb_id", "source_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32), ForeignKey("jobs.id", ondelete="CASCADE"))
    kb_id: Mapped[str] = mapped_column(String(32))
    source_id: Mapped[str] = mapped_column(String(1024))
    action: Mapped[str] = mapped_column(String(20))
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The document's version when the job was made (None: no document yet); only a newer one settles it.
    base_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(20), default=JobItemStatus.PENDING)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class ApiKey(Base):
    """A caller of the public API. The key itself is never stored: only its sha256 and a display prefix.

    `grants` maps a KB id to "read" or "write" (write implies read) and matters for the "client" role only;
    "admin" keys see everything. `search_filter` ({labels_any, doc_types}) is ANDed into every search.
    """

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(20))
    # The key's non-secret middle part (`rk_<prefix>_<secret>`): finds the row, and names the key in lists.
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    grants: Mapped[dict[str, Any]] = mapped_column(default=dict)
    search_filter: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class QuestionSet(Base):
    """Queries with relevance judgements (BEIR style) saved for a KB, to evaluate its retrieval with.

    `is_quality_gate`: the set a re-index of this KB is judged by (at most one per KB)."""

    __tablename__ = "question_sets"
    __table_args__ = (UniqueConstraint("kb_id", "name", name="uq_question_sets_kb_name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kb_id: Mapped[str] = mapped_column(String(32), ForeignKey("knowledge_bases.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    is_quality_gate: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Question(Base):
    """One query of a set; `position` keeps the order it was given in (an evaluation's `max_queries` takes
    the first ones)."""

    __tablename__ = "questions"

    set_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("question_sets.id", ondelete="CASCADE"), primary_key=True
    )
    query_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)


class Judgement(Base):
    """How relevant a document (by its `source_id`: a BEIR corpus id) is to one query of a set; 0 = not."""

    __tablename__ = "judgements"

    set_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("question_sets.id", ondelete="CASCADE"), primary_key=True
    )
    query_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    source_id: Mapped[str] = mapped_column(String(1024), primary_key=True)
    grade: Mapped[int] = mapped_column(Integer)


class Source(Base):
    """Where a KB reads documents itself (a folder, a web site, a Git repository) and when.

    A run is claimed by setting `lease_until` (and `lease_owner`) only where no live lease is held, in one
    compare-and-set UPDATE: two schedulers or api replicas never run one source at once. `credentials` is the
    Fernet token of the source's secrets, never shown."""

    __tablename__ = "sources"
    __table_args__ = (
        UniqueConstraint("kb_id", "name", name="uq_sources_kb_name"),
        Index("ix_sources_next_run", "next_run_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kb_id: Mapped[str] = mapped_column(String(32), ForeignKey("knowledge_bases.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))
    # The connector's settings (ragkb_api.sources.schemas), without secrets.
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    credentials: Mapped[str | None] = mapped_column(Text, nullable=True)
    interval_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cron: Mapped[str | None] = mapped_column(String(200), nullable=True)
    next_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_status: Mapped[str | None] = mapped_column(String(20), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    last_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SettingsVersion(Base):
    """One version of a KB's retrieval settings, as stored on the KB (`KnowledgeBase.retrieval`), numbered from 1
    per KB: who made it (`author_key_id`: the API key; None for the migration's first version), when, why
    (`origin`: create, patch, tune, revert, migration; `reason`: free text), and from what (`tune_job_id`, or
    `reverted_to`: the version a revert brought back). Written only by ragkb_store.settings_versions."""

    __tablename__ = "kb_settings_versions"
    __table_args__ = (UniqueConstraint("kb_id", "version", name="uq_kb_settings_versions_kb_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb_id: Mapped[str] = mapped_column(String(32), ForeignKey("knowledge_bases.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    retrieval: Mapped[dict[str, Any]] = mapped_column(default=dict)
    origin: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    author_key_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    tune_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reverted_to: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
