"""Scores that mean something: the cosine → relevance calibration and the default similarity floor, by
cross-validation across collections, offline, on the real engine.

    python bench/relevance.py [--collections scifact:train jsquad:dev] [--ood bench/data/out_of_domain.jsonl]

Each collection is chunked and embedded as bench/embedded.py does (cached), written into a Qdrant Edge index
through the retriever's adapter with the version 2 analyzer (bench/fusion.py's `build_index`), and every query
is searched as a KB with the default settings searches: both legs 12 × 7 = 84 candidates deep, DBSF, the
answer's 12 passages. Each passage of the answer gets the relevance the retriever gives it
(ragkb_retriever.searching.relevance: its dense cosine, or the dense leg's lowest for a passage only the
keyword leg found). The out-of-domain questions (bench/data/out_of_domain.jsonl: 30 English, 30 Japanese,
written for this, about things neither collection holds) are searched in every collection the same way.

- Calibration: a logistic P(relevant | cosine) fitted on every question's 100 nearest passages (relevant: the
  passage's document is in the question's qrels), each collection weighing the same.
- Floor, never chosen on the queries it is scored on: leave one collection out, the floor is the highest
  (tried at cosines 0.700–0.945 in steps of 0.005, each through the calibration) whose recall@10 loss on the
  other collection stays under `--budget` (0.005, half the target 0.01, for margin); it is then scored on
  the held-out collection: its recall@10 loss, and the
  share of out-of-domain questions left with no passage at or above it. The default is the same rule applied
  to every collection at once; its held-out figures are the folds'.

recall@10: the answer's passages reduced to documents in rank order, the first 10, the share of the
question's relevant documents among them (averaged over questions).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import REPO, read_jsonl, save_result
from embedded import Collection, embedder, load
from fusion import Config, build_index, keyword_encoder
from numpy.typing import NDArray

from ragkb_core.contracts import ScopeFilter
from ragkb_core.fusion import relevance
from ragkb_core.kb_settings import KbRetrieval, RelevanceCalibration
from ragkb_retriever.searching import qdrant_rrf_k

DEFAULTS = KbRetrieval()
DEPTH = DEFAULTS.top_k * DEFAULTS.candidate_multiplier
ANSWER = DEFAULTS.max_blocks
FIT_DEPTH = 100
OOD = REPO / "bench" / "data" / "out_of_domain.jsonl"
# Floors are tried at these cosines (through the calibration in use): steps of 0.01 *relevance* were too
# coarse, since an out-of-domain question's best passage sits far in the logistic's tail (relevance 0.01 is
# already a cosine of ~0.85, which costs JSQuAD 0.06 recall@10), so the rule chose no floor at all.
FLOOR_COSINES = np.round(np.arange(0.70, 0.95, 0.005), 3)


@dataclass
class Answer:
    """One question's answer as the service ranks it: its documents in order and each passage's cosine."""

    documents: list[str]
    cosines: NDArray[np.float64]


@dataclass
class Searched:
    collection: Collection
    answers: list[Answer]
    ood: dict[str, list[Answer]]  # by language
    fit_cosines: NDArray[np.float64]
    fit_relevant: NDArray[np.float64]


def answer_of(found: Any, passages: list[Any]) -> Answer:
    dense = {hit.id: hit.score for hit in found.dense}
    lowest = found.dense[-1].score if found.dense else 0.0
    fused = found.fused[:ANSWER]
    return Answer(
        documents=[passages[hit.payload["passage"]].document_id for hit in fused],
        cosines=np.array([dense.get(hit.id, lowest) for hit in fused], dtype=np.float64),
    )


def search_collection(collection: Collection, ood: list[dict[str, str]]) -> Searched:
    config = Config("v2", 1, "dbsf", 1.0, 0, DEPTH)
    encoder = keyword_encoder(config)
    ood_vectors = np.array([embedder().embed_query(q["text"]) for q in ood], dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="ragkb-relevance-") as root:
        index = build_index(Path(root), collection, encoder, 1)

        def run(vector: NDArray[np.float32], text: str) -> Answer:
            found = index.search(
                "bench", vector.tolist(), encoder.encode_query(text), ScopeFilter(), ANSWER, DEPTH, qdrant_rrf_k(60),
                fusion="dbsf",
            )  # fmt: skip
            return answer_of(found, collection.passages)

        answers = [run(v, q["text"]) for v, q in zip(collection.query_vectors, collection.queries, strict=True)]
        by_language: dict[str, list[Answer]] = {}
        for vector, question in zip(ood_vectors, ood, strict=True):
            by_language.setdefault(question["lang"], []).append(run(vector, question["text"]))
        index.close()
    cosines, relevant = fit_sample(collection)
    return Searched(collection, answers, by_language, cosines, relevant)


def fit_sample(collection: Collection) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every question's FIT_DEPTH nearest passages: their cosine, and whether their document is relevant."""
    similarities = collection.query_vectors @ collection.passage_vectors.T
    nearest = np.argsort(-similarities, axis=1)[:, :FIT_DEPTH]
    cosines, relevant = [], []
    for row, query in enumerate(collection.queries):
        qrels = collection.qrels[query["_id"]]
        for passage in nearest[row]:
            cosines.append(float(similarities[row, passage]))
            relevant.append(1.0 if qrels.get(collection.passages[passage].document_id, 0) > 0 else 0.0)
    return np.array(cosines), np.array(relevant)


def fit_logistic(samples: list[tuple[NDArray[np.float64], NDArray[np.float64]]]) -> RelevanceCalibration:
    """P(relevant | cosine) = 1 / (1 + exp(−s (cosine − m))) by Newton's method, each sample weighing the same."""
    x = np.concatenate([c for c, _ in samples])
    y = np.concatenate([r for _, r in samples])
    weights = np.concatenate([np.full(len(c), 1.0 / len(c)) for c, _ in samples])
    features = np.stack([np.ones_like(x), x], axis=1)
    beta = np.zeros(2)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(features @ beta)))
        gradient = features.T @ (weights * (y - p))
        hessian = (features * (weights * p * (1 - p))[:, None]).T @ features
        beta += np.linalg.solve(hessian + 1e-9 * np.eye(2), gradient)
    steepness = float(beta[1])
    return RelevanceCalibration(midpoint=round(-float(beta[0]) / steepness, 4), steepness=round(steepness, 2))


def recall_at_10(searched: Searched, calibration: RelevanceCalibration, floor: float) -> float:
    values = []
    for answer, query in zip(searched.answers, searched.collection.queries, strict=True):
        relevant = {doc for doc, grade in searched.collection.qrels[query["_id"]].items() if grade > 0}
        keep = relevances(answer.cosines, calibration) >= floor
        kept = [doc for doc, kept_one in zip(answer.documents, keep, strict=True) if kept_one]
        top = list(dict.fromkeys(kept))[:10]
        values.append(len(relevant & set(top)) / len(relevant) if relevant else 0.0)
    return statistics.fmean(values)


def relevances(cosines: NDArray[np.float64], calibration: RelevanceCalibration) -> NDArray[np.float64]:
    """The retriever's relevance of each cosine (ragkb_retriever.searching.relevance), vectorised."""
    values = 1.0 / (1.0 + np.exp(np.minimum(-calibration.steepness * (cosines - calibration.midpoint), 700.0)))
    assert len(cosines) == 0 or abs(values[0] - relevance(float(cosines[0]), calibration)) < 1e-9
    return values


def empty_share(answers: list[Answer], calibration: RelevanceCalibration, floor: float) -> float:
    """The share of questions whose answer keeps no passage at or above the floor."""
    return statistics.fmean(0.0 if (relevances(a.cosines, calibration) >= floor).any() else 1.0 for a in answers)


def highest_floor(searched: list[Searched], calibration: RelevanceCalibration, budget: float) -> float:
    """The highest floor whose recall@10 loss stays under `budget` on every given collection."""
    chosen = 0.0
    baselines = [recall_at_10(s, calibration, 0.0) for s in searched]
    for floor in relevances(FLOOR_COSINES.astype(np.float64), calibration):
        if all(
            base - recall_at_10(s, calibration, floor) < budget for s, base in zip(searched, baselines, strict=True)
        ):
            chosen = float(f"{floor:.4g}")
        else:
            break
    return chosen


def scored(
    searched: Searched, everything: list[Searched], calibration: RelevanceCalibration, floor: float
) -> dict[str, Any]:
    base = recall_at_10(searched, calibration, 0.0)
    ood = {
        f"{s.collection.label}/{language}": round(empty_share(answers, calibration, floor), 3)
        for s in everything
        for language, answers in s.ood.items()
    }
    return {
        "floor": floor,
        "recall@10": round(base, 4),
        "recall@10_with_floor": round(recall_at_10(searched, calibration, floor), 4),
        "recall@10_loss": round(base - recall_at_10(searched, calibration, floor), 4),
        "out_of_domain_empty": ood,
    }


def cosine_floors(searched: Searched, everything: list[Searched]) -> list[dict[str, Any]]:
    """A plain cosine floor swept (a step at the cosine: steepness 1000 around it, floor 0.5): the trade-off
    itself, free of any calibration."""
    rows = []
    for cosine in np.round(np.arange(0.78, 0.871, 0.005), 3):
        step = RelevanceCalibration(midpoint=float(cosine), steepness=1000)
        rows.append({"cosine": float(cosine), **scored(searched, everything, step, 0.5)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--ood", type=Path, default=OOD)
    parser.add_argument("--budget", type=float, default=0.005)
    args = parser.parse_args()
    ood = list(read_jsonl(args.ood))
    searched = [search_collection(load(spec), ood) for spec in args.collections]
    calibration = fit_logistic([(s.fit_cosines, s.fit_relevant) for s in searched])
    folds = []
    for held_out in searched if len(searched) > 1 else ():
        others = [s for s in searched if s is not held_out]
        fold_calibration = fit_logistic([(s.fit_cosines, s.fit_relevant) for s in others])
        floor = highest_floor(others, fold_calibration, args.budget)
        folds.append({"held_out": held_out.collection.label, "calibration": fold_calibration.model_dump(),
                      **scored(held_out, searched, fold_calibration, floor)})  # fmt: skip
    default_floor = highest_floor(searched, calibration, args.budget)
    result = {
        "calibration": calibration.model_dump(),
        "default_floor": default_floor,
        "folds": folds,
        "default": {s.collection.label: scored(s, searched, calibration, default_floor) for s in searched},
        "cosine_floors": {s.collection.label: cosine_floors(s, searched) for s in searched},
        "ood_questions": {language: sum(1 for q in ood if q["lang"] == language) for language in ("en", "ja")},
        "settings": {"depth": DEPTH, "answer": ANSWER, "fusion": "dbsf", "budget": args.budget},
    }
    save_result("relevance", result)
    print(result)


if __name__ == "__main__":
    main()
