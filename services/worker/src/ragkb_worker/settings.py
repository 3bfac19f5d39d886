from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings

from ragkb_core.settings import (
    DEFAULT_DATA_DIR,
    SERVICE_SETTINGS_CONFIG,
    SERVICE_TOKEN_DESCRIPTION,
    AnalyzerSettings,
    BlobSettings,
    DatabaseSettings,
    EmbeddingSettings,
    HttpServerSettings,
    JobSettings,
    LimitSettings,
    LogSettings,
    MetricsSettings,
    RedisSettings,
    RetrieverClientSettings,
    available_cores,
)
from ragkb_store.queue import DOCUMENTS_PER_MESSAGE


class TaskSettings(BaseModel):
    soft_time_limit_s: int = Field(default=900, ge=1)
    hard_time_limit_s: int = Field(default=960, ge=1)
    max_retries: int = Field(default=5, ge=0)
    # A claimed document is held this long and the claim renewed at every stage; a worker that dies
    # stops renewing, and the sweeper re-queues the document once the lease has run out.
    lease_s: int = Field(default=120, ge=5)
    # The lease is renewed before embedding only when parsing and chunking took at least this long since the
    # claim: the claim itself just set the lease and read the document, so renewing again at once only adds a
    # commit per document (for short documents, ~5 % of a task process's time: bench/ingest_profile.py). The
    # renewal after embedding, which checks the version and model before the write, always happens.
    renew_after_s: float = Field(default=5.0, ge=0)
    sweep_interval_s: int = Field(default=30, ge=1)
    # A pending document older than this without a claim lost its queue message: queue it again.
    pending_requeue_after_s: int = Field(default=300, ge=1)
    # Originals and extracted texts no document uses (an upload that died between storing its original and
    # recording it) are deleted once they are this old, checked this often.
    orphan_blob_age_s: int = Field(default=3600, ge=60)
    orphan_blob_sweep_interval_s: int = Field(default=3600, ge=1)
    # Task processes. One per core: a document spends much of its time outside the embedder (parsing, the
    # database, the retriever's HTTP write), so a second process on 2 cores took ingestion of short documents
    # from ~3.5 to ~8 documents/s (bench/ingest.py). Each process holds its own copy of the embedder.
    concurrency: int = Field(default_factory=available_cores, ge=1)
    # CPU priority of the task processes (Unix nice, 0–19): while documents are embedded, searches (the api,
    # the retriever) get the cores first; on an otherwise idle machine ingestion still has all of them.
    nice: int = Field(default=10, ge=0, le=19)


class BatchSettings(BaseModel):
    """Short documents built together (ragkb_worker.tasks.run_ingest): a task that claims a document also claims
    up to `documents` − 1 more pending ones of the same KB and lane, and builds them in one model call, one
    index write and one commit. Each document still succeeds or fails alone, with its own reason."""

    # Documents per batch (1: every document alone). A short document's fixed costs (its claim, finish and
    # index write, each a database commit or an HTTP call) were ~45 % of a task process's time against the
    # model's 55 % (bench/ingest_profile.py); a batch pays them once. A running batch is also what an upload of
    # another KB may wait for: with 16, single uploads during a SciFact import took up to 2.1–3.4 s, with 8 up to
    # 1.3 s (bench/fair_queueing.py), for about the same throughput (bench/batching_ab.py).
    # A queue message names this many by default (ragkb_store.queue.DOCUMENTS_PER_MESSAGE).
    documents: int = Field(default=DOCUMENTS_PER_MESSAGE, ge=1, le=256)
    # Only originals up to this size join a batch (as companion or as the one claiming): a large file is built
    # alone, so that small documents are not held behind its minutes of parsing and embedding.
    max_document_bytes: int = Field(default=256 * 1024, ge=1)
    # Once a batch's parsing has taken this long (small scanned PDFs are OCRed page by page), the documents not
    # parsed yet go back to the queue for another batch: a batch stays far inside the task's time limit.
    parse_budget_s: float = Field(default=60.0, gt=0)


class LongDocumentSettings(BaseModel):
    """Long documents in parallel (ragkb_worker.long_documents)."""

    # A PDF, DOCX or PPTX of more pages than this is built in ranges on every free worker process; shorter ones
    # are built by one task, whose share of coordination (a database row per range) would only slow them.
    split_above_pages: int = Field(default=40, ge=1)
    # Pages per range: 2–3 s of embedding on one core for text pages (bench/long_document.py), so a range is
    # retried cheaply and the document's progress moves often, while a range's own work (its claim and finish,
    # ~30 ms) stays small beside it.
    pages_per_range: int = Field(default=20, ge=1)
    enabled: bool = True


class WorkerServerSettings(HttpServerSettings):
    # Defaults of the class, not of a factory: setting RAGKB_WORKER__HOST alone must not move the port.
    port: int = 8002
    # Tasks run longer than requests; most ingests of a large file still run longer than this.
    drain_s: int = Field(default=30, ge=0)
    # Where the task processes write their metrics for the health port's GET /metrics to add up (Prometheus
    # multi-process mode; emptied at each start). PROMETHEUS_MULTIPROC_DIR, when set, wins.
    metrics_dir: Path = DEFAULT_DATA_DIR / "worker-metrics"


class WorkerSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG

    # The worker's health server (RAGKB_WORKER__HOST, RAGKB_WORKER__PORT): GET /health and /ready; and how long
    # its running tasks may finish after SIGTERM (RAGKB_WORKER__DRAIN_S).
    worker: WorkerServerSettings = Field(default_factory=WorkerServerSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    blobs: BlobSettings = Field(default_factory=BlobSettings)
    retriever: RetrieverClientSettings = Field(default_factory=RetrieverClientSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    analyzer: AnalyzerSettings = Field(default_factory=AnalyzerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    # A long PDF, DOCX or PPTX built in page ranges on every free task process (RAGKB_LONG_DOCUMENTS__*).
    long_documents: LongDocumentSettings = Field(default_factory=LongDocumentSettings)
    # Short documents built in batches (RAGKB_BATCHING__DOCUMENTS, RAGKB_BATCHING__MAX_DOCUMENT_BYTES).
    batching: BatchSettings = Field(default_factory=BatchSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    service_token: SecretStr | None = Field(default=None, description=SERVICE_TOKEN_DESCRIPTION)
    # Log lines: console or JSON (RAGKB_LOG__FORMAT), and their level.
    log: LogSettings = Field(default_factory=LogSettings)
    # GET /metrics (RAGKB_METRICS__ENABLED, RAGKB_METRICS__TOKEN).
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    def task_embedding(self) -> EmbeddingSettings:
        """The embedding settings of one task process. Threads 0 ("the runtime decides") would give each of the
        `tasks.concurrency` processes one thread per core, so two processes embedding at once on two cores ran
        four threads; each process gets its share of the cores instead (bench/batching_ab.py on 2 cores: +10 %
        documents/s, −12 % CPU per document). A set `RAGKB_EMBEDDING__THREADS` is kept as it is."""
        if self.embedding.threads:
            return self.embedding
        share = max(1, available_cores() // self.tasks.concurrency)
        return self.embedding.model_copy(update={"threads": share})
