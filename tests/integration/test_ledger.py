"""The ledger's rules, in process, on SQLite and PostgreSQL: versions (a compare-and-set that never leaves a
worker's claim behind), reference documents, labels on one side, the scope of a filtered key, retries, and
the jobs that record each run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import Conflict, Forbidden, NotFound
from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, KnowledgeBase
from ragkb_store.ledger import EVERY_DOCUMENT, DocumentLedger, DocumentScope, NewVersion
from ragkb_store.ledger.jobs import requeue_failed_documents, start_job
from ragkb_store.states import DocumentStatus, JobKind, JobStatus, Lane

pytestmark = pytest.mark.integration

PUBLIC_ONLY = DocumentScope(labels_any=frozenset({"public"}))


def version(kb_id: str, source_id: str = "a.md", content: str = "a", **fields: object) -> NewVersion:
    new = NewVersion(
        kb_id=kb_id,
        source_id=source_id,
        title=None,
        default_title=source_id,
        filename=None,
        media_type="text/markdown",
        size_bytes=1,
        blob_sha256=content.encode().hex().ljust(64, "0")[:64],
        labels=[],
        metadata={},
        doc_type="knowledge",
    )
    return replace(new, **fields)  # type: ignore[arg-type]


def ingest_jobs(sessions: sessionmaker[Session], document_id: str) -> list[tuple[str, list[str]]]:
    with sessions() as session:
        jobs = session.scalars(
            select(Job).where(Job.document_id == document_id, Job.kind == JobKind.INGEST).order_by(Job.created_at)
        )
        return [(job.status, job.errors) for job in jobs]


def test_a_new_document_is_pending_with_one_queued_run(ledger: DocumentLedger, kb_id: str) -> None:
    recorded = ledger.record_version(version(kb_id))
    assert recorded.changed and recorded.replaced_blob is None
    document = recorded.document
    assert (document.version, document.status, document.title) == (1, DocumentStatus.PENDING, "a.md")
    assert ingest_jobs(ledger._sessions, document.id) == [(JobStatus.QUEUED, [])]


def test_the_same_content_again_is_unchanged_and_records_nothing(ledger: DocumentLedger, kb_id: str) -> None:
    first = ledger.record_version(version(kb_id)).document
    again = ledger.record_version(version(kb_id))
    assert not again.changed and again.document.version == 1
    assert len(ingest_jobs(ledger._sessions, first.id)) == 1
    # New labels are a change even with the same bytes.
    assert ledger.record_version(version(kb_id, labels=["x"])).changed


def test_a_new_version_closes_the_run_of_the_one_it_replaces(ledger: DocumentLedger, kb_id: str) -> None:
    first = ledger.record_version(version(kb_id, content="a")).document
    second = ledger.record_version(version(kb_id, content="b"))
    assert second.document.version == 2 and second.replaced_blob == first.blob_sha256
    assert ingest_jobs(ledger._sessions, first.id) == [
        (JobStatus.CANCELLED, ["superseded by a newer run"]),
        (JobStatus.QUEUED, []),
    ]


def test_an_upload_over_a_workers_claim_takes_the_document_back(ledger: DocumentLedger, kb_id: str) -> None:
    """Issue 28, finding 7: a re-upload recorded while a worker held the document left it `processing` until
    the lease ran out. The version is written with its status and lease in one compare-and-set."""
    document_id = ledger.record_version(version(kb_id, content="a")).document.id
    claim = ledger.claim(document_id)
    assert claim is not None and claim.version == 1

    recorded = ledger.record_version(version(kb_id, content="b")).document
    assert (recorded.version, recorded.status, recorded.lease_until) == (2, DocumentStatus.PENDING, None)
    assert ledger.renew(claim) is None  # the worker on version 1 stops
    assert not ledger.finish(claim, 1, {}, {})  # and cannot make version 1 live
    ledger.fail(claim, "too late")  # nor fail version 2 with its own reason
    new_claim = ledger.claim(document_id)
    assert new_claim is not None and new_claim.version == 2  # at once, not after the lease
    assert ledger.finish(new_claim, 3, {}, {})
    assert [status for status, _ in ingest_jobs(ledger._sessions, document_id)] == [
        JobStatus.CANCELLED,
        JobStatus.SUCCEEDED,
    ]


def test_concurrent_re_uploads_each_get_a_version_and_leave_one_open_run(ledger: DocumentLedger, kb_id: str) -> None:
    ledger.record_version(version(kb_id, content="0"))
    with ThreadPoolExecutor(max_workers=4) as pool:
        recorded = list(pool.map(lambda n: ledger.record_version(version(kb_id, content=str(n))), range(1, 9)))
    assert sorted(r.document.version for r in recorded) == list(range(2, 10))
    document_id = recorded[0].document.id
    with ledger._sessions() as session:
        document = session.get_one(Document, document_id)
        assert (document.version, document.status) == (9, DocumentStatus.PENDING)
    runs = ingest_jobs(ledger._sessions, document_id)
    assert [status for status, _ in runs].count(JobStatus.QUEUED) == 1
    assert len(runs) == 9


def test_a_reference_keeps_its_content_and_its_type(ledger: DocumentLedger, kb_id: str) -> None:
    reference = version(kb_id, "rules.md", content="rules", doc_type="reference")
    ledger.record_version(reference)
    with pytest.raises(Conflict, match="content cannot be replaced"):
        ledger.record_version(replace(reference, blob_sha256="f" * 64))
    with pytest.raises(Conflict, match="cannot become knowledge"):
        ledger.record_version(replace(reference, doc_type="knowledge"))
    assert not ledger.record_version(reference).changed  # the same content is fine
    knowledge = ledger.record_version(version(kb_id, "notes.md")).document
    with pytest.raises(Conflict, match="cannot become reference"):
        ledger.change_fields(kb_id, knowledge.id, {}, requested_doc_type="reference", scope=EVERY_DOCUMENT, publish=_no)


def test_reference_and_knowledge_documents_never_share_a_label(ledger: DocumentLedger, kb_id: str) -> None:
    ledger.record_version(version(kb_id, "rules.md", doc_type="reference", labels=["rules"]))
    with pytest.raises(Conflict) as refused:
        ledger.record_version(version(kb_id, "notes.md", labels=["rules", "faq"]))
    assert refused.value.extra["conflicting_labels"] == ["rules"]
    notes = ledger.record_version(version(kb_id, "notes.md", labels=["faq"])).document
    with pytest.raises(Conflict):
        ledger.change_fields(
            kb_id, notes.id, {"labels": ["rules"]}, requested_doc_type=None, scope=EVERY_DOCUMENT, publish=_no
        )


def test_a_filtered_key_touches_only_documents_inside_its_filter(ledger: DocumentLedger, kb_id: str) -> None:
    """Issue 28, findings 3 and 11: a key limited to `public` documents listed, relabelled and replaced a
    `private` one. It can neither see one nor bring one inside, nor put one outside."""
    private = ledger.record_version(version(kb_id, "private.md", labels=["private"])).document
    public = ledger.record_version(version(kb_id, "public.md", labels=["public"])).document

    with pytest.raises(NotFound):
        ledger.get(kb_id, private.id, PUBLIC_ONLY)
    with pytest.raises(NotFound):
        ledger.change_fields(
            kb_id, private.id, {"labels": ["public"]}, requested_doc_type=None, scope=PUBLIC_ONLY, publish=_no
        )
    with pytest.raises(NotFound):
        ledger.writable(kb_id, private.id, PUBLIC_ONLY)  # so: no delete
    with pytest.raises(Forbidden, match="outside this key's search filter"):
        ledger.record_version(version(kb_id, "private.md", content="new", labels=["public"]), PUBLIC_ONLY)
    with pytest.raises(Forbidden, match="one of the labels public"):
        ledger.record_version(version(kb_id, "new.md", labels=["private"]), PUBLIC_ONLY)
    with pytest.raises(Forbidden):
        ledger.change_fields(
            kb_id, public.id, {"labels": ["private"]}, requested_doc_type=None, scope=PUBLIC_ONLY, publish=_no
        )

    assert ledger.get(kb_id, public.id, PUBLIC_ONLY).id == public.id
    changed = ledger.change_fields(
        kb_id, public.id, {"labels": ["public", "faq"]}, requested_doc_type=None, scope=PUBLIC_ONLY, publish=_no
    )
    assert changed.document.labels == ["public", "faq"] and not changed.requeued
    with ledger._sessions() as session:
        assert session.get_one(Document, private.id).labels == ["private"]  # untouched


def test_a_retry_sends_a_failed_document_back_without_its_lease(ledger: DocumentLedger, kb_id: str) -> None:
    document_id = ledger.record_version(version(kb_id)).document.id
    with pytest.raises(Conflict, match="only a failed document"):
        ledger.retry(kb_id, document_id)
    claim = ledger.claim(document_id)
    assert claim is not None
    ledger.fail(claim, "the document has no text")
    retried = ledger.retry(kb_id, document_id)
    assert (retried.status, retried.error, retried.lease_until, retried.attempts) == (
        DocumentStatus.PENDING,
        None,
        None,
        0,
    )
    assert [status for status, _ in ingest_jobs(ledger._sessions, document_id)] == [
        JobStatus.FAILED,
        JobStatus.QUEUED,
    ]


def test_retry_failed_requeues_only_what_the_key_may_touch(ledger: DocumentLedger, kb_id: str) -> None:
    for source_id, label in (("p.md", "public"), ("q.md", "private")):
        claim = ledger.claim(ledger.record_version(version(kb_id, source_id, labels=[label])).document.id)
        assert claim is not None
        ledger.fail(claim, "broken")
    with transaction(ledger._sessions) as session:
        job_id = start_job(session, JobKind.RETRY, kb_id)
        requeued, lane = requeue_failed_documents(session, job_id, kb_id, PUBLIC_ONLY, interactive_max_documents=10)
    with ledger._sessions() as session:
        statuses = {d.source_id: d.status for d in session.scalars(select(Document).where(Document.kb_id == kb_id))}
    assert len(requeued) == 1
    assert lane == Lane.INTERACTIVE  # one document: not bulk work
    assert statuses == {"p.md": DocumentStatus.PENDING, "q.md": DocumentStatus.FAILED}


def test_a_kb_being_deleted_takes_no_new_version(ledger: DocumentLedger, kb_id: str) -> None:
    with transaction(ledger._sessions) as session:
        session.get_one(KnowledgeBase, kb_id).deletion_job_id = new_id()
    with pytest.raises(Conflict, match="is being deleted"):
        ledger.check_version(version(kb_id))
    with pytest.raises(Conflict, match="is being deleted"):
        ledger.record_version(version(kb_id))


def test_blobs_in_use_are_found_in_any_number(ledger: DocumentLedger, kb_id: str) -> None:
    used = ledger.record_version(version(kb_id, content="used")).document.blob_sha256
    candidates = {f"{n:064x}" for n in range(1200)} | {used}
    assert ledger.unreferenced_blobs(candidates) == candidates - {used}


def _no(document: Document, changes: dict[str, object]) -> None:
    """No index to publish to: these documents were never indexed."""


def test_a_new_title_queues_an_indexed_document_again_as_its_next_version(
    ledger: DocumentLedger, kb_id: str, sessions: sessionmaker[Session]
) -> None:
    """Issue 21: the title is embedded and keyword-indexed, so a PATCH of it must rebuild the document."""
    document_id = ledger.record_version(version(kb_id)).document.id
    pending = ledger.change_fields(
        kb_id, document_id, {"title": "early"}, requested_doc_type=None, scope=EVERY_DOCUMENT, publish=_no
    )
    assert not pending.requeued  # not built yet: its worker reads the title when it embeds
    claim = ledger.claim(document_id)
    assert claim is not None and claim.title == "early"
    assert ledger.finish(claim, 1, {}, {})
    same = ledger.change_fields(
        kb_id, document_id, {"title": "early"}, requested_doc_type=None, scope=EVERY_DOCUMENT, publish=_no
    )
    assert not same.requeued
    renamed = ledger.change_fields(
        kb_id, document_id, {"title": "Renamed"}, requested_doc_type=None, scope=EVERY_DOCUMENT, publish=_no
    )
    assert renamed.requeued
    assert (renamed.document.version, renamed.document.status, renamed.document.indexed_version) == (2, "pending", 1)
    with sessions() as session:
        jobs = session.scalars(select(Job).where(Job.document_id == document_id).order_by(Job.created_at)).all()
        assert [job.status for job in jobs][-1] == "queued"
    rebuilt = ledger.claim(document_id)
    assert rebuilt is not None and (rebuilt.version, rebuilt.title) == (2, "Renamed")
