"""Compare the embedding runtimes of the packaged multilingual-e5-small on this machine.

For torch, ONNX Runtime float32 and ONNX Runtime int8 it measures passages/s on real passages (SciFact,
English, and JSQuAD, Japanese, read in place), single-query latency (p50/p95), the cosine agreement of each
runtime with ONNX float32, and nDCG@10 of the dense ranking inside the sampled passages (queries whose
relevant passages were all sampled), so a faster runtime cannot hide a loss of retrieval quality.

Throughput rounds are interleaved across runtimes, so load from other processes spreads over all of them.

    python bench/encode_runtime.py [--scifact 300] [--jsquad 200] [--queries 100] [--rounds 2] [--threads 0]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from common import DATA, ndcg_at_k, percentile, read_jsonl, read_qrels, save_result
from numpy.typing import NDArray

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import Backend, Embedder, convert_e5, load_embedder
from ragkb_models.onnx_encoder import ensure_onnx_model

RUNTIMES: list[Backend] = ["torch", "onnx", "onnx-int8"]
BASELINE: Backend = "onnx"


@dataclass
class Collection:
    name: str
    ids: list[str]
    passages: list[str]
    queries: dict[str, str]  # query id → text, only queries whose relevant passages were all sampled
    qrels: dict[str, dict[str, int]]


@dataclass
class Measurement:
    load_s: float = 0.0
    rates: dict[str, list[float]] = field(default_factory=dict)  # collection → passages/s per round
    latencies_ms: list[float] = field(default_factory=list)
    vectors: dict[str, NDArray[np.float32]] = field(default_factory=dict)
    ndcg: dict[str, float] = field(default_factory=dict)


def load_collection(name: str, passages: int, max_queries: int) -> Collection:
    folder = DATA / name
    qrels = read_qrels(next((folder / "qrels").glob("*.tsv")))
    corpus = {doc["_id"]: doc for doc in read_jsonl(folder / "corpus.jsonl")}
    ids = sample_ids(corpus, qrels, passages)
    sampled = set(ids)
    queries = {
        q["_id"]: q["text"]
        for q in read_jsonl(folder / "queries.jsonl")
        if q["_id"] in qrels and set(qrels[q["_id"]]) <= sampled
    }
    kept = dict(list(queries.items())[:max_queries])
    return Collection(name, ids, [passage_text(corpus[i]) for i in ids], kept, qrels)


def sample_ids(corpus: dict[str, Any], qrels: dict[str, dict[str, int]], count: int) -> list[str]:
    """The passages that the first queries judge relevant, then the corpus in order, up to `count`."""
    ids: dict[str, None] = {}
    for relevant in qrels.values():
        if len(ids) + len(relevant) > count // 2:
            break
        ids.update(dict.fromkeys(d for d in relevant if d in corpus))
    for doc_id in corpus:
        if len(ids) >= count:
            break
        ids.setdefault(doc_id, None)
    return list(ids)


def passage_text(doc: dict[str, Any]) -> str:
    return f"{doc['title']}\n{doc['text']}" if doc.get("title") else str(doc["text"])


def prepare() -> float:
    """Convert the packaged model and build both ONNX graphs, if not cached yet, outside the load timings."""
    started = time.perf_counter()
    folder = convert_e5(EmbeddingSettings().cache_dir)
    ensure_onnx_model(folder, "fp32")
    ensure_onnx_model(folder, "int8")
    return time.perf_counter() - started


def load(runtime: Backend, threads: int) -> tuple[Embedder, float]:
    # model_copy skips validation: EmbeddingSettings.backend does not list "onnx-int8" yet.
    settings = EmbeddingSettings(threads=threads).model_copy(update={"backend": runtime})
    started = time.perf_counter()
    embedder = load_embedder(settings)
    embedder.embed_passages(["warm-up", "ウォームアップ"])
    return embedder, time.perf_counter() - started


def measure_throughput(embedder: Embedder, collection: Collection, result: Measurement) -> None:
    started = time.perf_counter()
    vectors = embedder.embed_passages(collection.passages)
    result.rates.setdefault(collection.name, []).append(len(collection.passages) / (time.perf_counter() - started))
    result.vectors[collection.name] = vectors


def measure_queries(embedder: Embedder, collection: Collection, result: Measurement) -> None:
    """Single-query latency, and nDCG@10 of the dense ranking inside the sampled passages."""
    scores: list[float] = []
    for query_id, text in collection.queries.items():
        started = time.perf_counter()
        query = np.array(embedder.embed_query(text), dtype=np.float32)
        result.latencies_ms.append((time.perf_counter() - started) * 1000)
        order = np.argsort(-(result.vectors[collection.name] @ query))[:10]
        scores.append(ndcg_at_k([collection.ids[i] for i in order], collection.qrels[query_id]))
    result.ndcg[collection.name] = statistics.fmean(scores) if scores else float("nan")


def agreement(a: NDArray[np.float32], b: NDArray[np.float32]) -> tuple[float, float]:
    cosines = (a * b).sum(axis=1)
    return float(cosines.min()), float(cosines.mean())


def run(args: argparse.Namespace) -> dict[Backend, Measurement]:
    collections = [
        load_collection("scifact", args.scifact, args.queries),
        load_collection("jsquad", args.jsquad, args.queries),
    ]
    describe(collections)
    print(f"prepare (conversion + ONNX builds, 0 when cached): {prepare():.1f} s")
    embedders: dict[Backend, Embedder] = {}
    results = {runtime: Measurement() for runtime in RUNTIMES}
    for runtime in RUNTIMES:
        embedders[runtime], results[runtime].load_s = load(runtime, args.threads)
    for _ in range(args.rounds):
        for runtime in RUNTIMES:
            for collection in collections:
                measure_throughput(embedders[runtime], collection, results[runtime])
    for runtime in RUNTIMES:
        for collection in collections:
            measure_queries(embedders[runtime], collection, results[runtime])
    return results


def describe(collections: list[Collection]) -> None:
    for c in collections:
        chars = statistics.fmean(len(p) for p in c.passages)
        print(f"{c.name}: {len(c.passages)} passages (mean {chars:.0f} chars), {len(c.queries)} queries")


def table(results: dict[Backend, Measurement], names: list[str]) -> str:
    header = (
        "| runtime | load s | " + " | ".join(f"{n} passages/s" for n in names) + " | all passages/s (best, median) "
        "| query p50 ms | query p95 ms | cos to onnx fp32 (min / mean) | "
        + " | ".join(f"nDCG@10 {n}" for n in names)
        + " |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for runtime, m in results.items():
        lines.append(row(runtime, m, results[BASELINE], names))
    return "\n".join(lines)


def row(runtime: Backend, m: Measurement, baseline: Measurement, names: list[str]) -> str:
    per_collection = [max(m.rates[n]) for n in names]
    overall = overall_rates(m, baseline, names)
    cos_min, cos_mean = agreement(
        np.concatenate([m.vectors[n] for n in names]), np.concatenate([baseline.vectors[n] for n in names])
    )
    cells = [
        runtime,
        f"{m.load_s:.1f}",
        *(f"{r:.1f}" for r in per_collection),
        f"{max(overall):.1f}, {statistics.median(overall):.1f}",
        f"{percentile(m.latencies_ms, 50):.1f}",
        f"{percentile(m.latencies_ms, 95):.1f}",
        f"{cos_min:.4f} / {cos_mean:.4f}",
        *(f"{m.ndcg[n]:.3f}" for n in names),
    ]
    return "| " + " | ".join(cells) + " |"


def overall_rates(m: Measurement, baseline: Measurement, names: list[str]) -> list[float]:
    """Passages/s over all collections, per round: total passages ÷ total seconds."""
    sizes = [len(baseline.vectors[n]) for n in names]
    rounds = len(m.rates[names[0]])
    return [sum(sizes) / sum(size / m.rates[n][r] for n, size in zip(names, sizes, strict=True)) for r in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", type=int, default=300, help="SciFact passages (English)")
    parser.add_argument("--jsquad", type=int, default=200, help="JSQuAD passages (Japanese)")
    parser.add_argument("--queries", type=int, default=100, help="queries per collection")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved throughput rounds per runtime")
    parser.add_argument("--threads", type=int, default=0, help="runtime threads (0: the runtime decides)")
    args = parser.parse_args()
    results = run(args)
    names = ["scifact", "jsquad"]
    print(table(results, names))
    print(f"saved {save_result('encode_runtime', summary(results, names, args))}")


def summary(results: dict[Backend, Measurement], names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    baseline = results[BASELINE]
    return {
        "args": vars(args),
        "runtimes": {
            runtime: {
                "load_s": m.load_s,
                "passages_per_s": m.rates,
                "query_ms_p50": percentile(m.latencies_ms, 50),
                "query_ms_p95": percentile(m.latencies_ms, 95),
                "cosine_to_onnx_fp32": agreement(
                    np.concatenate([m.vectors[n] for n in names]),
                    np.concatenate([baseline.vectors[n] for n in names]),
                ),
                "ndcg_at_10": m.ndcg,
            }
            for runtime, m in results.items()
        },
    }


if __name__ == "__main__":
    main()
