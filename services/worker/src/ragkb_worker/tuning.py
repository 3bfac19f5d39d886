"""A tune job (ragkb_core.tuning): fetch every question's legs from the retriever once, in batches (the job's
progress counts questions), score every candidate setting from them, cross-validate, check the current settings'
computed answers against the search's own for the first questions, and record the result on the job. Nothing
about the KB changes: applying the recommendation is the api's (POST .../tune/{id}/apply)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.contracts import KbSearch, SearchQuery, SearchResult
from ragkb_core.fusion import (
    MAX_LEGS_QUERIES,
    FusionSettings,
    LegsQuery,
    LegsResult,
    QueryLegs,
    answer,
    same_up_to_ties,
)
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, RelevanceCalibration
from ragkb_core.metrics import Question
from ragkb_core.tuning import SearchCheck, TuneJobParams, answer_shape, candidates, leg_depth, tune
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Job, KnowledgeBase
from ragkb_store.ledger.jobs import succeed_with_params
from ragkb_store.progress import fail_job
from ragkb_store.quality_gate import load_question_set
from ragkb_store.states import FINISHED_JOB_STATUSES

_log = logging.getLogger("ragkb.worker")
# Questions whose computed answer under the current settings is checked against the search's own.
SEARCH_CHECKS = 20
RERANKED = (
    "this KB's searches are reranked (the server has a reranker and the KB's rerank is unset): a tune scores "
    "fusion settings without the reranker; PATCH retrieval.rerank to false to tune its fusion"
)


class TuneRetriever(Protocol):
    """What a tune needs of the retriever (ragkb_core.retriever_client.RetrieverClient)."""

    def legs(self, query: LegsQuery) -> LegsResult: ...

    def search(self, query: SearchQuery) -> SearchResult: ...


class Tuner:
    def __init__(self, sessions: sessionmaker[Session], retriever: TuneRetriever) -> None:
        self._sessions = sessions
        self._retriever = retriever

    def run(self, job_id: str) -> str:
        """Run the tune job; "succeeded", "failed" (a KB it cannot emulate), or "skipped" (finished or cancelled).
        A failure raises: the task's policy retries it or ends the job failed (fail)."""
        loaded = self._load(job_id)
        if loaded is None:
            return "skipped"
        params, kb, questions, qrels = loaded
        started = time.perf_counter()
        fetched = self._fetch_legs(job_id, kb, params, questions)
        if fetched is None:
            return "skipped"
        legs, calibration = fetched
        fetched_at = time.perf_counter()
        check = self._check_against_search(kb, params, questions, legs, calibration)
        if check is None:
            return self.fail(job_id, RERANKED)
        checked_at = time.perf_counter()
        request = params.request
        judgements = [qrels.get(question.query_id, {}) for question in questions]
        result = tune(
            kb.retrieval,
            request.space,
            legs,
            judgements,
            calibration,
            folds=request.folds,
            seed=request.seed,
            question_set_id=request.question_set_id,
            second_leg=kb.second_model is not None,
        )
        done_at = time.perf_counter()
        result.search_check = check
        result.settings_version = params.settings_version
        result.timings_ms = {
            "legs": _ms(fetched_at - started),
            "search_check": _ms(checked_at - fetched_at),
            "scoring": _ms(done_at - checked_at),
        }
        finished = params.model_copy(update={"result": result})
        with transaction(self._sessions) as session:
            if not succeed_with_params(session, job_id, finished.model_dump(mode="json")):
                return "skipped"
        _log.info("tune job %s: held-out gain %+.4f over %d questions", job_id, result.held_out.gain, result.queries)
        return "succeeded"

    def fail(self, job_id: str, reason: str) -> str:
        with transaction(self._sessions) as session:
            fail_job(session, job_id, f"the tune failed: {reason}")
        _log.warning("tune job %s failed: %s", job_id, reason)
        return "failed"

    def _load(self, job_id: str) -> tuple[TuneJobParams, KbSearch, list[Question], dict[str, dict[str, int]]] | None:
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.status in FINISHED_JOB_STATUSES or job.kb_id is None:
                return None
            params = TuneJobParams.model_validate(job.params)
            kb = session.get_one(KnowledgeBase, job.kb_id)
            search = KbSearch(
                kb_id=kb.id,
                name=kb.name,
                retrieval=KbRetrieval.model_validate(kb.retrieval),
                analyzer=KbAnalyzer.model_validate(kb.analyzer),
                embedding_model=kb.embedding_model,
                second_model=KbChunking.model_validate(kb.chunking).second_model,
            )
            questions, qrels = load_question_set(session, params.request.question_set_id)
        return params, search, questions, qrels

    def _fetch_legs(
        self, job_id: str, kb: KbSearch, params: TuneJobParams, questions: Sequence[Question]
    ) -> tuple[list[QueryLegs], RelevanceCalibration | None] | None:
        """Every question's legs, deep enough for every candidate; None when the job was cancelled meanwhile."""
        settings = candidates(
            FusionSettings.of(kb.retrieval, second_leg=kb.second_model is not None), params.request.space
        )
        depth = leg_depth(answer_shape(kb.retrieval), settings)
        legs: list[QueryLegs] = []
        calibration = None
        for start in range(0, len(questions), MAX_LEGS_QUERIES):
            batch = [question.text for question in questions[start : start + MAX_LEGS_QUERIES]]
            found = self._retriever.legs(LegsQuery(kb=kb, queries=batch, depth=depth, scope=params.scope))
            legs.extend(found.legs)
            calibration = found.calibration
            if not self._record_progress(job_id, len(legs)):
                return None
        return legs, calibration

    def _record_progress(self, job_id: str, fetched: int) -> bool:
        """The questions fetched so far on the job; False when the job was cancelled (or ended) meanwhile."""
        with transaction(self._sessions) as session:
            job = session.get_one(Job, job_id)
            if job.status in FINISHED_JOB_STATUSES:
                return False
            job.progress_current = fetched
        return True

    def _check_against_search(
        self,
        kb: KbSearch,
        params: TuneJobParams,
        questions: Sequence[Question],
        legs: Sequence[QueryLegs],
        calibration: RelevanceCalibration | None,
    ) -> SearchCheck | None:
        """The current settings' computed answers against the search's for the first questions; None when the
        search reranks (the tune cannot emulate it)."""
        current = FusionSettings.of(kb.retrieval, second_leg=kb.second_model is not None)
        shape = answer_shape(kb.retrieval)
        identical = 0
        checked = list(zip(questions, legs, strict=True))[:SEARCH_CHECKS]
        for question, query_legs in checked:
            query = SearchQuery(
                query=question.text, knowledge_bases=[kb], scope=params.scope, max_blocks=kb.retrieval.max_blocks
            )
            served = self._retriever.search(query)
            if served.reranked:
                return None
            computed = [hit.chunk_id for hit in answer(query_legs, current, shape, calibration)]
            identical += same_up_to_ties([(hit.chunk_id, hit.score) for hit in served.results], computed)
        return SearchCheck(queries=len(checked), identical=identical)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
