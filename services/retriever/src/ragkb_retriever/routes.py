"""The retriever's internal API (`/internal/v1`): index writes for the worker, search for the api."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, MediaType, Response, delete, get, patch, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Parameter
from pydantic import BaseModel, Field

from ragkb_core.contracts import (
    AnalyzeQuery,
    AnalyzeResult,
    ContextQuery,
    ContextResult,
    DocumentBatch,
    DocumentChunks,
    DocumentPoints,
    DocumentWriteResult,
    KbGenerations,
    KbIndexInfo,
    KbPointCensus,
    SearchQuery,
    SearchResult,
)
from ragkb_core.errors import InvalidInput
from ragkb_core.external import ExternalConfig, ExternalProbe, ExternalQdrantConfig, ExternalTarget
from ragkb_core.fusion import LegsQuery, LegsResult
from ragkb_core.ids import ID_PATTERN, is_id
from ragkb_core.kb_settings import KbIndexLayout
from ragkb_core.retriever_client import INTERNAL_PREFIX
from ragkb_http import JsonBodyRequest
from ragkb_models import EmbedderPool
from ragkb_retriever.external import ExternalSearch
from ragkb_retriever.indexing import IndexService
from ragkb_retriever.search_runner import SearchRunner
from ragkb_retriever.searching import SearchService
from ragkb_telemetry import metrics
from ragkb_telemetry.metrics import observe_stages

# Ids are checked here, at the boundary: a KB id becomes part of a file name in the index, so a NUL, a slash or
# 300 characters must be refused as input (422), never reach the disk (500).
KbId = Annotated[str, Parameter(pattern=ID_PATTERN, description="a knowledge base id (32 hex characters)")]
DocumentId = Annotated[str, Parameter(pattern=ID_PATTERN, description="a document id (32 hex characters)")]
# The most passages one page of a document's chunks carries.
MAX_CHUNKS_PAGE = 200
# Which generation a document call addresses: the live one when not given.
GenerationParam = Annotated[int | None, Parameter(ge=1, description="a generation of the KB; the live one when absent")]


class GenerationCreate(BaseModel):
    """The body of a generation create: the retriever's own shape, not a cross-service contract."""

    dense_size: int | None = Field(default=None, ge=1, description="null: the embedding model's dimension")
    embedding_model: str | None = Field(
        default=None, min_length=1, description="the model the generation is for (its dimension); null: the default"
    )
    second_model: str | None = Field(
        default=None, min_length=1, description="the KB's second model (its vectors' size); null: none"
    )


class ExternalProbeRequest(BaseModel):
    """The body of an external KB's probe: the KB as a search reaches it, and the model a Qdrant collection's
    vectors were written with (null: the default model)."""

    target: ExternalTarget
    embedding_model: str | None = Field(default=None, min_length=1, max_length=200)


@post(
    f"{INTERNAL_PREFIX}/external/probe",
    status_code=200,
    sync_to_thread=True,
    tags=["search"],
    summary="Reach an external KB once: 502 when it does not answer, 422 when its collection does not fit",
)
def probe_external(
    data: ExternalProbeRequest, external_search: ExternalSearch, embedders: EmbedderPool
) -> ExternalProbe:
    config: ExternalConfig = data.target.config
    dimension = embedders.get(data.embedding_model).dimension if isinstance(config, ExternalQdrantConfig) else None
    return external_search.probe(data.target, dimension)


@get(f"{INTERNAL_PREFIX}/ready", sync_to_thread=True, tags=["health"], summary="Ready, for callers holding the token")
def internal_ready(index_service: IndexService) -> dict[str, str]:
    """Like /ready, but behind the service token: a caller whose token is wrong learns it from its own
    readiness check instead of from its first failed write."""
    index_service.probe()
    return {"status": "ready"}


class IndexController(Controller):
    path = f"{INTERNAL_PREFIX}/kbs"
    tags = ["index"]

    @put("/{kb_id:str}", sync_to_thread=True, summary="Create a KB's index (idempotent)")
    def create_kb(
        self,
        kb_id: KbId,
        index_service: IndexService,
        data: KbIndexLayout | None = None,
        second_model: Annotated[
            str | None, Parameter(min_length=1, max_length=200, description="the KB's second model; none: none")
        ] = None,
    ) -> KbIndexInfo:
        return index_service.create_kb(kb_id, data, second_model)

    @delete("/{kb_id:str}", status_code=204, sync_to_thread=True, summary="Drop a KB's index, every generation")
    def drop_kb(self, kb_id: KbId, index_service: IndexService) -> None:
        index_service.drop_kb(kb_id)

    @post("/{kb_id:str}/generations", status_code=201, sync_to_thread=True, summary="Create a new, not live generation")
    def create_generation(self, kb_id: KbId, data: GenerationCreate, index_service: IndexService) -> dict[str, int]:
        generation = index_service.create_generation(kb_id, data.dense_size, data.embedding_model, data.second_model)
        return {"generation": generation}

    @get("/{kb_id:str}/generations", sync_to_thread=True, summary="The KB's generations and the live one")
    def generations(self, kb_id: KbId, index_service: IndexService) -> KbGenerations:
        return index_service.generations(kb_id)

    @put("/{kb_id:str}/generations/{generation:int}/live", sync_to_thread=True, summary="Switch the live generation")
    def switch_generation(self, kb_id: KbId, generation: int, index_service: IndexService) -> dict[str, int]:
        previous = index_service.switch_generation(kb_id, generation)
        return {"live": generation, "previous": previous}

    @delete("/{kb_id:str}/generations/{generation:int}", status_code=204, sync_to_thread=True)
    def drop_generation(self, kb_id: KbId, generation: int, index_service: IndexService) -> None:
        index_service.drop_generation(kb_id, generation)

    @put("/{kb_id:str}/documents/{document_id:str}", sync_to_thread=True, summary="Write a document version's chunks")
    def write_document(
        self,
        kb_id: KbId,
        document_id: DocumentId,
        data: DocumentPoints,
        index_service: IndexService,
        generation: GenerationParam = None,
    ) -> DocumentWriteResult:
        if data.kb_id != kb_id or data.document_id != document_id:
            raise InvalidInput("the body's kb_id and document_id must match the path")
        return index_service.write_document(data, generation=generation)

    @put("/{kb_id:str}/documents", sync_to_thread=True, summary="Write several documents' chunks in one upsert")
    def write_documents(self, kb_id: KbId, data: DocumentBatch, index_service: IndexService) -> DocumentWriteResult:
        return index_service.write_documents(kb_id, data)

    @delete("/{kb_id:str}/documents/{document_id:str}", status_code=204, sync_to_thread=True)
    def delete_document(
        self,
        kb_id: KbId,
        document_id: DocumentId,
        index_service: IndexService,
        *,
        keep_version: Annotated[int | None, Parameter(ge=1)] = None,
        only_version: Annotated[int | None, Parameter(ge=1)] = None,
        generation: GenerationParam = None,
    ) -> None:
        index_service.delete_document(kb_id, document_id, keep_version, only_version, generation=generation)

    @patch("/{kb_id:str}/documents/{document_id:str}", status_code=204, sync_to_thread=True)
    def set_document_payload(
        self,
        kb_id: KbId,
        document_id: DocumentId,
        data: dict[str, Any],
        index_service: IndexService,
        generation: GenerationParam = None,
    ) -> None:
        index_service.set_document_payload(kb_id, document_id, data, generation=generation)

    @get(
        "/{kb_id:str}/documents/{document_id:str}/chunks",
        sync_to_thread=True,
        summary="A page of one document version's passages in the live generation, in document order",
    )
    def document_chunks(
        self,
        kb_id: KbId,
        document_id: DocumentId,
        index_service: IndexService,
        *,
        version: Annotated[int, Parameter(ge=1)],
        offset: Annotated[int, Parameter(ge=0)] = 0,
        limit: Annotated[int, Parameter(ge=1, le=MAX_CHUNKS_PAGE)] = 50,
    ) -> DocumentChunks:
        return index_service.document_chunks(kb_id, document_id, version, offset, limit)

    @get(
        "/{kb_id:str}/documents/{document_id:str}/points",
        sync_to_thread=True,
        summary="One document version's points in the live generation, vectors included (a backup)",
    )
    def export_document(
        self,
        kb_id: KbId,
        document_id: DocumentId,
        index_service: IndexService,
        *,
        version: Annotated[int, Parameter(ge=1)],
    ) -> DocumentPoints:
        return index_service.export_document(kb_id, document_id, version)

    @get(
        "/{kb_id:str}/points",
        sync_to_thread=True,
        summary="The live generation's points counted per document and version (the consistency check)",
    )
    def point_census(self, kb_id: KbId, index_service: IndexService) -> KbPointCensus:
        return index_service.point_census(kb_id)

    @post("/{kb_id:str}/context", status_code=200, sync_to_thread=True, summary="A passage and its neighbours")
    def surrounding(self, kb_id: KbId, data: ContextQuery, search_service: SearchService) -> ContextResult:
        return search_service.surrounding(kb_id, data)

    @get("/{kb_id:str}/count", sync_to_thread=True, summary="Count a KB's points, optionally of one document")
    def count(
        self,
        kb_id: KbId,
        index_service: IndexService,
        document_id: Annotated[str | None, Parameter(pattern=ID_PATTERN, description="only this document")] = None,
        generation: GenerationParam = None,
    ) -> dict[str, int]:
        return {"count": index_service.count(kb_id, document_id, generation=generation)}


class SearchController(Controller):
    path = f"{INTERNAL_PREFIX}/search"
    tags = ["search"]

    @post(
        "/",
        status_code=200,
        summary="Search one or more KBs (the body: a SearchQuery)",
        responses={200: ResponseSpec(data_container=SearchResult, description="Passages, best first")},
    )
    # Async, and the body validated from its bytes (JsonBodyRequest.model), not declared as `data`: the search
    # runs on the event loop when that is safe, else in a thread (ragkb_retriever.search_runner says when).
    async def search(self, request: JsonBodyRequest, search_runner: SearchRunner) -> Response[bytes]:
        query = await request.model(SearchQuery)
        malformed = [position for position, kb_id in enumerate(query.kb_ids) if not is_id(kb_id)]
        if malformed:
            raise InvalidInput("a knowledge base id is 32 hex characters", knowledge_bases=malformed)
        result = await search_runner.search(query)
        observe_stages(metrics.search_stage_duration, result.timings_ms, result.mode)
        # Encoded by pydantic in one pass (Rust), not dumped to Python objects first and encoded after.
        return Response(result.model_dump_json().encode(), media_type=MediaType.JSON)


@post(
    f"{INTERNAL_PREFIX}/legs",
    status_code=200,
    sync_to_thread=True,
    tags=["search"],
    summary="Each question's dense and keyword candidates in one KB (a tune computes every fusion from them)",
)
def legs(data: LegsQuery, search_service: SearchService) -> LegsResult:
    if not is_id(data.kb.kb_id):
        raise InvalidInput("a knowledge base id is 32 hex characters")
    return search_service.legs(data)


@post(f"{INTERNAL_PREFIX}/analyze", status_code=200, sync_to_thread=True, tags=["search"], summary="Analyze a text")
def analyze(data: AnalyzeQuery, search_service: SearchService) -> AnalyzeResult:
    return search_service.analyze(data)
