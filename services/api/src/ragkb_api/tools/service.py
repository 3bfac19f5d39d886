"""The agent tools: retrieve passages, list files, grep and read extracted text, widen a passage's context.

Served as `/v1/tools/...` and over MCP (ragkb_api.tools.mcp). Every tool is scoped like a search: the KBs must be
readable by the caller (unknown and ungranted ids get one answer), and a document is visible only when it
passes the caller's mandatory filter; anything else is "not found"."""

from __future__ import annotations

import time
from collections.abc import Sequence

import regex
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.documents.service import document_out
from ragkb_api.search.schemas import SearchFilters, SearchRequest, SearchResponse
from ragkb_api.search.service import SearchService
from ragkb_api.tools.context import assemble_context
from ragkb_api.tools.grep import compile_pattern, grep_text
from ragkb_api.tools.schemas import (
    ContextRequest,
    ContextResponse,
    FileOut,
    GrepFilesRequest,
    GrepFilesResponse,
    GrepMatch,
    QueryFilesRequest,
    QueryFilesResponse,
    ReadFileRequest,
    ReadFileResponse,
    RetrieveTextNodesRequest,
    SurroundingContextRequest,
    SurroundingContextResponse,
)
from ragkb_core.contracts import ContextQuery
from ragkb_core.errors import Conflict, NotFound
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.db.models import Document, KnowledgeBase

MAX_FILES = 1000
# Matching time for one grep request, all documents together: a slow pattern ends with a partial answer.
GREP_BUDGET_S = 2.0
REINGEST = "re-ingest the document to enable read_file and grep_files"


class ToolService:
    def __init__(
        self, sessions: sessionmaker[Session], blobs: BlobStore, retriever: RetrieverClient, search: SearchService
    ) -> None:
        self._sessions = sessions
        self._blobs = blobs
        self._retriever = retriever
        self._search = search

    def retrieve_text_nodes(self, request: RetrieveTextNodesRequest, caller: Caller) -> SearchResponse:
        search = SearchRequest(
            query=request.query,
            knowledge_base_ids=request.knowledge_base_ids,
            top_k=request.top_k,
            filters=request.filters,
        )
        return self._search.search(search, caller)

    def context(self, request: ContextRequest, caller: Caller) -> ContextResponse:
        found = self.retrieve_text_nodes(request, caller)
        return assemble_context(request.query, found.results, request.token_budget)

    def query_files(self, request: QueryFilesRequest, caller: Caller) -> QueryFilesResponse:
        documents = self._visible(request.knowledge_base_ids, request.filters, caller)
        files = [_file_out(document) for document in documents[:MAX_FILES]]
        return QueryFilesResponse(files=files, truncated=len(documents) > MAX_FILES)

    def grep_files(self, request: GrepFilesRequest, caller: Caller) -> GrepFilesResponse:
        pattern = compile_pattern(request.pattern, is_regex=request.regex, ignore_case=request.ignore_case)
        filters = SearchFilters(document_ids=request.document_ids)
        documents = self._visible(request.knowledge_base_ids, filters, caller)
        if request.document_ids is not None:
            _require_all_found(request.document_ids, documents)
        with_text = [document for document in documents if document.text_sha256]
        response = GrepFilesResponse(
            matches=[],
            truncated=False,
            timed_out=False,
            documents_searched=0,
            documents_without_text=[document.id for document in documents if not document.text_sha256],
        )
        deadline = time.monotonic() + GREP_BUDGET_S
        for document in with_text:
            if not self._grep_one(document, pattern, request, response, deadline - time.monotonic()):
                break
        return response

    def read_file(self, request: ReadFileRequest, caller: Caller) -> ReadFileResponse:
        document = self._visible_document(request.document_id, caller)
        text = self._text_of(document)
        end = min(len(text), request.offset + request.limit)
        return ReadFileResponse(
            document_id=document.id,
            knowledge_base_id=document.kb_id,
            title=document.title,
            offset=request.offset,
            text=text[request.offset : end],
            total_chars=len(text),
            next_offset=end if end < len(text) else None,
        )

    def get_surrounding_context(self, request: SurroundingContextRequest, caller: Caller) -> SurroundingContextResponse:
        query = ContextQuery(chunk_id=request.chunk_id.lower(), before=request.before, after=request.after)
        for kb_id in self._candidate_kbs(request.knowledge_base_ids, caller):
            try:
                found = self._retriever.surrounding(kb_id, query)
            except NotFound:
                continue
            if found.passages and self._is_visible(found.passages[0].document_id, kb_id, caller):
                return SurroundingContextResponse(chunk_id=query.chunk_id, passages=found.passages)
        raise NotFound(f"passage {query.chunk_id} does not exist or is not yours")

    # -- scoping -----------------------------------------------------------------------------------------

    def _visible(self, kb_ids: Sequence[str], filters: SearchFilters, caller: Caller) -> list[Document]:
        unique = list(dict.fromkeys(kb_ids))
        self._search.require_readable_kbs(unique, caller)
        query = select(Document).where(Document.kb_id.in_(unique)).order_by(Document.created_at)
        if filters.document_ids is not None:
            query = query.where(Document.id.in_(filters.document_ids))
        with self._sessions() as session:
            documents = list(session.scalars(query))
        return [d for d in documents if _passes(d, filters, caller)]

    def _visible_document(self, document_id: str, caller: Caller) -> Document:
        with self._sessions() as session:
            document = session.get(Document, document_id)
        if document is None or not caller.may(document.kb_id, "read") or not _passes(document, SearchFilters(), caller):
            raise _document_not_found(document_id)
        return document

    def _is_visible(self, document_id: str, kb_id: str, caller: Caller) -> bool:
        try:
            return self._visible_document(document_id, caller).kb_id == kb_id
        except NotFound:
            return False

    def _candidate_kbs(self, kb_ids: list[str] | None, caller: Caller) -> list[str]:
        if kb_ids is not None:
            unique = list(dict.fromkeys(kb_ids))
            self._search.require_readable_kbs(unique, caller)
            return unique
        # Every KB the caller may read, but those being deleted: nothing of theirs is searchable any more.
        query = select(KnowledgeBase.id).where(KnowledgeBase.deletion_job_id.is_(None))
        with self._sessions() as session:
            every = list(session.scalars(query.order_by(KnowledgeBase.created_at)))
        return caller.readable(every)

    # -- text ----------------------------------------------------------------------------------------------

    def _text_of(self, document: Document) -> str:
        if not document.text_sha256:
            raise Conflict(f"document {document.id} has no stored text: {REINGEST}", document_id=document.id)
        return self._blobs.read(document.text_sha256).decode("utf-8")

    def _grep_one(
        self,
        document: Document,
        pattern: regex.Pattern[str],
        request: GrepFilesRequest,
        response: GrepFilesResponse,
        budget_s: float,
    ) -> bool:
        """Grep one document into `response`; False when the response is full or out of time."""
        remaining = request.max_matches - len(response.matches)
        outcome = grep_text(
            self._text_of(document),
            pattern,
            context_lines=request.context_lines,
            max_matches=remaining,
            budget_s=budget_s,
        )
        response.documents_searched += 1
        response.matches += [
            GrepMatch(document_id=document.id, knowledge_base_id=document.kb_id, title=document.title, **vars(match))
            for match in outcome.matches
        ]
        response.timed_out = response.timed_out or outcome.timed_out
        response.truncated = response.truncated or outcome.truncated or outcome.timed_out
        return not (outcome.truncated or outcome.timed_out or len(response.matches) >= request.max_matches)


def _passes(document: Document, filters: SearchFilters, caller: Caller) -> bool:
    """The request's filters AND the caller's mandatory restriction, as a search applies them."""
    restriction = caller.restriction
    label_sets = [filters.labels_any, restriction.labels_any]
    if any(wanted is not None and not set(wanted) & set(document.labels) for wanted in label_sets):
        return False
    type_sets = [filters.doc_types, restriction.doc_types]
    return all(wanted is None or document.doc_type in wanted for wanted in type_sets)


def _require_all_found(document_ids: list[str], documents: list[Document]) -> None:
    found = {document.id for document in documents}
    missing = [document_id for document_id in dict.fromkeys(document_ids) if document_id not in found]
    if missing:
        raise NotFound(f"documents that do not exist or are not yours: {', '.join(missing)}", missing=missing)


def _document_not_found(document_id: str) -> NotFound:
    return NotFound(f"document {document_id} does not exist or is not yours")


def _file_out(document: Document) -> FileOut:
    """The document as `query_files` lists it: the fields of the documents API that an agent needs."""
    shared = document_out(document).model_dump(include=set(FileOut.model_fields))
    return FileOut(**shared, text_available=bool(document.text_sha256))
