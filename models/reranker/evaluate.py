"""Step 5 of the reranker recipe: replay reranking on held-out questions and choose how much of it to trust.

    python models/reranker/evaluate.py [--model <the packaged reranker folder>] [--data var/reranker/data]

Each dev group (questions never trained on; see prepare.py) carries ragkb's whole hybrid list for its question,
fused scores and relevance included. This scores the list with the exported reranker and reports nDCG@10 and
MRR@10 of: the hybrid order alone, the reranker's order alone, and the blend the retriever computes
(`ragkb_models.cross_encoder.blend_scores`) for a range of reranker weights. The weight with the best dev nDCG@10
is the one to ship as the default `rerank_weight`; SciFact and JSQuAD (bench/quality.py) then measure it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from ragkb_models.cross_encoder import OnnxCrossEncoder, blend_scores, packaged_reranker_folder

REPO = Path(__file__).resolve().parents[2]
MAX_LENGTH = 256
DEPTH = 10
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def read_dev(data: Path) -> list[dict[str, Any]]:
    with (data / "dev.jsonl").open(encoding="utf-8") as handle:
        groups = [json.loads(line) for line in handle if line.strip()]
    return [group for group in groups if group.get("candidates")]


def ndcg_and_rr(order: list[int], relevant: list[bool]) -> tuple[float, float]:
    """Binary-relevance nDCG@DEPTH and reciprocal rank@DEPTH of one ranked list (indices into `relevant`)."""
    gains = [1.0 / math.log2(rank + 2) for rank, index in enumerate(order[:DEPTH]) if relevant[index]]
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(DEPTH, sum(relevant))))
    first = next((rank for rank, index in enumerate(order[:DEPTH]) if relevant[index]), None)
    return (sum(gains) / ideal if ideal else 0.0), (1.0 / (first + 1) if first is not None else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=packaged_reranker_folder())
    parser.add_argument("--data", type=Path, default=REPO / "var" / "reranker" / "data")
    parser.add_argument("--out", type=Path, default=REPO / "var" / "reranker" / "evaluate.json")
    args = parser.parse_args()
    encoder = OnnxCrossEncoder(args.model, MAX_LENGTH)
    groups = read_dev(args.data)
    started = time.perf_counter()
    scored = []
    for group in groups:
        candidates = group["candidates"]
        logits = encoder.logits([(group["query"], c["text"]) for c in candidates], batch_size=16)
        rerank = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).tolist()
        scored.append(([c["fused"] for c in candidates], rerank, [c["relevant"] for c in candidates], group["lang"]))
    seconds = time.perf_counter() - started
    report: dict[str, Any] = {"dev_groups": len(groups), "scoring_s": round(seconds, 1)}
    for lang in ("all", "ja", "en"):
        rows = [row for row in scored if lang in ("all", row[3])]
        if not rows:
            continue
        report[lang] = {"questions": len(rows), "hybrid": _metrics(rows, None)}
        for weight in WEIGHTS:
            report[lang][f"blend_{weight:.1f}"] = _metrics(rows, weight)
    best = max(WEIGHTS, key=lambda w: report["all"][f"blend_{w:.1f}"]["ndcg@10"])
    report["best_weight"] = best
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


def _metrics(rows: list[tuple[list[float], list[float], list[bool], str]], weight: float | None) -> dict[str, float]:
    ndcgs, rrs = [], []
    for fused, rerank, relevant, _ in rows:
        scores = fused if weight is None else blend_scores(rerank, fused, weight)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        ndcg, rr = ndcg_and_rr(order, relevant)
        ndcgs.append(ndcg)
        rrs.append(rr)
    return {"ndcg@10": round(float(np.mean(ndcgs)), 4), "mrr@10": round(float(np.mean(rrs)), 4)}


if __name__ == "__main__":
    main()
