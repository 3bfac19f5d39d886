"""Short documents claimed, renewed and finished together (ragkb_worker batches), in process, on SQLite and
PostgreSQL: a companion is taken exactly like a claim (never by two workers), only from the claimed document's
KB and lane, only when small; a batch's versions go live in one commit, each as a compare-and-set of its own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, KnowledgeBase
from ragkb_store.ledger import BuiltVersion, Claim, DocumentLedger
from ragkb_store.states import DocumentStatus, JobStatus, Lane
from tests.integration.test_ledger import ingest_jobs, version

pytestmark = pytest.mark.integration

SMALL = 1024


def new_kb(sessions: sessionmaker[Session]) -> str:
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    return kb_id


def pending(ledger: DocumentLedger, kb_id: str, count: int, name: str = "doc", **fields: object) -> list[str]:
    return [
        ledger.record_version(version(kb_id, f"{name}-{i}.md", f"{kb_id}{name}{i}", **fields)).document.id
        for i in range(count)
    ]


def status_of(sessions: sessionmaker[Session], document_id: str) -> str:
    with sessions() as session:
        return session.get_one(Document, document_id).status


def test_companions_are_pending_documents_of_the_same_kb_and_lane_oldest_first(
    ledger: DocumentLedger, sessions: sessionmaker[Session]
) -> None:
    kb_id, other_kb = new_kb(sessions), new_kb(sessions)
    leader, *same_kb = pending(ledger, kb_id, 5, lane=Lane.BULK)
    interactive = pending(ledger, kb_id, 1, "upload", lane=Lane.INTERACTIVE)
    elsewhere = pending(ledger, other_kb, 2, lane=Lane.BULK)
    claim = ledger.claim(leader)
    assert claim is not None

    companions = ledger.claim_companions(claim, 3, SMALL)

    assert {c.document_id for c in companions} == set(same_kb[:3])
    assert all(status_of(sessions, c.document_id) == DocumentStatus.PROCESSING for c in companions)
    assert all(ingest_jobs(sessions, c.document_id)[-1][0] == JobStatus.RUNNING for c in companions)
    # Their own queue messages find them taken.
    assert ledger.claim(same_kb[0]) is None
    assert [status_of(sessions, d) for d in (same_kb[3], *interactive, *elsewhere)] == [DocumentStatus.PENDING] * 4


def test_large_documents_are_built_alone(ledger: DocumentLedger, sessions: sessionmaker[Session]) -> None:
    kb_id = new_kb(sessions)
    small_leader = pending(ledger, kb_id, 1, "small")[0]
    large = pending(ledger, kb_id, 1, "large", size_bytes=SMALL + 1)[0]
    small = pending(ledger, kb_id, 1, "small-2")[0]
    claim = ledger.claim(small_leader)
    assert claim is not None
    assert [c.document_id for c in ledger.claim_companions(claim, 8, SMALL)] == [small]
    assert status_of(sessions, large) == DocumentStatus.PENDING
    # A large document claimed takes no companion.
    large_claim = ledger.claim(large)
    assert large_claim is not None
    pending(ledger, kb_id, 1, "small-3")
    assert ledger.claim_companions(large_claim, 8, SMALL) == []


def test_two_workers_never_take_the_same_companion(ledger: DocumentLedger, sessions: sessionmaker[Session]) -> None:
    kb_id = new_kb(sessions)
    leaders = pending(ledger, kb_id, 4, "leader")
    claims = [ledger.claim(document_id) for document_id in leaders]
    pending(ledger, kb_id, 40, "companion")

    def take(claim: Claim | None) -> list[str]:
        assert claim is not None
        return [c.document_id for c in ledger.claim_companions(claim, 15, SMALL)]

    with ThreadPoolExecutor(4) as pool:
        taken = [document_id for batch in pool.map(take, claims) for document_id in batch]
    assert len(taken) == len(set(taken)) == 40


def test_a_message_takes_its_first_pending_document_and_its_others_before_older_ones(
    ledger: DocumentLedger, sessions: sessionmaker[Session]
) -> None:
    kb_id = new_kb(sessions)
    older = pending(ledger, kb_id, 3, "older")  # handed back by another batch, say: older than the message's
    built, first, *others = pending(ledger, kb_id, 5, "message")
    done = ledger.claim(built)
    assert done is not None
    ledger.finish(done, 1, {}, {})

    claim = ledger.claim_first([built, first, *others])

    assert claim is not None and claim.document_id == first
    companions = ledger.claim_companions(claim, 4, SMALL, preferred=[built, first, *others])
    assert {c.document_id for c in companions} == {*others, older[0]}  # the message's three, then the oldest
    assert ledger.claim_first([built, first, *others]) is None  # a copy of the message finds nothing to take


def test_only_pending_documents_are_queued_again(ledger: DocumentLedger, sessions: sessionmaker[Session]) -> None:
    kb_id = new_kb(sessions)
    waiting, taken = pending(ledger, kb_id, 2)
    assert ledger.claim(taken) is not None
    assert set(ledger.queue_places([waiting, taken, "gone"])) == {waiting}


def test_a_failed_document_closes_its_run_with_the_reason(
    ledger: DocumentLedger, sessions: sessionmaker[Session]
) -> None:
    document_id = pending(ledger, new_kb(sessions), 1)[0]
    claim = ledger.claim(document_id)
    assert claim is not None
    ledger.fail(claim, "the PDF could not be read")
    assert status_of(sessions, document_id) == DocumentStatus.FAILED
    assert ingest_jobs(sessions, document_id)[-1] == (JobStatus.FAILED, ["the PDF could not be read"])


def test_a_batch_goes_live_in_one_commit_each_version_checked_alone(
    ledger: DocumentLedger, sessions: sessionmaker[Session]
) -> None:
    kb_id = new_kb(sessions)
    first, second, third = pending(ledger, kb_id, 3)
    claim = ledger.claim(first)
    assert claim is not None
    companions = ledger.claim_companions(claim, 2, SMALL)
    renewed = ledger.renew_many([claim, *companions])
    assert set(renewed) == {first, second, third}
    # A new upload of the third while the batch was built: its version is stale.
    ledger.record_version(version(kb_id, "doc-2.md", "changed"))
    builds = [BuiltVersion(c, 1, {"embed": 0.1}, {"chunks": 1}, "f" * 64) for c in (claim, *companions)]

    result = ledger.finish_many(builds)

    assert result.finished == {first, second}
    assert [status_of(sessions, d) for d in (first, second, third)] == [
        DocumentStatus.DONE,
        DocumentStatus.DONE,
        DocumentStatus.PENDING,
    ]
    assert ingest_jobs(sessions, first)[-1][0] == JobStatus.SUCCEEDED
    # The stale claim is not this worker's any more.
    stale = next(c for c in companions if c.document_id == third)
    assert ledger.renew_many([stale]) == {}


def test_a_version_already_live_is_not_handed_back(ledger: DocumentLedger, sessions: sessionmaker[Session]) -> None:
    kb_id = new_kb(sessions)
    document_id = pending(ledger, kb_id, 1)[0]
    claim = ledger.claim(document_id)
    assert claim is not None
    ledger.finish(claim, 1, {}, {})
    # A step after the finish failed (an old version's points not deleted): the retry policy hands it back.
    ledger.release_for_retry(claim, "the retriever did not answer")
    assert status_of(sessions, document_id) == DocumentStatus.DONE


def test_a_slow_worker_renewing_after_its_lease_ran_out_takes_its_document_back(
    sessions: sessionmaker[Session],
) -> None:
    ledger = DocumentLedger(sessions, lease_s=0)  # every lease has run out at once: a worker slowed past it
    document_id = pending(ledger, new_kb(sessions), 1)[0]
    claim = ledger.claim(document_id)
    assert claim is not None
    assert ledger.release_expired_leases() == [document_id]  # the sweeper sends it back to pending

    patient = DocumentLedger(sessions, lease_s=60)
    assert patient.renew(claim) is not None

    # The message the sweeper sent finds it held: it is not built a second time beside the slow worker.
    assert status_of(sessions, document_id) == DocumentStatus.PROCESSING
    assert patient.claim(document_id) is None
    patient.finish(claim, 1, {}, {})
    assert patient.renew(claim) is None  # built: nothing left to renew
