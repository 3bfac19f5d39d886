"""What observability adds to one search: the api's and the retriever's per-request work (request id, one metrics
observation and one log line per request, by route template) and the search's stage histograms, measured with
and without in one run.

    python bench/observability_overhead.py [--searches 1000] [--rounds 15]

A search crosses two Litestar apps (the api's /v1/search, then the retriever's /internal/v1/search). Here both
are real Litestar apps in this process, driven over ASGI without a network, whose handlers answer at once: what
is left is the framework's time plus what ragkb_http.observability and ragkb_telemetry.metrics add. Three
variants of the same two apps:

- plain: no observation at all (what ragkb was before issue 23);
- metrics: the request middleware (request id, X-Request-ID, request counter and histogram) and, in the
  handlers, the stage histograms a search records (api: auth, kbs, retriever, total; retriever: embed,
  analyze, retrieve, assemble), the request log line at INFO filtered out (level WARNING);
- metrics + JSON logs: the same, with the request lines and the api's search line written as JSON
  (RAGKB_LOG__FORMAT=json) to /dev/null.

Tracing is off (no OTEL_EXPORTER_OTLP_ENDPOINT), as by default: nothing of it is installed. The variants run in
interleaved rounds, each starting with another variant, and are timed in CPU time of this process (a machine
shared with other work delays a run without adding to its CPU time); the figure is the median over rounds of
each variant's mean CPU time per search, and the overhead the difference to plain. A scrape of /metrics is
timed too (the api's registry after the run).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
from common import save_result
from litestar import Litestar, MediaType, Response, post
from litestar.middleware.base import DefineMiddleware

from ragkb_core.settings import LogSettings, MetricsSettings
from ragkb_http.observability import metrics_router, observation_middleware
from ragkb_telemetry import metrics
from ragkb_telemetry.exposition import render, scrape_registry
from ragkb_telemetry.logs import configure_logging
from ragkb_telemetry.metrics import observe_stages

API_STAGES_MS = {"auth": 0.3, "kbs": 0.6, "retriever": 9.0, "total": 10.2}
RETRIEVER_STAGES_MS = {"embed": 4.0, "analyze": 0.2, "retrieve": 3.5, "assemble": 0.4}
ANSWER = b'{"results": [], "took_ms": 8.1}'
TARGET_MS = 0.5
_search_log = logging.getLogger("ragkb.search")


def build_apps(observed: bool) -> tuple[Litestar, Litestar]:
    """The api's and the retriever's search route, with or without what issue 23 added."""

    @post("/v1/search", sync_to_thread=False)
    def api_search(data: dict[str, Any]) -> Response[bytes]:
        if observed:
            observe_stages(metrics.api_search_stage_duration, API_STAGES_MS)
            _search_log.info("search %d KBs: %.1f ms", 1, 10.2, extra={"kb_ids": data["kbs"], "duration_ms": 10.2})
        return Response(ANSWER, media_type=MediaType.JSON)

    @post("/internal/v1/search", sync_to_thread=False)
    def retriever_search(data: dict[str, Any]) -> Response[bytes]:
        if observed:
            observe_stages(metrics.search_stage_duration, RETRIEVER_STAGES_MS, "hybrid")
        return Response(ANSWER, media_type=MediaType.JSON)

    def app(handler: Any, service: str) -> Litestar:
        middleware: list[DefineMiddleware] = observation_middleware(service) if observed else []
        extra = [metrics_router(scrape_registry(), MetricsSettings())] if observed else []
        return Litestar(route_handlers=[handler, *extra], middleware=middleware, logging_config=None)

    return app(api_search, "api"), app(retriever_search, "retriever")


async def time_searches(apps: tuple[Litestar, Litestar], searches: int) -> float:
    """Mean CPU ms of this process per search: one request to each app, one after the other, as a search makes
    them. CPU time, not wall time: other work on a shared machine delays a run without adding to it."""
    api, retriever = (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") for app in apps
    )
    body = {"query": "how long to upload receipts", "kbs": ["0" * 32]}
    async with api, retriever:
        for _ in range(50):  # warm-up: route caches, first label children
            await api.post("/v1/search", json=body)
            await retriever.post("/internal/v1/search", json=body)
        started = time.process_time()
        for _ in range(searches):
            await api.post("/v1/search", json=body, headers={"X-Request-ID": "bench"})
            await retriever.post("/internal/v1/search", json=body, headers={"X-Request-ID": "bench"})
        return (time.process_time() - started) * 1000 / searches


def with_logging(json_logs: bool) -> Callable[[], None]:
    def configure() -> None:
        configure_logging("bench", LogSettings(format="json", level="INFO" if json_logs else "WARNING"))
        handler = logging.getLogger().handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(open("/dev/null", "w"))  # noqa: SIM115 -- lives as long as the run

    return configure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    variants: dict[str, tuple[tuple[Litestar, Litestar], Callable[[], None]]] = {
        "plain": (build_apps(observed=False), with_logging(json_logs=False)),
        "metrics": (build_apps(observed=True), with_logging(json_logs=False)),
        "metrics + JSON logs": (build_apps(observed=True), with_logging(json_logs=True)),
    }
    means: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_number in range(args.rounds):
        # Each round starts with another variant: none always runs first (or last) in a round.
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            apps, configure = variants[name]
            configure()
            means[name].append(asyncio.run(time_searches(apps, args.searches)))
        print(f"round {round_number + 1}: " + ", ".join(f"{n} {m[-1]:.3f} ms" for n, m in means.items()), flush=True)

    medians = {name: statistics.median(values) for name, values in means.items()}
    scrape_ms = time_scrape()
    rows = [
        f"| {name} | {medians[name]:.3f} | {medians[name] - medians['plain']:+.3f} | "
        f"{(medians[name] - medians['plain']) / TARGET_MS:.2f} |"
        for name in variants
    ]
    table = "\n".join(
        [
            f"Observability overhead per search (2 Litestar hops over ASGI, {args.searches} searches × "
            f"{args.rounds} interleaved rounds, CPU ms, median of round means; target < {TARGET_MS} ms)",
            "",
            "| variant | CPU ms per search | overhead ms | overhead / 0.5 ms target |",
            "|---|---|---|---|",
            *rows,
            "",
            f"One scrape of the api's /metrics after the run: {scrape_ms:.2f} ms (every 15 s, not per search).",
        ]
    )
    result = {
        "searches_per_round": args.searches,
        "rounds": args.rounds,
        "round_means_ms": means,
        "median_ms": medians,
        "overhead_ms": {name: medians[name] - medians["plain"] for name in variants},
        "scrape_ms": scrape_ms,
        "python": sys.version.split()[0],
    }
    save_result("observability-overhead", result, table)


def time_scrape(times: int = 50) -> float:
    registry = scrape_registry()
    started = time.perf_counter()
    for _ in range(times):
        render(registry)
    return (time.perf_counter() - started) * 1000 / times


if __name__ == "__main__":
    main()
