"""Claims of source runs on SQLite and PostgreSQL: of many claimers of one due source exactly one wins, a
live lease keeps the others out (a restarted scheduler included), a lease that passed frees the source, and
a finished run stores its result and next run time (times compared as UTC on both databases)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Job, KnowledgeBase, Source, utcnow
from ragkb_store.ledger.sources import RunOutcome, SourceLedger
from ragkb_store.progress import as_utc, refresh_job
from ragkb_store.states import JobStatus, SourceRunStatus


@pytest.fixture
def source_id(sessions: sessionmaker[Session]) -> str:
    kb_id, source_id = new_id(), new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
        session.flush()
        session.add(Source(id=source_id, kb_id=kb_id, name="site", kind="web", config={}, next_run_at=utcnow()))
    return source_id


def test_of_many_claimers_exactly_one_runs_the_source(sessions: sessionmaker[Session], source_id: str) -> None:
    ledgers = [SourceLedger(sessions, lease_s=60) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        jobs = list(pool.map(lambda pair: pair[1].claim(source_id, f"owner-{pair[0]}"), enumerate(ledgers)))
    won = [job_id for job_id in jobs if job_id is not None]
    assert len(won) == 1
    # A scheduler started again meanwhile sees no due source: the run holds it.
    assert SourceLedger(sessions, lease_s=60).due() == []
    with sessions() as session:
        job = session.get_one(Job, won[0])
        assert (job.status, job.params) == (JobStatus.QUEUED, {"source_id": source_id})
        assert session.get_one(Source, source_id).last_job_id == won[0]


def test_a_passed_lease_frees_the_source_and_the_old_owner_can_no_longer_finish(
    sessions: sessionmaker[Session], source_id: str
) -> None:
    ledger = SourceLedger(sessions, lease_s=60)
    assert ledger.claim(source_id, "dead") is not None
    with transaction(sessions) as session:  # its process died a lease ago
        session.execute(update(Source).values(lease_until=utcnow() - timedelta(seconds=1)))
    assert ledger.due() == [source_id]
    assert ledger.claim(source_id, "alive") is not None
    assert not ledger.renew(source_id, "dead")
    later = utcnow() + timedelta(hours=1)
    ledger.finish(source_id, "dead", RunOutcome(SourceRunStatus.FAILED, "stale", later))
    with sessions() as session:
        assert session.get_one(Source, source_id).lease_owner == "alive"
    ledger.finish(source_id, "alive", RunOutcome(SourceRunStatus.SUCCEEDED, None, later))
    with sessions() as session:
        source = session.get_one(Source, source_id)
        assert (source.lease_owner, source.last_status, source.last_error) == (None, "succeeded", None)
        assert as_utc(source.next_run_at or utcnow()) == later
    assert ledger.due() == []  # next run an hour away


def test_a_queued_run_that_never_starts_fails_at_the_deadline(sessions: sessionmaker[Session], source_id: str) -> None:
    job_id = SourceLedger(sessions, lease_s=60).claim(source_id, "owner")
    assert job_id is not None
    with transaction(sessions) as session:
        job = session.get_one(Job, job_id)
        refresh_job(session, job, upload_wait_s=60)
        assert job.status == JobStatus.QUEUED  # no plan yet: not finished as if it had nothing to do
        refresh_job(session, job, upload_wait_s=60, now=utcnow() + timedelta(seconds=61))
        assert job.status == JobStatus.FAILED
