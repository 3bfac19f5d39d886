"""Re-index and rollback (ragkb_core.reindexing): start a job that builds a new index generation from the
stored originals while the old one serves, and switch back to the previous generation while it is kept."""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.jobs import job_item, running_job
from ragkb_api.schemas import ReindexRequest
from ragkb_api.services import load_kb
from ragkb_core.db.engine import transaction
from ragkb_core.db.models import Document, KnowledgeBase, utcnow
from ragkb_core.errors import Conflict, InvalidInput
from ragkb_core.ids import new_id
from ragkb_core.jobs import REINDEX
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_core.queue import enqueue_finish_reindex, enqueue_reindex_document
from ragkb_core.reindexing import BuildSettings, IndexState, ReindexTarget, active_reindex
from ragkb_core.retriever_client import RetrieverClient

_log = logging.getLogger("ragkb.api")


class ReindexService:
    def __init__(self, sessions: sessionmaker[Session], retriever: RetrieverClient, queue: Celery) -> None:
        self._sessions = sessions
        self._retriever = retriever
        self._queue = queue

    def start(self, kb_id: str, request: ReindexRequest) -> str:
        """Start a re-index job (one per KB at a time); returns its id."""
        job_id = new_id()
        with transaction(self._sessions) as session:
            kb = _locked_kb(session, kb_id)
            if (running := active_reindex(session, kb_id)) is not None:
                raise Conflict(f"a re-index of this knowledge base is already running (job {running.id})")
            _check_embedding_model(kb, request.embedding_model)
            settings = BuildSettings(
                chunking=request.chunking or KbChunking.model_validate(kb.chunking),
                analyzer=request.analyzer or KbAnalyzer.model_validate(kb.analyzer),
            )
            documents = _indexed_documents(session, kb_id)
            # Inside the transaction: if the generation cannot be made, no job is left behind.
            generation = self._retriever.create_generation(kb_id)
            target = ReindexTarget(
                generation=generation,
                settings=settings,
                document_ids=[document_id for document_id, _ in documents],
                skip_quality_gate=request.skip_quality_gate,
            )
            session.add(running_job(job_id, REINDEX, kb_id, utcnow(), params=target.model_dump(mode="json")))
            session.flush()
            session.add_all(job_item(job_id, kb_id, source_id, REINDEX) for _, source_id in documents)
        if not documents:
            enqueue_finish_reindex(self._queue, job_id)
        for document_id, _ in documents:
            enqueue_reindex_document(self._queue, job_id, document_id)
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
            current = BuildSettings.model_validate({"chunking": kb.chunking, "analyzer": kb.analyzer})
            _, left = self._retriever.switch_generation(kb_id, state.previous_generation)
            kb.chunking = state.previous_settings.chunking.model_dump()
            kb.analyzer = state.previous_settings.analyzer.model_dump()
            kb.analyzer_version = state.previous_settings.analyzer.version
            kb.index_state = IndexState(previous_generation=left, previous_settings=current).model_dump(mode="json")


def _locked_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB row, written first so that concurrent re-index and rollback calls on it run one at a time."""
    session.execute(update(KnowledgeBase).where(KnowledgeBase.id == kb_id).values(updated_at=utcnow()))
    return load_kb(session, kb_id)


def _check_embedding_model(kb: KnowledgeBase, requested: str | None) -> None:
    if requested is not None and requested != kb.embedding_model:
        # Not yet possible: the worker and the retriever each hold one embedder (RAGKB_EMBEDDING__MODEL) and
        # encode every KB's passages and queries with it; a per-KB model needs an embedder per model id in both.
        raise InvalidInput(
            f"this server embeds with {kb.embedding_model!r} only: changing a knowledge base's embedding model "
            f"(to {requested!r}) is not supported, because the worker and the retriever run one embedding model "
            "for every knowledge base; to use another model, run a server configured with it "
            "(RAGKB_EMBEDDING__MODEL) and sync the documents into a knowledge base there",
            embedding_model=kb.embedding_model,
        )


def _indexed_documents(session: Session, kb_id: str) -> list[tuple[str, str]]:
    query = select(Document.id, Document.source_id).where(
        Document.kb_id == kb_id, Document.indexed_version.is_not(None)
    )
    return [(document_id, source_id) for document_id, source_id in session.execute(query)]
