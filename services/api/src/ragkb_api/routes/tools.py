from __future__ import annotations

from litestar import Controller, post

from ragkb_api.access import Caller
from ragkb_api.schemas import (
    ContextRequest,
    ContextResponse,
    GrepFilesRequest,
    GrepFilesResponse,
    QueryFilesRequest,
    QueryFilesResponse,
    ReadFileRequest,
    ReadFileResponse,
    RetrieveTextNodesRequest,
    SearchResponse,
    SurroundingContextRequest,
    SurroundingContextResponse,
)
from ragkb_api.tools import ToolService
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
