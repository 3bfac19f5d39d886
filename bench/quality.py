"""Retrieval quality per search mode over HTTP, on BEIR collections ingested with bench/ingest.py.

    python bench/quality.py [--corpora scifact:train jsquad:dev] [--url http://127.0.0.1:8000]

For every query and mode (keyword, semantic, hybrid) the service returns up to 100 chunks; they are reduced
to documents in rank order (first chunk wins) and scored with nDCG@10, Recall@100 and MRR@10.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from common import DATA, client, find_kb, ndcg_at_k, read_jsonl, read_qrels, save_result

MODES = ("keyword", "semantic", "hybrid")


def recall_at_100(ranked: list[str], relevant: dict[str, int]) -> float:
    positives = {doc for doc, grade in relevant.items() if grade > 0}
    return len(positives & set(ranked[:100])) / len(positives) if positives else 0.0


def mrr_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    return next((1 / (i + 1) for i, doc in enumerate(ranked[:10]) if relevant.get(doc, 0) > 0), 0.0)


def evaluate(
    http: Any, kb_id: str, queries: list[dict[str, Any]], qrels: dict[str, dict[str, int]], mode: str
) -> dict[str, Any]:
    scores: dict[str, list[float]] = {"ndcg@10": [], "recall@100": [], "mrr@10": []}
    took: list[float] = []
    for query in queries:
        body = {"query": query["text"], "knowledge_base_ids": [kb_id], "top_k": 100, "mode": mode}
        response = http.post("/v1/search", json=body)
        response.raise_for_status()
        result = response.json()
        took.append(result["took_ms"])
        ranked = list(dict.fromkeys(hit["source_id"] for hit in result["results"]))
        relevant = qrels[query["_id"]]
        scores["ndcg@10"].append(ndcg_at_k(ranked, relevant, 10))
        scores["recall@100"].append(recall_at_100(ranked, relevant))
        scores["mrr@10"].append(mrr_at_10(ranked, relevant))
    summary = {metric: round(statistics.fmean(values), 4) for metric, values in scores.items()}
    return {"mode": mode, **summary, "retriever_ms_p50": round(statistics.median(took), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--corpora", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N judged queries")
    args = parser.parse_args()
    http = client(args.url)
    rows = []
    for spec in args.corpora:
        corpus, split = spec.split(":")
        size = sum(1 for _ in read_jsonl(DATA / corpus / "corpus.jsonl"))
        kb = find_kb(http, f"bench-{corpus}-{size}")
        if kb is None:
            raise SystemExit(f"no KB for {corpus}: run bench/ingest.py --corpus {corpus} first")
        qrels = read_qrels(DATA / corpus / "qrels" / f"{split}.tsv")
        queries = [q for q in read_jsonl(DATA / corpus / "queries.jsonl") if q["_id"] in qrels][: args.max_queries]
        for mode in MODES:
            started = time.perf_counter()
            row = {
                "corpus": corpus,
                "split": split,
                "queries": len(queries),
                **evaluate(http, kb["id"], queries, qrels, mode),
            }
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(row, flush=True)
    path = save_result("quality", {"rows": rows})
    print(
        "| corpus | queries | mode | nDCG@10 | Recall@100 | MRR@10 | retriever p50 ms |\n|---|---|---|---|---|---|---|"
    )
    for r in rows:
        print(
            f"| {r['corpus']} ({r['split']}) | {r['queries']} | {r['mode']} | {r['ndcg@10']} | {r['recall@100']} | "
            f"{r['mrr@10']} | {r['retriever_ms_p50']} |"
        )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
