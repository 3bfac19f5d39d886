"""Query latency over HTTP and retrieval quality (nDCG@10) on a BEIR collection already ingested by ingest.py.

    python bench/query.py [--corpus scifact] [--split train] [--url http://127.0.0.1:8000]

Ranks are per document: the chunks a search returns are reduced to their documents in order (first chunk wins).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from common import DATA, client, find_kb, ndcg_at_k, percentile, read_jsonl, read_qrels, save_result


def ranked_documents(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(result["source_id"] for result in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--corpus", default="scifact")
    parser.add_argument("--split", default="train")
    parser.add_argument("--kb-name", default=None, help="default: the KB ingest.py made for the whole corpus")
    parser.add_argument("--top-k", type=int, default=30)
    args = parser.parse_args()

    http = client(args.url)
    corpus_size = sum(1 for _ in read_jsonl(DATA / args.corpus / "corpus.jsonl"))
    kb = find_kb(http, args.kb_name or f"bench-{args.corpus}-{corpus_size}")
    if kb is None:
        raise SystemExit("no benchmark KB: run bench/ingest.py first")
    qrels = read_qrels(DATA / args.corpus / "qrels" / f"{args.split}.tsv")
    queries = [q for q in read_jsonl(DATA / args.corpus / "queries.jsonl") if q["_id"] in qrels]

    latencies: list[float] = []
    server_ms: list[float] = []
    scores: list[float] = []
    for query in queries:
        started = time.perf_counter()
        response = http.post(
            "/v1/search", json={"query": query["text"], "knowledge_base_ids": [kb["id"]], "top_k": args.top_k}
        )
        latencies.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        body = response.json()
        server_ms.append(body["took_ms"])
        scores.append(ndcg_at_k(ranked_documents(body["results"]), qrels[query["_id"]]))

    result = {
        "corpus": args.corpus,
        "split": args.split,
        "queries": len(queries),
        "mode": "hybrid",
        "top_k": args.top_k,
        "http_ms": {"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1)},
        "retriever_ms": {"p50": round(percentile(server_ms, 50), 1), "p95": round(percentile(server_ms, 95), 1)},
        "ndcg_at_10": round(statistics.fmean(scores), 4),
    }
    path = save_result(f"query-{args.corpus}", result)
    print(
        f"| corpus | queries | p50 ms | p95 ms | retriever p50 ms | nDCG@10 |\n|---|---|---|---|---|---|\n"
        f"| {args.corpus} ({args.split}) | {len(queries)} | {result['http_ms']['p50']} | {result['http_ms']['p95']} | "
        f"{result['retriever_ms']['p50']} | {result['ndcg_at_10']} |\nsaved {path}"
    )


if __name__ == "__main__":
    main()
