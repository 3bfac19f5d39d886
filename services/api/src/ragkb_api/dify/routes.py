"""Dify's External Knowledge API route (`POST /retrieval`), answering errors in Dify's shape."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.openapi.datastructures import ResponseSpec

from ragkb_api.access import Caller
from ragkb_api.dify.service import (
    DIFY_ACCESS,
    DifyError,
    DifyError_,
    DifyRetrievalRequest,
    DifyRetrievalResponse,
    DifyService,
)
from ragkb_http import access


def _dify_error(_: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    assert isinstance(exc, DifyError)
    return Response(content=exc.body(), status_code=exc.status, headers=exc.headers)


class DifyController(Controller):
    path = "/retrieval"
    tags = ["dify"]

    # The app-wide guard authenticates the Bearer key from the header, before the body is read, answering in
    # Dify's error shape (DifyService.authenticate, which spends the rate-limit token); the search scopes.
    @post(
        "/",
        status_code=200,
        sync_to_thread=True,
        opt=access(DIFY_ACCESS),
        summary="Dify External Knowledge API: retrieve from one knowledge base",
        exception_handlers={DifyError: _dify_error},
        security=[{"bearer": []}],
        responses={
            403: ResponseSpec(DifyError_, description="1001 invalid Authorization header, 1002 authorization failed"),
            404: ResponseSpec(DifyError_, description="2001 the knowledge does not exist"),
            429: ResponseSpec(DifyError_, description="3001 the key spent its rate limit (see Retry-After)"),
        },
    )
    def retrieval(self, data: DifyRetrievalRequest, dify_service: DifyService, caller: Caller) -> DifyRetrievalResponse:
        return dify_service.retrieve(data, caller)
