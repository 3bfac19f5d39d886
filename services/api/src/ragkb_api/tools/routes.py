"""Routes of the agent tools (/v1/tools/...), context assembly (/v1/context) and MCP (/mcp)."""

from __future__ import annotations

from litestar import Controller, Response, get, post
from litestar.status_codes import HTTP_200_OK, HTTP_202_ACCEPTED, HTTP_405_METHOD_NOT_ALLOWED

from ragkb_api.access import Caller
from ragkb_api.search.schemas import SearchResponse
from ragkb_api.tools.mcp import McpServer
from ragkb_api.tools.schemas import (
    ContextRequest,
    ContextResponse,
    GrepFilesRequest,
    GrepFilesResponse,
    QueryFilesRequest,
    QueryFilesResponse,
    ReadFileRequest,
    ReadFileResponse,
    RetrieveTextNodesRequest,
    SurroundingContextRequest,
    SurroundingContextResponse,
)
from ragkb_api.tools.service import ToolService
from ragkb_http import access


class ContextController(Controller):
    path = "/v1/context"
    tags = ["tools"]

    @post(
        "/",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="A prompt-ready block of the best passages with numbered sources, within a token budget",
    )
    def context(self, data: ContextRequest, tool_service: ToolService, caller: Caller) -> ContextResponse:
        return tool_service.context(data, caller)


class ToolController(Controller):
    """The agent tools. Any key: the service scopes every answer to the caller's readable KBs and filter."""

    path = "/v1/tools"
    tags = ["tools"]

    @post(
        "/retrieve_text_nodes",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="Search, returning a few passages",
    )
    def retrieve_text_nodes(
        self, data: RetrieveTextNodesRequest, tool_service: ToolService, caller: Caller
    ) -> SearchResponse:
        return tool_service.retrieve_text_nodes(data, caller)

    @post(
        "/query_files",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="List documents with their metadata",
    )
    def query_files(self, data: QueryFilesRequest, tool_service: ToolService, caller: Caller) -> QueryFilesResponse:
        return tool_service.query_files(data, caller)

    @post(
        "/grep_files",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="Grep the extracted text of documents",
    )
    def grep_files(self, data: GrepFilesRequest, tool_service: ToolService, caller: Caller) -> GrepFilesResponse:
        return tool_service.grep_files(data, caller)

    @post(
        "/read_file",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="Read a document's extracted text, paginated",
    )
    def read_file(self, data: ReadFileRequest, tool_service: ToolService, caller: Caller) -> ReadFileResponse:
        return tool_service.read_file(data, caller)

    @post(
        "/get_surrounding_context",
        status_code=200,
        sync_to_thread=True,
        opt=access("caller"),
        summary="A passage and its neighbours",
    )
    def get_surrounding_context(
        self, data: SurroundingContextRequest, tool_service: ToolService, caller: Caller
    ) -> SurroundingContextResponse:
        return tool_service.get_surrounding_context(data, caller)


class McpController(Controller):
    """The MCP endpoint (streamable HTTP, stateless, JSON answers). Not in the OpenAPI document: it speaks
    JSON-RPC, described by the protocol and by its own `tools/list`."""

    path = "/mcp"
    include_in_schema = False

    # Any key: every tool call is scoped by the service, as on /v1/tools.
    @post("/", status_code=HTTP_200_OK, sync_to_thread=True, opt=access("caller"))
    def message(self, body: bytes, mcp_server: McpServer, caller: Caller) -> Response[object]:
        answer = mcp_server.handle(body, caller)
        if answer.message is None:
            return Response(content=None, status_code=HTTP_202_ACCEPTED)
        return Response(content=answer.message, status_code=answer.status, media_type="application/json")

    # A stateless server opens no server-to-client stream: the transport's answer for that is 405.
    @get("/", sync_to_thread=False, opt=access("caller"))
    def stream(self) -> Response[None]:
        return Response(content=None, status_code=HTTP_405_METHOD_NOT_ALLOWED, headers={"Allow": "POST"})
