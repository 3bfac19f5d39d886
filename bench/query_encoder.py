"""The query encoder alone: CPU per query and what int8 query vectors do to dense retrieval, against float32.

    python bench/query_encoder.py [--corpora scifact:train jsquad:dev] [--max-queries N]

For each corpus, the passage vectors are the float32 ones every system in bench/peers.py uses (one vector per
document, `title\\ntext`, cached by bench/peer_vectors.py), as the worker embeds passages. Each query is embedded
by the retriever's query encoder (one thread, a batch of one) in float32 and in int8 (`RAGKB_RETRIEVER__QUERY_INT8`),
timed by the thread's CPU clock (what one query costs a core, much less moved by other load than wall time);
the documents are ranked by exact cosine and scored (nDCG@10, Recall@100) against the qrels.

This isolates the query encoder: the same passages, the same exact ranking, only the query vector differs.
It is not bench/quality.py, which scores every search mode of a running ragkb (chunks, BM25, fusion);
run that too before switching int8 queries on (README, Benchmarks).

Results: bench/results/query-encoder.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
from common import DATA, ndcg_at_k, percentile, read_jsonl, read_qrels, save_result
from peer_vectors import corpus_documents, passage_vectors

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import load_embedder

DEPTH = 100
PRECISIONS = {"fp32": "onnx", "int8": "onnx-int8"}


def evaluate(spec: str, max_queries: int | None) -> dict[str, Any]:
    name, split = spec.split(":")
    ids, texts = corpus_documents(name)
    passages = passage_vectors(name, texts)
    qrels = read_qrels(DATA / name / "qrels" / f"{split}.tsv")
    queries = [(q["_id"], q["text"]) for q in read_jsonl(DATA / name / "queries.jsonl") if q["_id"] in qrels]
    queries = queries[:max_queries]
    vectors: dict[str, np.ndarray[Any, np.dtype[np.float32]]] = {}
    rows = []
    for precision, backend in PRECISIONS.items():
        embedder = load_embedder(EmbeddingSettings(backend=backend, threads=1))
        for _, text in queries[:20]:
            embedder.embed_query(text)
        cpu_ms = []
        embedded = []
        for _, text in queries:
            started = time.thread_time()
            embedded.append(embedder.embed_query(text))
            cpu_ms.append((time.thread_time() - started) * 1000)
        vectors[precision] = np.asarray(embedded, dtype=np.float32)
        ranked = np.argsort(-(vectors[precision] @ passages.T), axis=1)[:, :DEPTH]
        ndcg = [ndcg_at_k([ids[i] for i in row], qrels[qid]) for (qid, _), row in zip(queries, ranked, strict=True)]
        recall = [
            len({ids[i] for i in row} & {d for d, g in qrels[qid].items() if g > 0})
            / max(1, sum(1 for g in qrels[qid].values() if g > 0))
            for (qid, _), row in zip(queries, ranked, strict=True)
        ]
        rows.append(
            {
                "precision": precision,
                "ndcg@10": round(statistics.fmean(ndcg), 4),
                "recall@100": round(statistics.fmean(recall), 4),
                "cpu_ms_p50": round(statistics.median(cpu_ms), 2),
                "cpu_ms_p95": round(percentile(cpu_ms, 95), 2),
            }
        )
    cosines = np.sum(vectors["fp32"] * vectors["int8"], axis=1)
    return {
        "corpus": name,
        "split": split,
        "documents": len(ids),
        "queries": len(queries),
        "cosine_fp32_int8": {"min": round(float(cosines.min()), 4), "p50": round(float(np.median(cosines)), 4)},
        "rows": rows,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "Dense retrieval with float32 passages, exact cosine; the query encoder on one thread, CPU ms per query.",
        "",
        "| corpus | queries | query encoder | nDCG@10 | Δ nDCG@10 | Recall@100 | CPU ms p50 / p95 | cosine to fp32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        reference = result["rows"][0]["ndcg@10"]
        for row in result["rows"]:
            cosine = "–" if row["precision"] == "fp32" else f"min {result['cosine_fp32_int8']['min']}"
            lines.append(
                f"| {result['corpus']} {result['split']} | {result['queries']} | {row['precision']} | "
                f"{row['ndcg@10']} | {row['ndcg@10'] - reference:+.4f} | {row['recall@100']} | "
                f"{row['cpu_ms_p50']} / {row['cpu_ms_p95']} | {cosine} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--max-queries", type=int, default=None)
    args = parser.parse_args()
    results = [evaluate(spec, args.max_queries) for spec in args.corpora]
    save_result("query-encoder", {"corpora": results}, markdown(results))


if __name__ == "__main__":
    main()
