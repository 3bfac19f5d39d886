from __future__ import annotations

from litestar import Controller, post

from ragkb_api.access import Caller
from ragkb_api.schemas import SearchRequest, SearchResponse
from ragkb_api.services import SearchService
from ragkb_http import access


class SearchController(Controller):
    path = "/v1/search"
    tags = ["search"]

    # Any key: the service checks read access to every requested KB and ANDs in the key's mandatory filter.
    @post("/", status_code=200, sync_to_thread=True, summary="Search one or more knowledge bases", opt=access("caller"))
    def search(self, data: SearchRequest, search_service: SearchService, caller: Caller) -> SearchResponse:
        return search_service.search(data, caller)
