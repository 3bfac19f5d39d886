"""Celery tasks: thin wrappers that take ids. Every failure goes through one policy (ragkb_worker.failures):
retried when transient, else the unit of work ends failed with a reason a user can act on."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from celery import Celery, Task

from ragkb_core import request_context
from ragkb_core.errors import RagkbError
from ragkb_store.ledger import Claim, DocumentLedger
from ragkb_store.queue import (
    DELETE_KB,
    FINISH_REINDEX,
    INGEST_DOCUMENT,
    INGEST_DOCUMENTS,
    INGEST_RANGE,
    REINDEX_DOCUMENT,
    TUNE_KB,
)
from ragkb_telemetry import metrics
from ragkb_telemetry.metrics import observe_stage_seconds
from ragkb_worker.failures import failure_reason, is_transient, run_with_policy
from ragkb_worker.long_documents import LongDocuments
from ragkb_worker.pipeline import IngestOutcome, IngestPipeline
from ragkb_worker.settings import BatchSettings, TaskSettings

if TYPE_CHECKING:  # the runtime builds an Ingest of this module: imported for the annotation only
    from ragkb_worker.runtime import WorkerRuntime

_log = logging.getLogger("ragkb.worker")


def register_tasks(app: Celery, settings: TaskSettings, runtime: Callable[[], WorkerRuntime]) -> None:
    """`runtime` builds (once per process, lazily) what the tasks use: models load in the child process."""
    # Every task is acknowledged only once it ran, so a worker lost mid-way leaves it to be delivered again (each
    # is idempotent), and is time-limited, so a stuck one fails instead of holding its item forever.
    redeliverable: dict[str, Any] = {
        "bind": True,
        "acks_late": True,
        "reject_on_worker_lost": True,
        "soft_time_limit": settings.soft_time_limit_s,
        "time_limit": settings.hard_time_limit_s,
        "max_retries": settings.max_retries,
    }

    @app.task(name=INGEST_DOCUMENTS, **redeliverable)  # type: ignore[untyped-decorator]
    def ingest_documents(self: Task, document_ids: list[str]) -> dict[str, Any]:
        return run_ingest(self, runtime().ingest, document_ids, settings.max_retries)

    # A message of one document, as every ingest message was before INGEST_DOCUMENTS (a broker may hold some).
    @app.task(name=INGEST_DOCUMENT, **redeliverable)  # type: ignore[untyped-decorator]
    def ingest_document(self: Task, document_id: str) -> dict[str, Any]:
        return run_ingest(self, runtime().ingest, [document_id], settings.max_retries)

    @app.task(name=INGEST_RANGE, **redeliverable)  # type: ignore[untyped-decorator]
    def ingest_range(self: Task, document_id: str, version: int, position: int) -> dict[str, Any]:
        long_documents = runtime().long_documents
        return run_range(self, long_documents, document_id, version, position, max_retries=settings.max_retries)

    @app.task(name=REINDEX_DOCUMENT, **redeliverable)  # type: ignore[untyped-decorator]
    def reindex_document(self: Task, job_id: str, document_id: str) -> dict[str, Any]:
        reindexer = runtime().reindexer
        status = run_with_policy(
            self,
            lambda: reindexer.reindex_document(job_id, document_id),
            doing="re-indexing the document",
            max_retries=settings.max_retries,
            on_failure=lambda reason: reindexer.fail_document(job_id, document_id, reason),
        )
        return {"document_id": document_id, "status": status}

    @app.task(name=FINISH_REINDEX, **redeliverable)  # type: ignore[untyped-decorator]
    def finish_reindex(self: Task, job_id: str) -> dict[str, Any]:
        reindexer = runtime().reindexer
        status = run_with_policy(
            self,
            lambda: reindexer.finish(job_id),
            doing="checking and switching the new index generation",
            max_retries=settings.max_retries,
            on_failure=lambda reason: reindexer.fail(job_id, reason),
        )
        return {"job_id": job_id, "status": status}

    # No retry budget: a KB deletion that failed says why and leaves the KB `deleting`, and DELETE again
    # resumes it at once; minutes of backoff would only hold the KB in between. Every step is idempotent, and
    # a worker lost mid-way leaves the message to be delivered again (acks_late).
    @app.task(name=DELETE_KB, **redeliverable)  # type: ignore[untyped-decorator]
    def delete_kb(self: Task, job_id: str) -> dict[str, Any]:
        deleter = runtime().kb_deleter
        status = run_with_policy(
            self,
            lambda: deleter.run(job_id),
            doing="deleting the knowledge base",
            max_retries=0,
            on_failure=lambda reason: deleter.fail(job_id, reason),
        )
        return {"job_id": job_id, "status": status}

    # Transient failures (the retriever restarting) are retried with backoff; the tune starts over (it has
    # recorded nothing but its progress). Anything else ends the job failed with the reason.
    @app.task(name=TUNE_KB, **redeliverable)  # type: ignore[untyped-decorator]
    def tune_kb(self: Task, job_id: str) -> dict[str, Any]:
        tuner = runtime().tuner
        status = run_with_policy(
            self,
            lambda: tuner.run(job_id),
            doing="tuning the knowledge base",
            max_retries=settings.max_retries,
            on_failure=lambda reason: tuner.fail(job_id, reason),
        )
        return {"job_id": job_id, "status": status}


@dataclass(frozen=True)
class Ingest:
    """What an ingest task works with: the ledger, the pipeline, how many short documents it builds together
    (`batching`), and how a document handed back goes to the queue again (`send_again`)."""

    ledger: DocumentLedger
    pipeline: IngestPipeline
    batching: BatchSettings
    send_again: Callable[[list[str]], object]


def run_ingest(task: Task, ingest: Ingest, document_ids: list[str], max_retries: int) -> dict[str, Any]:
    """The documents a message names, built in one batch: the first that can be taken, with the others (and, in a
    worker set to larger batches, other pending documents of the KB and lane) as companions. Those of them it
    could not take and that still wait (too large for a batch, beyond the batch's size) are queued again."""
    claim = ingest.ledger.claim_first(document_ids)
    if claim is None:
        return {"document_ids": document_ids, "status": "skipped"}
    batching = ingest.batching
    companions = ingest.ledger.claim_companions(
        claim, batching.documents - 1, batching.max_document_bytes, preferred=document_ids
    )
    taken = {claim.document_id, *(companion.document_id for companion in companions)}
    send_again(ingest, [document_id for document_id in document_ids if document_id not in taken])
    if companions:
        return run_batch(task, ingest, claim, companions, max_retries)
    return run_alone(task, ingest, claim, max_retries)


def run_alone(task: Task, ingest: Ingest, claim: Claim, max_retries: int) -> dict[str, Any]:
    """One claimed document under the failure policy: retried after a transient error, else failed."""
    document_id = claim.document_id

    def ingested() -> dict[str, Any]:
        outcome = ingest.pipeline.run(claim)
        _log_outcome(claim, outcome)
        return {"document_id": document_id, "status": outcome.status, "chunks": outcome.chunks}

    def failed(reason: str) -> dict[str, Any]:
        fail_document(ingest.ledger, claim, reason)
        return {"document_id": document_id, "status": "failed", "error": reason}

    with request_context.bound(kb=claim.kb_id, document=document_id):
        return run_with_policy(
            task,
            ingested,
            doing="ingesting",
            max_retries=max_retries,
            on_failure=failed,
            on_retry=lambda reason: ingest.ledger.release_for_retry(claim, reason),
        )


def run_batch(task: Task, ingest: Ingest, claim: Claim, companions: list[Claim], max_retries: int) -> dict[str, Any]:
    """The claimed document and its companions built together. A document whose own input or state stopped it
    fails alone, or, when its error is transient, goes back to the queue; if a shared step fails (the model, the
    index write, the database), the companions go back to the queue and the claimed document goes on alone under
    the failure policy: each batch settles at least one document, and none is lost or built twice."""
    claims = [claim, *companions]
    with request_context.bound(kb=claim.kb_id, document=claim.document_id):
        try:
            batch = ingest.pipeline.run_batch(claims, ingest.batching.parse_budget_s)
        except Exception as exc:
            _log.warning(
                "a batch of %d documents failed as a whole (%s): each goes on alone", len(claims), type(exc).__name__
            )
            hand_back(ingest, companions, f"its batch failed ({type(exc).__name__}); it is built alone")
            return run_alone(task, ingest, claim, max_retries)
    for outcome in batch.outcomes:
        _log_outcome(next(c for c in claims if c.document_id == outcome.document_id), outcome)
    for failed_claim, error in batch.failed:
        settle_document_error(ingest, failed_claim, error, max_retries)
    if batch.not_started:
        hand_back(ingest, batch.not_started, "its batch's parsing ran long; it goes in another batch")
    statuses = {outcome.document_id: outcome.status for outcome in batch.outcomes}
    return {"document_id": claim.document_id, "status": statuses.get(claim.document_id, "failed"), "batch": len(claims)}


def settle_document_error(ingest: Ingest, claim: Claim, exc: Exception, max_retries: int) -> None:
    """One document of a batch stopped by its own error: back to the queue when the error is transient and the
    document has tries left (its attempts count each claim), else failed with the reason."""
    reason = failure_reason(exc, "ingesting")
    if is_transient(exc) and claim.attempt <= max_retries:
        hand_back(ingest, [claim], reason)
        return
    fail_document(ingest.ledger, claim, reason)


def hand_back(ingest: Ingest, claims: list[Claim], reason: str) -> None:
    """Back to the queue, now. Best effort: when the database or the broker is down too (often why a batch
    failed), their leases run out or their pending age passes and the sweeper queues them again."""
    try:
        for claim in claims:
            ingest.ledger.release_for_retry(claim, reason)
    except Exception:
        _log.warning("could not hand %d documents back now; the sweeper will", len(claims), exc_info=True)
        return
    send_again(ingest, [claim.document_id for claim in claims])


def send_again(ingest: Ingest, document_ids: list[str]) -> None:
    """Queue the documents that still wait again (best effort: else the sweeper queues them once their pending
    age passes)."""
    if not document_ids:
        return
    try:
        ingest.send_again(document_ids)
    except Exception:
        _log.warning("could not queue %d documents again now; the sweeper will", len(document_ids), exc_info=True)


def fail_document(ledger: DocumentLedger, claim: Claim, reason: str) -> None:
    ledger.fail(claim, reason)
    metrics.documents_failed.labels(kb_id=claim.kb_id).inc()
    _log.warning("document %s v%d failed: %s", claim.document_id, claim.version, reason)


def _log_outcome(claim: Claim, outcome: IngestOutcome) -> None:
    _log.info("document %s v%d: %s (%d chunks)", claim.document_id, claim.version, outcome.status, outcome.chunks)
    if outcome.status == "done":
        record_ingested(claim.kb_id, outcome)


def run_range(
    task: Task, long_documents: LongDocuments, document_id: str, version: int, position: int, *, max_retries: int
) -> dict[str, Any]:
    """One range of a long document, under the same failure policy as a whole document: a transient error
    retries this range alone; anything else fails the document with the range's pages in the reason."""
    work = long_documents.claim_range(document_id, version, position)
    if work is None:
        # Built already; but a retry of the range that completed the split, whose write of the version failed,
        # writes it again.
        claim = long_documents.claim_completed(document_id, version) if task.request.retries else None
        if claim is None:
            return {"document_id": document_id, "range": position, "status": "skipped"}
        return run_publish(task, long_documents, claim, max_retries=max_retries)
    claim = work.claim

    def built() -> dict[str, Any]:
        if work.attempt > max_retries + 1:
            # Delivered again and again without finishing (its worker killed each time): give up like a retry.
            raise RangeGaveUp(f"the range was started {work.attempt} times without finishing")
        outcome = long_documents.build_range(work)
        _log.info("document %s v%d range %d: %s", document_id, version, position, outcome.status)
        if outcome.status == "done":
            record_ingested(claim.kb_id, outcome)
        return {"document_id": document_id, "range": position, "status": outcome.status}

    def failed(reason: str) -> dict[str, Any]:
        long_documents.fail(claim, f"pages {work.first_page}–{work.last_page}: {reason}")
        metrics.documents_failed.labels(kb_id=claim.kb_id).inc()
        _log.warning("document %s v%d failed in range %d: %s", document_id, version, position, reason)
        return {"document_id": document_id, "range": position, "status": "failed", "error": reason}

    with request_context.bound(kb=claim.kb_id, document=document_id):
        return run_with_policy(
            task,
            built,
            doing=f"ingesting pages {work.first_page}–{work.last_page}",
            max_retries=max_retries,
            on_failure=failed,
            on_retry=lambda reason: long_documents.release_range(work, reason),
        )


def run_publish(task: Task, long_documents: LongDocuments, claim: Claim, *, max_retries: int) -> dict[str, Any]:
    """Write a split version whose every range is built, and make it live."""

    def published() -> dict[str, Any]:
        outcome = long_documents.publish(claim)
        if outcome.status == "done":
            record_ingested(claim.kb_id, outcome)
        return {"document_id": claim.document_id, "status": outcome.status}

    def failed(reason: str) -> dict[str, Any]:
        long_documents.fail(claim, reason)
        metrics.documents_failed.labels(kb_id=claim.kb_id).inc()
        return {"document_id": claim.document_id, "status": "failed", "error": reason}

    with request_context.bound(kb=claim.kb_id, document=claim.document_id):
        return run_with_policy(
            task, published, doing="writing the document", max_retries=max_retries, on_failure=failed
        )


class RangeGaveUp(RagkbError):
    title = "Range gave up"


def record_ingested(kb_id: str, outcome: IngestOutcome) -> None:
    metrics.documents_ingested.labels(kb_id=kb_id).inc()
    metrics.chunks_ingested.labels(kb_id=kb_id).inc(outcome.chunks)
    observe_stage_seconds(metrics.ingest_stage_duration, outcome.stage_seconds)
