"""Routes of API keys (admin only): create, list, change, revoke."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, delete, get, patch, post

from ragkb_api.keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyOut, ApiKeyPatch
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.paging import MAX_PAGE, PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_http import access


class ApiKeyController(Controller):
    path = "/v1/api-keys"
    tags = ["api keys"]
    opt = access("admin")

    @post("/", status_code=201, sync_to_thread=True, summary="Create a key; the key is in this answer only")
    def create(self, data: ApiKeyCreate, key_service: ApiKeyService) -> ApiKeyCreated:
        return key_service.create(data)

    @get(
        "/",
        sync_to_thread=True,
        summary="List keys (never their secrets), a page at a time",
        response_headers=PAGE_HEADERS,
    )
    def list_all(
        self, request: Request[Any, Any, Any], key_service: ApiKeyService, limit: Limit = MAX_PAGE, offset: Offset = 0
    ) -> Response[list[ApiKeyOut]]:
        return paged_response(key_service.list(PageRequest(limit, offset)), request)

    @patch("/{key_id:str}", sync_to_thread=True, summary="Replace a key's grants and/or search filter")
    def update(self, key_id: str, data: ApiKeyPatch, key_service: ApiKeyService) -> ApiKeyOut:
        return key_service.update(key_id, data)

    @delete("/{key_id:str}", status_code=204, sync_to_thread=True, summary="Revoke a key (at once, for good)")
    def revoke(self, key_id: str, key_service: ApiKeyService) -> None:
        key_service.revoke(key_id)
