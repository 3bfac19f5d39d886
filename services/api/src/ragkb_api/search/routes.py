"""Routes of search, search-test and analyze."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Controller, MediaType, Request, Response, post
from litestar.openapi.datastructures import ResponseSpec

from ragkb_api.access import Caller
from ragkb_api.guards import provide_caller
from ragkb_api.search.schemas import (
    AnalyzeRequest,
    SearchRequest,
    SearchResponse,
    SearchTestRequest,
    SearchTestResponse,
)
from ragkb_api.search.service import SearchService
from ragkb_api.timing import AUTH_MS_STATE, SERVER_TIMING_HEADER, StageTimings, server_timing
from ragkb_core.contracts import AnalyzeResult
from ragkb_http import access
from ragkb_telemetry import metrics
from ragkb_telemetry.metrics import observe_stages

_log = logging.getLogger("ragkb.search")


class SearchController(Controller):
    path = "/v1"
    tags = ["search"]

    # Any key: the service checks read access to every requested KB and ANDs in the key's mandatory filter.
    @post(
        "/search",
        status_code=200,
        summary="Search one or more knowledge bases",
        opt=access("caller"),
        # The body is the retriever's JSON passed on (SearchService.search_json); this is its shape.
        responses={200: ResponseSpec(data_container=SearchResponse, description="Passages, best first")},
    )
    # Async: neither the handler, nor the KBs' read on SQLite (ragkb_api.loop_reads), nor the retriever's call
    # hands off to a worker thread. The caller is read from the request, not declared as a second dependency:
    # Litestar resolves two dependencies in a task group of their own, which cost each search more than both
    # lookups.
    async def search(
        self, data: SearchRequest, search_service: SearchService, request: Request[Any, Any, Any]
    ) -> Response[bytes]:
        timings = StageTimings()
        answer = await search_service.search_json_async(data, provide_caller(request), timings)
        auth_ms = request.state.get(AUTH_MS_STATE)
        stages_ms = timings.all_ms(**({"auth": auth_ms} if auth_ms is not None else {}))
        observe_stages(metrics.api_search_stage_duration, stages_ms)
        # Ids and counts only: the query is the caller's text, never logged.
        _log.info(
            "search %d KBs: %.1f ms",
            len(data.knowledge_base_ids),
            stages_ms["total"],
            extra={"kb_ids": data.knowledge_base_ids, "mode": data.mode, "duration_ms": round(stages_ms["total"], 2)},
        )
        return Response(answer, media_type=MediaType.JSON, headers={SERVER_TIMING_HEADER: server_timing(stages_ms)})

    @post(
        "/knowledge-bases/{kb_id:str}/search-test",
        status_code=200,
        sync_to_thread=True,
        summary="Run one query as semantic, keyword, hybrid and hybrid+rerank side by side (tuning)",
        opt=access("admin"),
    )
    def search_test(
        self, kb_id: str, data: SearchTestRequest, search_service: SearchService, caller: Caller
    ) -> SearchTestResponse:
        return search_service.search_test(kb_id, data, caller)

    @post(
        "/analyze",
        status_code=200,
        sync_to_thread=True,
        summary="The BM25 terms a knowledge base's analyzer makes of a text",
        opt=access("caller"),
    )
    def analyze(self, data: AnalyzeRequest, search_service: SearchService, caller: Caller) -> AnalyzeResult:
        return search_service.analyze(data, caller)
