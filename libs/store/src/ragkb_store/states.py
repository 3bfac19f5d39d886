"""The states a document, a job and a job's item can be in, and the kinds of jobs and items: the values the
metadata tables hold and the public API shows. Every write of them is in ragkb_store.ledger."""

from __future__ import annotations

from enum import StrEnum


class DocumentStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


class RangeStatus(StrEnum):
    """A split document's page range (ragkb_store.ledger.ranges): waiting, being built under a lease, built."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class Lane(StrEnum):
    """Which queue a document's ingestion waits in: `interactive` (a single upload, a small batch) is taken
    before `bulk` (a large batch, a sync's uploads, a bulk retry, a re-index), so that one KB's import does
    not hold another KB's upload (ragkb_store.queue)."""

    INTERACTIVE = "interactive"
    BULK = "bulk"


def lane_of_batch(documents: int, interactive_max_documents: int) -> Lane:
    """A batch of documents (an upload of several, a retry of a KB's failed ones) is interactive while small."""
    return Lane.INTERACTIVE if documents <= interactive_max_documents else Lane.BULK


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobKind(StrEnum):
    # One document's run through the pipeline: the operator's record of it (no items).
    INGEST = "ingest"
    # A manifest sync: uploads it waits for, orphans it deleted.
    SYNC = "sync"
    # Every failed document of a KB queued again.
    RETRY = "retry"
    # Every indexed document rebuilt into a new index generation, then a check and a switch.
    REINDEX = "reindex"
    # A whole KB deleted: index, documents in batches, blobs only they used, then the row.
    KB_DELETE = "kb_delete"
    # Retrieval settings searched on a question set by cross-validation (no items: progress is questions).
    TUNE = "tune"


class SourceRunStatus(StrEnum):
    """How a source's last run ended (reading the source and handing its changes over; the job tracks their
    indexing)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobItemStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ItemAction(StrEnum):
    """What a job does with one document."""

    UPLOAD = "upload"
    DELETE = "delete"
    RETRY = "retry"
    # A manifest entry the server could not judge (an exclude pattern that ran out of time on it).
    CHECK = "check"
    REINDEX = "reindex"


ACTIVE_JOB_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
# Jobs the worker that runs them settles and finishes: nothing waits for documents to arrive, so no deadline.
WORKER_SETTLED_KINDS = frozenset({JobKind.REINDEX, JobKind.KB_DELETE, JobKind.TUNE})
# Jobs without items: their progress is the job's own counters (an ingest's stages, a tune's questions).
ITEMLESS_KINDS = frozenset({JobKind.INGEST, JobKind.TUNE})


class SettingsOrigin(StrEnum):
    """What made a version of a KB's retrieval settings (ragkb_store.settings_versions)."""

    CREATE = "create"
    PATCH = "patch"
    TUNE = "tune"
    REVERT = "revert"
    # The settings a KB had when versions began (migration 0014), or before its first recorded change.
    INITIAL = "initial"
    MIGRATION = "migration"
