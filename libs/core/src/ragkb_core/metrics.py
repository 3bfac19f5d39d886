"""Retrieval metrics of a ranked run against graded judgements, computed by ir-measures (trec_eval's code
through pytrec_eval, and ir-measures' own RR@k). The one place they are defined: the api's evaluations and
the worker's re-index quality gate both score with them.

Definitions, the same as bench/quality.py's (common.ndcg_at_k): nDCG@10 with exponential gain 2^grade − 1
and discount log2(rank + 1), the ideal ranking made from every judged document; Recall@k counts documents
with grade ≥ 1 among the first k; MRR@10 is 1 / the rank of the first document with grade ≥ 1 in the first
10, else 0. A judged query the run has no answer for scores 0 on every metric; means are over every
judged query."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import ir_measures

Qrels = Mapping[str, Mapping[str, int]]
Rankings = Mapping[str, Sequence[str]]
NDCG_AT_10 = "ndcg@10"


@dataclass(frozen=True)
class Question:
    query_id: str
    text: str


@dataclass(frozen=True)
class JudgedQuestions:
    """Questions in their given order and, per query id, source_id → grade (0: judged not relevant)."""

    questions: list[Question]
    qrels: dict[str, dict[str, int]]


MRR_AT_10 = "mrr@10"


def recall_name(k: int) -> str:
    return f"recall@{k}"


def metric_names(depth: int) -> list[str]:
    """The metrics an evaluation reports: nDCG@10, Recall@100 and Recall@depth (one when depth is 100), MRR@10."""
    return list(dict.fromkeys([NDCG_AT_10, recall_name(100), recall_name(depth), MRR_AT_10]))


def documents_in_rank_order(source_ids: Iterable[str]) -> list[str]:
    """An answer's passages (their source_ids, best first) reduced to documents, each where its first passage
    ranks: judgements are per document, a search ranks passages."""
    return list(dict.fromkeys(source_ids))


def score_queries(qrels: Qrels, rankings: Rankings, depth: int) -> dict[str, dict[str, float]]:
    """Per judged query, every metric of `metric_names(depth)`; `rankings` are document ids best first."""
    measures = _measures(qrels, depth)
    judgements = [
        ir_measures.Qrel(query_id, doc_id, grade) for query_id, docs in qrels.items() for doc_id, grade in docs.items()
    ]
    # Scores fall strictly with rank, so trec_eval's sort by score keeps the run's order (no tie-breaking by id).
    run = [
        ir_measures.ScoredDoc(query_id, doc_id, float(len(ranked) - rank))
        for query_id, ranked in rankings.items()
        if query_id in qrels
        for rank, doc_id in enumerate(ranked)
    ]
    scores = {query_id: dict.fromkeys(measures, 0.0) for query_id in qrels}
    if run:
        for metric in ir_measures.iter_calc(list(measures.values()), judgements, run):
            name = next(name for name, measure in measures.items() if measure == metric.measure)
            scores[metric.query_id][name] = float(metric.value)
    return scores


def mean_scores(per_query: Mapping[str, Mapping[str, float]], names: Sequence[str]) -> dict[str, float]:
    if not per_query:
        return dict.fromkeys(names, 0.0)
    return {name: statistics.fmean(scores[name] for scores in per_query.values()) for name in names}


def _measures(qrels: Qrels, depth: int) -> dict[str, ir_measures.Measure]:
    grades = {grade for docs in qrels.values() for grade in docs.values()}
    # Exponential gain, as bench/quality.py and BEIR's papers use (trec_eval's own default is linear; the two
    # agree on binary judgements).
    gains = {grade: 2**grade - 1 for grade in grades | {0, 1}}
    measures = {
        NDCG_AT_10: ir_measures.nDCG(gains=gains) @ 10,
        MRR_AT_10: ir_measures.RR @ 10,
    }
    for k in dict.fromkeys([100, depth]):
        measures[recall_name(k)] = ir_measures.R @ k
    return {name: measures[name] for name in metric_names(depth)}
