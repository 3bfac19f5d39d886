"""A batch upload's versions checked in one session and recorded in one transaction (a savepoint per item), in
process, on SQLite and PostgreSQL: each item ends exactly as it would have sent alone, one after the other; a
refused item leaves the others in; an item colliding with a concurrent upload is recorded again on its own."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import Conflict, Forbidden, RagkbError
from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, KnowledgeBase
from ragkb_store.ledger import BatchOutcome, DocumentLedger, DocumentScope, RecordedVersion
from ragkb_store.states import JobStatus
from tests.integration.test_ledger import ingest_jobs, version

pytestmark = pytest.mark.integration

PUBLIC_ONLY = DocumentScope(labels_any=frozenset({"public"}))


def recorded(outcome: BatchOutcome) -> RecordedVersion:
    assert isinstance(outcome, RecordedVersion), outcome
    return outcome


def stored_versions(sessions: sessionmaker[Session], kb_id: str) -> dict[str, tuple[int, str]]:
    with sessions() as session:
        rows = session.execute(
            select(Document.source_id, Document.version, Document.blob_sha256).where(Document.kb_id == kb_id)
        )
        return {source_id: (number, sha) for source_id, number, sha in rows}


def test_a_refused_item_is_reported_and_the_others_go_in(ledger: DocumentLedger, kb_id: str) -> None:
    ledger.record_version(version(kb_id, "rules.md", "r", doc_type="reference"))
    batch = [
        version(kb_id, "a.md", "a"),
        version(kb_id, "rules.md", "new rules", doc_type="reference"),
        version(kb_id, "b.md", "b"),
    ]

    checks = ledger.check_versions(batch)
    outcomes = ledger.record_versions(batch)

    assert checks[0] is None and checks[2] is None
    assert isinstance(checks[1], Conflict) and "reference document" in checks[1].detail
    assert isinstance(outcomes[1], Conflict) and outcomes[1].detail == checks[1].detail
    for outcome in (outcomes[0], outcomes[2]):
        document = recorded(outcome).document
        assert (document.version, recorded(outcome).changed) == (1, True)
        assert ingest_jobs(ledger._sessions, document.id) == [(JobStatus.QUEUED, [])]
    assert set(stored_versions(ledger._sessions, kb_id)) == {"a.md", "b.md", "rules.md"}


def test_a_source_id_repeated_in_a_batch_becomes_the_next_version_of_the_earlier_item(
    ledger: DocumentLedger, kb_id: str
) -> None:
    first, second, again = version(kb_id, "a.md", "one"), version(kb_id, "a.md", "two"), version(kb_id, "a.md", "two")

    assert ledger.check_versions([first, second, again]) == [None, None, None]
    outcomes = [recorded(outcome) for outcome in ledger.record_versions([first, second, again])]

    # Each item's document as it was when that item was recorded, as when they are sent one by one.
    assert [(o.document.version, o.document.blob_sha256, o.changed) for o in outcomes] == [
        (1, first.blob_sha256, True),
        (2, second.blob_sha256, True),
        (2, second.blob_sha256, False),
    ]
    assert outcomes[1].replaced_blob == first.blob_sha256
    assert stored_versions(ledger._sessions, kb_id) == {"a.md": (2, second.blob_sha256)}
    assert [status for status, _ in ingest_jobs(ledger._sessions, outcomes[0].document.id)] == [
        JobStatus.CANCELLED,
        JobStatus.QUEUED,
    ]


def test_a_repeated_source_id_refused_only_because_of_the_earlier_item_is_refused_when_recorded(
    ledger: DocumentLedger, kb_id: str
) -> None:
    batch = [version(kb_id, "a.md", "a", doc_type="reference"), version(kb_id, "a.md", "a")]

    # Checked against the stored documents, the second passes; recorded after the first, it is refused.
    assert ledger.check_versions(batch) == [None, None]
    outcomes = ledger.record_versions(batch)

    assert recorded(outcomes[0]).document.doc_type == "reference"
    assert isinstance(outcomes[1], Conflict) and "cannot become knowledge" in outcomes[1].detail


def test_an_unchanged_item_records_nothing(ledger: DocumentLedger, kb_id: str) -> None:
    stored = ledger.record_version(version(kb_id, "a.md", "a")).document

    outcomes = [recorded(o) for o in ledger.record_versions([version(kb_id, "a.md", "a"), version(kb_id, "b.md", "b")])]

    assert (outcomes[0].document.id, outcomes[0].document.version, outcomes[0].changed) == (stored.id, 1, False)
    assert ingest_jobs(ledger._sessions, stored.id) == [(JobStatus.QUEUED, [])]
    assert outcomes[1].changed


def test_an_item_outside_the_keys_filter_is_refused_and_the_others_go_in(ledger: DocumentLedger, kb_id: str) -> None:
    ledger.record_version(version(kb_id, "private.md", "p", labels=["private"]))
    batch = [
        version(kb_id, "new.md", "n", labels=["private"]),
        version(kb_id, "public.md", "pub", labels=["public"]),
        version(kb_id, "private.md", "p2", labels=["public"]),
    ]

    checks = ledger.check_versions(batch, PUBLIC_ONLY)
    outcomes = ledger.record_versions(batch, PUBLIC_ONLY)

    for refusals in (checks, outcomes):
        assert isinstance(refusals[0], Forbidden) and "one of the labels public" in refusals[0].detail
        assert isinstance(refusals[2], Forbidden) and "outside this key's search filter" in refusals[2].detail
    assert checks[1] is None and recorded(outcomes[1]).changed
    assert set(stored_versions(ledger._sessions, kb_id)) == {"private.md", "public.md"}


def test_a_version_recorded_between_the_check_and_the_record_is_built_upon(ledger: DocumentLedger, kb_id: str) -> None:
    ledger.record_version(version(kb_id, "a.md", "one"))
    batch = [version(kb_id, "a.md", "three"), version(kb_id, "b.md", "b")]
    assert ledger.check_versions(batch) == [None, None]

    ledger.record_version(version(kb_id, "a.md", "two"))  # a concurrent single upload
    outcomes = [recorded(outcome) for outcome in ledger.record_versions(batch)]

    assert (outcomes[0].document.version, outcomes[0].replaced_blob) == (3, version(kb_id, "a.md", "two").blob_sha256)


def test_an_item_colliding_with_a_concurrent_first_upload_is_recorded_again_on_its_own(
    ledger: DocumentLedger, sessions: sessionmaker[Session], kb_id: str
) -> None:
    """Another upload inserts the same new source_id while the batch is recorded: on PostgreSQL the batch's
    insert waits for it and then collides (recorded again after the batch's commit); on SQLite the batch waits
    for its write lock and finds the document. Either way, the item is that document's next version and the
    batch's other items go in once."""
    batch = [version(kb_id, "a.md", "a"), version(kb_id, "raced.md", "mine"), version(kb_id, "b.md", "b")]
    with ThreadPoolExecutor(max_workers=1) as pool:
        with transaction(sessions) as session:
            session.add(racing_first_upload(kb_id, "raced.md"))
            session.flush()
            pending = pool.submit(ledger.record_versions, batch)
            time.sleep(0.5)  # the batch reaches the row the other upload holds
        outcomes = [recorded(outcome) for outcome in pending.result(timeout=30)]

    assert [(o.document.source_id, o.document.version) for o in outcomes] == [("a.md", 1), ("raced.md", 2), ("b.md", 1)]
    assert stored_versions(sessions, kb_id)["raced.md"] == (2, batch[1].blob_sha256)
    assert [status for status, _ in ingest_jobs(sessions, outcomes[1].document.id)] == [JobStatus.QUEUED]


def test_a_kb_being_deleted_refuses_every_item(
    ledger: DocumentLedger, sessions: sessionmaker[Session], kb_id: str
) -> None:
    with transaction(sessions) as session:
        session.get_one(KnowledgeBase, kb_id).deletion_job_id = new_id()
    batch = [version(kb_id, "a.md", "a"), version(kb_id, "b.md", "b")]

    for refusals in (ledger.check_versions(batch), ledger.record_versions(batch)):
        assert all(isinstance(refusal, RagkbError) and refusal.status == 409 for refusal in refusals)
    assert stored_versions(sessions, kb_id) == {}


def racing_first_upload(kb_id: str, source_id: str) -> Document:
    """The row another upload's first version inserts (its ingest job left out: this test reads only the batch's)."""
    other = version(kb_id, source_id, "theirs")
    return Document(
        id=new_id(),
        kb_id=kb_id,
        source_id=source_id,
        title=source_id,
        media_type=other.media_type,
        size_bytes=other.size_bytes,
        blob_sha256=other.blob_sha256,
    )
