"""Re-index a KB into a new index generation, check it, switch to it (ragkb_store.reindexing).

The check is twofold: every indexed document present at its live version, then the quality gate
(ragkb_worker.quality_gate) when the KB has a quality-gate question set; a refused switch fails the job
with both nDCG@10 figures, leaves the old generation serving and drops the new one.

Documents are rebuilt from their stored originals with the job's settings (chunking, analyzer, embedding
model: a new model's embedder is loaded once per worker process) at the version that is live, and
written into the new generation only: nothing a search sees changes until the switch. Documents that change
while the job runs (a new upload, a deletion) are caught up by the check, which runs until the new generation
holds every indexed document at its live version, so the switch loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.errors import RagkbError
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, JobItem, KnowledgeBase
from ragkb_store.ledger import Claim, claim_of
from ragkb_store.ledger.jobs import record_params, settle_item
from ragkb_store.progress import fail_job, finish_if_settled
from ragkb_store.quality_gate import QualityCheck
from ragkb_store.reindexing import (
    BuildSettings,
    IndexState,
    ReindexTarget,
    settings_of,
    take_settings,
)
from ragkb_store.states import DocumentStatus, ItemAction, JobItemStatus, JobKind, JobStatus
from ragkb_worker.pipeline import IngestPipeline
from ragkb_worker.quality_gate import QualityGate

_log = logging.getLogger("ragkb.worker")
# Catch-up rounds before the switch; each round rebuilds what changed during the previous one.
MAX_CATCH_UP_ROUNDS = 5


@dataclass(frozen=True)
class LiveDocument:
    document_id: str
    source_id: str
    version: int


class Reindexer:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        pipeline: IngestPipeline,
        retriever: RetrieverClient,
        gate: QualityGate,
        enqueue_finish: Callable[[str], None],
    ) -> None:
        self._sessions = sessions
        self._pipeline = pipeline
        self._retriever = retriever
        self._gate = gate
        self._enqueue_finish = enqueue_finish

    def reindex_document(self, job_id: str, document_id: str) -> str:
        """Build one document into the job's generation and settle its item; start the check after the last.
        A failure raises: the task's failure policy retries it or fails the item (fail_document)."""
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.status != JobStatus.RUNNING:
                return "skipped"
            target = ReindexTarget.model_validate(job.params)
            claim = _live_claim(session, document_id, target.settings)
        if claim is not None:
            self._pipeline.build_into(claim, target.generation)
        self._settle_item(job_id, document_id, None)
        return "done"

    def fail_document(self, job_id: str, document_id: str, reason: str) -> str:
        """The document's item failed with the reason; the job goes on (the check catches it up or says so)."""
        _log.warning("re-index of %s failed: %s", document_id, reason)
        self._settle_item(job_id, document_id, reason)
        return "failed"

    def _settle_item(self, job_id: str, document_id: str, message: str | None) -> None:
        with transaction(self._sessions) as session:
            source_id = _source_of(session, job_id, document_id)
            settle_item(session, job_id, source_id, ItemAction.REINDEX, message)
            left = _open_items(session, job_id)
        if left == 0:
            self._enqueue_finish(job_id)

    def finish(self, job_id: str) -> str:
        """Catch up, check (every document, then the quality gate), switch. Idempotent: a finished job is
        left alone."""
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.status != JobStatus.RUNNING or job.kind != JobKind.REINDEX or job.kb_id is None:
                return "skipped"
            kb_id, target = job.kb_id, ReindexTarget.model_validate(job.params)
        missing = self._catch_up(job_id, kb_id, target)
        if missing:
            return self._fail(job_id, f"the new generation still lacks {len(missing)} documents: {missing[:5]}")
        try:
            check = self._gate.check(kb_id, target)
        except RagkbError as exc:  # e.g. the retriever unreachable: no switch without a verdict
            return self._fail(job_id, f"the quality gate could not run ({exc.detail}); the old generation serves")
        self._record_check(job_id, check)
        if not check.passed:
            # Dropped, not kept: nothing can search a generation that is not live, and it holds a full copy of
            # the KB's index; the job keeps both figures, and a re-index with skip_quality_gate rebuilds it.
            self._retriever.drop_generation(kb_id, target.generation)
            return self._fail(job_id, check.refusal())
        live, previous = self._retriever.switch_generation(kb_id, target.generation)
        self._record_switch(job_id, kb_id, target, previous)
        _log.info("KB %s: switched to generation %d (previous %d)", kb_id, live, previous)
        return "switched"

    def _catch_up(self, job_id: str, kb_id: str, target: ReindexTarget) -> list[str]:
        """Rebuild the documents whose live version the new generation lacks, until none is missing (a
        document deleted meanwhile is deleted from every generation by the api). Returns what is still missing."""
        missing: list[LiveDocument] = []
        for _ in range(MAX_CATCH_UP_ROUNDS):
            missing = [doc for doc in self._live_documents(kb_id) if not self._holds(kb_id, target, doc)]
            if not missing:
                break
            for document in missing:
                self._rebuild(job_id, document, target)
        self._remove_deleted(kb_id, target)
        return [doc.source_id for doc in missing if not self._holds(kb_id, target, doc)]

    def _remove_deleted(self, kb_id: str, target: ReindexTarget) -> None:
        """Documents deleted during the job: the api deleted them from every generation, but a build that was
        already under way may have written one into the new generation after that."""
        with self._sessions() as session:
            existing = set(session.scalars(select(Document.id).where(Document.id.in_(target.document_ids))))
        for document_id in set(target.document_ids) - existing:
            self._retriever.delete_document(kb_id, document_id, generation=target.generation)

    def _rebuild(self, job_id: str, document: LiveDocument, target: ReindexTarget) -> None:
        with self._sessions() as session:
            claim = _live_claim(session, document.document_id, target.settings)
        if claim is None:
            return
        try:
            self._pipeline.build_into(claim, target.generation)
        except Exception as exc:  # still missing: the check reports it
            _log.warning("re-index catch-up of %s failed: %s", document.source_id, exc)
            return
        with transaction(self._sessions) as session:
            settle_item(session, job_id, document.source_id, ItemAction.REINDEX, None, only_open=False)

    def _holds(self, kb_id: str, target: ReindexTarget, document: LiveDocument) -> bool:
        """The new generation holds the document at its live version (and, after this, no other version)."""
        generation = target.generation
        self._retriever.delete_document(
            kb_id, document.document_id, keep_version=document.version, generation=generation
        )
        return self._retriever.count_points(kb_id, document.document_id, generation=generation) > 0

    def _live_documents(self, kb_id: str) -> list[LiveDocument]:
        with self._sessions() as session:
            rows = session.execute(
                select(Document.id, Document.source_id, Document.indexed_version).where(
                    Document.kb_id == kb_id, Document.indexed_version.is_not(None)
                )
            )
            return [LiveDocument(doc_id, source_id, version or 0) for doc_id, source_id, version in rows]

    def _record_switch(self, job_id: str, kb_id: str, target: ReindexTarget, previous: int) -> None:
        with transaction(self._sessions) as session:
            kb = session.get_one(KnowledgeBase, kb_id)
            replaced = settings_of(kb)
            take_settings(kb, target.settings)
            kb.index_state = IndexState(previous_generation=previous, previous_settings=replaced).model_dump(
                mode="json"
            )
            finish_if_settled(session, job_id)
        self._drop_older_generations(kb_id, keep={target.generation, previous})

    def _record_check(self, job_id: str, check: QualityCheck) -> None:
        with transaction(self._sessions) as session:
            record_params(session, job_id, quality_check=check.model_dump(mode="json"))
        if check.skipped is None:
            _log.info("re-index job %s: nDCG@10 %s → %s", job_id, check.old_ndcg_at_10, check.new_ndcg_at_10)

    def _drop_older_generations(self, kb_id: str, keep: set[int]) -> None:
        for generation in self._retriever.generations(kb_id).all:
            if generation not in keep:
                self._retriever.drop_generation(kb_id, generation)

    def fail(self, job_id: str, message: str) -> str:
        """End the job failed with the reason; the old generation keeps serving."""
        return self._fail(job_id, message)

    def _fail(self, job_id: str, message: str) -> str:
        with transaction(self._sessions) as session:
            fail_job(session, job_id, message)
        _log.warning("re-index job %s failed: %s", job_id, message)
        return "failed"


def _live_claim(session: Session, document_id: str, settings: BuildSettings) -> Claim | None:
    """The document's live version as a claim built with the job's settings; None unless it is indexed."""
    document = session.get(Document, document_id)
    if document is None or document.indexed_version is None or document.version != document.indexed_version:
        # Not indexed, or a newer version is being ingested: the check catches it up once that one is live.
        return None
    if document.status != DocumentStatus.DONE:
        return None
    # A job recorded before a re-index could change the model builds with the KB's.
    model = settings.embedding_model or session.get_one(KnowledgeBase, document.kb_id).embedding_model
    return claim_of(document, settings.chunking, settings.analyzer, model)


def _source_of(session: Session, job_id: str, document_id: str) -> str:
    """The source_id the job's item of this document is keyed by, also when the document is gone."""
    document = session.get(Document, document_id)
    if document is not None:
        return document.source_id
    target = ReindexTarget.model_validate(session.get_one(Job, job_id).params)
    return target.source_ids.get(document_id, document_id)


def _open_items(session: Session, job_id: str) -> int:
    query = select(func.count()).where(JobItem.job_id == job_id, JobItem.status == JobItemStatus.PENDING)
    return int(session.scalar(query) or 0)
