"""A hostile client against the live stack (issue 28): JSON-RPC batches on /mcp, JSON nested past any decoder
on every JSON endpoint, Dify's /retrieval probed without a key, NUL characters in stored and searched text,
and event streams opened by the hundred. Each answer is a 4xx in the route's documented error shape, never a
500, and nothing is stored."""

from __future__ import annotations

import json
import time
import uuid
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
# Nesting far past Python's recursion limit and msgspec's: the decoders give up with RecursionError.
DEEP_JSON = "[" * 100_000 + "]" * 100_000
JSON_HEADERS = {"Content-Type": "application/json"}
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def kb_id(ragkb: RunningRagkb) -> str:
    return ragkb.create_kb(f"hostile-{uuid.uuid4().hex[:8]}")


def _json_operations(ragkb: RunningRagkb) -> list[tuple[str, str]]:
    """(method, path template) of every documented operation whose body may be JSON."""
    document = ragkb.client.get("/schema/openapi.json").json()
    operations = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                operations.append((method, path))
    return operations


def _concrete(path: str, kb_id: str) -> str:
    """A path template with the test KB's id and made-up ids of the right form for the other parameters."""
    filled = path.replace("{kb_id}", kb_id)
    while "{" in filled:
        start, end = filled.index("{"), filled.index("}")
        filled = filled[:start] + uuid.uuid4().hex + filled[end + 1 :]
    return filled


# -- 1. MCP batches ------------------------------------------------------------------------------------------


def test_an_mcp_batch_is_refused_whole_without_running_a_tool(ragkb: RunningRagkb, kb_id: str) -> None:
    call = {"name": "query_files", "arguments": {"knowledge_base_ids": [kb_id]}}
    batch = [{"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call} for n in range(2000)]
    refused = ragkb.client.post("/mcp", json=batch)
    assert refused.status_code == 400, refused.text
    body = refused.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600
    assert "result" not in refused.text  # not one of the 2,000 calls ran
    single = ragkb.client.post("/mcp", json=batch[0])
    assert single.status_code == 200 and single.json()["result"]["isError"] is False


# -- 5. JSON nested past the decoders --------------------------------------------------------------------


def test_deeply_nested_json_answers_422_problem_on_every_json_endpoint(ragkb: RunningRagkb, kb_id: str) -> None:
    operations = _json_operations(ragkb)
    assert len(operations) >= 15
    answers = {}
    for method, path in operations:
        response = ragkb.client.request(method, _concrete(path, kb_id), content=DEEP_JSON, headers=JSON_HEADERS)
        answers[f"{method} {path}"] = (response.status_code, response.headers.get("content-type", ""))
    wrong = {operation: answer for operation, answer in answers.items() if answer[0] != 422 or PROBLEM not in answer[1]}
    # Routes whose path names something that does not exist may refuse before reading the body: a 404 problem.
    assert {op: answer for op, answer in wrong.items() if answer[0] != 404 or PROBLEM not in answer[1]} == {}
    assert answers["post /v1/search"][0] == answers["post /v1/knowledge-bases"][0] == 422
    mcp = ragkb.client.post("/mcp", content=DEEP_JSON, headers=JSON_HEADERS)
    assert mcp.status_code == 400 and mcp.json()["error"]["code"] == -32700


def test_malformed_json_answers_422_problem(ragkb: RunningRagkb, kb_id: str) -> None:
    for path in ("/v1/search", "/v1/knowledge-bases", "/v1/context", f"/v1/knowledge-bases/{kb_id}/documents"):
        response = ragkb.client.post(path, content=b'{"query": ', headers=JSON_HEADERS)
        assert response.status_code == 422, (path, response.text)
        assert response.headers["content-type"].startswith(PROBLEM)


def test_dify_refuses_an_unauthenticated_deep_body_from_its_header_alone(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        missing = anonymous.post("/retrieval", content=DEEP_JSON, headers=JSON_HEADERS)
        forged = anonymous.post(
            "/retrieval", content=DEEP_JSON, headers={**JSON_HEADERS, "Authorization": "Bearer rk_000000000000_x"}
        )
    assert (missing.status_code, missing.json()) == (
        403,
        {"error_code": 1001, "error_msg": "Invalid Authorization header format. Expected 'Bearer <api-key>' format."},
    )
    assert (forged.status_code, forged.json()) == (403, {"error_code": 1002, "error_msg": "Authorization failed"})
    authenticated = ragkb.client.post("/retrieval", content=DEEP_JSON, headers=JSON_HEADERS)
    assert authenticated.status_code == 422 and authenticated.headers["content-type"].startswith(PROBLEM)


# -- 13. The API contract -------------------------------------------------------------------------------------


def test_the_openapi_document_states_problems_streams_and_bodies(ragkb: RunningRagkb) -> None:
    paths = ragkb.client.get("/schema/openapi.json").json()["paths"]
    search, events = paths["/v1/search"]["post"], paths["/v1/jobs/{job_id}/events"]["get"]
    for status in ("401", "404", "409", "422", "429"):
        assert PROBLEM in search["responses"][status]["content"], status
    assert {"401", "404", "422"} <= set(events["responses"])
    assert list(events["responses"]["200"]["content"]) == ["text/event-stream"]
    upload = paths["/v1/knowledge-bases/{kb_id}/documents"]["post"]["requestBody"]["content"]
    question_sets = paths["/v1/knowledge-bases/{kb_id}/question-sets"]["post"]["requestBody"]["content"]
    batch = paths["/v1/knowledge-bases/{kb_id}/documents/batch"]["post"]["requestBody"]["content"]
    assert set(upload) == set(question_sets) == {"multipart/form-data", "application/json"}
    assert set(batch) == {"application/json"}
    assert paths["/health"]["get"]["responses"].keys() == {"200"}  # public: no key, no problem to document


def test_search_and_context_refuse_a_text_plain_body_with_415(ragkb: RunningRagkb, kb_id: str) -> None:
    body = json.dumps({"query": "lunch", "knowledge_base_ids": [kb_id]})
    for path in ("/v1/search", "/v1/context"):
        response = ragkb.client.post(path, content=body, headers={"Content-Type": "text/plain"})
        assert response.status_code == 415, (path, response.text)
        assert _problem(response)["supported_media_types"] == ["application/json"]
        assert ragkb.client.post(path, content=body, headers=JSON_HEADERS).status_code == 200


def test_an_unknown_query_parameter_is_refused_not_ignored(ragkb: RunningRagkb, kb_id: str) -> None:
    misspelt = ragkb.client.get("/v1/knowledge-bases", params={"limt": "1"})
    assert misspelt.status_code == 422
    assert "limt" in _problem(misspelt)["detail"] and "limit" in _problem(misspelt)["detail"]
    assert ragkb.client.get("/v1/knowledge-bases", params={"limit": "1"}).status_code == 200
    documents = f"/v1/knowledge-bases/{kb_id}/documents"
    assert ragkb.client.get(documents, params={"status": "done", "label": "x"}).status_code == 200
    assert ragkb.client.get(documents, params={"kb": kb_id}).status_code == 422


def test_dify_answers_an_id_no_kb_can_have_as_unknown_knowledge(ragkb: RunningRagkb) -> None:
    body = {"knowledge_id": "not an id!", "query": "lunch", "retrieval_setting": {"top_k": 3}}
    answer = ragkb.client.post("/retrieval", json=body)
    assert (answer.status_code, answer.json()["error_code"]) == (404, 2001), answer.text
    blank = ragkb.client.post("/retrieval", json={**body, "knowledge_id": "a" * 32, "query": "   "})
    assert blank.status_code == 422, blank.text


# -- 14. NUL characters ---------------------------------------------------------------------------------------


def _nul_requests(kb_id: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Every place text enters: a KB's name, a document's fields and metadata, a search, a label filter."""
    document = {"text": "Lunch is served at noon.", "source_id": "menu"}
    documents = f"/v1/knowledge-bases/{kb_id}/documents"
    return {
        "kb name": ("POST", "/v1/knowledge-bases", {"json": {"name": "nul\x00kb"}}),
        "source_id": ("POST", documents, {"json": {**document, "source_id": "menu\x00"}}),
        "title": ("POST", documents, {"json": {**document, "title": "Menu\x00"}}),
        "label": ("POST", documents, {"json": {**document, "labels": ["pub\x00lic"]}}),
        "metadata string": ("POST", documents, {"json": {**document, "metadata": {"team": "ops\x00"}}}),
        "metadata key": ("POST", documents, {"json": {**document, "metadata": {"te\x00am": "ops"}}}),
        "batch item": ("POST", f"{documents}/batch", {"json": {"documents": [{**document, "title": "\x00"}]}}),
        "multipart title": ("POST", documents, {"files": {"file": ("menu.txt", b"Lunch")}, "data": {"title": "a\x00"}}),
        "multipart labels": (
            "POST",
            documents,
            {"files": {"file": ("menu.txt", b"Lunch")}, "data": {"labels": "a\x00"}},
        ),
        "query": ("POST", "/v1/search", {"json": {"query": "lunch\x00", "knowledge_base_ids": [kb_id]}}),
        "context query": ("POST", "/v1/context", {"json": {"query": "\x00lunch", "knowledge_base_ids": [kb_id]}}),
        "label filter": ("GET", documents, {"params": {"label": "pub\x00lic"}}),
        "path id": ("GET", f"{documents}/{uuid.uuid4().hex}%00", {}),
    }


def test_nul_characters_are_refused_with_422_and_nothing_is_stored(ragkb: RunningRagkb, kb_id: str) -> None:
    answers = {}
    for name, (method, path, arguments) in _nul_requests(kb_id).items():
        response = ragkb.client.request(method, path, **arguments)
        answers[name] = (response.status_code, _problem(response)["detail"])
    assert {name: answer for name, answer in answers.items() if answer[0] != 422} == {}
    assert "NUL" in answers["kb name"][1] and "NUL" in answers["query"][1]
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json() == []
    assert all("nul" not in kb["name"] for kb in ragkb.client.get("/v1/knowledge-bases").json())
    grep = {"name": "grep_files", "arguments": {"pattern": "lunch\x00", "knowledge_base_ids": [kb_id]}}
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": grep}
    refused = ragkb.client.post("/mcp", json=rpc)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600


# -- 9. Event streams ----------------------------------------------------------------------------------------


def _waiting_job(ragkb: RunningRagkb, kb_id: str) -> str:
    """A sync job that waits for an upload nobody sends: it runs until it is cancelled."""
    manifest = [{"source_id": "never-sent.md", "sha256": "0" * 64, "size": 1, "mtime": 0.0}]
    plan = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": manifest})
    assert plan.status_code == 200, plan.text
    return str(plan.json()["job_id"])


class EventReader:
    """The events of one open stream, read a line at a time. One iterator for the stream's life: closing an
    httpx line iterator early closes the connection, which the server takes for a client gone."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200, response.read()
        self._lines = response.iter_lines()

    def next_event(self) -> str:
        for line in self._lines:
            if line.startswith("event:"):
                return line.partition(":")[2].strip()
        raise AssertionError("the stream ended without another event")

    def last_event(self) -> str:
        events = [line.partition(":")[2].strip() for line in self._lines if line.startswith("event:")]
        return events[-1]


def test_a_key_holds_at_most_four_event_streams_and_they_end_with_their_job(ragkb: RunningRagkb, kb_id: str) -> None:
    key = ragkb.client.post("/v1/api-keys", json={"name": "streams", "role": "client", "grants": {kb_id: "read"}})
    job_id = _waiting_job(ragkb, kb_id)
    events = f"/v1/jobs/{job_id}/events"
    with ragkb.client_with(key.json()["key"]) as reader, ExitStack() as open_streams:
        responses = [open_streams.enter_context(reader.stream("GET", events)) for _ in range(4)]
        streams = [EventReader(response) for response in responses]
        assert [stream.next_event() for stream in streams] == ["progress"] * 4
        refused = reader.get(events)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "4 job event streams" in _problem(refused)["detail"]
        with ragkb.client.stream("GET", events) as other:  # another key's streams are its own
            assert EventReader(other).next_event() == "progress"
        responses.pop().close()  # a client leaves: its place comes back once the api sees it gone
        streams.pop()
        assert _eventually_opens(reader, events)
        assert ragkb.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert [stream.last_event() for stream in streams] == ["complete"] * 3


def _eventually_opens(client: httpx.Client, path: str) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with client.stream("GET", path) as response:
            if response.status_code == 200:
                return EventReader(response).next_event() == "progress"
        time.sleep(0.2)
    return False


def _problem(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith(PROBLEM), response.text
    body: dict[str, Any] = response.json()
    return body
