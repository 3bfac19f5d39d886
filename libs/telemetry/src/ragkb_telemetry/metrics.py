"""Every Prometheus metric ragkb exports, in one place. Names follow the Prometheus conventions (`ragkb_`
prefix, base units, `_total` counters, `_seconds` durations); labels are bounded: route templates, never raw
paths; KB ids (32 hex characters, one per knowledge base) where a figure is per KB, never a KB's name, a query
or a key.

The worker's task processes (Celery prefork) write these to files in PROMETHEUS_MULTIPROC_DIR, which must be
set before this module is first imported (ragkb_worker.__main__ does it); the api and the retriever, one
process each, keep them in memory."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

# Requests: a search takes milliseconds, an upload or an MCP call may take seconds.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Stages of a search: from a cached query vector (µs) to a reranker on CPU (seconds).
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Stages of an ingest and queue waits: a short note parses in milliseconds, an OCRed scan takes minutes.
INGEST_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

# -- HTTP (api, retriever) -------------------------------------------------------------------------------------

http_requests = Counter(
    "ragkb_http_requests_total", "HTTP requests answered, by route template and status.",
    ["service", "method", "route", "status"],
)  # fmt: skip
http_request_duration = Histogram(
    "ragkb_http_request_duration_seconds", "Time from a request's arrival to the end of its answer.",
    ["service", "method", "route", "status"], buckets=REQUEST_BUCKETS,
)  # fmt: skip
rate_limit_refusals = Counter("ragkb_rate_limit_refusals_total", "Requests refused by a key's rate limit (429).")

# -- search ------------------------------------------------------------------------------------------------------

search_stage_duration = Histogram(
    "ragkb_search_stage_seconds",
    "Time per stage of a search in the retriever (embed, analyze, retrieve: every KB's legs and their fusion, "
    "rerank, assemble), by the search's mode.",
    ["stage", "mode"], buckets=STAGE_BUCKETS,
)  # fmt: skip
query_vector_cache = Counter(
    "ragkb_query_vector_cache_total",
    "Query vectors the retriever took from its cache of questions asked before (hit) or embedded (miss).",
    ["outcome"],
)
api_search_stage_duration = Histogram(
    "ragkb_api_search_stage_seconds",
    "Time per stage of a search in the api (auth, kbs: access and settings, retriever: the call, total).",
    ["stage"], buckets=STAGE_BUCKETS,
)  # fmt: skip

# -- index upkeep (retriever, Qdrant Edge) ----------------------------------------------------------------------

index_upkeep_duration = Histogram(
    "ragkb_index_upkeep_seconds",
    "Time the embedded index's background upkeep took, by operation: flush and optimize hold the retriever's "
    "interpreter, so every search waits meanwhile; wal_sync does not.",
    ["operation"], buckets=STAGE_BUCKETS,
)  # fmt: skip

# -- ingestion (worker) ------------------------------------------------------------------------------------------

documents_ingested = Counter(
    "ragkb_documents_ingested_total", "Documents whose new version went live, per KB.", ["kb_id"]
)
documents_failed = Counter("ragkb_documents_failed_total", "Documents whose ingest failed for good, per KB.", ["kb_id"])
chunks_ingested = Counter("ragkb_chunks_ingested_total", "Chunks written to the index by ingests, per KB.", ["kb_id"])
ingest_stage_duration = Histogram(
    "ragkb_ingest_stage_seconds", "Time per stage of one document's ingest (parse, chunk, embed, index).",
    ["stage"], buckets=INGEST_BUCKETS,
)  # fmt: skip
task_duration = Histogram(
    "ragkb_task_duration_seconds", "Time a Celery task ran, by task name and outcome (success, retry, failure).",
    ["task", "outcome"], buckets=INGEST_BUCKETS,
)  # fmt: skip
task_queue_wait = Histogram(
    "ragkb_task_queue_wait_seconds", "Time a task waited in its queue, from publication to its start.",
    ["queue"], buckets=INGEST_BUCKETS,
)  # fmt: skip

# -- models (retriever, worker) -------------------------------------------------------------------------------

model_load_duration = Gauge(
    "ragkb_model_load_seconds", "Time the last load of a model took, by role (embedder, reranker) and model.",
    ["role", "model"], multiprocess_mode="max",
)  # fmt: skip


def observe_stages(histogram: Histogram, timings_ms: Mapping[str, float], *other_labels: str) -> None:
    """One observation per stage of a `timings_ms` map (milliseconds, as Server-Timing and the search answer
    report them); `other_labels`: the values of the histogram's labels after `stage`, in order."""
    for stage, ms in timings_ms.items():
        child(histogram, stage, *other_labels).observe(ms / 1000)


def observe_stage_seconds(histogram: Histogram, seconds: Mapping[str, float]) -> None:
    for stage, value in seconds.items():
        child(histogram, stage).observe(value)


@functools.cache
def child(metric: MetricWrapperBase, *label_values: str) -> Any:
    """The time series of `metric` for `label_values` (in the order of its labels), kept once found: looking it up
    anew (`.labels()`) costs several times what an observation does, on every search. Labels are bounded, so
    is this cache."""
    return metric.labels(*label_values)


@contextmanager
def timed_model_load(role: str, model: str) -> Iterator[None]:
    """Records how long the block (a model's load) took; `model` is a configured name, so the label is bounded."""
    started = time.perf_counter()
    yield
    model_load_duration.labels(role=role, model=model).set(time.perf_counter() - started)
