"""Ingest a BEIR corpus through the public API and measure the pipeline against raw encoding.

Reports documents/s and chunks/s end to end (upload through the batch endpoint → every document `done`), the
share of worker time per stage, and — before and after ingestion, on the same machine, same model and the same
chunks — the raw encode throughput of the embedding model alone. efficiency = pipeline chunks/s ÷ raw chunks/s,
the raw rate being the mean of its two measurements: this machine's speed drifts by up to ~10 % between
minutes, and one measurement after the run charged that drift to the pipeline. While
it ingests, the memory of each process of the stack behind --url is sampled (RSS every second, PSS every 15 s,
bench/processes.py; Linux and a stack on this machine only). Results: bench/results/ingest-<kb>.json and .md.

    python bench/ingest.py [--corpus scifact] [--limit N] [--url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlparse

import httpx
from common import DATA, client, delete_kb, find_kb, read_jsonl, save_result
from processes import ProcessMemory, memory_table

from ragkb_core.kb_settings import PassagePrecision

# The worker's stages, in pipeline order (a document's `stage_timings`).
STAGES = ("parse", "chunk", "embed", "index")
# Documents per upload request (the server takes up to its max_batch_documents, default 100): one request
# per document would measure the API's per-key rate limit (600 a minute by default), not the pipeline.
BATCH_SIZE = 50


def upload_all(
    http: httpx.Client, kb_id: str, documents: list[dict[str, Any]], workers: int, batch_size: int = BATCH_SIZE
) -> None:
    """Upload through the batch endpoint, `batch_size` documents a request, `workers` requests at a time; an
    item the server refuses stops the benchmark (a benchmark of a corpus that did not go in measures nothing)."""

    def upload(batch: list[dict[str, Any]]) -> None:
        items = [
            {"source_id": document["_id"], "title": document.get("title") or document["_id"], "text": document["text"]}
            for document in batch
        ]
        response = http.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": items})
        response.raise_for_status()
        refused = [result for result in response.json()["results"] if result["error"]]
        if refused:
            raise SystemExit(f"the server refused {len(refused)} documents, the first: {refused[0]}")

    batches = [documents[i : i + batch_size] for i in range(0, len(documents), batch_size)]
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(upload, batches))


def wait_until_settled(http: httpx.Client, kb_id: str, total: int, timeout_s: float) -> dict[str, int]:
    """Polls the KB's counts once a second, then every 0.1 s for its last 2 % of documents: a 1 s poll adds
    half a second to the measured time on average (0.6 % of a 90 s run), and a fast poll all along would take
    the stack's CPU from the pipeline it measures."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts: dict[str, int] = http.get(f"/v1/knowledge-bases/{kb_id}").json()["document_counts"]
        settled = counts["done"] + counts["failed"]
        if settled >= total:
            return counts
        time.sleep(1 if total - settled > total * 0.02 else 0.1)
    raise TimeoutError(f"ingestion did not finish within {timeout_s} s: {counts}")


def documents_of(http: httpx.Client, kb_id: str) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = http.get(f"/v1/knowledge-bases/{kb_id}/documents").json()
    return documents


def stage_shares(documents: list[dict[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for document in documents:
        for stage, seconds in document["stage_timings"].items():
            totals[stage] = totals.get(stage, 0.0) + seconds
    whole = sum(totals.values()) or 1.0
    return {stage: round(seconds / whole, 3) for stage, seconds in totals.items()}


def graph_of(precision: PassagePrecision) -> str:
    """The graph a KB of `precision` is embedded with here: auto is float32 or int8-block, whichever this CPU
    runs faster (kept in the model cache by the stack's own start)."""
    if precision != "auto":
        return precision
    from ragkb_models.embedder import fastest_precision
    from ragkb_worker.settings import WorkerSettings

    return fastest_precision(WorkerSettings().embedding, "passages")


def raw_encode_rate(
    corpus: list[dict[str, Any]], sample: int, precision: PassagePrecision = "float32"
) -> dict[str, float]:
    """Chunk the same documents with the worker's chunker and time the model alone on those texts, in the
    KB's passage precision (the model's own speed there, all cores to itself)."""
    from ragkb_core.kb_settings import KbChunking
    from ragkb_models import EmbedderPool
    from ragkb_worker.chunking import Chunker
    from ragkb_worker.parsing import parse
    from ragkb_worker.pipeline import embedding_text
    from ragkb_worker.settings import WorkerSettings

    settings = WorkerSettings()
    embedder = EmbedderPool(settings.embedding).get(None, precision)
    chunker = Chunker(embedder, KbChunking())
    texts: list[str] = []
    for document in corpus:
        chunks, _ = chunker.chunk(parse("text/plain", document["text"].encode()))
        title = document.get("title") or document["_id"]
        texts.extend(embedding_text(title, chunk) for chunk in chunks)
        if len(texts) >= sample:
            break
    embedder.embed_passages(texts[:32])  # warm-up
    started = time.perf_counter()
    embedder.embed_passages(texts[:sample])
    seconds = time.perf_counter() - started
    return {
        "chunks": len(texts[:sample]),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts[:sample]) / seconds, 2),
    }


def mean_rate(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """One raw rate from the measurements before and after the run, both kept."""
    return {
        "chunks": before["chunks"],
        "chunks_per_s": round((before["chunks_per_s"] + after["chunks_per_s"]) / 2, 2),
        "before": before,
        "after": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--corpus", default="scifact")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--upload-workers", type=int, default=2, help="batch requests in flight")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="documents per upload request")
    parser.add_argument("--raw-sample", type=int, default=1000, help="chunks encoded for the raw model rate")
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--kb-name", default=None, help="default: bench-<corpus>-<documents>")
    parser.add_argument(
        "--analyzer", type=json.loads, default=None, help='the KB\'s analyzer, e.g. \'{"japanese": "char-bigram"}\''
    )
    parser.add_argument(
        "--chunking", type=json.loads, default=None, help='the KB\'s chunking, e.g. \'{"passage_precision": "int8"}\''
    )
    parser.add_argument("--skip-raw", action="store_true", help="do not measure the raw encode rate")
    args = parser.parse_args()

    corpus = list(read_jsonl(DATA / args.corpus / "corpus.jsonl"))[: args.limit]
    http = client(args.url)
    name = args.kb_name or f"bench-{args.corpus}-{len(corpus)}"
    if (existing := find_kb(http, name)) is not None:
        delete_kb(http, existing["id"])
    body: dict[str, Any] = (
        {"name": name}
        | ({"analyzer": args.analyzer} if args.analyzer else {})
        | ({"chunking": args.chunking} if args.chunking else {})
    )
    created = http.post("/v1/knowledge-bases", json=body)
    created.raise_for_status()
    kb_id = created.json()["id"]

    precision = created.json()["chunking"]["passage_precision"]
    raw_before = None if args.skip_raw else raw_encode_rate(corpus, args.raw_sample, precision)
    memory = ProcessMemory(urlparse(args.url).port or 80)
    memory.start()
    started, bench_cpu_started = time.perf_counter(), time.process_time()
    upload_all(http, kb_id, corpus, args.upload_workers, args.batch_size)
    uploaded_s = time.perf_counter() - started
    counts = wait_until_settled(http, kb_id, len(corpus), args.timeout)
    elapsed = time.perf_counter() - started
    process_memory = memory.stop()
    # The bench's own uploads and polls share the stack's cores: its CPU is part of where the time went.
    bench_cpu_s = round(time.process_time() - bench_cpu_started, 2)

    documents = documents_of(http, kb_id)
    chunks = sum(document["chunk_count"] for document in documents)
    # Skipped: null in the results (JSON has no NaN), and no efficiency figure.
    raw = None if raw_before is None else mean_rate(raw_before, raw_encode_rate(corpus, args.raw_sample, precision))
    pipeline_rate = chunks / elapsed
    result = {
        "corpus": args.corpus,
        "knowledge_base": name,
        "knowledge_base_id": kb_id,
        "analyzer": created.json()["analyzer"],
        "passage_precision": precision,
        # What auto stood for on this machine (the graph the worker embedded with), else the precision itself.
        "passage_graph": graph_of(precision),
        "documents": len(corpus),
        "counts": counts,
        "chunks": chunks,
        "upload_seconds": round(uploaded_s, 1),
        "seconds": round(elapsed, 1),
        "documents_per_s": round(len(corpus) / elapsed, 2),
        "chunks_per_s": round(pipeline_rate, 2),
        "raw_encode": raw,
        "efficiency": None if raw is None else round(pipeline_rate / raw["chunks_per_s"], 3),
        "stage_share": stage_shares(documents),
        "process_memory": process_memory,
        "bench_cpu_s": bench_cpu_s,
    }
    save_result(f"ingest-{name}", result, markdown(result))


def raw_cell(raw: dict[str, Any] | None) -> str:
    if raw is None:
        return "skipped"
    if "before" not in raw:  # a result saved before the raw rate was measured twice
        return str(raw["chunks_per_s"])
    return f"{raw['chunks_per_s']} ({raw['before']['chunks_per_s']} before, {raw['after']['chunks_per_s']} after)"


def markdown(result: dict[str, Any]) -> str:
    raw = result["raw_encode"]
    shares = " / ".join(f"{result['stage_share'].get(stage, 0):.1%}" for stage in STAGES)
    precision = result.get("passage_precision", "float32")
    graph = result.get("passage_graph", precision)
    return (
        f"Passages: {precision}" + (f" ({graph} on this CPU)" if graph != precision else "") + ".\n\n"
        "| corpus | docs | chunks | failed | seconds | docs/s | chunks/s | raw encode chunks/s | efficiency | "
        "parse / chunk / embed / index |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        f"| {result['corpus']} | {result['documents']} | {result['chunks']} | {result['counts']['failed']} | "
        f"{result['seconds']} | {result['documents_per_s']} | {result['chunks_per_s']} | "
        f"{raw_cell(raw)} | {result['efficiency']} | {shares} |\n\n"
        "Memory of each process of the stack while it ingested (RSS sampled every second, PSS every 15 s; PSS counts "
        "shared pages once) and the CPU it used meanwhile:\n\n"
        f"{memory_table(result['process_memory'])}\n\n"
        f"{cpu_line(result)}\n"
    )


def cpu_line(result: dict[str, Any]) -> str:
    """CPU milliseconds per document by role, the bench's own included: the time outside the model."""
    by_role = result["process_memory"].get("cpu_s_by_role")
    if by_role is None:
        return "CPU per document: not measured"
    seconds = {role.removeprefix("ragkb_"): cpu for role, cpu in by_role.items()}
    seconds["this bench"] = result["bench_cpu_s"]
    cells = ", ".join(f"{role} {1000 * cpu / result['documents']:.1f}" for role, cpu in seconds.items())
    return f"CPU ms per document: {cells} (the machine's wall ms per document: {1000 / result['documents_per_s']:.1f})"


if __name__ == "__main__":
    main()
