"""Create, read and change KBs. Deleting a KB is a job (ragkb_api.knowledge_bases.deletion); finding one
is ragkb_store.knowledge_bases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.jobs.sync import compile_exclude
from ragkb_api.knowledge_bases.schemas import (
    ExternalKnowledgeBaseCreate,
    ExternalKnowledgeBaseOut,
    KnowledgeBaseCreate,
    KnowledgeBaseOut,
    KnowledgeBaseUpdate,
    RetrievalPatch,
)
from ragkb_api.paging import Page, PageRequest
from ragkb_api.sources.credentials import CredentialVault
from ragkb_core.errors import Conflict, ExternalUnavailable, InvalidInput
from ragkb_core.external import CONFIG_ADAPTER, ExternalTarget
from ragkb_core.ids import new_id
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, KbSync
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import EmbeddingSettings
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, KnowledgeBase
from ragkb_store.knowledge_bases import ensure_indexed_here, ensure_not_deleting, load_kb, lock_kb
from ragkb_store.settings_versions import Change, change_retrieval, record_created
from ragkb_store.states import DocumentStatus, SettingsOrigin


class KnowledgeBaseService:
    """Create, read and change KBs. Deleting one is a job (ragkb_api.knowledge_bases.deletion)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        retriever: RetrieverClient,
        *,
        vault: CredentialVault | None = None,
        embedding: EmbeddingSettings | None = None,
    ) -> None:
        self._sessions = sessions
        self._retriever = retriever
        self._vault = vault or CredentialVault(None)
        self._embedding = embedding or EmbeddingSettings()

    def create(self, data: KnowledgeBaseCreate, author_key_id: str | None = None) -> KnowledgeBaseOut:
        if data.external is not None:
            return self._create_external(data, data.external, author_key_id)
        _check_sync_patterns(data.sync)
        second_model = data.chunking.second_model
        if second_model is not None:
            self._embedding.require_allowed(second_model)
        kb_id = new_id()
        try:
            with transaction(self._sessions) as session:
                _ensure_name_free(session, data.name)
                # Inside the transaction: if the index cannot be created, no KB row is left behind.
                index = self._retriever.create_kb(kb_id, data.index, second_model=second_model)
                kb = KnowledgeBase(
                    id=kb_id,
                    name=data.name,
                    description=data.description,
                    embedding_model=index.embedding_model,
                    analyzer_version=data.analyzer.version,
                    chunking=data.chunking.model_dump(),
                    retrieval=data.retrieval.model_dump(exclude_defaults=True),
                    # In full: the analyzer's defaults may change, the terms this KB was built with may not.
                    analyzer=data.analyzer.model_dump(),
                    sync=data.sync.model_dump(exclude_defaults=True),
                )
                session.add(kb)
                session.flush()
                record_created(session, kb, author_key_id)
        except IntegrityError as exc:
            # Lost a race for the name after the index was made: remove that empty index again.
            self._retriever.drop_kb(kb_id)
            raise Conflict(f"a knowledge base named {data.name!r} already exists") from exc
        return self.get(kb_id)

    def _create_external(
        self, data: KnowledgeBaseCreate, external: ExternalKnowledgeBaseCreate, author_key_id: str | None
    ) -> KnowledgeBaseOut:
        """Register an external KB: its credential sealed, then the KB reached once through the retriever (the
        only process that talks to Qdrant), so that a wrong address, key, collection, vector name or model is
        refused now (502 or 422) rather than at the first search. Nothing is created in ragkb's index."""
        model = None
        if external.config.kind == "qdrant":
            model = external.embedding_model or self._embedding.model
            self._embedding.require_allowed(model)
        sealed = self._vault.seal({"api_key": external.api_key.get_secret_value()}) if external.api_key else None
        try:
            self._retriever.probe_external(ExternalTarget(config=external.config, api_key=external.api_key), model)
        except ExternalUnavailable as exc:
            # Refused as input (422), not answered as a bad gateway: the KB as described cannot be searched now
            # (a wrong address, key or collection is the usual cause; if the store is only down, register again).
            raise InvalidInput(f"the external knowledge base did not answer: {exc.detail}") from None
        kb_id = new_id()
        try:
            with transaction(self._sessions) as session:
                _ensure_name_free(session, data.name)
                kb = KnowledgeBase(
                    id=kb_id,
                    name=data.name,
                    description=data.description,
                    embedding_model=model or "",
                    analyzer_version=data.analyzer.version,
                    chunking={},
                    retrieval=data.retrieval.model_dump(exclude_defaults=True),
                    analyzer=data.analyzer.model_dump(),
                    sync={},
                    external=external.config.model_dump(mode="json"),
                    external_credentials=sealed,
                )
                session.add(kb)
                session.flush()
                record_created(session, kb, author_key_id)
        except IntegrityError as exc:
            raise Conflict(f"a knowledge base named {data.name!r} already exists") from exc
        return self.get(kb_id)

    def list(self, caller: Caller, page: PageRequest) -> Page[KnowledgeBaseOut]:
        """A page of the KBs the caller may read, oldest first."""
        query = select(KnowledgeBase).order_by(KnowledgeBase.created_at, KnowledgeBase.id)
        if not caller.is_admin:
            query = query.where(KnowledgeBase.id.in_(caller.readable(caller.grants)))
        with self._sessions() as session:
            total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
            kbs = session.scalars(query.limit(page.limit).offset(page.offset)).all()
            counts = _status_counts(session, [kb.id for kb in kbs])
            return Page([_kb_out(kb, counts.get(kb.id, {})) for kb in kbs], total, page)

    def get(self, kb_id: str) -> KnowledgeBaseOut:
        with self._sessions() as session:
            kb = load_kb(session, kb_id)
            return _kb_out(kb, _status_counts(session, [kb_id]).get(kb_id, {}))

    def update(self, kb_id: str, data: KnowledgeBaseUpdate, author_key_id: str | None = None) -> KnowledgeBaseOut:
        changes = data.model_dump(exclude_none=True, exclude={"retrieval", "analyzer", "sync", "reason"})
        if not changes and data.retrieval is None and data.analyzer is None and data.sync is None:
            raise InvalidInput("nothing to change: give name, description, chunking, retrieval or sync")
        if data.sync is not None:
            _check_sync_patterns(data.sync)
        try:
            with transaction(self._sessions) as session:
                kb = _load_changeable_kb(session, kb_id, data)
                _refuse_analyzer_change(kb, data.analyzer)
                if data.chunking is not None:
                    changes["chunking"] = _chunking_change(kb, data.chunking).model_dump()
                if data.name is not None and data.name != kb.name:
                    _ensure_name_free(session, data.name)
                for field, value in changes.items():
                    setattr(kb, field, value)
                if data.retrieval is not None:
                    patched = patched_retrieval(kb.retrieval, data.retrieval)
                    reason = data.reason or "PATCH of the knowledge base"
                    change_retrieval(session, kb, patched, Change(SettingsOrigin.PATCH, reason, author_key_id))
                if data.sync is not None:
                    kb.sync = data.sync.model_dump(exclude_defaults=True)
        except IntegrityError as exc:
            raise Conflict(f"a knowledge base named {data.name!r} already exists") from exc
        return self.get(kb_id)


def _load_changeable_kb(session: Session, kb_id: str, data: KnowledgeBaseUpdate) -> KnowledgeBase:
    """The KB a PATCH may change. An external KB may be renamed, described and searched differently (retrieval);
    its chunking, analyzer and sync rules are refused (409): ragkb indexes nothing of it. A retrieval change
    locks the row first, so that concurrent changes number their settings versions one at a time."""
    kb = lock_kb(session, kb_id) if data.retrieval is not None else load_kb(session, kb_id)
    ensure_not_deleting(kb)
    indexing = [field for field in ("chunking", "analyzer", "sync") if getattr(data, field) is not None]
    if indexing:
        ensure_indexed_here(kb, f"chunked or analysed (refused: {', '.join(indexing)})")
    return kb


def _ensure_name_free(session: Session, name: str) -> None:
    if session.scalars(select(KnowledgeBase.id).where(KnowledgeBase.name == name)).first():
        raise Conflict(f"a knowledge base named {name!r} already exists")


def _refuse_analyzer_change(kb: KnowledgeBase, requested: KbAnalyzer | None) -> None:
    if requested is not None and requested != KbAnalyzer.model_validate(kb.analyzer):
        raise Conflict(
            "a knowledge base's analyzer changes only by re-indexing it: every passage's terms must be made again",
            analyzer=KbAnalyzer.model_validate(kb.analyzer).model_dump(),
        )


def _chunking_change(kb: KnowledgeBase, requested: KbChunking) -> KbChunking:
    """The KB's new chunking: applies to documents ingested afterwards, but for its second model, whose vectors
    its index was made for (KbChunking.second_model): left out, it stays; another one is a re-index (409)."""
    stored = KbChunking.model_validate(kb.chunking)
    chunking = requested.keeping_second_model(stored)
    if chunking.second_model != stored.second_model:
        raise Conflict(
            "a knowledge base's second model changes only by re-indexing it (POST /v1/knowledge-bases/{kb}/reindex "
            "with the chunking): its index must hold that model's vectors for every passage",
            second_model=stored.second_model,
        )
    return chunking


def _check_sync_patterns(sync: KbSync) -> None:
    """The exclude patterns compile as the sync matcher runs them (the `regex` module), not only as `re` does:
    a pattern that cannot run is refused now (422), never skipped at sync time."""
    for pattern in sync.exclude_patterns:
        compile_exclude(pattern)


def patched_retrieval(stored: dict[str, Any], patch: RetrievalPatch) -> dict[str, Any]:
    """The stored settings with the patch's fields applied (null: back to the default), validated whole."""
    merged = KbRetrieval.model_validate(stored).model_dump() | patch.model_dump(exclude_unset=True)
    defaults = KbRetrieval().model_dump()
    unset_to_default = {field: defaults[field] if value is None else value for field, value in merged.items()}
    try:
        return KbRetrieval.model_validate(unset_to_default).model_dump(exclude_defaults=True)
    except ValidationError as exc:
        raise InvalidInput(f"invalid retrieval settings: {exc.errors()[0]['msg']}") from exc


def _status_counts(session: Session, kb_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    rows = session.execute(
        select(Document.kb_id, Document.status, func.count())
        .where(Document.kb_id.in_(kb_ids))
        .group_by(Document.kb_id, Document.status)
    )
    counts: dict[str, dict[str, int]] = {}
    for kb_id, status, count in rows:
        counts.setdefault(kb_id, {})[status] = count
    return counts


def _external_out(kb: KnowledgeBase) -> ExternalKnowledgeBaseOut | None:
    if kb.external is None:
        return None
    return ExternalKnowledgeBaseOut(
        config=CONFIG_ADAPTER.validate_python(kb.external), has_api_key=kb.external_credentials is not None
    )


def _kb_out(kb: KnowledgeBase, counts: dict[str, int]) -> KnowledgeBaseOut:
    all_counts = {status.value: counts.get(status.value, 0) for status in DocumentStatus}
    return KnowledgeBaseOut(
        id=kb.id,
        name=kb.name,
        description=kb.description,
        embedding_model=kb.embedding_model,
        analyzer_version=kb.analyzer_version,
        chunking=KbChunking.model_validate(kb.chunking),
        retrieval=KbRetrieval.model_validate(kb.retrieval),
        analyzer=KbAnalyzer.model_validate(kb.analyzer),
        sync=KbSync.model_validate(kb.sync),
        document_counts=all_counts,
        status="deleting" if kb.deletion_job_id else "active",
        deletion_job_id=kb.deletion_job_id,
        kind="external" if kb.external is not None else "native",
        external=_external_out(kb),
        created_at=kb.created_at,
        updated_at=kb.updated_at,
    )
