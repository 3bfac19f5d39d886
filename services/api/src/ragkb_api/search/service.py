"""Search, search-test and analyze: resolve each KB's effective settings, then ask the retriever."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from pydantic import SecretStr
from sqlalchemy import Text, bindparam, cast, select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller, search_scope
from ragkb_api.loop_reads import LoopReads
from ragkb_api.retriever_async import AsyncRetrieverSearch
from ragkb_api.search.schemas import (
    AnalyzeRequest,
    ExpectedDocumentTrace,
    SearchFilters,
    SearchRequest,
    SearchResponse,
    SearchTestRequest,
    SearchTestResponse,
    SearchTestRun,
)
from ragkb_api.sources.base import SourceUnreadable
from ragkb_api.sources.credentials import CredentialVault
from ragkb_api.timing import StageTimings
from ragkb_core.contracts import (
    AnalyzeQuery,
    AnalyzeResult,
    Collapse,
    DocType,
    KbSearch,
    SearchMode,
    SearchQuery,
    SearchResult,
)
from ragkb_core.errors import Conflict, ExternalUnavailable, InvalidInput, NotFound, Unavailable
from ragkb_core.external import CONFIG_ADAPTER, ExternalTarget
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, RetrievalOverrides
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import LimitSettings
from ragkb_store.db.engine import engine_of
from ragkb_store.db.models import KnowledgeBase

SearchTestName = Literal["semantic", "keyword", "hybrid", "hybrid+rerank"]
# The runs of a search-test: (name, mode, rerank override).
SEARCH_TEST_RUNS: tuple[tuple[SearchTestName, SearchMode, bool], ...] = (
    ("semantic", "semantic", False),
    ("keyword", "keyword", False),
    ("hybrid", "hybrid", False),
    ("hybrid+rerank", "hybrid", True),
)
_KBS = KnowledgeBase.__table__.c
# A search's KBs as it searches them, read on every search (never cached: a KB being deleted, or its settings
# changed, is seen by the next search). A Core statement built once, not an ORM query
# (ragkb_store.db.engine.engine_of); the settings come as their JSON text, which is what their validated
# models are memoised by (_retrieval_of, _analyzer_of).
_SEARCHABLE_KBS = select(
    _KBS.id,
    _KBS.name,
    _KBS.deletion_job_id,
    _KBS.embedding_model,
    cast(_KBS.retrieval, Text).label("retrieval"),
    cast(_KBS.analyzer, Text).label("analyzer"),
    _KBS.external,
    _KBS.external_credentials,
    cast(_KBS.chunking, Text).label("chunking"),
).where(_KBS.id.in_(bindparam("ids", expanding=True)))
KbRow = Row[Any, Any, Any, Any, Any, Any, Any, Any, Any]
# Distinct settings texts whose validated models are kept: more than the KBs of most deployments.
SETTINGS_MEMO_SIZE = 1024


class SearchService:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        retriever: RetrieverClient,
        limits: LimitSettings,
        vault: CredentialVault | None = None,
        retriever_async: AsyncRetrieverSearch | None = None,
        *,
        reads: LoopReads | None = None,
    ) -> None:
        self._sessions = sessions
        self._engine = engine_of(sessions)
        # The async search's read of its KBs (no thread hand-off on SQLite).
        self._reads = reads or LoopReads(self._engine)
        self._retriever = retriever
        # The async handler's way to the retriever (the composition root gives one; tests of the sync paths may not).
        self._retriever_async = retriever_async
        self._limits = limits
        # Opens an external KB's sealed API key for the retriever, which reaches the KB (ragkb_core.external).
        self._vault = vault or CredentialVault(None)

    def search(self, request: SearchRequest, caller: Caller) -> SearchResponse:
        return SearchResponse.model_validate_json(self.search_json(request, caller))

    def search_json(self, request: SearchRequest, caller: Caller, timings: StageTimings | None = None) -> bytes:
        """The answer as the JSON of a SearchResponse: the retriever's JSON with the query added, never decoded
        and encoded again here (an answer of 100 passages would cost milliseconds each way)."""
        timings = timings if timings is not None else StageTimings()
        with timings.stage("kbs"):
            query = self.search_query(request, caller)
        with timings.stage("retriever"):
            answer = self._retriever_json(query)
        return with_query(answer, request.query)

    async def search_json_async(
        self, request: SearchRequest, caller: Caller, timings: StageTimings | None = None
    ) -> bytes:
        """`search_json` for an async handler: the KBs' read through LoopReads, the call to the retriever on the
        event loop (ragkb_api.retriever_async says why not httpx)."""
        if self._retriever_async is None:
            raise RuntimeError("this SearchService was built without an async retriever client")
        timings = timings if timings is not None else StageTimings()
        with timings.stage("kbs"):
            self._check_query(request.query)
            kb_ids = list(dict.fromkeys(request.knowledge_base_ids))
            rows = await self._reads.rows(_SEARCHABLE_KBS, {"ids": caller.readable(kb_ids)})
            query_json = self._request_query(request, self._kbs_of_rows(kb_ids, rows), caller).model_dump_json()
        with timings.stage("retriever"):
            answer = await self._retriever_async.search_json(query_json.encode())
        return with_query(answer, request.query)

    def search_query(self, request: SearchRequest, caller: Caller) -> SearchQuery:
        """What the retriever is asked: the readable KBs (read now, never cached) with the request's settings."""
        self._check_query(request.query)
        kbs = self._searchable_kbs(list(dict.fromkeys(request.knowledge_base_ids)), caller)
        return self._request_query(request, kbs, caller)

    def _request_query(self, request: SearchRequest, kbs: list[KbSearch], caller: Caller) -> SearchQuery:
        return self._query(
            request.query,
            kbs,
            caller,
            overrides=_with_top_k(request.settings, request.top_k),
            filters=request.filters,
            mode=request.mode,
            explain=request.explain,
            collapse=request.collapse,
        )

    def _retriever_json(self, query: SearchQuery) -> bytes:
        """The retriever's answer for a sync caller. In a sync handler's worker thread (tools, /v1/context, MCP,
        Dify, search-test) the call is made by the event loop's client, which costs a fraction of httpx's CPU
        (ragkb_api.retriever_async) and this thread waits; elsewhere (no event loop: a background thread, a
        script) the sync client makes it."""
        if self._retriever_async is not None:
            answer = self._retriever_async.search_json_from_thread(query.model_dump_json().encode())
            if answer is not None:
                return answer
        return self._retriever.search_json(query)

    def search_test(self, kb_id: str, request: SearchTestRequest, caller: Caller) -> SearchTestResponse:
        """Every mode side by side for one query (explain on), tracing the expected documents."""
        self._check_query(request.query)
        self.require_readable_kbs([kb_id], caller)
        runs = []
        kbs = self._kb_searches([kb_id])
        for name, mode, rerank in SEARCH_TEST_RUNS:
            overrides = request.settings.model_copy(update={"rerank": rerank})
            query = self._query(
                request.query, kbs, caller, overrides=overrides, filters=request.filters, mode=mode, explain=True
            )
            result = SearchResult.model_validate_json(self._retriever_json(query))
            traces = [trace_expected(document_id, result) for document_id in request.expected_document_ids]
            runs.append(SearchTestRun(name=name, result=result, expected=traces))
        return SearchTestResponse(query=request.query, knowledge_base_id=kb_id, runs=runs)

    def analyze(self, request: AnalyzeRequest, caller: Caller) -> AnalyzeResult:
        analyzer = self._searchable_kbs([request.knowledge_base_id], caller)[0].analyzer
        return self._retriever.analyze(AnalyzeQuery(analyzer=analyzer, text=request.text))

    def require_readable_kbs(self, kb_ids: Sequence[str], caller: Caller) -> None:
        """Every requested KB must exist and be readable; unknown and ungranted ids get the same answer. A
        KB being deleted answers 409, as its writes do (ensure_not_deleting in ragkb_store.knowledge_bases
        says why)."""
        readable = caller.readable(kb_ids)
        with self._sessions() as session:
            query = select(KnowledgeBase.id, KnowledgeBase.deletion_job_id).where(KnowledgeBase.id.in_(readable))
            found = {kb_id: deletion_job for kb_id, deletion_job in session.execute(query)}
        _require_searchable(kb_ids, found)

    def _searchable_kbs(self, kb_ids: list[str], caller: Caller) -> list[KbSearch]:
        """`require_readable_kbs` and `_kb_searches` in one database read: the KBs as they are searched."""
        readable = caller.readable(kb_ids)
        with self._engine.connect() as connection:
            return self._kbs_of_rows(kb_ids, connection.execute(_SEARCHABLE_KBS, {"ids": readable}).all())

    def _kbs_of_rows(self, kb_ids: list[str], rows: Sequence[KbRow]) -> list[KbSearch]:
        """The `_SEARCHABLE_KBS` rows read for `kb_ids`, as searched, once every one was found and searchable."""
        by_id = {row.id: row for row in rows}
        _require_searchable(kb_ids, {kb_id: row.deletion_job_id for kb_id, row in by_id.items()})
        return [self._kb_search(by_id[kb_id]) for kb_id in kb_ids]

    def _check_query(self, query: str) -> None:
        if len(query) > self._limits.max_query_chars:
            raise InvalidInput(f"the query is longer than {self._limits.max_query_chars} characters")

    def _query(
        self,
        text: str,
        kbs: list[KbSearch],
        caller: Caller,
        *,
        overrides: RetrievalOverrides,
        filters: SearchFilters,
        mode: SearchMode | None,
        explain: bool,
        collapse: Collapse | None = None,
    ) -> SearchQuery:
        kbs = [kb.model_copy(update={"retrieval": kb.retrieval.with_overrides(overrides)}) for kb in kbs]
        effective = [kb.retrieval for kb in kbs]
        return SearchQuery(
            query=text,
            knowledge_bases=kbs,
            mode=mode,
            scope=search_scope(caller, filters),
            max_blocks=min(retrieval.max_blocks for retrieval in effective),
            doc_type_quotas=merged_quotas(effective),
            explain=explain,
            collapse=collapse,
        )

    def _kb_searches(self, kb_ids: list[str]) -> list[KbSearch]:
        """Each KB as its own settings search it: retrieval, analyzer and the model its vectors come from."""
        with self._engine.connect() as connection:
            rows = {row.id: row for row in connection.execute(_SEARCHABLE_KBS, {"ids": kb_ids})}
        return [self._kb_search(rows[kb_id]) for kb_id in kb_ids]

    def _kb_search(self, row: KbRow) -> KbSearch:
        """A `_SEARCHABLE_KBS` row as it is searched."""
        return KbSearch(
            kb_id=row.id,
            name=row.name,
            retrieval=_retrieval_of(row.retrieval),
            analyzer=_analyzer_of(row.analyzer),
            # "" for a Dify endpoint, which embeds the question itself.
            embedding_model=row.embedding_model or None,
            second_model=_second_model_of(row.chunking),
            external=self._external_target(row),
        )

    def _external_target(self, row: KbRow) -> ExternalTarget | None:
        """An external KB as the retriever reaches it: its configuration and its API key, opened here."""
        if row.external is None:
            return None
        try:
            opened = self._vault.open(row.external_credentials)
        except SourceUnreadable as exc:
            raise ExternalUnavailable(
                f"knowledge base {row.id}'s API key cannot be opened: {exc.detail}", knowledge_base_id=row.id
            ) from None
        api_key = opened.get("api_key")
        return ExternalTarget(
            config=CONFIG_ADAPTER.validate_python(row.external), api_key=SecretStr(api_key) if api_key else None
        )


# Memoised by the settings' JSON text: the same text always validates to the same settings, so a memoised
# model is never stale (a changed KB has a new text). Callers copy, never change, what they get
# (KbRetrieval.with_overrides and model_copy make new models).
@lru_cache(maxsize=SETTINGS_MEMO_SIZE)
def _retrieval_of(settings_json: str) -> KbRetrieval:
    return KbRetrieval.model_validate_json(settings_json)


@lru_cache(maxsize=SETTINGS_MEMO_SIZE)
def _analyzer_of(settings_json: str) -> KbAnalyzer:
    return KbAnalyzer.model_validate_json(settings_json)


@lru_cache(maxsize=SETTINGS_MEMO_SIZE)
def _second_model_of(chunking_json: str | None) -> str | None:
    """The KB's second model (KbChunking.second_model); an external KB's chunking is empty."""
    if not chunking_json:
        return None
    return KbChunking.model_validate_json(chunking_json).second_model


def _require_searchable(kb_ids: Sequence[str], found: dict[str, str | None]) -> None:
    """Every requested KB was found among the readable ones (`found`: id → its deletion job, if any); unknown
    and ungranted ids get the same answer. A KB being deleted answers 409, as its writes do
    (ensure_not_deleting in ragkb_store.knowledge_bases says why)."""
    missing = [kb_id for kb_id in kb_ids if kb_id not in found]
    if missing:
        raise NotFound(f"knowledge bases that do not exist or are not yours: {', '.join(missing)}", missing=missing)
    deleting = [kb_id for kb_id in kb_ids if found[kb_id] is not None]
    if deleting:
        raise Conflict(f"knowledge bases being deleted: {', '.join(deleting)}", deleting=deleting)


def with_query(answer: bytes, query: str) -> bytes:
    """A SearchResponse's JSON from the retriever's SearchResult JSON (an object): the query as its first
    member. Spliced as bytes: the passages are passed on exactly as the retriever wrote them."""
    if not answer.startswith(b"{"):
        raise Unavailable("the retriever's answer is not a JSON object")
    rest = answer[1:].lstrip()
    separator = b"" if rest.startswith(b"}") else b","
    return b'{"query":' + json.dumps(query).encode() + separator + rest


def _with_top_k(overrides: RetrievalOverrides, top_k: int | None) -> RetrievalOverrides:
    """`top_k` on a request is shorthand for passages per KB and in the answer, unless set explicitly."""
    if top_k is None:
        return overrides
    changes = {field: top_k for field in ("top_k", "max_blocks") if getattr(overrides, field) is None}
    return overrides.model_copy(update=changes)


def merged_quotas(settings: Sequence[KbRetrieval]) -> dict[DocType, int] | None:
    """Quotas across KBs searched together: per doc_type, the smallest any KB sets (a KB's quota is a
    promise about how much of that type an answer may hold)."""
    merged: dict[DocType, int] = {}
    for retrieval in settings:
        for doc_type, quota in (retrieval.doc_type_quotas or {}).items():
            merged[doc_type] = min(quota, merged.get(doc_type, quota))
    return merged or None


def trace_expected(document_id: str, result: SearchResult) -> ExpectedDocumentTrace:
    """Where an expected document stood in one run, from the answer, the dropped candidates and the legs."""
    answer_rank = next((rank for rank, hit in enumerate(result.results, 1) if hit.document_id == document_id), None)
    candidates = [hit for hit in result.results if hit.document_id == document_id]
    dropped = [entry for entry in result.dropped or [] if entry.hit.document_id == document_id]
    leg_ranks = {
        leg: min(
            (
                entry.rank
                for ranking in result.legs or []
                if ranking.leg == leg
                for entry in ranking.entries
                if entry.document_id == document_id
            ),
            default=None,
        )
        for leg in ("dense", "keyword")
    }
    fused = [hit.fused_rank for hit in (*candidates, *(entry.hit for entry in dropped)) if hit.fused_rank]
    trace = ExpectedDocumentTrace(
        document_id=document_id,
        answer_rank=answer_rank,
        dense_rank=leg_ranks["dense"],
        keyword_rank=leg_ranks["keyword"],
        fused_rank=min(fused, default=None),
        dropped_by=None,
        explanation="",
    )
    if answer_rank is not None:
        trace.explanation = f"in the answer at rank {answer_rank}"
    elif dropped:
        trace.dropped_by = dropped[0].stage
        trace.explanation = f"retrieved, then dropped: {dropped[0].reason}"
    elif leg_ranks["dense"] or leg_ranks["keyword"]:
        trace.explanation = "ranked in a leg, but not among the fused candidates read"
    else:
        trace.explanation = "not retrieved by any leg (outside the candidates, the scope, or not in this KB)"
    return trace
