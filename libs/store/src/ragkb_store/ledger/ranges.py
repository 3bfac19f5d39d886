"""The ledger of long documents built in page ranges: every write of a split, its ranges and its progress.

A worker that claimed a long document parses and chunks it whole, then records a split: one row per page range
with that range's chunks. Any free worker process takes a range (a compare-and-set with a lease of its own, as a
document's claim), embeds it and marks it done with its vectors; the range that completes the split writes the
whole version to the index and makes it live (DocumentLedger.finish, which also removes the split). Progress
(ranges done of ranges total) is kept on the document and on its ingest job. A split outlives its worker:
claimed again after its lease ran out, the document resumes the split (the ranges not done are sent again)
instead of being parsed anew."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, DocumentRange, DocumentSplit, Job, utcnow
from ragkb_store.ledger.documents import Claim, _claim_of, _kb_not_deleting, delete_split, hold_document
from ragkb_store.states import ACTIVE_JOB_STATUSES, DocumentStatus, JobKind, RangeStatus


@dataclass(frozen=True)
class PlannedRange:
    """Pages [first_page, last_page] of the document and their chunks, the first with ordinal `first_ordinal`."""

    first_page: int
    last_page: int
    first_ordinal: int
    chunks: list[dict[str, Any]]


@dataclass(frozen=True)
class SplitPlan:
    """What the whole-document stages left for the ranges: the extracted text (stored), report and timings."""

    ranges: list[PlannedRange]
    text_sha256: str
    report: dict[str, Any]
    timings: dict[str, float]
    chunk_count: int


@dataclass(frozen=True)
class SplitState:
    """A split in progress: the positions of its ranges not done yet, and how many it has."""

    waiting: list[int]
    total: int


@dataclass(frozen=True)
class RangeWork:
    """A range taken by a worker: the document version's claim and the range's chunks."""

    claim: Claim
    # The model the split was chunked for (the claim's is the KB's now: a re-index may have switched it).
    embedding_model: str
    position: int
    first_page: int
    last_page: int
    first_ordinal: int
    chunks: list[dict[str, Any]]
    attempt: int


@dataclass(frozen=True)
class BuiltRange:
    first_ordinal: int
    chunks: list[dict[str, Any]]
    vectors: dict[str, Any]


@dataclass(frozen=True)
class CompletedSplit:
    """Every range is built: what writing the version and making it live need, its ranges in page order."""

    text_sha256: str
    report: dict[str, Any]
    timings: dict[str, float]
    chunk_count: int
    ranges: list[BuiltRange]


class RangeFinish(StrEnum):
    WAITING = "waiting"  # other ranges are not built yet
    COMPLETE = "complete"  # this was the last one: the caller makes the version live
    GONE = "gone"  # the split is gone (the version failed, was superseded or deleted): the caller withdraws


class RangeLedger:
    def __init__(self, sessions: sessionmaker[Session], lease_s: int = 300) -> None:
        self._sessions = sessions
        self._lease = timedelta(seconds=lease_s)

    def plan(self, claim: Claim, plan: SplitPlan) -> bool:
        """Record the claimed version's split (replacing any earlier one of the document); False when the
        version moved on meanwhile (nothing recorded)."""
        now = utcnow()
        with transaction(self._sessions) as session:
            if not hold_document(session, claim, now + self._lease, ranges_done=0, ranges_total=len(plan.ranges)):
                return False
            delete_split(session, claim.document_id)
            session.add(_split_row(claim, plan, now))
            session.flush()
            session.add_all(_range_row(claim, position, planned) for position, planned in enumerate(plan.ranges))
            _set_job_progress(session, claim.document_id, 0, len(plan.ranges))
        return True

    def split_of(self, claim: Claim) -> SplitState | None:
        """The claimed version's split, if one was recorded (a worker built part of it, then lost its lease)."""
        with self._sessions() as session:
            if session.scalar(_split_query(claim.document_id, claim.version)) is None:
                return None
            rows = session.execute(
                select(DocumentRange.position, DocumentRange.status).where(
                    DocumentRange.document_id == claim.document_id
                )
            ).all()
        return SplitState([p for p, status in rows if status != RangeStatus.DONE], len(rows))

    def completed(self, claim: Claim) -> CompletedSplit | None:
        """The claimed version's split when every range is built (its last range's worker died before making it
        live); None otherwise."""
        with self._sessions() as session:
            return _completed(session, claim.document_id, claim.version)

    def claim_completed(self, document_id: str, version: int) -> Claim | None:
        """The version's claim, its lease renewed, when every range is built but the version is not live yet (the
        write of the whole version failed and is tried again); None otherwise."""
        with transaction(self._sessions) as session:
            document = _building(session, document_id, version)
            if document is None or _completed_counts(session, document_id) is None:
                return None
            document.lease_until = utcnow() + self._lease
            return _claim_of(session, document)

    def claim_range(self, document_id: str, version: int, position: int) -> RangeWork | None:
        """Take a range: None when it is built, held by a live worker, or its version is no longer being built
        (superseded, failed, deleted, its KB being deleted)."""
        now = utcnow()
        with transaction(self._sessions) as session:
            document = _building(session, document_id, version)
            if document is None:
                return None
            taken = session.execute(
                update(DocumentRange)
                .where(
                    DocumentRange.document_id == document_id,
                    DocumentRange.position == position,
                    DocumentRange.version == version,
                    or_(
                        DocumentRange.status == RangeStatus.PENDING,
                        (DocumentRange.status == RangeStatus.RUNNING) & (DocumentRange.lease_until < now),
                    ),
                )
                .values(status=RangeStatus.RUNNING, lease_until=now + self._lease, attempts=DocumentRange.attempts + 1)
            ).rowcount  # type: ignore[attr-defined]
            if not taken:
                return None
            # The document is held as long as any of its ranges is worked on: its lease follows theirs.
            document.lease_until = now + self._lease
            row = session.get_one(DocumentRange, (document_id, position), populate_existing=True)
            split = session.get_one(DocumentSplit, document_id)
            return RangeWork(
                claim=_claim_of(session, document),
                embedding_model=split.embedding_model,
                position=position,
                first_page=row.first_page,
                last_page=row.last_page,
                first_ordinal=row.first_ordinal,
                chunks=list(row.chunks),
                attempt=row.attempts,
            )

    def renew_range(self, work: RangeWork) -> Claim | None:
        """Extend the range's lease and the document's; the version's current claim (title, labels…), or None
        when it is no longer being built: stop."""
        now = utcnow()
        with transaction(self._sessions) as session:
            document = _building(session, work.claim.document_id, work.claim.version)
            if document is None:
                return None
            renewed = session.execute(
                update(DocumentRange)
                .where(_range_of(work), DocumentRange.status == RangeStatus.RUNNING)
                .values(lease_until=now + self._lease)
            ).rowcount  # type: ignore[attr-defined]
            if not renewed:
                return None
            document.lease_until = now + self._lease
            return _claim_of(session, document)

    def finish_range(self, work: RangeWork, timings: dict[str, float], vectors: dict[str, Any]) -> RangeFinish:
        """The range is built: its `vectors` are kept for the version's write. COMPLETE for exactly one caller,
        the one whose range was the last; the document row is locked first, so that two last ranges finishing at
        once count in turn."""
        now = utcnow()
        with transaction(self._sessions) as session:
            if not hold_document(session, work.claim, now + self._lease) or not _split_exists(session, work):
                return RangeFinish.GONE
            finished = session.execute(
                update(DocumentRange)
                .where(_range_of(work), DocumentRange.status != RangeStatus.DONE)
                .values(status=RangeStatus.DONE, lease_until=None, error=None, stage_timings=timings, vectors=vectors)
            ).rowcount  # type: ignore[attr-defined]
            done, total = _range_counts(session, work.claim.document_id)
            session.execute(update(Document).where(Document.id == work.claim.document_id).values(ranges_done=done))
            _set_job_progress(session, work.claim.document_id, done, total)
            return RangeFinish.COMPLETE if finished and done == total else RangeFinish.WAITING

    def release_range(self, work: RangeWork, reason: str) -> None:
        """Hand the range back after a transient error: its retry (or another worker) takes it again."""
        with transaction(self._sessions) as session:
            session.execute(
                update(DocumentRange)
                .where(_range_of(work), DocumentRange.status == RangeStatus.RUNNING)
                .values(status=RangeStatus.PENDING, lease_until=None, error=f"retrying: {reason}")
            )


def _building(session: Session, document_id: str, version: int) -> Document | None:
    """The document, when this version of it is being built (pending after a lost lease, or processing)."""
    document = session.get(Document, document_id, populate_existing=True)
    if document is None or document.version != version:
        return None
    if document.status not in (DocumentStatus.PENDING, DocumentStatus.PROCESSING):
        return None
    deleting = session.scalar(select(func.count()).where(Document.id == document_id, ~_kb_not_deleting()))
    return None if deleting else document


def _completed(session: Session, document_id: str, version: int) -> CompletedSplit | None:
    split = session.scalar(_split_query(document_id, version))
    if split is None:
        return None
    done, total = _range_counts(session, document_id)
    if done < total:
        return None
    report = {**split.ingest_report, "ranges_retried": _retried_ranges(session, document_id)}
    rows = session.scalars(
        select(DocumentRange).where(DocumentRange.document_id == document_id).order_by(DocumentRange.position)
    )
    built = [BuiltRange(row.first_ordinal, list(row.chunks), dict(row.vectors or {})) for row in rows]
    return CompletedSplit(split.text_sha256, report, _timings(session, split), split.chunk_count, built)


def _completed_counts(session: Session, document_id: str) -> tuple[int, int] | None:
    done, total = _range_counts(session, document_id)
    return (done, total) if total and done == total else None


def _retried_ranges(session: Session, document_id: str) -> list[dict[str, Any]]:
    """The ranges that took more than one attempt (a transient failure, a worker lost), for the operator."""
    rows = session.execute(
        select(DocumentRange.first_page, DocumentRange.last_page, DocumentRange.attempts)
        .where(DocumentRange.document_id == document_id, DocumentRange.attempts > 1)
        .order_by(DocumentRange.position)
    )
    return [{"pages": [first, last], "attempts": attempts} for first, last, attempts in rows]


def _timings(session: Session, split: DocumentSplit) -> dict[str, float]:
    """The whole-document stages' seconds plus every range's (embed and index, summed over the ranges)."""
    timings: dict[str, float] = dict(split.stage_timings)
    for seconds in session.scalars(
        select(DocumentRange.stage_timings).where(DocumentRange.document_id == split.document_id)
    ):
        for stage, value in seconds.items():
            timings[stage] = round(timings.get(stage, 0.0) + float(value), 4)
    return timings


def _range_counts(session: Session, document_id: str) -> tuple[int, int]:
    rows = session.execute(select(DocumentRange.status).where(DocumentRange.document_id == document_id)).scalars()
    statuses = list(rows)
    return sum(1 for status in statuses if status == RangeStatus.DONE), len(statuses)


def _split_query(document_id: str, version: int) -> Any:
    return select(DocumentSplit).where(DocumentSplit.document_id == document_id, DocumentSplit.version == version)


def _split_exists(session: Session, work: RangeWork) -> bool:
    return session.scalar(_split_query(work.claim.document_id, work.claim.version)) is not None


def _range_of(work: RangeWork) -> Any:
    return (
        (DocumentRange.document_id == work.claim.document_id)
        & (DocumentRange.position == work.position)
        & (DocumentRange.version == work.claim.version)
    )


def _split_row(claim: Claim, plan: SplitPlan, now: datetime) -> DocumentSplit:
    return DocumentSplit(
        document_id=claim.document_id,
        version=claim.version,
        embedding_model=claim.embedding_model,
        text_sha256=plan.text_sha256,
        ingest_report=plan.report,
        stage_timings=plan.timings,
        chunk_count=plan.chunk_count,
        created_at=now,
    )


def _range_row(claim: Claim, position: int, planned: PlannedRange) -> DocumentRange:
    return DocumentRange(
        document_id=claim.document_id,
        position=position,
        version=claim.version,
        first_page=planned.first_page,
        last_page=planned.last_page,
        first_ordinal=planned.first_ordinal,
        chunks=planned.chunks,
        status=RangeStatus.PENDING,
        attempts=0,
        stage_timings={},
    )


def _set_job_progress(session: Session, document_id: str, current: int, total: int) -> None:
    """The document's open ingest job counts its ranges: GET /v1/jobs/{id} shows how far a long one is."""
    session.execute(
        update(Job)
        .where(Job.document_id == document_id, Job.kind == JobKind.INGEST, Job.status.in_(ACTIVE_JOB_STATUSES))
        .values(progress_current=current, progress_total=total)
    )
