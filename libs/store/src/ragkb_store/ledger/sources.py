"""The ledger of sources (ragkb_store.db.models.Source): who runs a source now, and what its last run did.

A run is claimed with one compare-and-set UPDATE that sets a lease only where none is live, and its job is
recorded (queued) in the same transaction: of two schedulers or api replicas that see the same due source,
exactly one gets the run. The lease is renewed while the run reads and freed when it ends; a run whose process
died frees its source when the lease passes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Job, Source, utcnow
from ragkb_store.states import JobKind, JobStatus, SourceRunStatus


@dataclass(frozen=True)
class RunOutcome:
    """What a run of a source ended with, and when the source runs next (None: only when asked)."""

    status: SourceRunStatus
    error: str | None
    next_run_at: datetime | None


def _free(now: datetime) -> ColumnElement[bool]:
    """No run holds the source: no lease, or one that has passed."""
    return or_(Source.lease_until.is_(None), Source.lease_until < now)


class SourceLedger:
    def __init__(self, sessions: sessionmaker[Session], lease_s: float) -> None:
        self._sessions = sessions
        self._lease = timedelta(seconds=lease_s)

    def due(self, limit: int = 50) -> list[str]:
        """Sources whose next run time has come and that no one runs now, the longest waiting first."""
        now = utcnow()
        query = (
            select(Source.id)
            .where(Source.next_run_at.is_not(None), Source.next_run_at <= now, _free(now))
            .order_by(Source.next_run_at)
            .limit(limit)
        )
        with self._sessions() as session:
            return list(session.scalars(query))

    def claim(self, source_id: str, owner: str) -> str | None:
        """Take the source for one run and record its job, queued; the job's id, or None when another run
        holds the source (or it no longer exists)."""
        now = utcnow()
        with transaction(self._sessions) as session:
            won = session.execute(
                update(Source)
                .where(Source.id == source_id, _free(now))
                .values(lease_owner=owner, lease_until=now + self._lease)
            ).rowcount  # type: ignore[attr-defined]
            if not won:
                return None
            source = session.get_one(Source, source_id)
            job_id = new_id()
            session.add(
                Job(
                    id=job_id,
                    kind=JobKind.SYNC,
                    kb_id=source.kb_id,
                    status=JobStatus.QUEUED,
                    params={"source_id": source_id},
                    counts={},
                    errors=[],
                    created_at=now,
                )
            )
            source.last_job_id = job_id
            return job_id

    def renew(self, source_id: str, owner: str) -> bool:
        """Extend the run's lease; False when this run no longer holds it (it must stop)."""
        with transaction(self._sessions) as session:
            renewed = session.execute(
                update(Source)
                .where(Source.id == source_id, Source.lease_owner == owner)
                .values(lease_until=utcnow() + self._lease)
            ).rowcount  # type: ignore[attr-defined]
        return bool(renewed)

    def finish(self, source_id: str, owner: str, outcome: RunOutcome) -> None:
        """Free the source and record the run's result and the next run time (if this run still holds it)."""
        with transaction(self._sessions) as session:
            session.execute(
                update(Source)
                .where(Source.id == source_id, Source.lease_owner == owner)
                .values(
                    lease_owner=None,
                    lease_until=None,
                    last_run_at=utcnow(),
                    last_status=outcome.status,
                    last_error=outcome.error,
                    next_run_at=outcome.next_run_at,
                )
            )


def begin_queued_job(session: Session, job_id: str, unchanged: int) -> bool:
    """A queued source run starts: its plan is made and its items follow. False when it was cancelled (or
    its KB deleted) while queued."""
    now = utcnow()
    started = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED)
        .values(status=JobStatus.RUNNING, started_at=now, counts={"unchanged": unchanged})
    ).rowcount  # type: ignore[attr-defined]
    return bool(started)


def fail_queued_job(session: Session, job_id: str, message: str) -> None:
    """A source run that could not read its source ends its job, failed, with the reason."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)))
        .values(status=JobStatus.FAILED, finished_at=utcnow(), errors=[message])
    )
