from __future__ import annotations

from litestar import Controller, post

from ragkb_api.schemas import SearchRequest, SearchResponse
from ragkb_api.services import SearchService


class SearchController(Controller):
    path = "/v1/search"
    tags = ["search"]

    @post("/", status_code=200, sync_to_thread=True, summary="Search one or more knowledge bases")
    def search(self, data: SearchRequest, search_service: SearchService) -> SearchResponse:
        return search_service.search(data)
