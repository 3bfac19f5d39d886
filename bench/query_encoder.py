"""The query encoder alone: CPU per query and what int8 query graphs do to dense retrieval, against float32.

    python bench/query_encoder.py [--corpora scifact:train jsquad:dev] [--graphs fp32 int8 ...] [--max-queries N]

For each corpus, the passage vectors are the float32 ones every system in bench/peers.py uses (one vector per
document, `title\\ntext`, cached by bench/peer_vectors.py), as the worker embeds passages. Each query is embedded
by the packaged e5 on one ONNX Runtime thread, a batch of one, as the retriever does, once per query graph:

- fp32: the float32 graph (the default);
- int8: the passage int8 graph (`chunking.passage_precision=int8`; before issue 20 also the query int8 graph):
  every MatMul, the fused attention's Q/K/V projection and the embedding tables in int8;
- int8-mixed: the retriever's int8 query graph (`RAGKB_RETRIEVER__QUERY_PRECISION=int8-mixed`, onnx_encoder.MIXED_INT8),
  also the graph of `chunking.passage_precision=int8-mixed`;
- int8-block: the blockwise int8 graph (ragkb_models.onnx_encoder.BLOCK_INT8), `passage_precision=int8-block` and
  `RAGKB_RETRIEVER__QUERY_PRECISION=int8-block`;
- the candidate recipes of CANDIDATES, built here from the float32 graph into the bench cache (how the query
  recipe was chosen; README, Benchmarks).

Each query is timed by the thread's CPU clock (what one query costs a core, much less moved by other load than
wall time); the documents are ranked by exact cosine and scored (nDCG@10, Recall@100) against the qrels; Δ nDCG@10
against fp32 comes with the paired bootstrap 95 % interval the tune job uses.

This isolates the query encoder: the same passages, the same exact ranking, only the query vector differs.
It is not bench/quality.py, which scores every search mode of a running ragkb (chunks, BM25, fusion);
run that too before switching int8 queries on (README, Benchmarks).

    python bench/query_encoder.py --sensitivity

ranks the FFN down-projections: each layer's alone in int8, the cosine of 200 training questions' vectors
(PubMedQA, JaQuAD train) to float32. Results: bench/results/query-encoder.json and .md
(query-encoder-sensitivity.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import DATA, ndcg_at_k, percentile, read_jsonl, read_qrels, save_result
from numpy.typing import NDArray
from peer_vectors import CACHE, corpus_documents, passage_vectors

from ragkb_core.settings import EmbeddingSettings
from ragkb_core.tuning import paired_bootstrap_interval
from ragkb_models import Embedder, convert_e5, load_embedder
from ragkb_models.embedder import onnx_embedder
from ragkb_models.onnx_encoder import Int8Recipe, ensure_onnx_model, quantize_int8

DEPTH = 100
TRAINING = DATA / "training"
WARM_UP_QUERIES = 20
# Candidate recipes of the int8 query graph, each built from the float32 graph like the passages' int8 graph
# (every MatMul, the attention's Q/K/V projection and the embedding tables) but for the MatMuls kept in float32:
# FFN down-projections (`output.dense`, not the attention's `attention.output.dense`), the ones that moved the
# query vectors most when quantised alone (`--sensitivity`, on training questions). int8-mixed is layers 0, 4, 5.
CANDIDATES: dict[str, Int8Recipe] = {
    "int8 ffn-down-4-fp32": Int8Recipe(float_weights=(r"encoder\.layer\.4\.output\.dense\.weight",)),
    "int8 ffn-down-fp32": Int8Recipe(float_weights=(r"encoder\.layer\.\d+\.output\.dense\.weight",)),
}
BACKENDS = {"fp32": "onnx", "int8": "onnx-int8", "int8-mixed": "onnx-int8-mixed", "int8-block": "onnx-int8-block"}


def query_embedder(graph: str) -> Embedder:
    settings = EmbeddingSettings(threads=1)
    if graph in BACKENDS:
        # model_copy skips validation: EmbeddingSettings.backend lists the worker's backends only.
        return load_embedder(settings.model_copy(update={"backend": BACKENDS[graph]}))
    return recipe_embedder(graph, CANDIDATES[graph])


def recipe_embedder(name: str, recipe: Int8Recipe) -> Embedder:
    """The packaged e5 on a graph quantised by `recipe`, built into the bench cache once per name and recipe."""
    settings = EmbeddingSettings(threads=1)
    folder = convert_e5(settings.cache_dir)
    digest = hashlib.sha256(repr(recipe).encode()).hexdigest()[:12]
    path = CACHE / "query-graphs" / f"{name.replace(' ', '-')}-{digest}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        quantize_int8(ensure_onnx_model(folder, "fp32"), path, recipe)
    return onnx_embedder(settings, folder, path)


def training_questions(per_set: int, seed: int = 20) -> list[str]:
    """Questions of the training data (never the evaluation queries): PubMedQA's (English, biomedical) and
    JaQuAD train's (Japanese Wikipedia), `per_set` of each, drawn at random."""
    rng = random.Random(seed)
    pubmed = [q["QUESTION"] for q in json.loads((TRAINING / "pubmedqa" / "ori_pqal.json").read_text()).values()]
    jaquad = [
        qa["question"]
        for path in sorted((TRAINING / "jaquad_train").glob("*.json"))[:3]
        for article in json.loads(path.read_text())["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    return rng.sample(pubmed, per_set) + rng.sample(jaquad, per_set)


def sensitivity(layers: int = 12) -> dict[str, Any]:
    """1 − mean cosine to float32 of the training questions' vectors with one layer's FFN down-projection alone
    in int8, layer by layer: which MatMuls the int8 query graph keeps in float32."""
    questions = training_questions(100)
    reference = np.asarray([query_embedder("fp32").embed_query(q) for q in questions])
    loss = {}
    for layer in range(layers):
        # Every other MatMul stays float32 (the negative lookahead matches every weight but this one).
        others = rf"(?!encoder\.layer\.{layer}\.output\.dense\.weight$).*"
        embedder = recipe_embedder(f"only-ffn-down-{layer}", Int8Recipe(op_types=("MatMul",), float_weights=(others,)))
        vectors = np.asarray([embedder.embed_query(q) for q in questions])
        loss[layer] = round(float(1 - np.sum(reference * vectors, axis=1).mean()), 6)
        print(f"layer {layer}: FFN down-projection alone in int8, 1 - mean cosine {loss[layer]}", flush=True)
    return {"questions": len(questions), "one_minus_mean_cosine": loss}


def embed_timed(embed: Callable[[str], list[float]], texts: list[str]) -> tuple[NDArray[np.float32], list[float]]:
    for text in texts[:WARM_UP_QUERIES]:
        embed(text)
    cpu_ms, vectors = [], []
    for text in texts:
        started = time.thread_time()
        vectors.append(embed(text))
        cpu_ms.append((time.thread_time() - started) * 1000)
    return np.asarray(vectors, dtype=np.float32), cpu_ms


def scores(
    ranked: NDArray[np.int64], ids: list[str], qrels: dict[str, dict[str, int]], qids: list[str]
) -> tuple[list[float], list[float]]:
    ndcg, recall = [], []
    for qid, row in zip(qids, ranked, strict=True):
        found = [ids[i] for i in row]
        relevant = {d for d, g in qrels[qid].items() if g > 0}
        ndcg.append(ndcg_at_k(found, qrels[qid]))
        recall.append(len(set(found) & relevant) / max(1, len(relevant)))
    return ndcg, recall


def evaluate(spec: str, graphs: list[str], max_queries: int | None) -> dict[str, Any]:
    name, split = spec.split(":")
    ids, texts = corpus_documents(name)
    passages = passage_vectors(name, texts)
    qrels = read_qrels(DATA / name / "qrels" / f"{split}.tsv")
    queries = [(q["_id"], q["text"]) for q in read_jsonl(DATA / name / "queries.jsonl") if q["_id"] in qrels]
    queries = queries[:max_queries]
    qids = [qid for qid, _ in queries]
    rows, reference = [], None
    for graph in graphs:
        vectors, cpu_ms = embed_timed(query_embedder(graph).embed_query, [text for _, text in queries])
        ranked = np.argsort(-(vectors @ passages.T), axis=1)[:, :DEPTH]
        ndcg, recall = scores(ranked, ids, qrels, qids)
        if reference is None:
            reference = (vectors, ndcg)
        row = {
            "graph": graph,
            "ndcg@10": round(statistics.fmean(ndcg), 4),
            "recall@100": round(statistics.fmean(recall), 4),
            "cpu_ms_p50": round(statistics.median(cpu_ms), 2),
            "cpu_ms_p95": round(percentile(cpu_ms, 95), 2),
        }
        if graph != graphs[0]:
            row |= against_reference(reference, vectors, ndcg)
        rows.append(row)
        print(name, row, flush=True)
    return {"corpus": name, "split": split, "documents": len(ids), "queries": len(queries), "rows": rows}


def against_reference(
    reference: tuple[NDArray[np.float32], list[float]], vectors: NDArray[np.float32], ndcg: list[float]
) -> dict[str, Any]:
    """Δ nDCG@10 against the first graph (fp32) with its paired bootstrap 95 % interval, and the cosine of
    each query's vector to the reference one."""
    differences = [o - b for b, o in zip(reference[1], ndcg, strict=True)]
    low, high = paired_bootstrap_interval(differences, seed=20)
    cosines = np.sum(reference[0] * vectors, axis=1)
    return {
        "delta": round(statistics.fmean(differences), 4),
        "ci": [round(low, 4), round(high, 4)],
        "cosine_min": round(float(cosines.min()), 4),
        "cosine_p50": round(float(np.median(cosines)), 4),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "Dense retrieval with float32 passages, exact cosine; the query encoder on one thread, CPU ms per query.",
        "",
        "| corpus | queries | query graph | nDCG@10 | Δ [95 % CI] | Recall@100 | CPU ms p50 / p95 "
        "| cosine to fp32 min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for row in result["rows"]:
            delta = f"{row['delta']:+.4f} [{row['ci'][0]:+.4f}, {row['ci'][1]:+.4f}]" if "delta" in row else ""
            lines.append(
                f"| {result['corpus']} {result['split']} | {result['queries']} | {row['graph']} | {row['ndcg@10']} | "
                f"{delta} | {row['recall@100']} | {row['cpu_ms_p50']} / {row['cpu_ms_p95']} | "
                f"{row.get('cosine_min', '')} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["scifact:train", "jsquad:dev"])
    # The first graph is the reference of Δ and of the cosines.
    parser.add_argument("--graphs", nargs="+", default=[*BACKENDS, *CANDIDATES])
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--sensitivity", action="store_true", help="rank the FFN down-projections instead")
    args = parser.parse_args()
    if args.sensitivity:
        save_result("query-encoder-sensitivity", sensitivity())
        return
    results = [evaluate(spec, args.graphs, args.max_queries) for spec in args.corpora]
    save_result("query-encoder", {"corpora": results}, markdown(results))


if __name__ == "__main__":
    main()
