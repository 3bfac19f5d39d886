"""Scores that mean something: the relevance calibration (cosine and keyword coverage) and the default
similarity floor, by cross-validation across collections, offline, on the real engine.

    python bench/relevance.py [--collections scifact:train jsquad:dev] [--ood bench/data/out_of_domain.jsonl]
    python bench/relevance.py --paraphrases     (what the shipped floor costs questions sharing no word with answers)

Each collection is chunked and embedded as bench/embedded.py does (cached), written into a Qdrant Edge index
through the retriever's adapter with the version 2 analyzer (bench/fusion.py's `build_index`), and every query
is searched as a KB with the default settings searches: both legs 12 × 7 = 84 candidates deep, DBSF, the
answer's 12 passages. Each passage of the answer gets what the retriever's relevance reads: its dense cosine (or
the dense leg's lowest for a passage only the keyword leg found) and the question's keyword coverage of it
(ragkb_retriever.coverage.KeywordCoverage on the same index: the IDF-weighted share of the question's terms the
passage holds). The out-of-domain questions (bench/data/out_of_domain.jsonl: 30 English, 30 Japanese, written
for this, about things neither collection holds) are searched in every collection the same way.

- Evidence: z = cosine + w × (coverage − c0), for each coverage weight w of WEIGHTS (0: the cosine alone); c0,
  the neutral coverage an external store's passage is given, is the mean coverage of the fit sample.
- Calibration: a logistic P(relevant | z) fitted on every question's answer passages (relevant: the passage's
  document is in the question's qrels), each collection weighing the same.
- Floor, never chosen on the queries it is scored on: leave one collection out, the floor is the highest
  (tried at z 0.700–0.945 in steps of 0.0025, each through the calibration) whose recall@10 loss on the other
  collection stays under `--budget` (0.005, half the target 0.01, for margin); it is then scored on the
  held-out collection: its recall@10 loss, and the share of out-of-domain questions left with no passage at
  or above it. The default is the same rule applied to every collection at once.
- The weight w is chosen on half of the out-of-domain questions (odd numbers: the highest share left empty,
  the smaller weight on a tie) and reported on the other half; the collections' own queries only set floors.

It also times what the coverage adds to a question (p50, one thread): the engine's search, the coverage with the
IDFs cached as the run left them, and with none cached (every 10th question).

recall@10: the answer's passages reduced to documents in rank order, the first 10, the share of the
question's relevant documents among them (averaged over questions).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import REPO, read_jsonl, save_result
from embedded import Collection, Passage, embedder, load
from fusion import KB, Config, build_index, keyword_encoder
from numpy.typing import NDArray

from ragkb_core.contracts import ScopeFilter
from ragkb_core.fusion import relevance
from ragkb_core.ids import point_id
from ragkb_core.kb_settings import (
    COVERAGE_MIN_RELEVANCE,
    PACKAGED_E5_COVERAGE_RELEVANCE,
    PACKAGED_E5_RELEVANCE,
    KbRetrieval,
    RelevanceCalibration,
)
from ragkb_retriever.coverage import KeywordCoverage
from ragkb_retriever.searching import qdrant_rrf_k

DEFAULTS = KbRetrieval()
DEPTH = DEFAULTS.top_k * DEFAULTS.candidate_multiplier
ANSWER = DEFAULTS.max_blocks
OOD = REPO / "bench" / "data" / "out_of_domain.jsonl"
# Every this many questions, the coverage is also timed with nothing cached (a KB's first questions).
COLD_EVERY = 10
# The floor recommended with the built-in cosine calibration (PACKAGED_E5_RELEVANCE; README, a cosine of ~0.815).
COSINE_MIN_RELEVANCE = 0.00045
WEIGHTS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.125, 0.15, 0.2)
# Floors are tried at these evidence values z (through the calibration in use): steps of 0.01 *relevance* were
# too coarse, since an out-of-domain question's best passage sits far in the logistic's tail.
FLOOR_EVIDENCE = np.round(np.arange(0.70, 0.95, 0.0025), 4)


@dataclass
class Answer:
    """One question's answer as the service ranks it: its documents in order, each passage's cosine and the
    question's keyword coverage of it."""

    documents: list[str]
    cosines: NDArray[np.float64]
    coverages: NDArray[np.float64]
    relevant: NDArray[np.float64]  # 1 where the passage's document is relevant to the question
    search_ms: float  # the engine's search (both legs, fused)
    coverage_ms: float  # the coverage of the answered passages, IDFs from the cache as the run left it
    cold_coverage_ms: float | None  # the same with no IDF cached (every COLD_EVERY-th question)


@dataclass
class Searched:
    collection: Collection
    answers: list[Answer]
    ood: dict[str, list[Answer]]  # by language; each answer's question number in ood_numbers
    ood_numbers: dict[str, list[int]]


def search_collection(collection: Collection, ood: list[dict[str, str]]) -> Searched:
    config = Config("v2", 1, "dbsf", 1.0, 0, DEPTH)
    encoder = keyword_encoder(config)
    ood_vectors = np.array([embedder().embed_query(q["text"]) for q in ood], dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="ragkb-relevance-") as root:
        index = build_index(Path(root), collection, encoder, 1)
        coverage = KeywordCoverage(index)
        asked = [0]

        def run(vector: NDArray[np.float32], text: str, relevant: set[str]) -> Answer:
            terms = encoder.encode_query(text)
            started = time.perf_counter()
            found = index.search(
                "bench", vector.tolist(), terms, ScopeFilter(), ANSWER, DEPTH, qdrant_rrf_k(60), fusion="dbsf",
            )  # fmt: skip
            searched = time.perf_counter()
            dense = {hit.id: hit.score for hit in found.dense}
            lowest = found.dense[-1].score if found.dense else 0.0
            fused = found.fused[:ANSWER]
            point_ids = [hit.id for hit in fused]
            covered = coverage.of("bench", None, terms.indices, point_ids)
            covering = time.perf_counter()
            cold = None
            asked[0] += 1
            if asked[0] % COLD_EVERY == 0:
                KeywordCoverage(index).of("bench", None, terms.indices, point_ids)
                cold = (time.perf_counter() - covering) * 1000
            documents = [collection.passages[hit.payload["passage"]].document_id for hit in fused]
            return Answer(
                documents=documents,
                cosines=np.array([dense.get(hit.id, lowest) for hit in fused], dtype=np.float64),
                coverages=np.array([covered[hit.id] for hit in fused], dtype=np.float64),
                relevant=np.array([1.0 if doc in relevant else 0.0 for doc in documents]),
                search_ms=(searched - started) * 1000,
                coverage_ms=(covering - searched) * 1000,
                cold_coverage_ms=cold,
            )

        answers = [
            run(v, q["text"], relevant_documents(collection, q["_id"]))
            for v, q in zip(collection.query_vectors, collection.queries, strict=True)
        ]
        by_language: dict[str, list[Answer]] = {}
        numbers: dict[str, list[int]] = {}
        for vector, question in zip(ood_vectors, ood, strict=True):
            by_language.setdefault(question["lang"], []).append(run(vector, question["text"], set()))
            numbers.setdefault(question["lang"], []).append(int(question["_id"].split("-")[-1]))
        index.close()
    return Searched(collection, answers, by_language, numbers)


def relevant_documents(collection: Collection, query_id: str) -> set[str]:
    return {doc for doc, grade in collection.qrels[query_id].items() if grade > 0}


@dataclass(frozen=True)
class Evidence:
    """z = cosine + weight × (coverage − neutral)."""

    weight: float
    neutral: float

    def of(self, answer: Answer) -> NDArray[np.float64]:
        return answer.cosines + self.weight * (answer.coverages - self.neutral)


def evidence_for(searched: list[Searched], weight: float) -> Evidence:
    coverages = np.concatenate([a.coverages for s in searched for a in s.answers])
    return Evidence(weight, round(float(coverages.mean()), 4) if weight > 0 else 0.0)


def fit_logistic(searched: list[Searched], evidence: Evidence) -> RelevanceCalibration:
    """P(relevant | z) = 1 / (1 + exp(−s (z − m))) by Newton's method over the answers' passages, each collection
    weighing the same."""
    x = np.concatenate([evidence.of(a) for s in searched for a in s.answers])
    y = np.concatenate([a.relevant for s in searched for a in s.answers])
    weights = np.concatenate([np.full(sum(len(a.cosines) for a in s.answers), 1.0 / len(s.answers)) for s in searched])
    weights = weights / weights.sum()
    features = np.stack([np.ones_like(x), x], axis=1)
    beta = np.zeros(2)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(features @ beta)))
        gradient = features.T @ (weights * (y - p))
        hessian = (features * (weights * p * (1 - p))[:, None]).T @ features
        beta += np.linalg.solve(hessian + 1e-9 * np.eye(2), gradient)
    steepness = float(beta[1])
    return RelevanceCalibration(
        midpoint=round(-float(beta[0]) / steepness, 4),
        steepness=round(steepness, 2),
        coverage_weight=evidence.weight,
        coverage_neutral=evidence.neutral,
    )


def relevances(answer: Answer, calibration: RelevanceCalibration) -> NDArray[np.float64]:
    """The retriever's relevance of each passage (ragkb_core.fusion.relevance), vectorised, rounded as it does."""
    z = answer.cosines + calibration.coverage_weight * (answer.coverages - calibration.coverage_neutral)
    values = 1.0 / (1.0 + np.exp(np.minimum(-calibration.steepness * (z - calibration.midpoint), 700.0)))
    if len(values):
        served = relevance(float(answer.cosines[0]), calibration, float(answer.coverages[0]))
        assert abs(values[0] - served) < 1e-9
    return np.round(values, 6)


def recall_at_10(searched: Searched, calibration: RelevanceCalibration, floor: float) -> float:
    values = []
    for answer, query in zip(searched.answers, searched.collection.queries, strict=True):
        relevant = relevant_documents(searched.collection, query["_id"])
        keep = relevances(answer, calibration) >= floor
        kept = [doc for doc, kept_one in zip(answer.documents, keep, strict=True) if kept_one]
        top = list(dict.fromkeys(kept))[:10]
        values.append(len(relevant & set(top)) / len(relevant) if relevant else 0.0)
    return statistics.fmean(values)


def empty_share(answers: list[Answer], calibration: RelevanceCalibration, floor: float) -> float:
    """The share of questions whose answer keeps no passage at or above the floor."""
    if not answers:
        return 0.0
    return statistics.fmean(0.0 if (relevances(a, calibration) >= floor).any() else 1.0 for a in answers)


def floor_at(z: float, calibration: RelevanceCalibration) -> float:
    """The relevance of evidence z, as a floor (4 significant digits, rounded down so that z itself passes)."""
    value = 1.0 / (1.0 + np.exp(-calibration.steepness * (z - calibration.midpoint)))
    digits = 4 - int(np.floor(np.log10(value))) - 1
    return float(np.floor(value * 10**digits) / 10**digits)


def highest_floor(searched: list[Searched], calibration: RelevanceCalibration, budget: float) -> float:
    """The highest floor whose recall@10 loss stays under `budget` on every given collection."""
    chosen = 0.0
    baselines = [recall_at_10(s, calibration, 0.0) for s in searched]
    for z in FLOOR_EVIDENCE:
        floor = floor_at(float(z), calibration)
        if all(
            base - recall_at_10(s, calibration, floor) < budget for s, base in zip(searched, baselines, strict=True)
        ):
            chosen = floor
        else:
            break
    return chosen


def ood_answers(everything: list[Searched], half: str | None) -> dict[str, list[Answer]]:
    """The out-of-domain answers per collection and language; `half`: "odd" or "even" question numbers only."""
    keep = {"odd": 1, "even": 0}
    return {
        f"{s.collection.label}/{language}": [
            a for a, n in zip(answers, s.ood_numbers[language], strict=True) if half is None or n % 2 == keep[half]
        ]
        for s in everything
        for language, answers in s.ood.items()
    }


def scored(
    searched: Searched, everything: list[Searched], calibration: RelevanceCalibration, floor: float
) -> dict[str, Any]:
    base = recall_at_10(searched, calibration, 0.0)
    with_floor = recall_at_10(searched, calibration, floor)
    return {
        "floor": floor,
        "recall@10": round(base, 4),
        "recall@10_with_floor": round(with_floor, 4),
        "recall@10_loss": round(base - with_floor, 4),
        "out_of_domain_empty": {
            name: round(empty_share(answers, calibration, floor), 3)
            for name, answers in ood_answers(everything, None).items()
        },
    }


def weight_row(searched: list[Searched], weight: float, budget: float) -> dict[str, Any]:
    """One coverage weight: its calibration and default floor on all collections, the out-of-domain share left
    empty on each half, and its leave-one-collection-out folds."""
    evidence = evidence_for(searched, weight)
    calibration = fit_logistic(searched, evidence)
    floor = highest_floor(searched, calibration, budget)
    halves = {
        half: statistics.fmean(empty_share(a, calibration, floor) for a in ood_answers(searched, half).values())
        for half in ("odd", "even")
    }
    folds = []
    for held_out in searched if len(searched) > 1 else ():
        others = [s for s in searched if s is not held_out]
        fold_calibration = fit_logistic(others, evidence_for(others, weight))
        fold_floor = highest_floor(others, fold_calibration, budget)
        folds.append({"held_out": held_out.collection.label, "calibration": fold_calibration.model_dump(),
                      **scored(held_out, searched, fold_calibration, fold_floor)})  # fmt: skip
    return {
        "weight": weight,
        "calibration": calibration.model_dump(),
        "default_floor": floor,
        "ood_empty_odd": round(halves["odd"], 3),
        "ood_empty_even": round(halves["even"], 3),
        "default": {s.collection.label: scored(s, searched, calibration, floor) for s in searched},
        "folds": folds,
    }


def cost(searched: Searched) -> dict[str, float]:
    """What the coverage adds to a question, p50 in ms, beside the engine's search (one thread, offline)."""
    answers = searched.answers
    cold = [a.cold_coverage_ms for a in answers if a.cold_coverage_ms is not None]
    return {
        "search": round(statistics.median(a.search_ms for a in answers), 3),
        "coverage": round(statistics.median(a.coverage_ms for a in answers), 3),
        "coverage_nothing_cached": round(statistics.median(cold), 3) if cold else 0.0,
    }


# Questions that share no word with their answer, in the HR handbook of the tune's e2e test (its own paraphrases,
# tests/e2e/test_tune.py) and across Japanese and English: what a floor costs a KB asked that way.
CROSS_LANGUAGE = {
    "x1": ("how many days of paid holiday", {"kyuka": 1}),
    "x2": ("commuting costs", {"tsukin": 1}),
    "x3": ("経費精算の締め切り", {"expenses": 1}),
    "x4": ("有給休暇は何日ですか", {"leave": 1}),
    "x5": ("ノートパソコンはいつ交換されますか", {"laptops": 1}),
}


def paraphrase_check(calibration: RelevanceCalibration, floor: float) -> list[dict[str, Any]]:
    """Each question's relevant passage in the small handbook: its cosine, the question's keyword coverage of it
    (the retriever's KeywordCoverage on the handbook indexed as a KB) and whether the floor keeps it."""
    import sys

    sys.path.insert(0, str(REPO))
    from tests.e2e.test_tune import DOCS, QUERIES

    questions = {**QUERIES, **CROSS_LANGUAGE}
    handbook = Collection(
        name="handbook",
        split="test",
        passages=[Passage(doc, 0, title, text, f"{title}\n{text}") for doc, (title, text) in DOCS.items()],
        queries=[{"_id": question, "text": text} for question, (text, _) in questions.items()],
        qrels={question: judged for question, (_, judged) in questions.items()},
        passage_vectors=np.array(embedder().embed_passages([f"{t}\n{x}" for t, x in DOCS.values()]), dtype=np.float32),
        query_vectors=np.array([embedder().embed_query(text) for text, _ in questions.values()], dtype=np.float32),
    )
    encoder = keyword_encoder(Config("v2", 1, "dbsf", 1.0, 0, DEPTH))
    row_of = {doc: row for row, doc in enumerate(DOCS)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragkb-paraphrases-") as root:
        index = build_index(Path(root), handbook, encoder, 1)
        coverage = KeywordCoverage(index)
        for query, vector in zip(handbook.queries, handbook.query_vectors, strict=True):
            judged = list(handbook.qrels[query["_id"]])
            points = [point_id(KB, doc, 1, 0) for doc in judged]
            covered = coverage.of(KB, None, encoder.encode_query(query["text"]).indices, points)
            best = max(
                (relevance(float(vector @ handbook.passage_vectors[row_of[doc]]), calibration, covered[point]), doc)
                for doc, point in zip(judged, points, strict=True)
            )
            kind = "cross-language" if query["_id"] in CROSS_LANGUAGE else "paraphrase"
            rows.append({"kind": kind, "id": query["_id"], "text": query["text"], "document": best[1],
                         "relevance": round(best[0], 6), "kept": best[0] >= floor})  # fmt: skip
        index.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--ood", type=Path, default=OOD)
    parser.add_argument("--budget", type=float, default=0.005)
    parser.add_argument(
        "--paraphrases", action="store_true", help="only the paraphrase and cross-language check, at the chosen floor"
    )
    args = parser.parse_args()
    if args.paraphrases:
        # The coverage calibration at its floor, and the built-in cosine one at the floor recommended for it.
        result = {
            "coverage": paraphrase_check(PACKAGED_E5_COVERAGE_RELEVANCE, COVERAGE_MIN_RELEVANCE),
            "cosine_alone": paraphrase_check(PACKAGED_E5_RELEVANCE, COSINE_MIN_RELEVANCE),
        }
        save_result("relevance-paraphrases", result)
        for name, rows in result.items():
            for kind in ("paraphrase", "cross-language"):
                mine = [row for row in rows if row["kind"] == kind]
                print(f"{name} {kind}: kept {sum(row['kept'] for row in mine)} of {len(mine)}")
        return
    ood = list(read_jsonl(args.ood))
    searched = [search_collection(load(spec), ood) for spec in args.collections]
    rows = [weight_row(searched, weight, args.budget) for weight in WEIGHTS]
    # Chosen on the odd half of the out-of-domain questions; the smaller weight wins a tie.
    chosen = max(rows, key=lambda row: (row["ood_empty_odd"], -row["weight"]))
    result = {
        "chosen_weight": chosen["weight"],
        "calibration": chosen["calibration"],
        "default_floor": chosen["default_floor"],
        "weights": rows,
        "ood_questions": {language: sum(1 for q in ood if q["lang"] == language) for language in ("en", "ja")},
        "settings": {"depth": DEPTH, "answer": ANSWER, "fusion": "dbsf", "budget": args.budget},
    }
    result["cost_ms_p50"] = {s.collection.label: cost(s) for s in searched}
    save_result("relevance", result)
    for row in rows:
        folds = " | ".join(
            f"{f['held_out']}: loss {f['recall@10_loss']} ood {f['out_of_domain_empty']}" for f in row["folds"]
        )
        print(f"w {row['weight']}: floor {row['default_floor']} odd {row['ood_empty_odd']} even {row['ood_empty_even']}"
              f" default {[(k, v['recall@10_loss'], v['out_of_domain_empty']) for k, v in row['default'].items()]}"
              f" folds {folds}")  # fmt: skip
    print("chosen", chosen["weight"], chosen["calibration"], chosen["default_floor"])
    print("cost (ms, p50)", result["cost_ms_p50"])


if __name__ == "__main__":
    main()
