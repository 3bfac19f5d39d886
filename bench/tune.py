"""The tune endpoint's computation on whole BEIR collections, offline, from the retriever's own legs.

    python bench/tune.py [--collections scifact:train jsquad:dev] [--folds 5] [--seed 21] [--check 200]

What `POST /v1/knowledge-bases/{kb}/tune` does, minus HTTP and Celery: each collection is chunked as the worker
chunks it and embedded once with the packaged e5 (bench/embedded.py, cached); its chunks are written into a
Qdrant Edge index through the retriever's adapter (EdgeIndex) with the default analyzer of a new KB (version 2,
title weight 2), the payload the worker writes (source_id, text); every question's dense and keyword legs are
fetched once from that index as the retriever's legs endpoint fetches them (SearchService.legs: the same
index.search, the same conversion `leg_candidates`), as deep as the deepest candidate reads (12 × 25 = 300);
then ragkb_core.tuning.tune — the very function the worker's tune job runs — scores the 150 settings of the
default search space and the KB's defaults (DBSF, equal weights, 12 × 7 candidates, top_k 12, no floor) by
5-fold cross-validation with a paired-bootstrap 95 % interval of the held-out gain.

`--check N` answers the first N questions through the engine's own search with the default settings (DBSF
fused by Qdrant, top_k 12, 84 candidates a leg) and counts how many equal the answer computed from the legs (up
to the order of equal scores), as the tune job checks its first 20 against the retriever's search.

Differences from the service, stated: documents are written straight into the index (no HTTP, no Celery), so
chunking is the worker's Chunker on the document text parsed as text/plain. The index is optimised (HNSW) before
any search, as the retriever's maintainer optimises a KB past 2,000 points; approximate dense search at 300
candidates may order a question's first 84 otherwise than a search for 84 does, which the engine check counts.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import save_result
from embedded import Collection, load
from fusion import Config, keyword_encoder
from fusion import build_index as fusion_index

from ragkb_analyzer import Bm25Encoder
from ragkb_core.contracts import ScopeFilter
from ragkb_core.fusion import FusionSettings, QueryLegs, answer, same_up_to_ties
from ragkb_core.kb_settings import KbRetrieval
from ragkb_core.settings import EmbeddingSettings
from ragkb_core.tuning import TuneResult, TuneSpace, answer_shape, candidates, leg_depth, tune
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.searching import leg_candidates, qdrant_rrf_k

KB = "0" * 32
# A new KB's analyzer: version 2 words, the title counted twice (KbAnalyzer's defaults).
NEW_KB_ANALYZER = Config("v2", 2, "dbsf", 1.0, 60, 84)


def build_index(root: Path, collection: Collection, encoder: Bm25Encoder) -> EdgeIndex:
    index = fusion_index(root, collection, encoder, NEW_KB_ANALYZER.title_weight, with_text=True, kb=KB)
    # HNSW built now, as the retriever's maintainer builds it for a KB past 2,000 points (optimize_after_points):
    # every search below runs on the index a KB of this size is served from, not half of them before it.
    index.optimize(KB)
    return index


def fetch_legs(index: EdgeIndex, collection: Collection, encoder: Bm25Encoder, depth: int) -> list[QueryLegs]:
    """As SearchService.legs fetches them: both legs `depth` deep, through index.search with payloads."""
    legs = []
    for query, vector in zip(collection.queries, collection.query_vectors, strict=True):
        found = index.search(
            KB, vector.tolist(), encoder.encode_query(query["text"]), ScopeFilter(), 1, depth, qdrant_rrf_k(60)
        )
        legs.append(QueryLegs(dense=leg_candidates(found.dense), keyword=leg_candidates(found.keyword)))
    return legs


def engine_check(index: EdgeIndex, collection: Collection, encoder: Bm25Encoder, legs: list[QueryLegs], n: int) -> int:
    """How many of the first `n` questions the engine's own search (the defaults) answers as computed."""
    current = KbRetrieval()
    shape = answer_shape(current)
    identical = 0
    for position in range(min(n, len(legs))):
        found = index.search(
            KB,
            collection.query_vectors[position].tolist(),
            encoder.encode_query(collection.queries[position]["text"]),
            ScopeFilter(),
            current.top_k,
            current.top_k * current.candidate_multiplier,
            qdrant_rrf_k(current.rrf_k),
            fusion=current.fusion,
        )
        computed = [hit.chunk_id for hit in answer(legs[position], FusionSettings.of(current), shape, None)]
        identical += same_up_to_ties([(hit.id, hit.score) for hit in found.fused], computed)
    return identical


def run(spec: str, folds: int, seed: int, check: int) -> dict[str, Any]:
    collection = load(spec)
    current = KbRetrieval()
    settings = candidates(FusionSettings.of(current), TuneSpace())
    depth = leg_depth(answer_shape(current), settings)
    encoder = keyword_encoder(NEW_KB_ANALYZER)
    calibration = EmbeddingSettings().relevance_of(None)
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ragkb-tune-") as root:
        started = time.perf_counter()
        index = build_index(Path(root), collection, encoder)
        timings["index_s"] = time.perf_counter() - started
        started = time.perf_counter()
        legs = fetch_legs(index, collection, encoder, depth)
        timings["legs_s"] = time.perf_counter() - started
        identical = engine_check(index, collection, encoder, legs, check)
        index.close()
    judgements = [collection.qrels[query["_id"]] for query in collection.queries]
    started = time.perf_counter()
    result = tune(
        current, TuneSpace(), legs, judgements, calibration, folds=folds, seed=seed, question_set_id=collection.label
    )
    timings["scoring_s"] = time.perf_counter() - started
    print(f"{collection.label}: " + ", ".join(f"{name} {value:.1f}" for name, value in timings.items()), flush=True)
    return {
        "collection": collection.label,
        "passages": len(collection.passages),
        "engine_check": {"queries": min(check, len(legs)), "identical": identical},
        "timings_s": {name: round(value, 1) for name, value in timings.items()},
        "result": result.model_dump(mode="json"),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| collection | queries | current nDCG@10 | held-out winner | held-out gain | 95 % CI | better / worse / same "
        "| recommended (all questions) | engine check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        result = TuneResult.model_validate(row["result"])
        held = result.held_out
        check = row["engine_check"]
        lines.append(
            f"| {row['collection']} | {result.queries} | {held.current_ndcg_at_10:.4f} | "
            f"{held.winner_ndcg_at_10:.4f} | {held.gain:+.4f} | [{held.ci_low:+.4f}, {held.ci_high:+.4f}] | "
            f"{held.wins} / {held.losses} / {held.ties} | {result.recommended.label} "
            f"({result.recommended_ndcg_at_10:.4f}) | {check['identical']}/{check['queries']} |"
        )
    lines += ["", "| collection | fold | queries | winner (chosen on the other folds) | winner | current | gain |"]
    lines.append("|---|---|---|---|---|---|---|")
    for row in rows:
        for fold in TuneResult.model_validate(row["result"]).fold_results:
            lines.append(
                f"| {row['collection']} | {fold.fold} | {fold.queries} | {fold.winner.label} | "
                f"{fold.winner_ndcg_at_10:.4f} | {fold.current_ndcg_at_10:.4f} | {fold.gain:+.4f} |"
            )
    seconds = [f"{row['collection']}: {row['timings_s']}" for row in rows]
    return "\n".join([*lines, "", "Seconds: " + "; ".join(seconds)]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--check", type=int, default=200, help="questions checked against the engine's own search")
    args = parser.parse_args()
    rows = [run(spec, args.folds, args.seed, args.check) for spec in args.collections]
    gains = [TuneResult.model_validate(row["result"]).held_out.gain for row in rows]
    print(f"mean held-out gain over the collections: {statistics.fmean(gains):+.4f}")
    save_result("tune", {"folds": args.folds, "seed": args.seed, "collections": rows}, markdown(rows))


if __name__ == "__main__":
    main()
