"""Query latency per mode and per stage at several index sizes, one client and eight concurrent clients.

    python bench/query.py [--scales 10000 100000] [--queries 300] [--concurrency 8] [--env KEY=VALUE ...]
    python bench/query.py --url http://127.0.0.1:8000 --retriever-url http://127.0.0.1:8001
        (a running stack: admin key from RAGKB_API_KEY, service token from RAGKB_SERVICE_TOKEN; its rate limit
        must be off, RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE=0, or the concurrent run measures the limiter)

Without --url it starts a private stack (ragkb_cli.stack: deploy/launcher.py on free ports and a temporary directory),
with the retriever's query-vector cache off (--query-cache-size 0): every mode and phase asks the same SciFact
questions, and with the cache on, every one after the first would be answered from a cached vector (a repeated
question's latency is bench/latency_ab.py's). For every scale it builds a KB of that many chunks with bench/scale.py —
real SciFact passages scaled up by repetition with perturbation, NOT that many distinct passages — waits until the index
has finished its background optimisation, then, per mode (semantic, keyword, hybrid, and hybrid+rerank when the server
has a reranker), sends real SciFact queries through the public `POST /v1/search`:

- one client: a warm-up, then --queries requests one after the other; p50/p95/p99 of the HTTP latency,
  of the server's `took_ms`, and of each stage in `timings_ms` (embed, analyze, retrieve, rerank,
  assemble; a stage the server does not report is absent);
- --concurrency clients (threads, one connection each) sharing --queries requests: queries/s and p50/p95;
- while ingesting (--ingest-documents, default 1500; 0 skips it): on the smallest scale's KB, hybrid search
  with 1 client and --concurrency clients, first idle, then while that many SciFact documents are bulk-ingested
  into another KB through the public API (batch uploads; the worker parses, chunks and embeds them, the
  retriever writes them); p50/p95/p99 of both phases and the ratio of the p99s.

Results: bench/results/query-latency.json and .md (`--label 1m`: query-latency-1m.*, e.g. for
`--scales 1000000 --large`, next to the default run's). Retrieval quality (nDCG@10 per mode on a corpus
ingested by bench/ingest.py) is bench/quality.py.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import scale
from common import DATA, QUERY_CACHE_ENV, REPO, percentile, read_jsonl, save_result, settings_of
from profile_search import server_timing

from ragkb_cli.stack import StackAddress, private_stack

WARM_UP = 20
STAGES = ("embed", "analyze", "retrieve", "rerank", "assemble")
LARGEST_DEFAULT_SCALE = 100_000
ENDED_EARLY = "; THE INGEST ENDED BEFORE THE MEASUREMENT DID: add --ingest-documents"


@dataclass(frozen=True)
class Mode:
    label: str
    mode: str
    rerank: bool


MODES = (
    Mode("semantic", "semantic", rerank=False),
    Mode("keyword", "keyword", rerank=False),
    Mode("hybrid", "hybrid", rerank=False),
    Mode("hybrid+rerank", "hybrid", rerank=True),
)


@dataclass
class Samples:
    """What one run of requests measured: HTTP latency, server total, per stage, and the flags answered."""

    http_ms: list[float] = field(default_factory=list)
    took_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    # The api's own stages from its Server-Timing header (auth, kbs, retriever, total).
    api_stages: dict[str, list[float]] = field(default_factory=dict)
    reranked: int = 0
    degraded: int = 0

    def add(self, http_ms: float, body: dict[str, Any], api_stages: dict[str, float] | None = None) -> None:
        self.http_ms.append(http_ms)
        self.took_ms.append(body["took_ms"])
        for stage, ms in (body.get("timings_ms") or {}).items():
            self.stages.setdefault(stage, []).append(ms)
        for stage, ms in (api_stages or {}).items():
            self.api_stages.setdefault(stage, []).append(ms)
        self.reranked += bool(body.get("reranked"))
        self.degraded += bool(body.get("degraded"))


class Searcher:
    """Builds the search body for a mode. Reranking is switched per request through the request's retrieval
    overrides when the API offers them (found in its OpenAPI document); without them the KB's default holds."""

    def __init__(self, api: httpx.Client, kb_id: str, top_k: int) -> None:
        self._kb_id = kb_id
        self._top_k = top_k
        self._overrides_field = _rerank_overrides_field(api.get("/schema/openapi.json").json())

    @property
    def can_switch_rerank(self) -> bool:
        return self._overrides_field is not None

    def body(self, query: str, mode: Mode) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, "knowledge_base_ids": [self._kb_id], "top_k": self._top_k}
        body["mode"] = mode.mode
        if self._overrides_field:
            body[self._overrides_field] = {"rerank": mode.rerank}
        return body


def _rerank_overrides_field(openapi: dict[str, Any]) -> str | None:
    """The property of the search request whose schema has a `rerank` field, if any."""
    schemas = openapi.get("components", {}).get("schemas", {})
    properties = schemas.get("SearchRequest", {}).get("properties", {})
    for name, schema in properties.items():
        refs = [schema.get("$ref", "")] + [option.get("$ref", "") for option in schema.get("anyOf", [])]
        for ref in filter(None, refs):
            if "rerank" in schemas.get(ref.rsplit("/", 1)[-1], {}).get("properties", {}):
                return str(name)
    return None


def timed_search(http: httpx.Client, body: dict[str, Any]) -> tuple[float, dict[str, Any], dict[str, float]]:
    """Milliseconds over HTTP, the answer, and the api's stages from its Server-Timing header."""
    started = time.perf_counter()
    response = http.post("/v1/search", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"search answered {response.status_code}: {response.text[:500]}")
    answer: dict[str, Any] = response.json()
    return elapsed, answer, server_timing(response.headers.get("server-timing"))


def probe_search(http: httpx.Client, body: dict[str, Any]) -> float | None:
    """Milliseconds of one search, or None when it failed: a search waiting on an optimisation that holds
    the retriever longer than the api's retriever timeout answers 503."""
    started = time.perf_counter()
    response = http.post("/v1/search", json=body)
    return (time.perf_counter() - started) * 1000 if response.status_code == 200 else None


def single_client(http: httpx.Client, searcher: Searcher, mode: Mode, queries: list[str], count: int) -> Samples:
    for query in queries[:WARM_UP]:
        timed_search(http, searcher.body(query, mode))
    samples = Samples()
    for index in range(count):
        samples.add(*timed_search(http, searcher.body(queries[(WARM_UP + index) % len(queries)], mode)))
    return samples


def concurrent_clients(
    stack: StackAddress, searcher: Searcher, mode: Mode, queries: list[str], *, count: int, clients: int
) -> tuple[Samples, float]:
    """`clients` threads, each with its own connection, share `count` requests; returns samples and wall s."""
    samples = Samples()
    lock = threading.Lock()
    next_index = iter(range(count))

    def run() -> None:
        with api_client(stack) as http:
            timed_search(http, searcher.body(queries[0], mode))  # opens the connection
            barrier.wait()
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None:
                    return
                measured = timed_search(http, searcher.body(queries[index % len(queries)], mode))
                with lock:
                    samples.add(*measured)

    barrier = threading.Barrier(clients + 1)
    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return samples, time.perf_counter() - started


@contextmanager
def api_client(stack: StackAddress) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {stack.admin_key}"}
    with httpx.Client(base_url=stack.api_url, timeout=120, headers=headers) as http:
        yield http


def quantiles(values: list[float], qs: tuple[int, ...] = (50, 95, 99)) -> dict[str, float]:
    return {f"p{q}": round(percentile(values, q), 1) for q in qs} if values else {}


def summary(samples: Samples) -> dict[str, Any]:
    return {
        "requests": len(samples.http_ms),
        "http_ms": quantiles(samples.http_ms),
        "took_ms": quantiles(samples.took_ms),
        # A stage that took 0 ms in every request did not run (the server reports every stage).
        "stages_ms": {stage: quantiles(values) for stage, values in samples.stages.items() if any(values)},
        "api_stages_ms": {stage: quantiles(values) for stage, values in samples.api_stages.items()},
        "reranked": samples.reranked,
        "degraded": samples.degraded,
    }


def measure_scale(stack: StackAddress, points: int, base: scale.BaseSet, args: argparse.Namespace) -> dict[str, Any]:
    queries = [query["text"] for query in read_jsonl(DATA / "scifact" / "queries.jsonl")]
    with api_client(stack) as http:
        kb_id = scale.create_kb(http, f"bench-scale-{points}")
        retriever = scale.retriever_client(stack.retriever_url, stack.service_token)
        write_s = scale.write_points(retriever, kb_id, points, base)
        print(f"{points} points written in {write_s:.0f} s; waiting for the index to optimise", flush=True)
        searcher = Searcher(http, kb_id, args.top_k)
        probe = Mode("probe", "hybrid", rerank=False)
        settle = scale.wait_until_optimized(
            lambda: probe_search(http, searcher.body(queries[0], probe)), args.optimize_idle_s
        )
        print(f"  settled: {settle}", flush=True)
        rows = []
        for mode in MODES:
            if mode.rerank and not searcher.can_switch_rerank:
                print(f"  {mode.label}: skipped (the search API has no rerank switch)", flush=True)
                continue
            if mode.rerank and not timed_search(http, searcher.body(queries[0], mode))[1].get("reranked"):
                print(f"  {mode.label}: skipped (the answer was not reranked: no reranker on the server)", flush=True)
                continue
            one = single_client(http, searcher, mode, queries, args.queries)
            many, wall_s = concurrent_clients(
                stack, searcher, mode, queries, count=args.queries, clients=args.concurrency
            )
            row = {
                "mode": mode.label,
                "single": summary(one),
                "concurrent": {
                    "clients": args.concurrency,
                    "queries_per_s": round(len(many.http_ms) / wall_s, 1),
                    **summary(many),
                },
            }
            print(f"  {mode.label}: {row}", flush=True)
            rows.append(row)
        retriever.close()
    return {"points": points, "kb_id": kb_id, "write_s": round(write_s, 1), "optimize_wait": settle, "modes": rows}


def while_ingesting(
    stack: StackAddress, scale_run: dict[str, Any], base_queries: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Hybrid search on the scale KB, idle and then during a bulk ingest of SciFact documents into another KB
    (through the public API: upload, worker parse/chunk/embed, retriever writes), 1 client and --concurrency."""
    from ingest import upload_all  # bench/ingest.py: the batch uploads of a bulk load

    with api_client(stack) as http:
        searcher = Searcher(http, scale_run["kb_id"], args.top_k)
        idle = _search_phases(stack, searcher, base_queries, args)
        target = scale.create_kb(http, "bench-while-ingesting")
        documents = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))[: args.ingest_documents]
        uploads = threading.Thread(target=upload_all, args=(http, target, documents, 2))
        uploads.start()
        done_before = _wait_until_ingesting(http, target)
        busy = _search_phases(stack, searcher, base_queries, args)
        counts = http.get(f"/v1/knowledge-bases/{target}").json()["document_counts"]
        uploads.join()
    still_ingesting = counts["pending"] + counts["processing"] > 0
    return {
        "points": scale_run["points"],
        "ingest_documents": len(documents),
        "documents_ingested_while_measuring": counts["done"] - done_before,
        "ingest_still_running_at_the_end": still_ingesting,
        "idle": idle,
        "ingesting": busy,
        "p99_ratio_single": round(busy["single"]["http_ms"]["p99"] / idle["single"]["http_ms"]["p99"], 2),
        "p99_ratio_concurrent": round(busy["concurrent"]["http_ms"]["p99"] / idle["concurrent"]["http_ms"]["p99"], 2),
    }


def _search_phases(
    stack: StackAddress, searcher: Searcher, queries: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Hybrid search: --queries requests from one client, then shared by --concurrency clients."""
    mode = Mode("hybrid", "hybrid", rerank=False)
    with api_client(stack) as http:
        one = single_client(http, searcher, mode, queries, args.queries)
    many, wall_s = concurrent_clients(stack, searcher, mode, queries, count=args.queries, clients=args.concurrency)
    return {
        "single": summary(one),
        "concurrent": {
            "clients": args.concurrency,
            "queries_per_s": round(len(many.http_ms) / wall_s, 1),
            **summary(many),
        },
    }


def _wait_until_ingesting(http: httpx.Client, kb_id: str, timeout_s: float = 900) -> int:
    """Wait until the worker has finished a first document of the KB (so the pipeline is busy, not starting);
    returns how many are done then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts = http.get(f"/v1/knowledge-bases/{kb_id}").json()["document_counts"]
        if counts["done"] > 0:
            return int(counts["done"])
        time.sleep(0.5)
    raise SystemExit(f"no document of the ingest finished within {timeout_s:.0f} s")


def cache_note(result: dict[str, Any]) -> str:
    """Whether a repeated question's vector came from the retriever's cache: every mode asks the same questions."""
    size = result.get("query_cache_size")
    if size is None:
        return "The running stack's query-vector cache answered repeated questions."
    if size == 0:
        return "Query-vector cache off: every search embedded its question."
    return f"Query-vector cache of {size}: a question asked again (every mode after the first) was not embedded."


def markdown(result: dict[str, Any]) -> str:
    def q3(values: dict[str, float]) -> str:
        return " / ".join(str(values[p]) for p in ("p50", "p95", "p99")) if values else "–"

    lines = [
        f"Corpus: {result['corpus']}. Queries: {result['queries_per_mode']} SciFact queries per mode after "
        f"{WARM_UP} warm-up, top_k {result['top_k']}. Cells: p50 / p95 / p99 ms. {cache_note(result)}",
        "",
        "| chunks | mode | HTTP | server took | " + " | ".join(STAGES) + " |",
        "|---|---|---|---|" + "---|" * len(STAGES),
    ]
    for run in result["scales"]:
        for row in run["modes"]:
            single = row["single"]
            stages = [q3(single["stages_ms"].get(stage, {})) for stage in STAGES]
            lines.append(
                f"| {run['points']:,} | {row['mode']} | {q3(single['http_ms'])} | {q3(single['took_ms'])} | "
                + " | ".join(stages)
                + " |"
            )
    lines += ["", "| chunks | mode | clients | queries/s | HTTP p50 | HTTP p95 |", "|---|---|---|---|---|---|"]
    for run in result["scales"]:
        for row in run["modes"]:
            many = row["concurrent"]
            lines.append(
                f"| {run['points']:,} | {row['mode']} | {many['clients']} | {many['queries_per_s']} | "
                f"{many['http_ms']['p50']} | {many['http_ms']['p95']} |"
            )
    if during := result.get("while_ingesting"):
        lines += [
            "",
            f"While ingesting (hybrid at {during['points']:,} chunks; a bulk ingest of {during['ingest_documents']} "
            f"SciFact documents into another KB, {during['documents_ingested_while_measuring']} of them done while "
            f"measuring{'' if during['ingest_still_running_at_the_end'] else ENDED_EARLY}):",
            "",
            "| | HTTP p50 / p95 / p99, 1 client | server took p50 / p99 | queries/s and p50 / p99, "
            f"{during['idle']['concurrent']['clients']} clients |",
            "|---|---|---|---|",
        ]
        for phase in ("idle", "ingesting"):
            single, many = during[phase]["single"], during[phase]["concurrent"]
            lines.append(
                f"| {phase} | {q3(single['http_ms'])} | {single['took_ms']['p50']} / {single['took_ms']['p99']} | "
                f"{many['queries_per_s']} q/s, {many['http_ms']['p50']} / {many['http_ms']['p99']} |"
            )
        lines += [
            "",
            f"p99 during ingest ÷ idle p99: {during['p99_ratio_single']} (1 client), "
            f"{during['p99_ratio_concurrent']} ({during['idle']['concurrent']['clients']} clients).",
        ]
    return "\n".join(lines) + "\n"


@contextmanager
def stack_for(args: argparse.Namespace) -> Iterator[StackAddress]:
    if not args.url:
        print("starting a private stack (deploy/launcher.py on free ports)", flush=True)
        overrides = {QUERY_CACHE_ENV: str(args.query_cache_size)} | settings_of(args.env)
        with (
            tempfile.TemporaryDirectory(prefix="ragkb-bench-") as workdir,
            private_stack(REPO, Path(workdir), **overrides) as stack,
        ):
            yield stack.address
        return
    print(f"--url: the running stack's query-vector cache ({QUERY_CACHE_ENV}) applies to repeated questions")
    key, token = os.environ.get("RAGKB_API_KEY"), os.environ.get("RAGKB_SERVICE_TOKEN")
    if not key or not token:
        raise SystemExit("with --url set RAGKB_API_KEY (an admin key) and RAGKB_SERVICE_TOKEN (the service token)")
    yield StackAddress(api_url=args.url, retriever_url=args.retriever_url, service_token=token, admin_key=key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--large", action="store_true", help=f"allow scales over {LARGEST_DEFAULT_SCALE:,} (1M)")
    parser.add_argument("--label", default="", help="results as query-latency-LABEL (keeps the default run's file)")
    parser.add_argument("--base", type=int, default=2000, help="real passages the corpus is scaled up from")
    parser.add_argument("--queries", type=int, default=300, help="measured requests per mode, after the warm-up")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--optimize-idle-s", type=float, default=10.0, help="the retriever's optimize_idle_s")
    parser.add_argument(
        "--ingest-documents",
        type=int,
        default=1500,
        help="SciFact documents bulk-ingested into another KB for the 'while ingesting' scenario (0: skip it)",
    )
    parser.add_argument(
        "--query-cache-size",
        type=int,
        default=0,
        help="the private stack's query-vector cache (0: every search embeds its question, as a new one does)",
    )
    parser.add_argument("--env", nargs="*", default=[], help="KEY=VALUE settings of the private stack")
    parser.add_argument("--url", default=None, help="a running stack's API (default: start a private one)")
    parser.add_argument("--retriever-url", default="http://127.0.0.1:8001")
    args = parser.parse_args()
    if max(args.scales) > LARGEST_DEFAULT_SCALE and not args.large:
        raise SystemExit(f"scales over {LARGEST_DEFAULT_SCALE:,} take long and much memory: add --large")

    base = scale.load_base(args.base)
    corpus = (
        f"SciFact scaled up: {args.base:,} real passages (title + up to 3 sentences, real e5 embeddings) repeated "
        f"with perturbation (1-3 words dropped, 1-2 swapped; dense + N(0, {scale.NOISE_SIGMA}²) renormalised; "
        "sparse = real BM25 of the perturbed text), documents of 10 chunks, written through the retriever's "
        "internal API"
    )
    with stack_for(args) as stack:
        scales = [measure_scale(stack, points, base, args) for points in sorted(args.scales)]
        result = {
            "corpus": corpus,
            "queries_per_mode": args.queries,
            "top_k": args.top_k,
            "query_cache_size": None if args.url else args.query_cache_size,
            "env": {} if args.url else settings_of(args.env),
            "scales": scales,
        }
        if args.ingest_documents:
            queries = [query["text"] for query in read_jsonl(DATA / "scifact" / "queries.jsonl")]
            result["while_ingesting"] = while_ingesting(stack, scales[0], queries, args)
    save_result(f"query-latency-{args.label}" if args.label else "query-latency", result, markdown(result))


if __name__ == "__main__":
    main()
