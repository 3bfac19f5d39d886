"""Latency of cross-encoder reranking as the retriever runs it: 1 query × N candidates (default 84 = top_k 12 ×
candidate multiplier 7) through `RerankerPool`, on real passages (SciFact, English; JSQuAD, Japanese, read in
place), p50/p95 over repetitions, each with another query and another slice of the corpus.

The default model is ragkb's own packaged reranker (models/reranker/); any sentence-transformers CrossEncoder id
or folder can be passed instead. The model is loaded and warmed up before timing; the budget is unlimited, so
every run is measured to its end.

    python bench/rerank_latency.py [MODEL] [--candidates 84] [--repetitions 20] [--max-length 256] [--batch-size 32]

Results: bench/results/rerank-latency.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from itertools import islice
from typing import Any

from common import DATA, percentile, read_jsonl, save_result

from ragkb_models.cross_encoder import PACKAGED_RERANKER
from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.settings import RerankerSettings

COLLECTIONS = ["scifact", "jsquad"]
UNLIMITED_MS = 10 * 60 * 1000


@dataclass
class Measurement:
    collection: str
    mean_chars: float
    latencies_ms: list[float]
    ms_per_pair: float | None

    def row(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "mean_passage_chars": round(self.mean_chars),
            "p50_ms": round(percentile(self.latencies_ms, 50), 1),
            "p95_ms": round(percentile(self.latencies_ms, 95), 1),
            "mean_ms": round(statistics.fmean(self.latencies_ms), 1),
            "estimated_ms_per_pair": None if self.ms_per_pair is None else round(self.ms_per_pair, 2),
        }


def load_texts(collection: str, queries: int, passages: int) -> tuple[list[str], list[str]]:
    folder = DATA / collection
    query_texts = [query["text"] for query in islice(read_jsonl(folder / "queries.jsonl"), queries)]
    passage_texts = [doc["text"] for doc in islice(read_jsonl(folder / "corpus.jsonl"), passages)]
    return query_texts, passage_texts


def measure(pool: RerankerPool, collection: str, candidates: int, repetitions: int) -> Measurement:
    queries, passages = load_texts(collection, repetitions, candidates * repetitions)
    latencies: list[float] = []
    for index, query in enumerate(queries):
        batch = passages[index * candidates : (index + 1) * candidates]
        outcome = pool.rerank(None, query, batch, UNLIMITED_MS)
        if outcome.degraded_reason is not None:
            raise SystemExit(f"reranking degraded: {outcome.degraded_reason}")
        latencies.append(outcome.took_ms)
    stats = pool.stats(None)
    mean_chars = statistics.fmean(len(p) for p in passages)
    return Measurement(collection, mean_chars, latencies, stats.ms_per_pair if stats else None)


def markdown(model: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Reranking 1 query × {args.candidates} candidates with `{model}` (max_length {args.max_length}, "
        f"batch {args.batch_size}, {args.repetitions} repetitions):",
        "",
        "| collection | mean passage chars | p50 ms | p95 ms | ms per pair |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['collection']} | {row['mean_passage_chars']} | {row['p50_ms']} | {row['p95_ms']} "
            f"| {row['estimated_ms_per_pair']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "model", nargs="?", default=PACKAGED_RERANKER, help="the packaged reranker, or a CrossEncoder id or folder"
    )
    parser.add_argument("--candidates", type=int, default=84)
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    settings = RerankerSettings(
        model=args.model, max_length=args.max_length, batch_size=args.batch_size, device=args.device
    )
    pool = RerankerPool(settings)
    started = time.perf_counter()
    pool.warm_up()
    load_s = time.perf_counter() - started
    if (stats := pool.stats(None)) is None or stats.load_failure:
        raise SystemExit(f"the reranker did not load: {stats.load_failure if stats else 'not configured'}")
    rows = [measure(pool, name, args.candidates, args.repetitions).row() for name in COLLECTIONS]
    pool.close()

    print(f"load + warm-up: {load_s:.1f} s")
    result = {"model": args.model, "load_s": round(load_s, 2), **vars(args), "results": rows}
    save_result("rerank-latency", result, markdown(args.model, args, rows))


if __name__ == "__main__":
    main()
