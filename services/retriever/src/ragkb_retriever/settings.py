from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AnyHttpUrl, BaseModel, Field, SecretStr, TypeAdapter, field_validator, model_validator
from pydantic_settings import BaseSettings

from ragkb_core.kb_settings import PassagePrecision
from ragkb_core.settings import (
    SERVICE_SETTINGS_CONFIG,
    SERVICE_TOKEN_DESCRIPTION,
    AnalyzerSettings,
    EmbeddingSettings,
    HttpServerSettings,
    LogSettings,
    MetricsSettings,
    QdrantSettings,
    available_cores,
)
from ragkb_models import in_precision

# The most threads a query embedding takes when RAGKB_RETRIEVER__EMBED_THREADS is 0: a query is a batch of one
# short text, whose layers split into few useful pieces; more threads would only wait for each other (measured
# up to 2, the cores of the benchmark machine; 4 is a bound, not a measurement).
QUERY_THREADS_CAP = 4


class HttpRerankerSpec(BaseModel):
    """A rerank service of the common `/rerank` shape (Cohere, Jina, Text Embeddings Inference, Infinity):
    POST {model?, query, documents | texts, top_n} → results with `index` and `relevance_score` (or `score`)."""

    # The endpoint itself, e.g. https://api.cohere.com/v2/rerank or http://tei:8080/rerank.
    url: AnyHttpUrl
    # The model the service is asked for (sent as `model`); None sends none (TEI serves one model).
    model: str | None = None
    # Sent as `Authorization: Bearer <key>`; None sends no header.
    api_key: SecretStr | None = None
    # The passages' field: "documents" (Cohere, Jina, Infinity) or "texts" (TEI).
    documents_field: Literal["documents", "texts"] = "documents"
    # The service's scores are logits (TEI with raw_scores): mapped to 0–1 by a sigmoid, as a local model's are.
    logits: bool = False
    # Seconds a call may take at most; a search's own rerank_budget_ms cuts it shorter.
    timeout_s: float = Field(default=10.0, gt=0, le=120)


class RerankerSettings(BaseModel):
    # The default reranker: a sentence-transformers cross-encoder id or folder. None (the default) = no reranker,
    # because no cross-encoder ships offline and a real one costs seconds per search on a small CPU.
    model: str | None = None
    # Other ids or folders a knowledge base may choose; the default model is always allowed. A closed list, so a
    # request cannot make the server load (or download) an arbitrary model.
    allowed_models: list[str] = Field(default_factory=list)
    # HTTP rerank services, by the name a KB chooses as its `reranker_model` (or `model` names as the default):
    # a JSON object name → {url, model?, api_key?, documents_field?, logits?, timeout_s?}. They are allowed
    # as the listed models are; the API key stays here, never in a KB's settings.
    http_models: dict[str, HttpRerankerSpec] = Field(default_factory=dict)
    # Tokens per (query, passage) pair; longer pairs are truncated. Bounded because cost grows with length and
    # most cross-encoders are trained on ≤ 512 tokens.
    max_length: int = Field(default=256, ge=16, le=512)
    # Pairs per forward pass: larger batches amortise overhead but pad every pair to the longest in the batch.
    batch_size: int = Field(default=32, ge=1)
    # Torch device for the rerankers ("cpu", "cuda", "cuda:1", "mps"); cpu is what every deployment has.
    device: str = "cpu"

    @field_validator("model")
    @classmethod
    def _empty_means_none(cls, value: str | None) -> str | None:
        return value or None  # docker-compose passes "" through for "no reranker"


class RetrieverServerSettings(HttpServerSettings):
    # A default of the class, not of a factory: setting RAGKB_RETRIEVER__HOST alone must not move the port.
    port: int = 8001
    # Query vectors kept for questions asked again (least recently used out; 1.5 KB each); 0 keeps none.
    query_cache_size: int = Field(default=4096, ge=0)
    # Runtime threads per query embedding (RAGKB_EMBEDDING__THREADS is the worker's, for passages). 0: the
    # cores the retriever may run on (its CPU affinity), at most QUERY_THREADS_CAP. Measured on 2 cores
    # (bench/latency_ab.py, README Latency): two threads against one took a lone search from 23.4 to 19.8 ms
    # p50 over HTTP; 8 concurrent clients searched as fast as before (concurrent runs share the session's pool).
    embed_threads: int = Field(default=0, ge=0)
    # The packaged e5's graph that embeds queries (on ONNX; other models run on torch in float32): one of a KB's
    # passage precisions (ragkb_core.kb_settings.PassagePrecision), whatever the KBs' passages are in (every
    # graph's vectors are ≥ 0.99 cosine to float32's). auto (the default): float32 or int8-block, whichever this
    # CPU embeds a question faster with, measured once per CPU (ragkb_models.precision_choice); the two are
    # equally exact (1 − cosine ~0.0001) and int8-block was ~1.2× faster per query with AVX-512 VNNI, slower
    # with AVX2 alone. int8-mixed takes about half float32's CPU but moves the vectors ~10× more. README,
    # Benchmarks: int8-block, for what each does to quality.
    query_precision: PassagePrecision = "auto"

    @model_validator(mode="before")
    @classmethod
    def _query_int8_means_int8_mixed(cls, data: Any) -> Any:
        """RAGKB_RETRIEVER__QUERY_INT8, the switch before query_precision: true embedded queries in int8-mixed.
        Still read (not a field: nothing new should set it), so such a deployment keeps its queries."""
        if isinstance(data, dict) and "query_int8" in data:
            data = dict(data)
            if TypeAdapter(bool).validate_python(data.pop("query_int8")):
                data.setdefault("query_precision", "int8-mixed")
        return data


class ExternalSettings(BaseModel):
    """External knowledge bases (ragkb_core.external): how the retriever reaches them."""

    qdrant_local_roots: list[Path] = Field(
        default_factory=list,
        description="Folders under which an external Qdrant KB may name a qdrant-client local-mode storage `path` "
        '(tests, single-host setups), as a JSON list (e.g. ["/srv/qdrant-local"]); empty: none may (only `url`).',
    )
    timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="Seconds one call to an external Qdrant or Dify endpoint may take."
    )


class RetrieverSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG

    # Where the retriever listens (RAGKB_RETRIEVER__HOST, RAGKB_RETRIEVER__PORT); clients use RAGKB_RETRIEVER__URL.
    retriever: RetrieverServerSettings = Field(default_factory=RetrieverServerSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    analyzer: AnalyzerSettings = Field(default_factory=AnalyzerSettings)
    reranker: RerankerSettings = Field(default_factory=RerankerSettings)
    # External knowledge bases: local-mode Qdrant folders allowed, and the timeout of their calls.
    external: ExternalSettings = Field(default_factory=ExternalSettings)
    service_token: SecretStr | None = Field(default=None, description=SERVICE_TOKEN_DESCRIPTION)
    # Log lines: console or JSON (RAGKB_LOG__FORMAT), and their level.
    log: LogSettings = Field(default_factory=LogSettings)
    # GET /metrics (RAGKB_METRICS__ENABLED, RAGKB_METRICS__TOKEN).
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)


def query_embedding_settings(settings: RetrieverSettings) -> EmbeddingSettings:
    """The embedding settings the retriever loads its models with: it embeds only queries (and reads a
    model's dimension), so the runtime is set up for one short text at a time."""
    server = settings.retriever
    threads = server.embed_threads or min(available_cores(), QUERY_THREADS_CAP)
    return in_precision(settings.embedding, server.query_precision, "queries").model_copy(update={"threads": threads})
