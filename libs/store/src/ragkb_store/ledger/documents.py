"""The ledger of documents: every change of a document's state, each one whole transaction.

The api records versions, changes fields, retries and deletes; the worker claims a version with a lease,
renews it, and finishes, fails or releases it; the sweeper takes back expired leases. Each write that can
race is a compare-and-set on the version (or the status and lease), so that two workers never both build one
version, a stale worker never wins over a newer upload, and an upload never leaves a worker's claim behind.
The rules of stored documents live here too, next to the writes they guard: a reference document's content
is never replaced, a document keeps its doc_type, reference and knowledge documents of a KB never share a
label, and a key with a search filter touches only documents inside it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, case, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import Conflict, Forbidden, NotFound, RagkbError
from ragkb_core.ids import new_id
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_store.consistency import DocumentState
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, DocumentRange, DocumentSplit, Job, JobItem, KnowledgeBase, utcnow
from ragkb_store.knowledge_bases import load_kb, load_writable_kb
from ragkb_store.progress import documents_by_source, refresh_overdue_jobs, settle_items_of_documents
from ragkb_store.states import (
    ACTIVE_JOB_STATUSES,
    DocumentStatus,
    ItemAction,
    JobItemStatus,
    JobKind,
    JobStatus,
    Lane,
)

# A version recorded while another upload of the same document moved its version on is recorded again on
# top of that one; more than this many collisions in a row means something is wrong.
_RECORD_ATTEMPTS = 16
# Between attempts, a random pause of up to this many seconds times the attempt: racers that collided once
# spread out instead of colliding again in lockstep (under load, five back-to-back attempts were not enough).
_RECORD_BACKOFF_S = 0.005
# Rows looked up per query: well under SQLite's bound on parameters.
_BATCH = 500


@dataclass(frozen=True)
class DocumentScope:
    """The documents a key may touch: its search filter (`labels_any`, `doc_types`), None meaning any. A
    document is inside when it has one of the labels and one of the doc types, as a search filters them."""

    labels_any: frozenset[str] | None = None
    doc_types: frozenset[str] | None = None

    def admits(self, labels: Iterable[str], doc_type: str) -> bool:
        if self.doc_types is not None and doc_type not in self.doc_types:
            return False
        return self.labels_any is None or bool(self.labels_any.intersection(labels))


EVERY_DOCUMENT = DocumentScope()


@dataclass(frozen=True)
class NewVersion:
    """An accepted upload's fields and stored original, as plain values."""

    kb_id: str
    source_id: str
    # None: keep the document's title (a new document takes `default_title`).
    title: str | None
    default_title: str
    filename: str | None
    media_type: str
    size_bytes: int
    blob_sha256: str
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    # The queue its ingestion waits in; a version a sync's job waits for goes to the bulk lane whatever this says.
    lane: Lane = Lane.INTERACTIVE


@dataclass(frozen=True)
class QueuePlace:
    kb_id: str
    lane: Lane


@dataclass(frozen=True)
class LaneCounts:
    """A KB's documents waiting (`pending`) and being built (`processing`) in one lane."""

    pending: int = 0
    processing: int = 0


@dataclass(frozen=True)
class RestoredDocument:
    """A document as a backup holds it, to be recorded in another KB: `indexed` when its version's points were
    restored with it (done), else it is built again from its original (pending), or stays failed with `error`."""

    id: str
    source_id: str
    title: str
    filename: str | None
    media_type: str
    size_bytes: int
    blob_sha256: str
    text_sha256: str | None
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    version: int
    chunk_count: int
    indexed: bool
    error: str | None = None


@dataclass(frozen=True)
class RecordedVersion:
    document: Document
    # The original the document no longer uses, to delete if nothing else does.
    replaced_blob: str | None
    # False: the upload equals the live version (`unchanged`), nothing was queued.
    changed: bool


@dataclass(frozen=True)
class Claim:
    """A snapshot of the document version a worker is processing."""

    document_id: str
    kb_id: str
    source_id: str
    version: int
    title: str
    media_type: str
    blob_sha256: str
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    attempt: int
    chunking: KbChunking
    # How the KB's text becomes BM25 terms; fixed for a KB until it is re-indexed.
    analyzer: KbAnalyzer
    # The model that embeds (and counts the tokens of) its chunks: the KB's, or a re-index target's.
    embedding_model: str


@dataclass(frozen=True)
class BuiltVersion:
    """A claimed version built and written to the index, ready to go live."""

    claim: Claim
    chunk_count: int
    timings: dict[str, float]
    report: dict[str, Any]
    text_sha256: str | None = None


@dataclass(frozen=True)
class FinishedVersions:
    """What `finish_many` did: the documents whose version went live, and the extracted text each one had
    before (to delete when no longer referenced)."""

    finished: set[str]
    replaced_texts: dict[str, str | None]


@dataclass(frozen=True)
class ChangedFields:
    """A document after a PATCH; `requeued` when its original was queued again (a new title to index)."""

    document: Document
    requeued: bool


class _VersionMoved(Exception):
    """Another upload recorded a version between our read and our write."""


# What record_versions did with one item: recorded (or found unchanged), or refused with the error the single
# record_version would have raised.
BatchOutcome = RecordedVersion | RagkbError


class DocumentLedger:
    def __init__(self, sessions: sessionmaker[Session], lease_s: int = 300) -> None:
        self._sessions = sessions
        self._lease = timedelta(seconds=lease_s)

    # -- the api's transitions ---------------------------------------------------------------------------

    def check_version(self, new: NewVersion, scope: DocumentScope = EVERY_DOCUMENT) -> None:
        """Refuse now what record_version would refuse, before the original is stored (a refused upload
        must leave nothing behind)."""
        with self._sessions() as session:
            load_writable_kb(session, new.kb_id)
            existing = _document_by_source(session, new.kb_id, new.source_id)
            _check_new_version(session, existing, new, scope)

    def record_version(self, new: NewVersion, scope: DocumentScope = EVERY_DOCUMENT) -> RecordedVersion:
        """A new version of the document (or a new document), pending, with its ingest job recorded; the
        same content again with the same labels and metadata is `unchanged` and records nothing."""
        for attempt in range(_RECORD_ATTEMPTS):
            try:
                with transaction(self._sessions) as session:
                    return _record_version(session, new, scope)
            except (IntegrityError, _VersionMoved):
                # Two first uploads raced to insert, or one moved the version on: record on top of it.
                if attempt == _RECORD_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0, _RECORD_BACKOFF_S * (attempt + 1)))
        raise AssertionError("unreachable")

    def check_versions(
        self, news: Sequence[NewVersion], scope: DocumentScope = EVERY_DOCUMENT
    ) -> list[RagkbError | None]:
        """check_version for each of a batch's items (all of one KB), in one session: per item None, or the
        error that refuses it. An item is checked against the stored documents only: one whose source_id an
        earlier item of the batch also names is checked again when record_versions records it."""
        if not news:
            return []
        with self._sessions() as session:
            try:
                load_writable_kb(session, news[0].kb_id)
            except RagkbError as exc:
                return [exc] * len(news)
            existing = documents_by_source(session, news[0].kb_id, {new.source_id for new in news})
            return [_refusal_of(session, existing.get(new.source_id), new, scope) for new in news]

    def record_versions(self, news: Sequence[NewVersion], scope: DocumentScope = EVERY_DOCUMENT) -> list[BatchOutcome]:
        """record_version for each of a batch's items (all of one KB), in order, in one transaction with a
        savepoint per item: a refused item reports its error and the others still go in, and an item naming the
        source_id of an earlier one becomes its next version, as when they are sent one by one. An item that
        collides with a concurrent upload (record_version's retries) is recorded again on its own after the
        batch's commit, with the later items of its source_id, so that their order holds."""
        if not news:
            return []
        with transaction(self._sessions) as session:
            outcomes = _record_batch(session, news, scope)
        return [
            outcome if outcome is not None else self._record_or_refusal(new, scope)
            for new, outcome in zip(news, outcomes, strict=True)
        ]

    def _record_or_refusal(self, new: NewVersion, scope: DocumentScope) -> BatchOutcome:
        try:
            return self.record_version(new, scope)
        except RagkbError as exc:
            return exc

    def get(self, kb_id: str, document_id: str, scope: DocumentScope = EVERY_DOCUMENT) -> Document:
        """The document, if it is in the KB and inside the scope (one NotFound otherwise)."""
        with self._sessions() as session:
            return _visible_document(session, kb_id, document_id, scope)

    def writable(self, kb_id: str, document_id: str, scope: DocumentScope = EVERY_DOCUMENT) -> Document:
        """The document, if the caller may change it: visible, and its KB not being deleted."""
        with self._sessions() as session:
            load_writable_kb(session, kb_id)
            return _visible_document(session, kb_id, document_id, scope)

    def change_fields(
        self,
        kb_id: str,
        document_id: str,
        changes: dict[str, Any],
        *,
        requested_doc_type: str | None,
        scope: DocumentScope,
        publish: Callable[[Document, dict[str, Any]], None],
    ) -> ChangedFields:
        """Change title, source_id, labels or metadata. `publish` applies the change to the indexed chunks
        inside the transaction: if the index refuses, the database keeps the old values too.

        The title is part of what is embedded and keyword-indexed (ragkb_worker.pipeline.embedding_text), so
        a new title on a document that is indexed or being built also re-queues its original as the next
        version (`requeued`, for the caller to enqueue): searches then match the new title, not the old. Its
        points keep answering, with the new title in their payload, until the new version replaces them."""
        with transaction(self._sessions) as session:
            load_writable_kb(session, kb_id)
            document = _visible_document(session, kb_id, document_id, scope)
            _ensure_doc_type_kept(document, requested_doc_type)
            if not changes:
                return ChangedFields(document, requeued=False)
            if "source_id" in changes:
                _ensure_source_id_free(session, kb_id, changes["source_id"], document_id)
            if "labels" in changes:
                _ensure_inside_scope(scope, changes["labels"], document.doc_type)
                _ensure_labels_on_one_side(session, kb_id, document.doc_type, changes["labels"])
            requeue = _title_changes_indexed_text(document, changes)
            for field, value in changes.items():
                setattr(document, "metadata_" if field == "metadata" else field, value)
            session.flush()
            if document.indexed_version is not None:
                publish(document, changes)
            if requeue:
                document = _next_version_of_same_original(session, document)
            return ChangedFields(document, requeued=requeue)

    def retry(self, kb_id: str, document_id: str, scope: DocumentScope = EVERY_DOCUMENT) -> Document:
        """A failed document back to pending, from its stored original, with its ingest job recorded."""
        with transaction(self._sessions) as session:
            load_writable_kb(session, kb_id)
            document = _visible_document(session, kb_id, document_id, scope)
            if document.status != DocumentStatus.FAILED:
                raise Conflict(f"only a failed document can be retried; this one is {document.status}")
            send_back_to_pending(session, document, Lane.INTERACTIVE)
            return document

    def delete(self, kb_id: str, document_id: str) -> set[str]:
        """Remove the document's row (its chunks have left the index already); returns the blobs it used, to
        delete if nothing else uses them."""
        with transaction(self._sessions) as session:
            document = _visible_document(session, kb_id, document_id, EVERY_DOCUMENT)
            blobs = {sha for sha in (document.blob_sha256, document.text_sha256) if sha}
            session.delete(document)
        return blobs

    def restore(self, kb_id: str, documents: Iterable[RestoredDocument]) -> list[str]:
        """Record a restored KB's documents in one transaction; returns those to enqueue (not indexed, not
        failed: built again from their restored originals)."""
        queued: list[str] = []
        with transaction(self._sessions) as session:
            load_writable_kb(session, kb_id)
            for restored in documents:
                document = _restored_document(kb_id, restored)
                session.add(document)
                session.flush()
                if document.status == DocumentStatus.PENDING:
                    record_ingest_job(session, document)
                    queued.append(document.id)
        return queued

    # -- the consistency check ---------------------------------------------------------------------------

    def consistency_states(self, kb_id: str) -> list[DocumentState]:
        """What the database says of each of the KB's documents, for comparing with the index."""
        with self._sessions() as session:
            rows = session.execute(
                select(
                    Document.id,
                    Document.status,
                    Document.version,
                    Document.indexed_version,
                    Document.chunk_count,
                    Document.lease_until,
                ).where(Document.kb_id == kb_id)
            )
            return [DocumentState(*row) for row in rows]

    def requeue_for_repair(self, kb_id: str, document_ids: Iterable[str]) -> list[str]:
        """Send documents the index lacks back to pending, to be built again from their stored original (the
        worker rewrites their version and deletes every other one); returns those to enqueue. A document held
        by a live worker is left to it; one already pending is only enqueued again (a duplicate message is
        skipped by the claim)."""
        now = utcnow()
        requeued: list[str] = []
        with transaction(self._sessions) as session:
            load_writable_kb(session, kb_id)
            for document_id in document_ids:
                document = session.get(Document, document_id)
                if document is None or document.kb_id != kb_id or _held_by_live_worker(document, now):
                    continue
                if document.status != DocumentStatus.PENDING:
                    send_back_to_pending(session, document, Lane.BULK)
                requeued.append(document_id)
        return requeued

    # -- the worker's transitions ----------------------------------------------------------------------

    def claim(self, document_id: str) -> Claim | None:
        """Take the document for processing; None when it is done, gone, held by a live worker, or of a KB
        being deleted (its row goes soon: building it would only be thrown away)."""
        return self.claim_first([document_id])

    def claim_first(self, document_ids: Sequence[str]) -> Claim | None:
        """`claim` the first of the documents that can be taken (a queue message names a batch of them: the
        others may have been built in another's batch meanwhile); None when none can."""
        now = utcnow()
        # A message often finds its documents built already, by another task's batch or a copy of the message: a
        # read tells so without taking the database's write lock (SQLite) for an update of no row.
        with self._sessions() as session:
            query = select(Document.id).where(Document.id.in_(document_ids), _claimable(now))
            claimable = set(session.scalars(query))
        for document_id in document_ids:
            if document_id in claimable and (claim := self._take(document_id, now)) is not None:
                return claim
        return None

    def _take(self, document_id: str, now: datetime) -> Claim | None:
        """The compare-and-set of a claim: None when another worker took the document first."""
        with transaction(self._sessions) as session:
            taken = session.execute(
                update(Document)
                .where(Document.id == document_id, _claimable(now), _kb_not_deleting())
                .values(
                    status=DocumentStatus.PROCESSING,
                    lease_until=now + self._lease,
                    attempts=Document.attempts + 1,
                    error=None,
                )
            ).rowcount  # type: ignore[attr-defined]
            if not taken:
                return None
            _mark_ingest_jobs(session, [document_id], JobStatus.RUNNING)
            return _claims_of(session, [document_id])[0]

    def renew(self, claim: Claim) -> Claim | None:
        """Extend the lease and return the document's current title, labels and metadata (a PATCH may have
        changed them meanwhile); None when the version changed, the document is gone, built already (by a
        worker that took it over) or its KB is being deleted: stop working on it."""
        return self.renew_many([claim]).get(claim.document_id)

    def claim_companions(self, claim: Claim, limit: int, max_bytes: int, preferred: Sequence[str] = ()) -> list[Claim]:
        """Claim up to `limit` more pending documents of `claim`'s KB and lane, each at most `max_bytes`, to be
        built in one batch with it (one model call, one index write, one commit): those of `preferred` (the
        others its queue message names) first, then the oldest. Each is taken
        exactly as `claim` takes it (a compare-and-set on pending, so that two workers never both take one); its
        own queue message later finds it taken and is skipped. None for a claimed document that is itself too
        large, or resumes a long document's split: it is built alone."""
        if limit <= 0:
            return []
        now = utcnow()
        with transaction(self._sessions) as session:
            leader = session.get(Document, claim.document_id)
            if leader is None or leader.size_bytes > max_bytes or leader.ranges_total:
                return []
            # One statement, so that workers taking companions at once share the pending documents instead of
            # all choosing the same ones and all but one getting none: SQLite runs it under its write lock, and
            # PostgreSQL skips the rows another worker is taking (SKIP LOCKED, the usual job-queue idiom). A CTE,
            # evaluated once: as an IN subquery, PostgreSQL may scan it again and take more than `limit`.
            picked = (
                select(Document.id)
                .where(
                    Document.kb_id == claim.kb_id,
                    Document.status == DocumentStatus.PENDING,
                    Document.lane == leader.lane,
                    Document.ranges_total == 0,
                    Document.size_bytes <= max_bytes,
                )
                .order_by(*_preferred_first(preferred), Document.updated_at, Document.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
                .cte("picked")
            )
            taken = session.scalars(
                update(Document)
                .where(
                    Document.id.in_(select(picked.c.id)),
                    Document.status == DocumentStatus.PENDING,
                    _kb_not_deleting(),
                )
                .values(
                    status=DocumentStatus.PROCESSING,
                    lease_until=now + self._lease,
                    attempts=Document.attempts + 1,
                    error=None,
                )
                .returning(Document.id)
                .execution_options(synchronize_session=False)
            ).all()
            companions = sorted(taken)
            _mark_ingest_jobs(session, companions, JobStatus.RUNNING)
            return _claims_of(session, companions)

    def renew_many(self, claims: Iterable[Claim]) -> dict[str, Claim]:
        """`renew` for several claims in one transaction: the current claim of each document still this worker's
        to build (absent: stop working on it). A batch's statements are one per step, not one per document."""
        claims = list(claims)
        if not claims:
            return {}
        with transaction(self._sessions) as session:
            # Processing again: a worker slowed past its lease (a loaded machine) whose document the sweeper sent
            # back to pending takes it back, so that the message the sweeper sent finds it held instead of building
            # it a second time beside this worker.
            held = hold_documents(session, claims, utcnow() + self._lease, status=DocumentStatus.PROCESSING)
            return {claim.document_id: claim for claim in _claims_of(session, sorted(held))}

    def finish(
        self,
        claim: Claim,
        chunk_count: int,
        timings: dict[str, float],
        report: dict[str, Any],
        text_sha256: str | None = None,
    ) -> bool:
        """Mark the claimed version live, with its extracted text. False when a newer version arrived
        meanwhile (this one is stale)."""
        built = BuiltVersion(claim, chunk_count, timings, report, text_sha256)
        return built.claim.document_id in self.finish_many([built]).finished

    def finish_many(self, builds: Iterable[BuiltVersion]) -> FinishedVersions:
        """Mark several claimed versions live in one transaction (a batch of documents built together): one
        commit for all. Each is a compare-and-set on its own version, as `finish`; what follows a version going
        live (its split gone, its run closed, the jobs waiting for it settled) is one statement per step."""
        builds = list(builds)
        document_ids = [built.claim.document_id for built in builds]
        with transaction(self._sessions) as session:
            stored_texts = dict(
                session.execute(select(Document.id, Document.text_sha256).where(Document.id.in_(document_ids))).all()
            )
            live = [built.claim for built in builds if _make_live(session, built)]
            if live:
                _close_runs(session, live, JobStatus.SUCCEEDED)
        replaced_texts = {document_id: stored_texts.get(document_id) for document_id in document_ids}
        return FinishedVersions({claim.document_id for claim in live}, replaced_texts)

    def fail(self, claim: Claim, reason: str) -> None:
        """The claimed version failed for good, with a reason a user can act on."""
        with transaction(self._sessions) as session:
            failed = session.execute(
                update(Document)
                .where(Document.id == claim.document_id, Document.version == claim.version)
                .values(status=DocumentStatus.FAILED, error=reason, lease_until=None)
            ).rowcount  # type: ignore[attr-defined]
            if failed:  # else a newer version took over: its run is not this one's to mark
                # A long document's ranges still queued find their split gone and stop (RangeLedger).
                _close_runs(session, [claim], JobStatus.FAILED, error=reason)

    def release_for_retry(self, claim: Claim, reason: str) -> None:
        """Hand the document back to the queue after a transient error (the retry re-claims it)."""
        with transaction(self._sessions) as session:
            session.execute(
                update(Document)
                .where(
                    Document.id == claim.document_id,
                    Document.version == claim.version,
                    # A version that went live before the error (a step after its finish failed) stays live.
                    Document.status == DocumentStatus.PROCESSING,
                )
                .values(status=DocumentStatus.PENDING, error=f"retrying: {reason}", lease_until=None)
            )

    def release_expired_leases(self) -> list[str]:
        """Documents whose worker died mid-way (lease run out) go back to pending; returns their ids."""
        now = utcnow()
        with transaction(self._sessions) as session:
            expired = (Document.status == DocumentStatus.PROCESSING) & (Document.lease_until < now)
            ids = list(session.scalars(select(Document.id).where(expired).limit(_BATCH)))
            if ids:
                session.execute(
                    update(Document)
                    .where(Document.id.in_(ids), expired)
                    .values(status=DocumentStatus.PENDING, lease_until=None, updated_at=now)
                )
            return ids

    def finish_overdue_jobs(self, upload_wait_s: float) -> list[str]:
        """Jobs past their deadline fail the items still open and finish (nobody may be watching them)."""
        with transaction(self._sessions) as session:
            return refresh_overdue_jobs(session, upload_wait_s)

    # -- reads the worker and the sweeper need -----------------------------------------------------------

    def pending_older_than(self, age: timedelta) -> list[str]:
        """Pending documents untouched for `age`: their queue message may have been lost."""
        with self._sessions() as session:
            query = select(Document.id).where(
                Document.status == DocumentStatus.PENDING, Document.updated_at < utcnow() - age
            )
            return list(session.scalars(query.limit(_BATCH)))

    def queue_places(self, document_ids: list[str]) -> dict[str, QueuePlace]:
        """The KB and lane of each of the documents still pending (a document taken, built or gone since needs no
        message): where to queue it again."""
        places: dict[str, QueuePlace] = {}
        with self._sessions() as session:
            for start in range(0, len(document_ids), _BATCH):
                batch = document_ids[start : start + _BATCH]
                query = select(Document.id, Document.kb_id, Document.lane).where(
                    Document.id.in_(batch), Document.status == DocumentStatus.PENDING
                )
                places.update((row_id, QueuePlace(kb_id, Lane(lane))) for row_id, kb_id, lane in session.execute(query))
        return places

    def bulk_backlog(self, kb_id: str) -> int:
        """How many of the KB's documents wait in the bulk lane: the priority of its next bulk message."""
        with self._sessions() as session:
            query = select(func.count()).where(
                Document.kb_id == kb_id, Document.status == DocumentStatus.PENDING, Document.lane == Lane.BULK
            )
            return session.scalar(query) or 0

    def queue_counts(self, kb_id: str) -> dict[Lane, LaneCounts]:
        """The KB's documents pending and processing, per lane."""
        waiting = (DocumentStatus.PENDING, DocumentStatus.PROCESSING)
        with self._sessions() as session:
            load_kb(session, kb_id)
            query = (
                select(Document.lane, Document.status, func.count())
                .where(Document.kb_id == kb_id, Document.status.in_(waiting))
                .group_by(Document.lane, Document.status)
            )
            found = {(Lane(lane), status): count for lane, status, count in session.execute(query)}
        return {
            lane: LaneCounts(
                pending=found.get((lane, DocumentStatus.PENDING), 0),
                processing=found.get((lane, DocumentStatus.PROCESSING), 0),
            )
            for lane in Lane
        }

    def indexed_version_of(self, document_id: str) -> int | None:
        """The version whose points are live (None: none yet, or the document is gone)."""
        with self._sessions() as session:
            return session.scalar(select(Document.indexed_version).where(Document.id == document_id))

    def exists(self, document_id: str) -> bool:
        with self._sessions() as session:
            return session.get(Document, document_id) is not None

    def unreferenced_blobs(self, shas: set[str]) -> set[str]:
        """Those of `shas` that no document uses, as its original or as its extracted text (one plain-text
        document's text may have the same bytes, hence the same blob, as another's original): safe to delete."""
        shas = {sha for sha in shas if sha}
        if not shas:
            return set()
        used: set[str] = set()
        ordered = sorted(shas)
        with self._sessions() as session:
            for start in range(0, len(ordered), _BATCH):
                batch = ordered[start : start + _BATCH]
                used.update(session.scalars(select(Document.blob_sha256).where(Document.blob_sha256.in_(batch))))
                used.update(session.scalars(select(Document.text_sha256).where(Document.text_sha256.in_(batch))))
                # A long document's text, stored when it was split and the document's once it is live.
                used.update(
                    session.scalars(select(DocumentSplit.text_sha256).where(DocumentSplit.text_sha256.in_(batch)))
                )
        return shas - used


def _restored_document(kb_id: str, restored: RestoredDocument) -> Document:
    if restored.indexed:
        status, indexed_version, indexed_at = DocumentStatus.DONE, restored.version, utcnow()
    else:
        status = DocumentStatus.FAILED if restored.error else DocumentStatus.PENDING
        indexed_version, indexed_at = None, None
    return Document(
        id=restored.id,
        kb_id=kb_id,
        source_id=restored.source_id,
        title=restored.title,
        filename=restored.filename,
        media_type=restored.media_type,
        size_bytes=restored.size_bytes,
        blob_sha256=restored.blob_sha256,
        text_sha256=restored.text_sha256 if restored.indexed else None,
        labels=restored.labels,
        metadata_=restored.metadata,
        doc_type=restored.doc_type,
        # Built again only when its points did not come with the backup: a whole KB's worth is bulk work.
        lane=Lane.BULK,
        status=status,
        version=restored.version,
        indexed_version=indexed_version,
        chunk_count=restored.chunk_count if restored.indexed else 0,
        error=None if restored.indexed else restored.error,
        indexed_at=indexed_at,
    )


def hold_document(session: Session, claim: Claim, lease_until: datetime, **fields: object) -> bool:
    """Renew the lease of the claimed version (if it is still the document's, being built), with `fields`: this
    write also locks the row (PostgreSQL) or the database (SQLite) for the rest of the transaction."""
    return claim.document_id in hold_documents(session, [claim], lease_until, **fields)


def hold_documents(session: Session, claims: Sequence[Claim], lease_until: datetime, **fields: object) -> set[str]:
    """`hold_document` for several claims in one statement: the ids of those still being built at their
    claimed version."""
    claimed_version = or_(*(
        (Document.id == claim.document_id) & (Document.version == claim.version) for claim in claims
    ))  # fmt: skip
    held = session.scalars(
        update(Document)
        .where(
            claimed_version,
            Document.status.in_((DocumentStatus.PENDING, DocumentStatus.PROCESSING)),
            _kb_not_deleting(),
        )
        .values(lease_until=lease_until, **fields)
        .returning(Document.id)
        .execution_options(synchronize_session=False)
    ).all()
    return set(held)


def _make_live(session: Session, built: BuiltVersion) -> bool:
    """The built version becomes the document's live one, if it is still the document's version."""
    claim = built.claim
    finished = session.execute(
        update(Document)
        .where(Document.id == claim.document_id, Document.version == claim.version)
        .values(
            status=DocumentStatus.DONE,
            indexed_version=claim.version,
            chunk_count=built.chunk_count,
            stage_timings=built.timings,
            ingest_report=built.report,
            lease_until=None,
            indexed_at=utcnow(),
            text_sha256=built.text_sha256,
        )
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    return bool(finished)


def _close_runs(session: Session, claims: Sequence[Claim], status: JobStatus, error: str | None = None) -> None:
    """What follows claimed versions going live or failing: their splits go, their runs are closed with
    `status`, and a sync or retry job waiting for them advances now, watched or not."""
    document_ids = [claim.document_id for claim in claims]
    delete_splits(session, document_ids)
    _mark_ingest_jobs(session, document_ids, status, error=error)
    sources_by_kb: dict[str, set[str]] = {}
    for claim in claims:
        sources_by_kb.setdefault(claim.kb_id, set()).add(claim.source_id)
    for kb_id, source_ids in sources_by_kb.items():
        settle_items_of_documents(session, kb_id, source_ids)


def _held_by_live_worker(document: Document, now: datetime) -> bool:
    lease = document.lease_until
    if document.status != DocumentStatus.PROCESSING or lease is None:
        return False
    return (lease if lease.tzinfo is not None else lease.replace(tzinfo=now.tzinfo)) >= now


def send_back_to_pending(session: Session, document: Document, lane: Lane) -> None:
    """The one way a stored version goes back to the queue (a retry): pending in `lane`, no error, no lease,
    attempts counted afresh, and the run recorded as an ingest job."""
    document.status = DocumentStatus.PENDING
    document.lane = lane
    document.error = None
    document.attempts = 0
    document.lease_until = None
    document.ranges_done, document.ranges_total = 0, 0
    record_ingest_job(session, document)


def record_ingest_job(session: Session, document: Document, *, first_run: bool = False) -> None:
    """The operator's record of one run of the document through the pipeline. Runs of earlier versions that
    never finished are closed: only the newest one is marked by the worker. `first_run`: the document was just
    inserted, no run of it can be open (one statement less per new document of an import)."""
    if not first_run:
        session.execute(
            update(Job)
            .where(Job.document_id == document.id, Job.kind == JobKind.INGEST, Job.status.in_(ACTIVE_JOB_STATUSES))
            .values(status=JobStatus.CANCELLED, finished_at=utcnow(), errors=["superseded by a newer run"])
        )
    session.add(
        Job(id=new_id(), kind=JobKind.INGEST, kb_id=document.kb_id, document_id=document.id, status=JobStatus.QUEUED)
    )


def _record_batch(session: Session, news: Sequence[NewVersion], scope: DocumentScope) -> list[BatchOutcome | None]:
    """Each item in its savepoint; None for an item to record again on its own (it collided, or an earlier item
    of its source_id did). A KB that no longer takes writes refuses every item."""
    kb_id = news[0].kb_id
    try:
        load_writable_kb(session, kb_id)
    except RagkbError as exc:
        return [exc] * len(news)
    _begin_writing(session, kb_id)
    awaited = _sources_awaited_by_sync(session, kb_id, {new.source_id for new in news})
    collided: set[str] = set()
    outcomes: list[BatchOutcome | None] = []
    for new in news:
        outcome = None if new.source_id in collided else _record_in_savepoint(session, new, scope, awaited)
        if outcome is None:
            collided.add(new.source_id)
        outcomes.append(outcome)
    return outcomes


def _record_in_savepoint(
    session: Session, new: NewVersion, scope: DocumentScope, awaited_by_sync: set[str]
) -> BatchOutcome | None:
    try:
        with session.begin_nested():
            recorded = _record_in_writable_kb(session, new, scope, awaited_by_sync)
    except RagkbError as exc:
        return exc
    except (IntegrityError, _VersionMoved):
        return None
    # Detached as recorded: a later item of the same source_id reads the row anew instead of refreshing (and
    # changing) this item's document.
    session.expunge(recorded.document)
    return recorded


def _begin_writing(session: Session, kb_id: str) -> None:
    """Open the write transaction before the first savepoint. The sqlite3 driver begins a transaction only at
    the first write, so a SAVEPOINT before any write would begin one itself, and its RELEASE would commit each
    item on its own; PostgreSQL is already in its transaction and needs nothing (nor a lock on the KB row)."""
    if session.get_bind().dialect.name == "sqlite":
        _serialize_label_writes(session, kb_id)


def _record_version(session: Session, new: NewVersion, scope: DocumentScope) -> RecordedVersion:
    # Again, in the transaction that records the version: a deletion accepted since any earlier check must not
    # get a new document.
    load_writable_kb(session, new.kb_id)
    # Asked before the document is read: between that read and the write, other uploads of it may move it on.
    return _record_in_writable_kb(session, new, scope, _sources_awaited_by_sync(session, new.kb_id, {new.source_id}))


def _record_in_writable_kb(
    session: Session, new: NewVersion, scope: DocumentScope, awaited_by_sync: set[str]
) -> RecordedVersion:
    """The version recorded, its KB checked already in this transaction; `awaited_by_sync`: the source_ids a
    sync waits for (their versions go to the bulk lane)."""
    if new.source_id in awaited_by_sync:
        new = replace(new, lane=Lane.BULK)
    existing = _document_by_source(session, new.kb_id, new.source_id)
    _check_new_version(session, existing, new, scope)
    if existing is not None and _is_unchanged(existing, new):
        return RecordedVersion(existing, None, changed=False)
    if existing is None:
        document, replaced = _insert_document(session, new), None
    else:
        # Read before the write: the row object is refreshed with the new version's values.
        replaced = existing.blob_sha256 if existing.blob_sha256 != new.blob_sha256 else None
        document = _next_version(session, existing, new)
    record_ingest_job(session, document, first_run=existing is None)
    return RecordedVersion(document, replaced, changed=True)


def _refusal_of(
    session: Session, existing: Document | None, new: NewVersion, scope: DocumentScope
) -> RagkbError | None:
    try:
        _check_new_version(session, existing, new, scope)
    except RagkbError as exc:
        return exc
    return None


def _check_new_version(session: Session, existing: Document | None, new: NewVersion, scope: DocumentScope) -> None:
    if existing is not None:
        if not scope.admits(existing.labels, existing.doc_type):
            raise Forbidden(
                f"source_id {new.source_id!r} names a document outside this key's search filter; "
                "this key cannot replace it"
            )
        _ensure_version_allowed(existing, new)
        if _is_unchanged(existing, new):
            return
    _ensure_inside_scope(scope, new.labels, new.doc_type)
    _ensure_labels_on_one_side(session, new.kb_id, new.doc_type, new.labels)


def _insert_document(session: Session, new: NewVersion) -> Document:
    document = Document(
        id=new_id(),
        kb_id=new.kb_id,
        source_id=new.source_id,
        version=1,
        status=DocumentStatus.PENDING,
        attempts=0,
        **_version_fields(new, new.title or new.default_title),
    )
    session.add(document)
    session.flush()
    return document


def _next_version(session: Session, existing: Document, new: NewVersion) -> Document:
    """One compare-and-set UPDATE that writes every field of the new version, status and lease included, on
    the version it read: a worker's claim taken in between is overwritten (its renewal then sees the new
    version and stops), and an upload recorded in between makes this one record again on top of it."""
    if not _take_next_version(session, existing, **_version_fields(new, new.title or existing.title)):
        raise _VersionMoved
    return session.get_one(Document, existing.id, populate_existing=True)


def _take_next_version(session: Session, document: Document, **fields: Any) -> bool:
    """The compare-and-set both new versions go through: the next version, pending, no error, attempts or
    lease, with `fields`, written only if the stored version is still the one `document` was read at."""
    moved = session.execute(
        update(Document)
        .where(Document.id == document.id, Document.version == document.version)
        .values(
            version=Document.version + 1,
            status=DocumentStatus.PENDING,
            error=None,
            attempts=0,
            lease_until=None,
            ranges_done=0,
            ranges_total=0,
            updated_at=utcnow(),
            **fields,
        )
    ).rowcount  # type: ignore[attr-defined]
    return bool(moved)


def _title_changes_indexed_text(document: Document, changes: dict[str, Any]) -> bool:
    """A new title changes what is indexed once the document is built or being built; a pending document's
    worker reads the title when it embeds, and a failed one is built again (with it) only by a retry."""
    if "title" not in changes or changes["title"] == document.title:
        return False
    return document.status in (DocumentStatus.DONE, DocumentStatus.PROCESSING)


def _next_version_of_same_original(session: Session, document: Document) -> Document:
    """The same original again as the next version, pending, with its ingest job recorded. A new version, not
    the same one rebuilt: a worker building the old one is superseded (its renewal sees the version move), and
    the new points replace the old ones by version when it finishes, as an upload's do."""
    if not _take_next_version(session, document):
        raise Conflict("the document changed while its title was being changed; send the change again")
    document = session.get_one(Document, document.id, populate_existing=True)
    record_ingest_job(session, document)
    return document


def _version_fields(new: NewVersion, title: str) -> dict[str, Any]:
    return {
        "title": title,
        "filename": new.filename,
        "media_type": new.media_type,
        "size_bytes": new.size_bytes,
        "blob_sha256": new.blob_sha256,
        "labels": new.labels,
        "metadata_": new.metadata,
        "doc_type": new.doc_type,
        "lane": new.lane,
    }


def _sources_awaited_by_sync(session: Session, kb_id: str, source_ids: set[str]) -> set[str]:
    """Those of the source_ids whose upload a sync's job waits for: they are a folder's files, bulk work."""
    ordered, awaited = sorted(source_ids), set[str]()
    for start in range(0, len(ordered), _BATCH):
        query = (
            select(JobItem.source_id)
            .join(Job, Job.id == JobItem.job_id)
            .where(
                JobItem.kb_id == kb_id,
                JobItem.source_id.in_(ordered[start : start + _BATCH]),
                JobItem.status == JobItemStatus.PENDING,
                JobItem.action == ItemAction.UPLOAD,
                Job.kind == JobKind.SYNC,
            )
        )
        awaited.update(session.scalars(query.distinct()))
    return awaited


def _document_by_source(session: Session, kb_id: str, source_id: str) -> Document | None:
    query = select(Document).where(Document.kb_id == kb_id, Document.source_id == source_id)
    return session.scalars(query.with_for_update().execution_options(populate_existing=True)).one_or_none()


def _visible_document(session: Session, kb_id: str, document_id: str, scope: DocumentScope) -> Document:
    """The document, if it is in the KB and inside the scope: a document outside a key's filter is answered
    exactly as one that does not exist."""
    document = session.get(Document, document_id)
    if document is None or document.kb_id != kb_id or not scope.admits(document.labels, document.doc_type):
        raise NotFound(f"document {document_id} does not exist in knowledge base {kb_id}")
    return document


def _is_unchanged(document: Document, new: NewVersion) -> bool:
    # A failed version is worth another try; anything else with the same bytes needs no work.
    same_content = document.blob_sha256 == new.blob_sha256 and document.status != DocumentStatus.FAILED
    return same_content and document.labels == new.labels and document.metadata_ == new.metadata


def _ensure_inside_scope(scope: DocumentScope, labels: list[str], doc_type: str) -> None:
    if not scope.admits(labels, doc_type):
        raise Forbidden(
            "this key's search filter limits it to documents with "
            + _scope_words(scope)
            + "; these labels and doc_type would put the document outside it",
            allowed_labels=sorted(scope.labels_any) if scope.labels_any is not None else None,
            allowed_doc_types=sorted(scope.doc_types) if scope.doc_types is not None else None,
        )


def _scope_words(scope: DocumentScope) -> str:
    parts = []
    if scope.labels_any is not None:
        parts.append("one of the labels " + ", ".join(sorted(scope.labels_any)))
    if scope.doc_types is not None:
        parts.append("doc_type " + " or ".join(sorted(scope.doc_types)))
    return " and ".join(parts)


def _ensure_version_allowed(existing: Document, new: NewVersion) -> None:
    """A new version never changes a document's doc_type, and a reference's content is never replaced: it is
    the authoritative original. (The same content again is fine: that is how a failed reference is retried.)"""
    if existing.doc_type != new.doc_type:
        raise Conflict(
            f"source_id {existing.source_id!r} names a {existing.doc_type} document, which cannot become "
            f"{new.doc_type}: delete it and register it again",
            document_id=existing.id,
        )
    if existing.doc_type == "reference" and existing.blob_sha256 != new.blob_sha256:
        raise Conflict(
            f"source_id {existing.source_id!r} names a reference document, whose content cannot be replaced: "
            "delete it and register it again",
            document_id=existing.id,
        )


def _ensure_doc_type_kept(document: Document, requested: str | None) -> None:
    if requested is not None and requested != document.doc_type:
        raise Conflict(
            f"document {document.id} is a {document.doc_type} document and cannot become {requested}: "
            "delete it and register it again",
            document_id=document.id,
        )


def _ensure_source_id_free(session: Session, kb_id: str, source_id: str, document_id: str) -> None:
    other = session.scalars(
        select(Document.id).where(Document.kb_id == kb_id, Document.source_id == source_id, Document.id != document_id)
    ).first()
    if other is not None:
        raise Conflict(f"source_id {source_id!r} already names document {other} in this knowledge base")


def _ensure_labels_on_one_side(session: Session, kb_id: str, doc_type: str, labels: list[str]) -> None:
    """Labels of reference documents and labels of knowledge documents are disjoint within a KB, so that a
    label filter selects one kind or the other, never a mix."""
    if not labels:
        return
    _serialize_label_writes(session, kb_id)
    used = session.scalars(select(Document.labels).where(Document.kb_id == kb_id, Document.doc_type != doc_type))
    conflicting = sorted(set(labels) & {label for row in used for label in row})
    if conflicting:
        other = "knowledge" if doc_type == "reference" else "reference"
        raise Conflict(
            f"labels already used by {other} documents in this knowledge base: {', '.join(conflicting)}; "
            "reference and knowledge documents cannot share labels",
            conflicting_labels=conflicting,
        )


def _serialize_label_writes(session: Session, kb_id: str) -> None:
    """A write to the KB row before reading labels: PostgreSQL locks that row and SQLite takes its write
    lock, so two concurrent writers (one reference, one knowledge, same new label) check one after the other."""
    session.execute(update(KnowledgeBase).where(KnowledgeBase.id == kb_id).values(updated_at=KnowledgeBase.updated_at))


def delete_split(session: Session, document_id: str) -> None:
    """Remove the document's split and its ranges (ragkb_store.ledger.ranges): its version went live or failed,
    or a new split replaces it."""
    delete_splits(session, [document_id])


def delete_splits(session: Session, document_ids: Sequence[str]) -> None:
    """`delete_split` for several documents, one statement per table."""
    session.execute(delete(DocumentRange).where(DocumentRange.document_id.in_(document_ids)))
    session.execute(delete(DocumentSplit).where(DocumentSplit.document_id.in_(document_ids)))


def _claimable(now: datetime) -> ColumnElement[bool]:
    """A document a worker may take: pending, or held by a worker whose lease ran out."""
    return or_(
        Document.status == DocumentStatus.PENDING,
        (Document.status == DocumentStatus.PROCESSING) & (Document.lease_until < now),
    )


def _preferred_first(preferred: Sequence[str]) -> list[ColumnElement[int]]:
    return [case((Document.id.in_(preferred), 0), else_=1)] if preferred else []


def _kb_not_deleting() -> ColumnElement[bool]:
    deleting = select(KnowledgeBase.id).where(KnowledgeBase.deletion_job_id.is_not(None))
    return Document.kb_id.not_in(deleting)


def _claim_of(session: Session, document: Document) -> Claim:
    return claim_of(document, *_build_settings(session, document.kb_id))


def _build_settings(session: Session, kb_id: str) -> tuple[KbChunking, KbAnalyzer, str]:
    """The KB's chunking, analyzer and embedding model: what its documents' claims are built with."""
    kb = session.get_one(KnowledgeBase, kb_id)
    return KbChunking.model_validate(kb.chunking), KbAnalyzer.model_validate(kb.analyzer), kb.embedding_model


def _claims_of(session: Session, document_ids: Sequence[str]) -> list[Claim]:
    """The claims of documents just taken or held, in the order of `document_ids`: the documents read in one
    statement, and each KB's settings read and validated once (a batch is one KB's)."""
    documents = session.scalars(
        select(Document).where(Document.id.in_(document_ids)).execution_options(populate_existing=True)
    ).all()
    by_id = {document.id: document for document in documents}
    settings: dict[str, tuple[KbChunking, KbAnalyzer, str]] = {}
    claims = []
    for document_id in document_ids:
        document = by_id[document_id]
        if document.kb_id not in settings:
            settings[document.kb_id] = _build_settings(session, document.kb_id)
        claims.append(claim_of(document, *settings[document.kb_id]))
    return claims


def claim_of(document: Document, chunking: KbChunking, analyzer: KbAnalyzer, embedding_model: str) -> Claim:
    """A snapshot of the document's newest version, to be built with these settings (the KB's own, or a
    re-index's)."""
    return Claim(
        document_id=document.id,
        kb_id=document.kb_id,
        source_id=document.source_id,
        version=document.version,
        title=document.title,
        media_type=document.media_type,
        blob_sha256=document.blob_sha256,
        labels=list(document.labels),
        metadata=dict(document.metadata_),
        doc_type=document.doc_type,
        attempt=document.attempts,
        chunking=chunking,
        analyzer=analyzer,
        embedding_model=embedding_model,
    )


def _mark_ingest_jobs(
    session: Session, document_ids: Sequence[str], status: JobStatus, error: str | None = None
) -> None:
    """Update the documents' open ingest jobs (record_ingest_job keeps at most one open per document), which
    record their runs for operators: one statement, and one more per job when there is an error to add."""
    now: datetime = utcnow()
    times = {"started_at": func.coalesce(Job.started_at, now)} if status == JobStatus.RUNNING else {"finished_at": now}
    marked = session.scalars(
        update(Job)
        .where(Job.document_id.in_(document_ids), Job.kind == JobKind.INGEST, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(status=status, **times)
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    ).all()
    if error:
        marked_jobs = select(Job).where(Job.id.in_(marked)).execution_options(populate_existing=True)
        for job in session.scalars(marked_jobs):
            job.errors = [*job.errors, error]
