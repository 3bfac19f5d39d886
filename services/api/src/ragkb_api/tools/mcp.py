"""A Model Context Protocol server for the agent tools: the streamable-HTTP transport's stateless subset.

JSON-RPC 2.0 over `POST /mcp`, answered with `application/json` (never an SSE stream), no session ids: each
request stands alone, so any number of clients and api processes serve at once. Implemented here rather than
with the `mcp` SDK, whose server brings Starlette and a task-group lifespan into a Litestar app for three
methods: `initialize`, `tools/list` and `tools/call` (plus `ping` and notifications, which are accepted).

One POST carries one JSON-RPC message: batches (JSON arrays) are refused with -32600 and HTTP 400. The MCP
revision 2025-06-18 dropped batching, and a batch would let one request (one rate-limit token) run thousands
of tool calls; one message per request makes every `tools/call` spend one token of the key's limit."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST
from pydantic import BaseModel, ValidationError

from ragkb_api.access import Caller
from ragkb_api.tools.schemas import (
    GrepFilesRequest,
    QueryFilesRequest,
    ReadFileRequest,
    RetrieveTextNodesRequest,
    SurroundingContextRequest,
)
from ragkb_api.tools.service import ToolService
from ragkb_core.errors import InvalidInput, RagkbError
from ragkb_http import NulInText, decode_json

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
SERVER_INFO = {"name": "ragkb", "version": "1.0.0"}
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    request: type[BaseModel]
    run: Callable[[ToolService, Any, Caller], BaseModel]

    def listing(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.request.model_json_schema()}


TOOLS = {
    tool.name: tool
    for tool in (
        Tool(
            "retrieve_text_nodes",
            "Search knowledge bases (hybrid dense + keyword) and return the best passages with their chunk_id, "
            "document, heading path and score. Start here for any question.",
            RetrieveTextNodesRequest,
            ToolService.retrieve_text_nodes,
        ),
        Tool(
            "query_files",
            "List the documents of knowledge bases (optionally filtered by labels, doc_types, document_ids) with "
            "title, metadata, labels, status, size and chunk count.",
            QueryFilesRequest,
            ToolService.query_files,
        ),
        Tool(
            "grep_files",
            "Find lines in the documents' extracted text that contain a literal string (or match a regular "
            "expression with regex=true); returns line numbers and surrounding lines. Output is bounded.",
            GrepFilesRequest,
            ToolService.grep_files,
        ),
        Tool(
            "read_file",
            "Read a document's full extracted text by document_id, `limit` characters from `offset`; "
            "next_offset tells where the next page starts.",
            ReadFileRequest,
            ToolService.read_file,
        ),
        Tool(
            "get_surrounding_context",
            "Given a chunk_id from retrieve_text_nodes, return that passage with `before`/`after` neighbouring "
            "passages of the same document, in document order.",
            SurroundingContextRequest,
            ToolService.get_surrounding_context,
        ),
    )
}


@dataclass(frozen=True)
class McpAnswer:
    """What one POST answers: a JSON-RPC response (None for a notification) and its HTTP status."""

    message: dict[str, Any] | None
    status: int = HTTP_200_OK


class McpServer:
    def __init__(self, tools: ToolService) -> None:
        self._tools = tools

    def handle(self, body: bytes, caller: Caller) -> McpAnswer:
        """The answer to one POSTed JSON-RPC message; a batch or a body that is not JSON is refused."""
        try:
            message = decode_json(body)
        except NulInText as exc:
            return McpAnswer(_error(None, INVALID_REQUEST, exc.detail), HTTP_400_BAD_REQUEST)
        except InvalidInput:
            return McpAnswer(_error(None, PARSE_ERROR, "the body is not JSON"), HTTP_400_BAD_REQUEST)
        if isinstance(message, list):
            refusal = "JSON-RPC batches are not supported (MCP 2025-06-18): send one message per request"
            return McpAnswer(_error(None, INVALID_REQUEST, refusal), HTTP_400_BAD_REQUEST)
        return McpAnswer(self._one(message, caller))

    def _one(self, message: Any, caller: Caller) -> dict[str, Any] | None:
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
        ):
            return _error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST, "not JSON-RPC 2.0")
        if "id" not in message:
            return None  # a notification (notifications/initialized, cancelled, …): nothing to answer
        params = message.get("params") or {}
        if not isinstance(params, dict):
            return _error(message["id"], INVALID_PARAMS, "params must be an object")
        return self._dispatch(message["id"], message["method"], params, caller)

    def _dispatch(self, request_id: Any, method: str, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        if method == "initialize":
            return _result(request_id, _initialized(params))
        if method == "ping":
            return _result(request_id, {})
        if method == "tools/list":
            return _result(request_id, {"tools": [tool.listing() for tool in TOOLS.values()]})
        if method == "tools/call":
            return self._call(request_id, params, caller)
        return _error(request_id, METHOD_NOT_FOUND, f"unknown method {method!r}")

    def _call(self, request_id: Any, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        tool = TOOLS.get(str(params.get("name")))
        if tool is None:
            return _error(request_id, INVALID_PARAMS, f"unknown tool {params.get('name')!r}")
        try:
            arguments = tool.request.model_validate(params.get("arguments") or {})
            output = tool.run(self._tools, arguments, caller)
        except ValidationError as exc:
            return _result(
                request_id, _tool_error(f"invalid arguments: {exc.errors(include_url=False, include_input=False)}")
            )
        except RagkbError as exc:
            return _result(request_id, _tool_error(str(exc)))
        structured = output.model_dump(mode="json")
        content = [{"type": "text", "text": json.dumps(structured, ensure_ascii=False)}]
        return _result(request_id, {"content": content, "structuredContent": structured, "isError": False})


def _initialized(params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion")
    return {
        "protocolVersion": requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": SERVER_INFO,
        "instructions": "ragkb knowledge bases: search with retrieve_text_nodes, then read or grep documents.",
    }


def _tool_error(text: str) -> dict[str, Any]:
    # Tool failures are results the model can read and act on, not protocol errors (MCP's convention).
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
