"""Dify's External Knowledge API (`POST /retrieval`): a Dify workspace uses a ragkb KB as external knowledge.

Dify sends `Authorization: Bearer <key>` (a ragkb API key) and `knowledge_id` (a KB id the key may read), and
expects `{records: [{content, score, title, metadata}]}`, or `{error_code, error_msg}` with Dify's codes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller, bearer_token
from ragkb_api.dify.conditions import condition_holds
from ragkb_api.fields import MAX_ID_CHARS
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.rate_limit import RateLimiter
from ragkb_api.search.schemas import SearchFilters, SearchRequest
from ragkb_api.search.service import SearchService
from ragkb_core.contracts import SearchHit
from ragkb_core.errors import Conflict, InvalidInput, NotFound, TooManyRequests, Unauthorized
from ragkb_core.kb_settings import RetrievalOverrides
from ragkb_store.db.models import Document

INVALID_HEADER, AUTH_FAILED, NO_SUCH_KNOWLEDGE = 1001, 1002, 2001
# Not one of Dify's documented codes (Dify has none for it): the key spent its rate limit; HTTP 429 and
# Retry-After say when to try again.
RATE_LIMITED = 3001
# The route's access level (ragkb_api.access): the app's guard authenticates it through DifyService.
DIFY_ACCESS = "dify"


class DifyError(Exception):
    """One of Dify's documented errors, answered as `{error_code, error_msg}` with its HTTP status."""

    def __init__(self, code: int, message: str, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error_code": self.code, "error_msg": self.message}


class RetrievalSetting(BaseModel):
    top_k: int = Field(ge=1, le=100)
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)


class MetadataCondition(BaseModel):
    name: list[str]
    comparison_operator: str
    value: str | None = None


class MetadataFilter(BaseModel):
    logical_operator: Literal["and", "or"] = "and"
    conditions: list[MetadataCondition] = Field(default_factory=list, max_length=50)

    def holds(self, metadata: dict[str, Any]) -> bool:
        if not self.conditions:
            return True
        results = (condition_holds(metadata, c.name, c.comparison_operator, c.value) for c in self.conditions)
        return all(results) if self.logical_operator == "and" else any(results)


class DifyRetrievalRequest(BaseModel):
    knowledge_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    query: str = Field(min_length=1)
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataFilter | None = None


class DifyRecord(BaseModel):
    content: str
    score: float
    title: str
    metadata: dict[str, Any]


class DifyRetrievalResponse(BaseModel):
    records: list[DifyRecord]


class DifyError_(BaseModel):  # noqa: N801 -- the documented error body, named apart from the exception
    error_code: int
    error_msg: str


class DifyService:
    def __init__(
        self, sessions: sessionmaker[Session], keys: ApiKeyService, limiter: RateLimiter, search: SearchService
    ) -> None:
        self._sessions = sessions
        self._keys = keys
        self._limiter = limiter
        self._search = search

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller, or Dify's 1001 (header not `Bearer <key>`) / 1002 (key not valid), both HTTP 403, or
        3001 with HTTP 429 and Retry-After when the key spent its rate limit."""
        presented = bearer_token(authorization)
        if presented is None:
            raise DifyError(
                INVALID_HEADER, "Invalid Authorization header format. Expected 'Bearer <api-key>' format.", 403
            )
        try:
            caller = self._keys.authenticate(presented)
        except Unauthorized:
            raise DifyError(AUTH_FAILED, "Authorization failed", 403) from None
        try:
            self._limiter.take(caller.key_id)
        except TooManyRequests as exc:
            raise DifyError(RATE_LIMITED, exc.detail, 429, exc.headers) from None
        return caller

    def retrieve(self, request: DifyRetrievalRequest, caller: Caller) -> DifyRetrievalResponse:
        setting, condition = request.retrieval_setting, request.metadata_condition
        filters = SearchFilters()
        if condition is not None and condition.conditions:
            # Inside the search's filter, before ranking: top_k records whenever that many passages match.
            filters = _within_documents(self._documents_matching(request.knowledge_id, condition))
        try:
            search = SearchRequest(
                query=request.query,
                knowledge_base_ids=[request.knowledge_id],
                top_k=setting.top_k,
                filters=filters,
                settings=_floor(setting.score_threshold),
            )
        except ValidationError as exc:
            raise _refused(exc) from None
        try:
            hits = self._search.search(search, caller).results
        except NotFound:
            raise DifyError(NO_SUCH_KNOWLEDGE, "The knowledge does not exist", 404) from None
        except Conflict:  # a KB being deleted: Dify's protocol has no code but "does not exist" for it
            raise DifyError(NO_SUCH_KNOWLEDGE, "The knowledge is being deleted", 404) from None
        metadata = self._metadata_of({hit.document_id for hit in hits})
        return DifyRetrievalResponse(records=[_record(hit, metadata) for hit in hits[: setting.top_k]])

    def _documents_matching(self, kb_id: str, condition: MetadataFilter) -> list[str]:
        """The KB's documents whose metadata satisfies the condition. Dify's operators (contains, start with,
        numeric and date comparisons) have no engine filter, so they are evaluated here on the stored metadata,
        and the search is then limited to these documents. A KB the caller may not read matches nothing here,
        and the search itself answers that it does not exist."""
        with self._sessions() as session:
            rows = session.execute(select(Document.id, Document.metadata_).where(Document.kb_id == kb_id))
            return [document_id for document_id, metadata in rows if condition.holds(dict(metadata or {}))]

    def _metadata_of(self, document_ids: set[str]) -> dict[str, dict[str, Any]]:
        with self._sessions() as session:
            rows = session.execute(select(Document.id, Document.metadata_).where(Document.id.in_(document_ids)))
            return {document_id: dict(metadata or {}) for document_id, metadata in rows}


def _refused(exc: ValidationError) -> Exception:
    """Dify's request is looser than a search's (any knowledge_id, any query): an id no KB can have is Dify's
    "does not exist"; a query a search refuses (blank) is invalid input, as on /v1/search."""
    if any(error["loc"][:1] == ("knowledge_base_ids",) for error in exc.errors()):
        return DifyError(NO_SUCH_KNOWLEDGE, "The knowledge does not exist", 404)
    return InvalidInput("; ".join(f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()))


def _floor(score_threshold: float) -> RetrievalOverrides:
    """Dify's 0–1 score_threshold is the similarity floor of this search (compared with each passage's 0–1
    relevance, not with fused scores that have no fixed range); 0, Dify's "off", keeps the KB's own floor."""
    return RetrievalOverrides(min_relevance=score_threshold) if score_threshold > 0 else RetrievalOverrides()


def _within_documents(document_ids: list[str]) -> SearchFilters:
    """A filter to these documents. Built without the request bound on document ids: the ids come from the
    database, not from a caller, and a condition may match any number of documents (an empty list: none)."""
    return SearchFilters.model_construct(document_ids=document_ids)


def _record(hit: SearchHit, metadata: dict[str, dict[str, Any]]) -> DifyRecord:
    return DifyRecord(
        content=hit.text,
        # The 0–1 relevance Dify's score_threshold was compared with; the answer's order is still the search's.
        score=hit.relevance if hit.relevance is not None else hit.score,
        title=hit.title,
        # The document's own metadata, then ragkb's citation fields (which win on a clash).
        metadata={
            **metadata.get(hit.document_id, {}),
            "document_id": hit.document_id,
            "source_id": hit.source_id,
            "chunk_id": hit.chunk_id,
            "knowledge_base_id": hit.knowledge_base_id,
            "heading_path": hit.heading_path,
            "page": hit.page,
            "labels": hit.labels,
            "doc_type": hit.doc_type,
        },
    )
