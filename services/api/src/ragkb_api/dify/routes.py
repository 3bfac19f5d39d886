"""Dify's External Knowledge API route (`POST /retrieval`), answering errors in Dify's shape."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, post
from litestar.openapi.datastructures import ResponseSpec

from ragkb_api.dify.service import DifyError, DifyError_, DifyRetrievalRequest, DifyRetrievalResponse, DifyService
from ragkb_http import PUBLIC, access


def _dify_error(_: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    assert isinstance(exc, DifyError)
    return Response(content=exc.body(), status_code=exc.status)


class DifyController(Controller):
    path = "/retrieval"
    tags = ["dify"]

    # Public to the app-wide guard only because Dify expects its own error shape: the service authenticates
    # the Bearer key itself (and spends its rate-limit token), and then scopes like any search.
    @post(
        "/",
        status_code=200,
        sync_to_thread=True,
        opt=access(PUBLIC),
        summary="Dify External Knowledge API: retrieve from one knowledge base",
        exception_handlers={DifyError: _dify_error},
        security=[{"bearer": []}],
        responses={
            403: ResponseSpec(DifyError_, description="1001 invalid Authorization header, 1002 authorization failed"),
            404: ResponseSpec(DifyError_, description="2001 the knowledge does not exist"),
        },
    )
    def retrieval(
        self, request: Request[Any, Any, Any], data: DifyRetrievalRequest, dify_service: DifyService
    ) -> DifyRetrievalResponse:
        caller = dify_service.authenticate(request.headers.get("authorization"))
        return dify_service.retrieve(data, caller)
