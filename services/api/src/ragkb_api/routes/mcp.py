from __future__ import annotations

from litestar import Controller, Response, get, post
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED, HTTP_405_METHOD_NOT_ALLOWED

from ragkb_api.access import Caller
from ragkb_api.mcp import McpServer
from ragkb_http import access


class McpController(Controller):
    """The MCP endpoint (streamable HTTP, stateless, JSON answers). Not in the OpenAPI document: it speaks
    JSON-RPC, described by the protocol and by its own `tools/list`."""

    path = "/mcp"
    include_in_schema = False

    # Any key: every tool call is scoped by the service, as on /v1/tools.
    @post("/", status_code=HTTP_200_OK, sync_to_thread=True, opt=access("caller"))
    def message(self, body: bytes, mcp_server: McpServer, caller: Caller) -> Response[object]:
        answer = mcp_server.handle(body, caller)
        if answer is None:
            return Response(content=None, status_code=HTTP_202_ACCEPTED)
        return Response(content=answer, status_code=HTTP_200_OK, media_type="application/json")

    # A stateless server opens no server-to-client stream: the transport's answer for that is 405.
    @get("/", sync_to_thread=False, opt=access("caller"))
    def stream(self) -> Response[None]:
        return Response(content=None, status_code=HTTP_405_METHOD_NOT_ALLOWED, headers={"Allow": "POST"})
