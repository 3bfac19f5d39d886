"""Agent tools over REST and MCP, and the Dify External Knowledge API, against the live service: every
answer scoped to the caller's KBs, bounded, and in the shapes those clients expect."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
TOOL_NAMES = {"retrieve_text_nodes", "query_files", "grep_files", "read_file", "get_surrounding_context"}


def _handbook(tag: str) -> str:
    sections = []
    for number in range(12):
        sentences = " ".join(f"Rule {number}.{line} of the {tag} handbook covers topic {number}." for line in range(25))
        sections.append(f"Section {number}\n{sentences}")
    sections.append("The espresso machine is descaled every Friday at noon.")
    return "\n\n".join(sections)


@dataclass(frozen=True)
class Library:
    kb_a: str
    kb_b: str
    handbook: str
    handbook_text: str
    internal: str
    b_doc: str
    b_secret: str
    reader: str  # client: read on A
    filtered: str  # client: read on A, mandatory labels_any ["public"]


def _upload(ragkb: RunningRagkb, kb_id: str, text: str, **fields: Any) -> str:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    document_id = str(response.json()["id"])
    assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    return document_id


def _key(ragkb: RunningRagkb, **body: Any) -> str:
    response = ragkb.client.post("/v1/api-keys", json={"role": "client", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


@pytest.fixture(scope="module")
def library(ragkb: RunningRagkb) -> Library:
    tag = uuid.uuid4().hex[:8]
    kb_a, kb_b = ragkb.create_kb(f"tools-a-{tag}"), ragkb.create_kb(f"tools-b-{tag}")
    text = _handbook(tag)
    handbook = _upload(ragkb, kb_a, text, title="Handbook", labels=["public"], metadata={"team": "ops"})
    internal = _upload(ragkb, kb_a, "Internal: the espresso budget is secret.", labels=["internal"])
    # A line on which a backtracking pattern takes for ever.
    _upload(ragkb, kb_a, "x" * 4000 + "\nend", labels=["internal"], title="slow")
    b_secret = f"zebra-{tag} vault combination"
    b_doc = _upload(ragkb, kb_b, f"Bravo notes.\nThe {b_secret} is 4711.\nEspresso too.")
    return Library(
        kb_a=kb_a,
        kb_b=kb_b,
        handbook=handbook,
        handbook_text=text,
        internal=internal,
        b_doc=b_doc,
        b_secret=b_secret,
        reader=_key(ragkb, name=f"tools-reader-{tag}", grants={kb_a: "read"}),
        filtered=_key(
            ragkb, name=f"tools-filtered-{tag}", grants={kb_a: "read"}, search_filter={"labels_any": ["public"]}
        ),
    )


@pytest.fixture
def reader(ragkb: RunningRagkb, library: Library) -> Iterator[httpx.Client]:
    with ragkb.client_with(library.reader) as client:
        yield client


def _tool(client: httpx.Client, name: str, **body: Any) -> httpx.Response:
    return client.post(f"/v1/tools/{name}", json=body)


def test_tools_answer_over_rest(reader: httpx.Client, library: Library) -> None:
    nodes = _tool(reader, "retrieve_text_nodes", query="espresso descaled Friday", knowledge_base_ids=[library.kb_a])
    assert nodes.status_code == 200, nodes.text
    results = nodes.json()["results"]
    assert 1 <= len(results) <= 3 and results[0]["document_id"] == library.handbook

    files = _tool(reader, "query_files", knowledge_base_ids=[library.kb_a], filters={"labels_any": ["public"]}).json()
    assert [f["id"] for f in files["files"]] == [library.handbook]
    assert files["files"][0]["metadata"] == {"team": "ops"} and files["files"][0]["chunk_count"] >= 3
    assert files["files"][0]["text_available"] is True

    literal = _tool(reader, "grep_files", pattern="Rule 3.7 of", knowledge_base_ids=[library.kb_a]).json()
    assert len(literal["matches"]) == 1 and literal["matches"][0]["document_id"] == library.handbook
    line_number = literal["matches"][0]["line_number"]
    full_line = library.handbook_text.splitlines()[line_number - 1]
    assert "Rule 3.7 of" in full_line and literal["matches"][0]["line"] == full_line[:500] + "…"  # clipped
    assert literal["matches"][0]["before"] == ["Section 3"] and literal["matches"][0]["after"] == [""]
    regex = _tool(reader, "grep_files", pattern=r"^Section 1\d$", regex=True, knowledge_base_ids=[library.kb_a])
    assert [m["line"] for m in regex.json()["matches"]] == ["Section 10", "Section 11"]
    capped = _tool(reader, "grep_files", pattern="Section", knowledge_base_ids=[library.kb_a], max_matches=2).json()
    assert len(capped["matches"]) == 2 and capped["truncated"] is True

    first = _tool(reader, "read_file", document_id=library.handbook, limit=1000).json()
    assert first["total_chars"] == len(library.handbook_text) and first["text"] == library.handbook_text[:1000]
    rest = _tool(reader, "read_file", document_id=library.handbook, offset=first["next_offset"], limit=10**5).json()
    assert first["text"] + rest["text"] == library.handbook_text and rest["next_offset"] is None


def test_surrounding_context_gives_neighbours_in_document_order(reader: httpx.Client, library: Library) -> None:
    hits = _tool(reader, "retrieve_text_nodes", query="Rule 6.12 topic 6", knowledge_base_ids=[library.kb_a], top_k=10)
    middle = next(h for h in hits.json()["results"] if h["document_id"] == library.handbook and h["ordinal"] > 0)
    answer = _tool(reader, "get_surrounding_context", chunk_id=middle["chunk_id"], before=1, after=1)
    assert answer.status_code == 200, answer.text
    passages = answer.json()["passages"]
    ordinals = [p["ordinal"] for p in passages]
    assert ordinals == sorted(ordinals) and middle["ordinal"] in ordinals and ordinals[0] == middle["ordinal"] - 1
    assert {p["document_id"] for p in passages} == {library.handbook}


def test_tools_never_show_another_kb_or_a_filtered_document(
    ragkb: RunningRagkb, reader: httpx.Client, library: Library
) -> None:
    b_chunk = ragkb.search("vault combination", [library.kb_b])[0]["chunk_id"]
    refused = [
        _tool(reader, "read_file", document_id=library.b_doc),
        _tool(reader, "grep_files", pattern="vault", knowledge_base_ids=[library.kb_b]),
        _tool(reader, "grep_files", pattern="vault", knowledge_base_ids=[library.kb_a], document_ids=[library.b_doc]),
        _tool(reader, "query_files", knowledge_base_ids=[library.kb_b]),
        _tool(reader, "get_surrounding_context", chunk_id=b_chunk),
        _tool(reader, "get_surrounding_context", chunk_id=b_chunk, knowledge_base_ids=[library.kb_b]),
    ]
    assert [r.status_code for r in refused] == [404] * len(refused)
    everywhere = _tool(reader, "grep_files", pattern="e", knowledge_base_ids=[library.kb_a]).json()
    assert library.b_doc not in str(everywhere)
    for response in refused:
        assert library.b_secret not in response.text and "4711" not in response.text
    with ragkb.client_with(library.filtered) as filtered:
        assert _tool(filtered, "read_file", document_id=library.internal).status_code == 404
        grep = _tool(filtered, "grep_files", pattern="budget", knowledge_base_ids=[library.kb_a]).json()
        assert grep["matches"] == []
        assert _tool(filtered, "read_file", document_id=library.handbook).status_code == 200


def test_a_catastrophic_regex_ends_bounded_and_bad_patterns_are_refused(reader: httpx.Client, library: Library) -> None:
    started = time.monotonic()
    slow = _tool(reader, "grep_files", pattern=r"(x+x+)+y", regex=True, knowledge_base_ids=[library.kb_a])
    assert slow.status_code == 200, slow.text
    assert time.monotonic() - started < 15
    assert slow.json()["timed_out"] is True and slow.json()["truncated"] is True
    assert _tool(reader, "grep_files", pattern="(", regex=True, knowledge_base_ids=[library.kb_a]).status_code == 422
    too_long = _tool(reader, "grep_files", pattern="a" * 501, knowledge_base_ids=[library.kb_a])
    assert too_long.status_code in (400, 422)


def test_documents_ingested_before_text_was_kept_answer_409(ragkb: RunningRagkb, library: Library) -> None:
    old = _upload(ragkb, library.kb_a, "An old document from before the upgrade.", labels=["public"])
    with sqlite3.connect(ragkb.env["RAGKB_DATABASE__URL"].removeprefix("sqlite:///")) as db:
        db.execute("UPDATE documents SET text_sha256 = NULL WHERE id = ?", (old,))
    read = _tool(ragkb.client, "read_file", document_id=old)
    assert read.status_code == 409 and "re-ingest" in read.text
    grep = _tool(ragkb.client, "grep_files", pattern="old", knowledge_base_ids=[library.kb_a], document_ids=[old])
    assert grep.status_code == 200 and grep.json()["documents_without_text"] == [old]


# -- MCP ------------------------------------------------------------------------------------------------


def _rpc(client: httpx.Client, method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    response = client.post("/mcp", json=message, headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id
    return body.get("result", body.get("error"))


def _tool_calls(library: Library, chunk_id: str) -> dict[str, dict[str, Any]]:
    """One call of every MCP tool against KB A, as an agent session makes them."""
    return {
        "retrieve_text_nodes": {"query": "espresso", "knowledge_base_ids": [library.kb_a]},
        "query_files": {"knowledge_base_ids": [library.kb_a]},
        "grep_files": {"pattern": "espresso", "knowledge_base_ids": [library.kb_a]},
        "read_file": {"document_id": library.handbook, "limit": 50},
        "get_surrounding_context": {"chunk_id": chunk_id},
    }


def _mcp_session(client: httpx.Client, library: Library, chunk_id: str) -> dict[str, Any]:
    init = _rpc(
        client, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    )
    assert init["protocolVersion"] == "2025-06-18" and "tools" in init["capabilities"]
    notified = client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert notified.status_code == 202
    tools = _rpc(client, "tools/list", request_id=2)["tools"]
    assert {tool["name"] for tool in tools} == TOOL_NAMES
    assert all(tool["description"] and tool["inputSchema"]["type"] == "object" for tool in tools)
    calls = _tool_calls(library, chunk_id)
    results = {}
    for number, (name, arguments) in enumerate(calls.items(), start=3):
        result = _rpc(client, "tools/call", {"name": name, "arguments": arguments}, request_id=number)
        assert result["isError"] is False, result
        assert result["content"][0]["type"] == "text"
        results[name] = result["structuredContent"]
    return results


def test_two_mcp_clients_list_and_call_every_tool_at_once(ragkb: RunningRagkb, library: Library) -> None:
    chunk_id = ragkb.search("espresso descaled", [library.kb_a])[0]["chunk_id"]
    with (
        ragkb.client_with(library.reader) as one,
        ragkb.client_with(library.reader) as two,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        futures = [pool.submit(_mcp_session, client, library, chunk_id) for client in (one, two)]
        sessions = [future.result() for future in futures]
    for results in sessions:
        assert results["read_file"]["text"] == library.handbook_text[:50]
        assert results["grep_files"]["matches"] and results["retrieve_text_nodes"]["results"]
        assert any(p["chunk_id"] == chunk_id for p in results["get_surrounding_context"]["passages"])


def test_mcp_needs_a_key_and_keeps_to_its_scope(ragkb: RunningRagkb, library: Library) -> None:
    with ragkb.client_with(None) as anonymous:
        assert anonymous.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 401
    with ragkb.client_with(library.reader) as client:
        foreign = _rpc(client, "tools/call", {"name": "read_file", "arguments": {"document_id": library.b_doc}})
        assert foreign["isError"] is True and library.b_secret not in str(foreign)
        assert _rpc(client, "no/such/method")["code"] == -32601
        bad = _rpc(client, "tools/call", {"name": "grep_files", "arguments": {}})
        assert bad["isError"] is True
        assert client.post("/mcp", content=b"{not json").json()["error"]["code"] == -32700


# -- Dify External Knowledge API -----------------------------------------------------------------------


def _dify_body(knowledge_id: str, top_k: int = 3) -> dict[str, Any]:
    return {
        "knowledge_id": knowledge_id,
        "query": "espresso",
        "retrieval_setting": {"top_k": top_k, "score_threshold": 0},
    }


def test_dify_retrieval_answers_records(ragkb: RunningRagkb, library: Library) -> None:
    with ragkb.client_with(library.reader) as client:
        response = client.post("/retrieval", json=_dify_body(library.kb_a, 2))
    assert response.status_code == 200, response.text
    records = response.json()["records"]
    assert 1 <= len(records) <= 2
    assert set(records[0]) == {"content", "score", "title", "metadata"} and records[0]["metadata"]["document_id"]
    ops = {"logical_operator": "and", "conditions": [{"name": ["team"], "comparison_operator": "is", "value": "ops"}]}
    kept = ragkb.client.post("/retrieval", json={**_dify_body(library.kb_a), "metadata_condition": ops}).json()
    assert kept["records"] and {r["metadata"]["team"] for r in kept["records"]} == {"ops"}
    ops["conditions"][0]["value"] = "sales"
    none = ragkb.client.post("/retrieval", json={**_dify_body(library.kb_a), "metadata_condition": ops}).json()
    assert none["records"] == []
    high = ragkb.client.post(
        "/retrieval", json={**_dify_body(library.kb_a), "retrieval_setting": {"top_k": 3, "score_threshold": 1.0}}
    )
    assert high.status_code == 200 and all(r["score"] >= 1.0 for r in high.json()["records"])


def test_dify_errors_use_difys_codes(ragkb: RunningRagkb, library: Library) -> None:
    body = _dify_body(library.kb_a)
    with ragkb.client_with(None) as anonymous:
        missing = anonymous.post("/retrieval", json=body)
        malformed = anonymous.post("/retrieval", json=body, headers={"Authorization": "Token abc"})
    with ragkb.client_with("rk_000000000000_wrong") as wrong:
        refused = wrong.post("/retrieval", json=body)
    with ragkb.client_with(library.reader) as reader:
        foreign = reader.post("/retrieval", json=_dify_body(library.kb_b))
        unknown = reader.post("/retrieval", json=_dify_body(uuid.uuid4().hex))
    assert (missing.status_code, missing.json()["error_code"]) == (403, 1001)
    assert (malformed.status_code, malformed.json()["error_code"]) == (403, 1001)
    assert (refused.status_code, refused.json()["error_code"]) == (403, 1002)
    for response in (foreign, unknown):
        assert (response.status_code, response.json()["error_code"]) == (404, 2001)
        assert set(response.json()) == {"error_code", "error_msg"} and library.b_secret not in response.text


# -- MCP through the official SDK client ---------------------------------------------------------------


async def _sdk_session(url: str, key: str, library: Library, chunk_id: str) -> dict[str, Any]:
    """One agent session as an MCP host runs it: the `mcp` SDK's streamable-HTTP client and ClientSession."""
    calls = _tool_calls(library, chunk_id)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=False) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == TOOL_NAMES
        results = {}
        for name, arguments in calls.items():
            result = await session.call_tool(name, arguments)
            assert result.is_error is False, result
            results[name] = result.structured_content
        return results


def test_official_mcp_sdk_clients_use_every_tool_concurrently(ragkb: RunningRagkb, library: Library) -> None:
    chunk_id = ragkb.search("espresso descaled", [library.kb_a])[0]["chunk_id"]
    url = f"http://127.0.0.1:{ragkb.env['RAGKB_API__PORT']}/mcp"

    async def two_sessions() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                _sdk_session(url, library.reader, library, chunk_id),
                _sdk_session(url, library.reader, library, chunk_id),
            )
        )

    for results in asyncio.run(two_sessions()):
        assert results["read_file"] is not None and results["read_file"]["text"] == library.handbook_text[:50]
        assert results["grep_files"] is not None and results["grep_files"]["matches"]
        context = results["get_surrounding_context"]
        assert context is not None and any(p["chunk_id"] == chunk_id for p in context["passages"])


def test_context_assembles_cited_passages_within_the_budget(reader: httpx.Client, library: Library) -> None:
    body = {"query": "espresso", "knowledge_base_ids": [library.kb_a], "token_budget": 400}
    response = reader.post("/v1/context", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["context"].startswith("[1] ") and result["citations"][0]["number"] == 1
    assert result["estimated_tokens"] <= 400
    assert all(c["knowledge_base_id"] == library.kb_a for c in result["citations"])
    foreign = reader.post("/v1/context", json={**body, "knowledge_base_ids": [library.kb_b]})
    assert foreign.status_code == 404
