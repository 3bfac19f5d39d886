"""Evaluations: run a KB's question set through the search pipeline under given settings and score it.

Judgements are per document (a BEIR corpus id is a ragkb `source_id`) while a search ranks passages: each
answer of up to `depth` passages is reduced to documents in rank order, a document's first passage giving
its rank — exactly as bench/quality.py does — and the metrics (ragkb_core.metrics) score that ranking.
The searches go through the same `search` a client calls, with the caller's key: access control and the
key's search filter apply, and so does its rate limit: an evaluation spends one token per search (queries
× runs) before it starts, or is refused with 429 without searching (ragkb_api.rate_limit: one larger than the
key's burst needs a full bucket and leaves the key waiting until its tokens are back). They run in the
request (no request timeout in uvicorn or Litestar), a few at a time; a SciFact train evaluation (809
queries) takes tens of seconds."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from ragkb_api.access import Caller
from ragkb_api.evaluations.beir import JudgedQuestions, Question
from ragkb_api.evaluations.question_sets import QuestionSetService
from ragkb_api.evaluations.schemas import (
    RANKED_SHOWN,
    Comparison,
    EvaluationOut,
    EvaluationRequest,
    MetricComparison,
    QueryResult,
    RunResult,
    RunSpec,
)
from ragkb_api.rate_limit import RateLimiter
from ragkb_api.search.schemas import SearchRequest, SearchResponse
from ragkb_core.metrics import MRR_AT_10, NDCG_AT_10, mean_scores, metric_names, recall_name, score_queries
from ragkb_core.metrics import documents_in_rank_order as ranked_documents

# Searches in flight at once for one evaluation: faster than one by one, without crowding out other clients.
SEARCH_CONCURRENCY = 4
REDUCTION = (
    "each query is searched for up to `depth` passages (settings.top_k and max_blocks = depth unless the "
    "settings set them); the passages are reduced to documents by source_id in rank order, a document ranked "
    "where its first passage is; judgements are per source_id"
)


def metric_definitions(depth: int) -> dict[str, str]:
    definitions = {
        NDCG_AT_10: "nDCG over the first 10 documents, gain 2^grade - 1, discount log2(rank + 1) (ir-measures)",
        recall_name(100): "share of the documents judged relevant (grade >= 1) among the first 100",
        recall_name(depth): f"share of the documents judged relevant (grade >= 1) among the first {depth}",
        MRR_AT_10: "1 / rank of the first relevant document within the first 10, else 0",
    }
    return {name: definitions[name] for name in metric_names(depth)}


class Searcher(Protocol):
    """What an evaluation searches with (ragkb_api.search.service.SearchService)."""

    def search(self, request: SearchRequest, caller: Caller) -> SearchResponse: ...


@dataclass(frozen=True)
class _Answer:
    ranked: list[str]
    response: SearchResponse


class EvaluationService:
    def __init__(
        self,
        question_sets: QuestionSetService,
        searcher: Searcher,
        limiter: RateLimiter,
        concurrency: int = SEARCH_CONCURRENCY,
    ) -> None:
        self._question_sets = question_sets
        self._searcher = searcher
        self._limiter = limiter
        self._concurrency = concurrency

    def evaluate(self, kb_id: str, request: EvaluationRequest, caller: Caller) -> EvaluationOut:
        """Score the set under `request`'s mode and settings (and `compare`'s, when given). The re-index
        quality gate scores the KB's gate set in the worker instead (ragkb_worker.quality_gate), per index
        generation, with the same metrics (ragkb_core.metrics)."""
        started = time.perf_counter()
        judged = self._question_sets.load(kb_id, request.question_set_id, request.max_queries)
        runs = 1 if request.compare is None else 2
        self._limiter.take(caller.key_id, len(judged.questions) * runs)
        base = self._run(kb_id, judged, request, request.depth, caller)
        compare = None
        if request.compare is not None:
            other = self._run(kb_id, judged, request.compare, request.depth, caller)
            compare = Comparison(**dict(other), per_metric=compare_runs(base, other))
        return EvaluationOut(
            **dict(base),
            knowledge_base_id=kb_id,
            question_set_id=request.question_set_id,
            queries=len(judged.questions),
            depth=request.depth,
            reduction=REDUCTION,
            metric_definitions=metric_definitions(request.depth),
            compare=compare,
            took_ms=round((time.perf_counter() - started) * 1000, 1),
        )

    def _run(self, kb_id: str, judged: JudgedQuestions, spec: RunSpec, depth: int, caller: Caller) -> RunResult:
        def search(question: Question) -> _Answer:
            request = SearchRequest(
                query=question.text, knowledge_base_ids=[kb_id], mode=spec.mode, settings=spec.settings, top_k=depth
            )
            response = self._searcher.search(request, caller)
            return _Answer(documents_in_rank_order(response), response)

        with ThreadPoolExecutor(self._concurrency) as pool:
            answers = dict(zip((q.query_id for q in judged.questions), pool.map(search, judged.questions), strict=True))
        return run_result(judged, answers, depth, kb_id)


def documents_in_rank_order(response: SearchResponse) -> list[str]:
    """Passages → documents (source_ids), each where its first passage ranks."""
    return ranked_documents(hit.source_id for hit in response.results)


def run_result(judged: JudgedQuestions, answers: dict[str, _Answer], depth: int, kb_id: str) -> RunResult:
    scores = score_queries(judged.qrels, {query_id: answer.ranked for query_id, answer in answers.items()}, depth)
    names = metric_names(depth)
    responses = [answer.response for answer in answers.values()]
    reasons = sorted({r.degraded_reason or "degraded" for r in responses if r.degraded})
    first = responses[0] if responses else None
    return RunResult(
        mode=_modes(responses),
        settings=first.effective_settings.get(kb_id) if first else None,
        metrics={name: round(value, 4) for name, value in mean_scores(scores, names).items()},
        degraded_queries=sum(1 for r in responses if r.degraded),
        degraded_reasons=reasons,
        per_query=[
            QueryResult(
                query_id=q.query_id,
                metrics={name: round(scores[q.query_id][name], 4) for name in names},
                ranked=answers[q.query_id].ranked[:RANKED_SHOWN],
            )
            for q in judged.questions
        ],
    )


def compare_runs(base: RunResult, other: RunResult) -> dict[str, MetricComparison]:
    """Per metric: other − base of the means, and per query other's wins, losses and ties against base."""
    theirs = {result.query_id: result.metrics for result in other.per_query}
    comparisons = {}
    for name in base.metrics:
        pairs = [(result.metrics[name], theirs[result.query_id][name]) for result in base.per_query]
        comparisons[name] = MetricComparison(
            delta=round(other.metrics[name] - base.metrics[name], 4),
            wins=sum(1 for mine, their in pairs if their > mine),
            losses=sum(1 for mine, their in pairs if their < mine),
            ties=sum(1 for mine, their in pairs if their == mine),
        )
    return comparisons


def _modes(responses: Sequence[SearchResponse]) -> str:
    modes = sorted({str(response.mode) for response in responses})
    return modes[0] if len(modes) == 1 else "mixed"
