"""Tuning a KB (ragkb_core.tuning): start a tune job, read its result, apply its recommendation as a new
settings version. The worker runs the job (ragkb_worker.tuning); this only checks the request, records the job
and reads what the worker recorded."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller, search_scope
from ragkb_api.knowledge_bases.schemas import RetrievalPatch
from ragkb_api.knowledge_bases.service import patched_retrieval
from ragkb_api.search.schemas import SearchFilters
from ragkb_api.tuning.schemas import SettingsVersionOut
from ragkb_api.tuning.versions import version_out
from ragkb_core.errors import Conflict, InvalidInput, NotFound
from ragkb_core.fusion import FusionSettings
from ragkb_core.kb_settings import KbChunking, KbRetrieval
from ragkb_core.tuning import (
    MIN_QUESTIONS_PER_FOLD,
    TuneJobParams,
    TuneRequest,
    TuneResult,
    answer_shape,
    candidates,
    check_leg_depth,
    leg_depth,
)
from ragkb_store import progress
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Job, QuestionSet
from ragkb_store.knowledge_bases import ensure_not_deleting, load_writable_kb, lock_kb
from ragkb_store.ledger.jobs import start_job
from ragkb_store.quality_gate import load_question_set
from ragkb_store.queue import enqueue_tune
from ragkb_store.settings_versions import Change, change_retrieval, current_version
from ragkb_store.states import JobKind, JobStatus, SettingsOrigin

_log = logging.getLogger("ragkb.api")


class TuneService:
    def __init__(self, sessions: sessionmaker[Session], queue: Celery) -> None:
        self._sessions = sessions
        self._queue = queue

    def start(self, kb_id: str, request: TuneRequest, caller: Caller) -> str:
        """Check the request against the KB and its question set, record the job, queue it; its id."""
        with transaction(self._sessions) as session:
            kb = load_writable_kb(session, kb_id)
            questions = _questions_of(session, kb_id, request.question_set_id)
            second_leg = KbChunking.model_validate(kb.chunking).second_model is not None
            _check_tunable(KbRetrieval.model_validate(kb.retrieval), request, questions, second_leg=second_leg)
            params = TuneJobParams(
                request=request,
                scope=search_scope(caller, SearchFilters()),
                settings_version=current_version(session, kb_id),
            )
            job_id = start_job(session, JobKind.TUNE, kb_id, params=params.model_dump(mode="json"))
            session.get_one(Job, job_id).progress_total = questions
        try:
            enqueue_tune(self._queue, job_id)
        except Exception:
            with transaction(self._sessions) as session:
                progress.fail_job(session, job_id, "the tune could not be queued (the broker did not answer)")
            raise
        _log.info("KB %s: tune job %s on question set %s", kb_id, job_id, request.question_set_id)
        return job_id

    def result(self, kb_id: str, job_id: str) -> TuneResult | None:
        with self._sessions() as session:
            return _params(_tune_job(session, kb_id, job_id)).result

    def apply(self, kb_id: str, job_id: str, author_key_id: str, reason: str | None) -> SettingsVersionOut:
        """The tune's recommended settings as the KB's next settings version."""
        with transaction(self._sessions) as session:
            kb = lock_kb(session, kb_id)
            ensure_not_deleting(kb)
            job = _tune_job(session, kb_id, job_id)
            params = _params(job)
            result = _applicable(job, params)
            latest = current_version(session, kb_id)
            if latest != params.settings_version:
                raise Conflict(
                    f"the KB's retrieval settings changed since the tune ran (version {params.settings_version} then, "
                    f"{latest} now): its figures are of other settings; tune again",
                    tuned_version=params.settings_version,
                    current_version=latest,
                )
            patched = patched_retrieval(kb.retrieval, RetrievalPatch.model_validate(result.recommended.patch()))
            change = Change(SettingsOrigin.TUNE, reason or _default_reason(job_id, result), author_key_id, job_id)
            made = change_retrieval(session, kb, patched, change, even_if_same=True)
            assert made is not None  # even_if_same: always recorded
            return version_out(made, made.version)


def _questions_of(session: Session, kb_id: str, set_id: str) -> int:
    question_set = session.get(QuestionSet, set_id)
    if question_set is None or question_set.kb_id != kb_id:
        raise NotFound(f"question set {set_id} does not exist in knowledge base {kb_id}", question_set_id=set_id)
    questions, _ = load_question_set(session, set_id)
    return len(questions)


def _check_tunable(retrieval: KbRetrieval, request: TuneRequest, questions: int, *, second_leg: bool) -> None:
    """422 for a request the KB's question set or settings cannot serve; 409 for settings a tune cannot emulate."""
    needed = request.folds * MIN_QUESTIONS_PER_FOLD
    if questions < needed:
        raise InvalidInput(
            f"{request.folds} folds need at least {needed} questions ({MIN_QUESTIONS_PER_FOLD} per fold); "
            f"question set {request.question_set_id} has {questions}: use fewer folds or more questions",
            questions=questions,
            folds=request.folds,
        )
    try:
        settings = candidates(FusionSettings.of(retrieval, second_leg=second_leg), request.space)
        check_leg_depth(leg_depth(answer_shape(retrieval), settings))
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if retrieval.rerank:
        raise Conflict(
            "this KB reranks (retrieval.rerank = true): a tune scores fusion settings from the legs without the "
            "reranker; PATCH rerank to false (or null without a server reranker) to tune its fusion",
        )
    if retrieval.doc_type_quotas:
        raise Conflict("a tune does not emulate per-doc_type quotas: remove retrieval.doc_type_quotas to tune")


def _tune_job(session: Session, kb_id: str, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.kind != JobKind.TUNE or job.kb_id != kb_id:
        raise NotFound(f"knowledge base {kb_id} has no tune job {job_id}", job_id=job_id)
    return job


def _params(job: Job) -> TuneJobParams:
    return TuneJobParams.model_validate(job.params)


def _applicable(job: Job, params: TuneJobParams) -> TuneResult:
    if job.status != JobStatus.SUCCEEDED or params.result is None:
        raise Conflict(f"tune job {job.id} is {job.status}: only a finished tune can be applied", job_status=job.status)
    if not params.result.changes:
        raise Conflict(
            "the tune recommends the KB's current settings: nothing to apply",
            recommended=params.result.recommended.label,
        )
    return params.result


def _default_reason(job_id: str, result: TuneResult) -> str:
    gain = result.held_out
    return (
        f"tune {job_id}: {result.recommended.label}; held-out nDCG@10 gain {gain.gain:+.4f} "
        f"(95 % CI {gain.ci_low:+.4f} to {gain.ci_high:+.4f}) over {result.queries} questions, {result.folds} folds"
    )
