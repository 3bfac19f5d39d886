"""The consistency check of a KB: does its live index hold what the database says, and the repair.

The comparison is ragkb_store.consistency's; this service reads both sides (the ledger's document states, the
retriever's point census) and acts on a repair plan: documents re-queued through the ledger, orphan points
deleted through the retriever. Both actions are idempotent, so a repair run twice does nothing the second time.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.knowledge_bases.schemas import ConsistencyRepairOut, ConsistencyReportOut, FindingOut, OrphanVersionOut
from ragkb_core.contracts import KbPointCensus
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.consistency import Finding, compare, confirmed, repair_plan
from ragkb_store.db.models import utcnow
from ragkb_store.knowledge_bases import ensure_indexed_here, load_kb
from ragkb_store.ledger import DocumentLedger
from ragkb_store.queue import IngestQueue
from ragkb_store.states import Lane

_log = logging.getLogger("ragkb.api")
# A finding must still be there this long after the first pass: a document moving on between reading the
# database and counting the index looks inconsistent for an instant.
CONFIRM_AFTER_S = 0.5


class ConsistencyService:
    def __init__(self, sessions: sessionmaker[Session], retriever: RetrieverClient, queue: IngestQueue) -> None:
        self._sessions = sessions
        self._retriever = retriever
        self._queue = queue
        self._ledger = DocumentLedger(sessions)

    def check(self, kb_id: str) -> ConsistencyReportOut:
        findings, census, documents = self._examine(kb_id)
        return _report(kb_id, census, documents, findings)

    def repair(self, kb_id: str) -> ConsistencyRepairOut:
        """Re-queue the documents the index lacks, delete the points nothing owns; then check again."""
        findings, census, documents = self._examine(kb_id)
        before = _report(kb_id, census, documents, findings)
        plan = repair_plan(findings)
        requeued = self._ledger.requeue_for_repair(kb_id, plan.requeue)
        self._queue.send_batch(kb_id, [(document_id, Lane.BULK) for document_id in requeued])
        for document_id, version in plan.delete_versions:
            self._retriever.delete_document(kb_id, document_id, only_version=version)
        for document_id in plan.delete_documents:
            self._retriever.delete_document(kb_id, document_id)
        if not plan.is_empty:
            _log.info(
                "KB %s repaired: %d re-queued, %d orphan versions and %d orphan documents deleted",
                kb_id,
                len(requeued),
                len(plan.delete_versions),
                len(plan.delete_documents),
            )
        return ConsistencyRepairOut(
            before=before,
            requeued=requeued,
            deleted_versions=[OrphanVersionOut(document_id=d, version=v) for d, v in plan.delete_versions],
            deleted_documents=plan.delete_documents,
            after=self.check(kb_id),
        )

    def _examine(self, kb_id: str) -> tuple[list[Finding], KbPointCensus, int]:
        """The confirmed findings (seen by two passes), the index's census and the number of documents."""
        with self._sessions() as session:
            # 404 for a KB that does not exist; 409 for an external one (ragkb holds no index of it to check).
            ensure_indexed_here(load_kb(session, kb_id), "indexed (no consistency to check)")
        findings, census, documents = self._pass(kb_id)
        if findings:
            time.sleep(CONFIRM_AFTER_S)
            second, census, documents = self._pass(kb_id)
            findings = confirmed(findings, second)
        return findings, census, documents

    def _pass(self, kb_id: str) -> tuple[list[Finding], KbPointCensus, int]:
        # The database first, then the index: a document finishing in between still looks in flight.
        states = self._ledger.consistency_states(kb_id)
        census = self._retriever.point_census(kb_id)
        return compare(states, census.documents, utcnow()), census, len(states)


def _report(kb_id: str, census: KbPointCensus, documents: int, findings: list[Finding]) -> ConsistencyReportOut:
    return ConsistencyReportOut(
        kb_id=kb_id,
        consistent=not findings,
        generation=census.generation,
        documents=documents,
        points=sum(sum(versions.values()) for versions in census.documents.values()),
        findings=[
            FindingOut(
                kind=finding.kind.value,
                document_id=finding.document_id,
                version=finding.version,
                expected=finding.expected,
                found=finding.found,
                detail=finding.detail,
            )
            for finding in findings
        ],
    )
