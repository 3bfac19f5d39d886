"""Celery tasks: thin wrappers that take ids. Errors map to retry-or-fail here and nowhere else."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded

from ragkb_core.errors import RagkbError
from ragkb_store.queue import DELETE_KB, FINISH_REINDEX, INGEST_DOCUMENT, REINDEX_DOCUMENT
from ragkb_worker.documents import Claim, DocumentLedger
from ragkb_worker.kb_deletion import KbDeleter
from ragkb_worker.pipeline import IngestPipeline
from ragkb_worker.reindexing import Reindexer
from ragkb_worker.settings import TaskSettings

_log = logging.getLogger("ragkb.worker")
# Backoff between retries of a transient failure: 5 s, 10 s, 20 s … capped at 5 minutes.
_BACKOFF_BASE_S = 5
_BACKOFF_CAP_S = 300


def register_tasks(
    app: Celery,
    settings: TaskSettings,
    runtime: Callable[[], tuple[DocumentLedger, IngestPipeline]],
    reindexer: Callable[[], Reindexer],
    kb_deleter: Callable[[], KbDeleter],
) -> None:
    """`runtime` builds (once per process, lazily) the ledger and pipeline: models load in the child process."""
    # Every task is acknowledged only once it ran, so a worker lost mid-way leaves it to be delivered again (each
    # is idempotent), and is time-limited, so a stuck one fails instead of holding its item forever.
    redeliverable: dict[str, Any] = {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "soft_time_limit": settings.soft_time_limit_s,
        "time_limit": settings.hard_time_limit_s,
    }

    @app.task(  # type: ignore[untyped-decorator]
        name=INGEST_DOCUMENT,
        bind=True,
        **redeliverable,
        max_retries=settings.max_retries,
    )
    def ingest_document(self: Task, document_id: str) -> dict[str, Any]:
        ledger, pipeline = runtime()
        return run_ingest(self, ledger, pipeline, document_id, settings.max_retries)

    @app.task(name=REINDEX_DOCUMENT, **redeliverable)  # type: ignore[untyped-decorator]
    def reindex_document(job_id: str, document_id: str) -> dict[str, Any]:
        return {"document_id": document_id, "status": reindexer().reindex_document(job_id, document_id)}

    @app.task(name=FINISH_REINDEX, **redeliverable)  # type: ignore[untyped-decorator]
    def finish_reindex(job_id: str) -> dict[str, Any]:
        return {"job_id": job_id, "status": reindexer().finish(job_id)}

    # Not retried by Celery: a failure fails the job with its reason (KbDeleter.run), and DELETE again resumes
    # it. A worker lost mid-way leaves the message to be delivered again (acks_late); every step is idempotent.
    @app.task(name=DELETE_KB, **redeliverable)  # type: ignore[untyped-decorator]
    def delete_kb(job_id: str) -> dict[str, Any]:
        return {"job_id": job_id, "status": kb_deleter().run(job_id)}


def run_ingest(
    task: Task, ledger: DocumentLedger, pipeline: IngestPipeline, document_id: str, max_retries: int
) -> dict[str, Any]:
    claim = ledger.claim(document_id)
    if claim is None:
        return {"document_id": document_id, "status": "skipped"}
    try:
        outcome = pipeline.run(claim)
    except Exception as exc:  # every failure ends in exactly one of: retry, or failed with a reason
        return _handle_failure(task, ledger, claim, exc, max_retries)
    _log.info("document %s v%d: %s (%d chunks)", document_id, claim.version, outcome.status, outcome.chunks)
    return {"document_id": document_id, "status": outcome.status, "chunks": outcome.chunks}


def _handle_failure(
    task: Task, ledger: DocumentLedger, claim: Claim, exc: Exception, max_retries: int
) -> dict[str, Any]:
    reason = _reason(exc)
    retries = task.request.retries or 0
    if _is_transient(exc) and retries < max_retries:
        _log.warning("document %s: transient failure, retry %d: %s", claim.document_id, retries + 1, reason)
        ledger.release_for_retry(claim, reason)
        raise task.retry(exc=exc, countdown=min(_BACKOFF_BASE_S * 2**retries, _BACKOFF_CAP_S))
    _log.warning("document %s v%d failed: %s", claim.document_id, claim.version, reason)
    ledger.fail(claim, reason)
    return {"document_id": claim.document_id, "status": "failed", "error": reason}


def _is_transient(exc: Exception) -> bool:
    return isinstance(exc, RagkbError) and exc.transient


def _reason(exc: Exception) -> str:
    if isinstance(exc, RagkbError):
        return exc.detail
    if isinstance(exc, SoftTimeLimitExceeded):
        return "processing took longer than the task time limit"
    # Unexpected errors: name the kind without leaking internals; the log has the traceback.
    logging.getLogger("ragkb.worker").exception("unexpected ingest error", exc_info=exc)
    return f"internal error while ingesting ({type(exc).__name__})"
