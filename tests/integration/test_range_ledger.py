"""The ledger of long documents built in ranges, in process, on SQLite and PostgreSQL: a range is taken once
while its lease lives, exactly one finishing range completes the split even when the last two finish at once,
progress is counted on the document and its ingest job, and a failure, a new version or the version going live
ends the split."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_store.db.models import Document, DocumentRange, Job
from ragkb_store.ledger import Claim, DocumentLedger
from ragkb_store.ledger.ranges import PlannedRange, RangeFinish, RangeLedger, SplitPlan
from ragkb_store.states import DocumentStatus, JobKind
from tests.integration.test_ledger import version

pytestmark = pytest.mark.integration

RANGES = 4


@pytest.fixture
def ranges(sessions: sessionmaker[Session]) -> RangeLedger:
    return RangeLedger(sessions, lease_s=60)


@pytest.fixture
def split(ledger: DocumentLedger, ranges: RangeLedger, kb_id: str) -> Iterator[Claim]:
    document = ledger.record_version(version(kb_id, "manual.pdf")).document
    claim = ledger.claim(document.id)
    assert claim is not None
    assert ranges.plan(claim, plan(RANGES))
    yield claim


def plan(count: int) -> SplitPlan:
    planned = [
        PlannedRange(3 * n + 1, 3 * n + 3, 2 * n, [{"text": f"r{n}a"}, {"text": f"r{n}b"}]) for n in range(count)
    ]
    return SplitPlan(planned, "f" * 64, {"pages": 3 * count}, {"parse": 1.0, "chunk": 0.5}, 2 * count)


def progress(sessions: sessionmaker[Session], document_id: str) -> tuple[int, int, int, int]:
    with sessions() as session:
        document = session.get_one(Document, document_id)
        job = session.scalars(select(Job).where(Job.document_id == document_id, Job.kind == JobKind.INGEST)).one()
        return document.ranges_done, document.ranges_total, job.progress_current, job.progress_total


def test_a_range_is_taken_once_while_its_lease_lives(ranges: RangeLedger, split: Claim) -> None:
    work = ranges.claim_range(split.document_id, split.version, 1)
    assert work is not None and work.first_ordinal == 2 and [c["text"] for c in work.chunks] == ["r1a", "r1b"]
    assert ranges.claim_range(split.document_id, split.version, 1) is None
    assert ranges.claim_range(split.document_id, split.version + 1, 2) is None


def test_progress_counts_ranges_and_one_caller_completes_the_split(
    ranges: RangeLedger,
    split: Claim,
    sessions: sessionmaker[Session],
) -> None:
    works = [ranges.claim_range(split.document_id, split.version, n) for n in range(RANGES)]
    assert all(work is not None for work in works)
    assert ranges.finish_range(works[0], {"embed": 2.0}, {"n": 0}) == RangeFinish.WAITING  # type: ignore[arg-type]
    assert progress(sessions, split.document_id) == (1, RANGES, 1, RANGES)
    # The last ranges finish at the same moment: exactly one of them completes the split.
    with ThreadPoolExecutor(RANGES - 1) as pool:
        outcomes = list(pool.map(lambda work: ranges.finish_range(work, {"embed": 2.0}, {"n": 1}), works[1:]))
    assert sorted(outcomes) == sorted([RangeFinish.COMPLETE] + [RangeFinish.WAITING] * (RANGES - 2))
    assert progress(sessions, split.document_id) == (RANGES, RANGES, RANGES, RANGES)
    completed = ranges.completed(split)
    assert completed is not None and completed.chunk_count == 2 * RANGES
    assert completed.timings == {"parse": 1.0, "chunk": 0.5, "embed": 2.0 * RANGES}
    assert [built.first_ordinal for built in completed.ranges] == [0, 2, 4, 6]
    # A range finishing again (a duplicate that ran meanwhile) completes nothing more.
    assert ranges.finish_range(works[0], {}, {}) == RangeFinish.WAITING  # type: ignore[arg-type]


def test_a_failed_document_ends_its_split_and_its_ranges_stop(
    ledger: DocumentLedger,
    ranges: RangeLedger,
    split: Claim,
    sessions: sessionmaker[Session],
) -> None:
    work = ranges.claim_range(split.document_id, split.version, 0)
    assert work is not None
    ledger.fail(split, "pages 4–6: the retriever answered 500")
    assert ranges.finish_range(work, {}, {}) == RangeFinish.GONE
    assert ranges.claim_range(split.document_id, split.version, 1) is None
    assert ranges.split_of(split) is None
    with sessions() as session:
        assert session.scalars(select(DocumentRange)).all() == []


def test_a_new_version_supersedes_the_split_and_a_live_version_removes_it(
    ledger: DocumentLedger,
    ranges: RangeLedger,
    split: Claim,
    kb_id: str,
) -> None:
    work = ranges.claim_range(split.document_id, split.version, 0)
    newer = ledger.record_version(version(kb_id, "manual.pdf", content="b")).document
    assert newer.ranges_total == 0 and newer.status == DocumentStatus.PENDING
    assert work is not None and ranges.renew_range(work) is None
    assert ranges.finish_range(work, {}, {}) == RangeFinish.GONE

    claim = ledger.claim(newer.id)
    assert claim is not None and ranges.plan(claim, plan(1))
    assert ledger.finish(claim, 2, {}, {}, "f" * 64)
    assert ranges.split_of(claim) is None


def test_an_expired_range_lease_lets_another_worker_take_it(sessions: sessionmaker[Session], split: Claim) -> None:
    short = RangeLedger(sessions, lease_s=1)
    assert short.claim_range(split.document_id, split.version, 3) is not None
    time.sleep(1.5)
    again = short.claim_range(split.document_id, split.version, 3)
    assert again is not None and again.attempt == 2
