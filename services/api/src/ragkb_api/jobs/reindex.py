"""Re-index and rollback (ragkb_store.reindexing): start a job that builds a new index generation from the
stored originals while the old one serves (with new chunking, analyzer or embedding model settings), and
switch back to the previous generation, and its settings, while it is kept."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.jobs.schemas import ReindexRequest
from ragkb_core.errors import Conflict
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import EmbeddingSettings
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, KnowledgeBase
from ragkb_store.knowledge_bases import ensure_indexed_here, ensure_not_deleting, lock_kb
from ragkb_store.ledger.jobs import add_items, start_job
from ragkb_store.queue import bulk_priority, enqueue_finish_reindex, enqueue_reindex_document
from ragkb_store.reindexing import BuildSettings, IndexState, ReindexTarget, active_reindex, settings_of, take_settings
from ragkb_store.states import ItemAction, JobKind

_log = logging.getLogger("ragkb.api")


class ReindexService:
    def __init__(
        self, sessions: sessionmaker[Session], retriever: RetrieverClient, queue: Celery, embedding: EmbeddingSettings
    ) -> None:
        self._sessions = sessions
        self._retriever = retriever
        self._queue = queue
        self._embedding = embedding

    def start(self, kb_id: str, request: ReindexRequest) -> str:
        """Start a re-index job (one per KB at a time); returns its id."""
        with transaction(self._sessions) as session:
            kb = _locked_kb(session, kb_id)
            if (running := active_reindex(session, kb_id)) is not None:
                raise Conflict(f"a re-index of this knowledge base is already running (job {running.id})")
            model = request.embedding_model or kb.embedding_model
            if model != kb.embedding_model:
                self._embedding.require_allowed(model)
            stored = KbChunking.model_validate(kb.chunking)
            chunking = stored if request.chunking is None else request.chunking.keeping_second_model(stored)
            if chunking.second_model is not None:
                self._embedding.require_allowed(chunking.second_model)
            settings = BuildSettings(
                chunking=chunking,
                analyzer=request.analyzer or KbAnalyzer.model_validate(kb.analyzer),
                embedding_model=model,
            )
            documents = _indexed_documents(session, kb_id)
            # Inside the transaction: if the generation cannot be made, no job is left behind. Its vectors
            # have the size of the model it is built with.
            generation = self._retriever.create_generation(
                kb_id, embedding_model=model, second_model=chunking.second_model
            )
            target = ReindexTarget(
                generation=generation,
                settings=settings,
                document_ids=[document_id for document_id, _ in documents],
                source_ids=dict(documents),
                skip_quality_gate=request.skip_quality_gate,
            )
            job_id = start_job(session, JobKind.REINDEX, kb_id, params=target.model_dump(mode="json"))
            add_items(session, job_id, kb_id, ItemAction.REINDEX, [source_id for _, source_id in documents])
        if not documents:
            enqueue_finish_reindex(self._queue, job_id)
        # The job's own documents are its KB's bulk backlog: the further down the list, the lower the priority.
        for position, (document_id, _) in enumerate(documents):
            enqueue_reindex_document(self._queue, job_id, document_id, bulk_priority(position))
        _log.info("KB %s: re-index job %s into generation %d (%d documents)", kb_id, job_id, generation, len(documents))
        return job_id

    def rollback(self, kb_id: str) -> None:
        """Serve the previous generation again, with the settings it was built with (and keep the one left)."""
        with transaction(self._sessions) as session:
            kb = _locked_kb(session, kb_id)
            if active_reindex(session, kb_id) is not None:
                raise Conflict("a re-index of this knowledge base is running: wait for it, or cancel it")
            state = IndexState.model_validate(kb.index_state)
            if state.previous_generation is None or state.previous_settings is None:
                raise Conflict("this knowledge base has no previous index generation to roll back to")
            current = settings_of(kb)
            _, left = self._retriever.switch_generation(kb_id, state.previous_generation)
            take_settings(kb, state.previous_settings)
            kb.index_state = IndexState(previous_generation=left, previous_settings=current).model_dump(mode="json")


def _locked_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB row, locked (ragkb_store.knowledge_bases.lock_kb); a KB being deleted, or an external one, is
    refused (409)."""
    kb = lock_kb(session, kb_id)
    ensure_not_deleting(kb)
    ensure_indexed_here(kb, "re-indexed")
    return kb


def _indexed_documents(session: Session, kb_id: str) -> list[tuple[str, str]]:
    query = select(Document.id, Document.source_id).where(
        Document.kb_id == kb_id, Document.indexed_version.is_not(None)
    )
    return [(document_id, source_id) for document_id, source_id in session.execute(query)]
