"""What a scrape of /metrics answers: the process's metrics (or, in the worker, every task process's, from
PROMETHEUS_MULTIPROC_DIR) and the figures read at scrape time (queue depth, counts per state)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from redis import Redis

from ragkb_core.request_context import REQUEST_ID_TASK_HEADER
from ragkb_telemetry.multiprocess import MULTIPROC_ENV

# Content type of the Prometheus text format that generate_latest writes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The Celery message header with the time the task was published (seconds since the epoch): a queue's age is
# its oldest message's.
SENT_AT_TASK_HEADER = "ragkb_sent_at"
_log = logging.getLogger("ragkb.metrics")

# Label values → value; read at every scrape.
GaugeReader = Callable[[], dict[tuple[str, ...], float]]


class ScrapeGauge(Collector):
    """A gauge whose values are read when scraped (a database count, a queue length); a read that fails
    leaves the gauge out of that scrape and logs why, instead of failing the whole scrape."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], read: GaugeReader) -> None:
        self._name, self._documentation, self._labels, self._read = name, documentation, list(labels), read

    def collect(self) -> Iterator[Metric]:
        try:
            values = self._read()
        except Exception as error:
            _log.warning("metric %s not read: %s", self._name, error)
            return
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        for label_values, value in sorted(values.items()):
            family.add_metric(list(label_values), value)
        yield family


class QueueCollector(Collector):
    """Depth and age of each Celery queue, read from Redis at scrape time: LLEN, and the publication time of
    the message that waited longest (kombu pushes on the left and pops on the right: it is the last one). A
    queue with priorities is several Redis lists (one per priority step): its depth is their sum, its age the
    oldest of their tails."""

    def __init__(self, redis: Redis, lists_of_queue: Mapping[str, Sequence[str]]) -> None:
        self._redis, self._lists_of_queue = redis, dict(lists_of_queue)

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("ragkb_queue_depth", "Tasks waiting in a Celery queue.", labels=["queue"])
        age = GaugeMetricFamily(
            "ragkb_queue_oldest_task_age_seconds",
            "How long the task that waited longest in a Celery queue has waited (0 when the queue is empty).",
            labels=["queue"],
        )
        try:
            for queue, lists in self._lists_of_queue.items():
                depth.add_metric([queue], float(sum(self._redis.llen(name) for name in lists)))
                age.add_metric([queue], max(self._oldest_age(name) for name in lists))
        except Exception as error:
            _log.warning("queue metrics not read: %s", error)
            return
        yield depth
        yield age

    def _oldest_age(self, redis_list: str) -> float:
        oldest = self._redis.lindex(redis_list, -1)
        if oldest is None:
            return 0.0
        sent_at = _header(oldest, SENT_AT_TASK_HEADER)  # type: ignore[arg-type]
        return max(0.0, time.time() - sent_at) if isinstance(sent_at, int | float) else 0.0


def _header(raw_message: bytes, name: str) -> object | None:
    try:
        value: object = json.loads(raw_message).get("headers", {}).get(name)
        return value
    except (ValueError, AttributeError):
        return None


class _Sources(Collector):
    """Several collectors as one, so that each app gets a registry of its own over the process-wide metrics
    (two apps in one process, as the tests build them, must not register the same scrape-time gauges twice)."""

    def __init__(self, sources: Iterable[Collector]) -> None:
        self._sources = list(sources)

    def collect(self) -> Iterator[Metric]:
        for source in self._sources:
            yield from source.collect()


def scrape_registry(*extra: Collector) -> CollectorRegistry:
    """The process's metrics (every task process's in multi-process mode) and `extra`."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        process_metrics = CollectorRegistry()
        MultiProcessCollector(process_metrics)  # type: ignore[no-untyped-call]
        registry.register(_Sources([process_metrics, *extra]))
    else:
        registry.register(_Sources([REGISTRY, *extra]))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def task_headers(request_id: str | None) -> dict[str, object]:
    """What a published task carries besides its arguments: the publication time, and the request id."""
    headers: dict[str, object] = {SENT_AT_TASK_HEADER: time.time()}
    if request_id:
        headers[REQUEST_ID_TASK_HEADER] = request_id
    return headers
