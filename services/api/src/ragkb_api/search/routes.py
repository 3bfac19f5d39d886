"""Routes of search, search-test and analyze."""

from __future__ import annotations

from litestar import Controller, post

from ragkb_api.access import Caller
from ragkb_api.search.schemas import (
    AnalyzeRequest,
    SearchRequest,
    SearchResponse,
    SearchTestRequest,
    SearchTestResponse,
)
from ragkb_api.search.service import SearchService
from ragkb_core.contracts import AnalyzeResult
from ragkb_http import access


class SearchController(Controller):
    path = "/v1"
    tags = ["search"]

    # Any key: the service checks read access to every requested KB and ANDs in the key's mandatory filter.
    @post(
        "/search",
        status_code=200,
        sync_to_thread=True,
        summary="Search one or more knowledge bases",
        opt=access("caller"),
    )
    def search(self, data: SearchRequest, search_service: SearchService, caller: Caller) -> SearchResponse:
        return search_service.search(data, caller)

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
