"""Each passage precision a KB may choose, against float32, on a collection's chunks: how far its vectors move and
how fast it embeds them. No service.

    python bench/passage_precision.py [--corpora scifact jsquad] [--documents 200] [--rounds 3]

The first --documents documents of each corpus are chunked as the worker chunks them (title and heading path
included) and embedded in calls of 8 chunks (a worker's batch), one ONNX Runtime thread (a task process's share
of this machine's two cores), by every precision of `chunking.passage_precision`. Reported per precision:
1 − cosine to the float32 vector (mean and worst chunk) and chunks/s (median of --rounds, the precisions taking
turns within each round, since this machine's speed drifts). What the vectors' movement costs in retrieval is
bench/quality.py's to say, through the service (`--compare`; README, Benchmarks: int8-mixed passages).

The same precisions as the retriever's query graph (RAGKB_RETRIEVER__QUERY_PRECISION): the first --queries
questions of each corpus embedded one at a time on QUERY_THREADS threads (the retriever's on this machine), back
to back, taking turns the same way; reported per precision: 1 − cosine to float32 and the wall ms per query
(median over the questions of every round).

Results: bench/results/passage-precision[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, get_args

import numpy as np
from common import DATA, read_jsonl, save_result
from embed_batching import chunked_documents
from numpy.typing import NDArray

from ragkb_core.kb_settings import PassagePrecision
from ragkb_core.settings import EmbeddingSettings
from ragkb_models import Embedder, EmbedderPool
from ragkb_models.embedder import fastest_precision

CALL_SIZE = 8
QUERY_THREADS = 2


# Every graph a precision names; auto is one of them (float32 or int8-block), reported as what it chose here.
GRAPHS: tuple[PassagePrecision, ...] = tuple(p for p in get_args(PassagePrecision) if p != "auto")


def embed_in_calls(embedder: Embedder, texts: list[str]) -> tuple[NDArray[np.float32], float]:
    started = time.perf_counter()
    vectors = np.vstack([embedder.embed_passages(texts[i : i + CALL_SIZE]) for i in range(0, len(texts), CALL_SIZE)])
    return vectors, time.perf_counter() - started


def measure(corpus: str, documents: int, rounds: int, pool: EmbedderPool) -> list[dict[str, Any]]:
    precisions = GRAPHS
    embedders = {precision: pool.get(None, precision) for precision in precisions}
    texts = [text for chunks in chunked_documents(embedders["float32"], corpus, documents) for text in chunks]
    vectors: dict[str, NDArray[np.float32]] = {}
    seconds: dict[str, list[float]] = {precision: [] for precision in precisions}
    for precision in precisions:  # warm-up, off the clock
        embedders[precision].embed_passages(texts[:CALL_SIZE])
    for _ in range(rounds):
        for precision in precisions:
            vectors[precision], took = embed_in_calls(embedders[precision], texts)
            seconds[precision].append(took)
    return [
        {"corpus": corpus, "precision": precision, "chunks": len(texts)}
        | distance_to_float32(vectors, precision)
        | {"chunks_per_s": round(len(texts) / statistics.median(seconds[precision]), 1)}
        for precision in precisions
    ]


def distance_to_float32(vectors: dict[str, NDArray[np.float32]], precision: str) -> dict[str, float]:
    """1 − cosine of each of the precision's vectors to its float32 one: the mean and the worst."""
    # Clipped at 0: float32 against itself differs from 1 in the last bit only.
    loss = np.clip(1 - np.sum(vectors[precision] * vectors["float32"], axis=1), 0.0, None)
    return {"one_minus_cosine_mean": round(float(loss.mean()), 6), "one_minus_cosine_max": round(float(loss.max()), 6)}


def measure_queries(corpus: str, count: int, rounds: int, pool: EmbedderPool) -> list[dict[str, Any]]:
    precisions = GRAPHS
    embedders = {precision: pool.get(None, precision) for precision in precisions}
    questions = [row["text"] for row in read_jsonl(DATA / corpus / "queries.jsonl")][:count]
    vectors: dict[str, NDArray[np.float32]] = {}
    walls: dict[str, list[float]] = {precision: [] for precision in precisions}
    for precision in precisions:  # warm-up, off the clock
        embedders[precision].embed_query(questions[0])
    for _ in range(rounds):
        for precision in precisions:
            embedded = []
            for question in questions:
                started = time.perf_counter()
                embedded.append(embedders[precision].embed_query(question))
                walls[precision].append((time.perf_counter() - started) * 1000)
            vectors[precision] = np.array(embedded, dtype=np.float32)
    return [
        {"corpus": corpus, "precision": precision, "queries": len(questions)}
        | distance_to_float32(vectors, precision)
        | {"ms_per_query_p50": round(statistics.median(walls[precision]), 2)}
        for precision in precisions
    ]


def markdown(rows: list[dict[str, Any]], query_rows: list[dict[str, Any]], auto: dict[str, str]) -> str:
    lines = [
        f"auto on this CPU (ragkb_models.precision_choice): passages {auto['passages']}, queries {auto['queries']}.",
        "",
        "| corpus | precision | chunks | 1 − cosine to float32: mean | worst chunk | chunks/s (1 thread) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['corpus']} | {r['precision']} | {r['chunks']} | {r['one_minus_cosine_mean']} | "
        f"{r['one_minus_cosine_max']} | {r['chunks_per_s']} |"
        for r in rows
    ]
    lines += [
        "",
        f"| corpus | query graph | questions | 1 − cosine to float32: mean | worst question | ms per query p50 "
        f"({QUERY_THREADS} threads) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['corpus']} | {r['precision']} | {r['queries']} | {r['one_minus_cosine_mean']} | "
        f"{r['one_minus_cosine_max']} | {r['ms_per_query_p50']} |"
        for r in query_rows
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["scifact", "jsquad"])
    parser.add_argument("--documents", type=int, default=200, help="the first N documents of each corpus")
    parser.add_argument("--queries", type=int, default=200, help="the first N questions of each corpus (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    pool = EmbedderPool(EmbeddingSettings(threads=1))
    rows = [row for corpus in args.corpora for row in measure(corpus, args.documents, args.rounds, pool)]
    query_pool = EmbedderPool(EmbeddingSettings(threads=QUERY_THREADS))
    query_rows = [
        row
        for corpus in args.corpora
        if args.queries
        for row in measure_queries(corpus, args.queries, args.rounds, query_pool)
    ]
    settings = EmbeddingSettings()
    auto: dict[str, str] = {shape: fastest_precision(settings, shape) for shape in ("passages", "queries")}
    save_result(
        f"passage-precision{'-' + args.label if args.label else ''}",
        {
            "documents": args.documents,
            "queries": args.queries,
            "rounds": args.rounds,
            "rows": rows,
            "query_rows": query_rows,
            "auto": auto,
        },
        markdown(rows, query_rows, auto),
    )


if __name__ == "__main__":
    main()
