"""Keys and grants, enforced on every operation of the live API, and the retriever's closed internal surface."""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
METHODS = ("get", "post", "put", "patch", "delete")
PUBLIC_PATHS = {"/health", "/ready"}


@dataclass(frozen=True)
class World:
    kb_a: str
    kb_b: str
    b_name: str
    b_documents: list[dict[str, Any]]
    a_public_doc: str
    a_internal_doc: str
    writer: str  # client key: write on A
    reader: str  # client key: read on A
    filtered: str  # client key: read on A, mandatory labels_any ["public"]

    def b_secrets(self) -> list[str]:
        """What no response to a client of A may contain."""
        found = [self.b_name]
        for document in self.b_documents:
            found += [document["id"], document["title"], document["source_id"], *document["text_lines"]]
        return found


def upload(ragkb: RunningRagkb, kb_id: str, text: str, **fields: Any) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def create_key(ragkb: RunningRagkb, **body: Any) -> dict[str, Any]:
    response = ragkb.client.post("/v1/api-keys", json={"role": "client", **body})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


@pytest.fixture(scope="module")
def world(ragkb: RunningRagkb) -> World:
    tag = uuid.uuid4().hex[:8]
    kb_a, kb_b = ragkb.create_kb(f"alpha-{tag}"), ragkb.create_kb(f"bravo-vault-{tag}")
    public = upload(ragkb, kb_a, "The canteen serves lunch from noon until two.", labels=["public"])
    internal = upload(ragkb, kb_a, "The canteen's lunch budget for next year is confidential.", labels=["internal"])
    b_texts = [f"Bravo vault code {tag} opens the lunch safe.", f"Bravo payroll {tag}: lunch allowance doubled."]
    b_documents = []
    for number, text in enumerate(b_texts):
        accepted = upload(ragkb, kb_b, text, title=f"bravo-title-{tag}-{number}", source_id=f"bravo/{tag}/{number}")
        b_documents.append({**accepted, "text_lines": [text]})
    for kb_id, document in [(kb_a, public), (kb_a, internal)] + [(kb_b, d) for d in b_documents]:
        assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    return World(
        kb_a=kb_a,
        kb_b=kb_b,
        b_name=f"bravo-vault-{tag}",
        b_documents=b_documents,
        a_public_doc=public["id"],
        a_internal_doc=internal["id"],
        writer=create_key(ragkb, name="writer", grants={kb_a: "write"})["key"],
        reader=create_key(ragkb, name="reader", grants={kb_a: "read"})["key"],
        filtered=create_key(ragkb, name="filtered", grants={kb_a: "read"}, search_filter={"labels_any": ["public"]})[
            "key"
        ],
    )


@pytest.fixture
def as_client(ragkb: RunningRagkb) -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def make(key: str | None) -> httpx.Client:
        clients.append(ragkb.client_with(key))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def test_no_key_a_bad_key_and_a_revoked_key_are_unauthorized(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    revoked = create_key(ragkb, name="short-lived", grants={world.kb_a: "read"})
    assert as_client(revoked["key"]).get(f"/v1/knowledge-bases/{world.kb_a}").status_code == 200
    assert ragkb.client.delete(f"/v1/api-keys/{revoked['id']}").status_code == 204
    forged = f"rk_{revoked['prefix']}_{secrets.token_urlsafe(32)}"
    for key in (None, "not-a-key", forged, revoked["key"]):
        for method, path in (("GET", "/v1/knowledge-bases"), ("GET", f"/v1/knowledge-bases/{world.kb_a}/documents")):
            response = as_client(key).request(method, path)
            assert response.status_code == 401, (key, path, response.text)
            assert response.headers["content-type"].startswith("application/problem+json")
    assert as_client(None).get("/health").status_code == 200
    assert as_client(None).get("/ready").status_code == 200
    assert as_client(None).get("/schema/openapi.json").status_code == 200


def test_key_listing_never_shows_a_secret(ragkb: RunningRagkb, world: World) -> None:
    listed = ragkb.client.get("/v1/api-keys")
    assert listed.status_code == 200
    for key in (world.writer, world.reader, world.filtered):
        # `rk_<prefix>_<secret>`: the secret is everything after the prefix (it may hold "_" itself).
        secret = key.split("_", 2)[2]
        assert key not in listed.text and secret not in listed.text
    assert {"writer", "reader", "filtered"} <= {k["name"] for k in listed.json()}


def _bodies(world: World, b_doc: str) -> dict[tuple[str, str], Any]:
    """A plausible body per operation, carrying KB B's ids wherever ids go."""
    return {
        ("post", "/v1/knowledge-bases"): {"name": "stolen"},
        ("patch", "/v1/knowledge-bases/{kb_id}"): {"name": "stolen"},
        ("post", "/v1/knowledge-bases/{kb_id}/documents"): {"text": "injected", "source_id": "x"},
        ("patch", "/v1/knowledge-bases/{kb_id}/documents/{document_id}"): {"title": "stolen"},
        ("post", "/v1/search"): {"query": "lunch", "knowledge_base_ids": [world.kb_b], "filters": {}},
        ("post", "/v1/api-keys"): {"name": "escalate", "role": "client", "grants": {world.kb_b: "write"}},
        ("patch", "/v1/api-keys/{key_id}"): {"grants": {world.kb_b: "write"}},
        ("post", "/v1/tools/grep_files"): {"pattern": "lunch", "knowledge_base_ids": [world.kb_b]},
        ("post", "/v1/tools/read_file"): {"document_id": b_doc},
        ("post", "/v1/tools/get_surrounding_context"): {
            "chunk_id": str(uuid.uuid4()),
            "knowledge_base_ids": [world.kb_b],
        },
        ("post", "/retrieval"): {
            "knowledge_id": world.kb_b,
            "query": "lunch",
            "retrieval_setting": {"top_k": 3, "score_threshold": 0},
        },
    }


def _generic_body(world: World, b_doc: str) -> dict[str, Any]:
    # An operation added later gets B's ids under every name an id might go by.
    return {
        "knowledge_base_ids": [world.kb_b],
        "knowledge_base_id": world.kb_b,
        "kb_id": world.kb_b,
        "document_ids": [b_doc],
        "query": "lunch",
        "text": "lunch",
    }


def _operations(ragkb: RunningRagkb) -> list[tuple[str, str]]:
    schema = ragkb.client.get("/schema/openapi.json").json()
    operations = [
        (method, path)
        for path, item in schema["paths"].items()
        for method in METHODS
        if method in item and path not in PUBLIC_PATHS
    ]
    assert len(operations) >= 14, operations
    return operations


def _fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda match: values.get(match.group(1), "unknown"), path)


def _call(client: httpx.Client, method: str, path: str, body: Any) -> httpx.Response:
    return client.request(method.upper(), path, json=body)


def _mask(text: str, ids: list[str]) -> str:
    for value in ids:
        text = text.replace(value, "<ID>")
    return text


def test_a_client_of_kb_a_learns_nothing_about_kb_b_through_any_operation(
    ragkb: RunningRagkb, world: World, as_client: Any
) -> None:
    client = as_client(world.writer)
    b_doc = world.b_documents[0]["id"]
    admin_key_id = next(k["id"] for k in ragkb.client.get("/v1/api-keys").json() if k["name"] == "writer")
    bodies = _bodies(world, b_doc)
    for method, path in _operations(ragkb):
        body = bodies.get((method, path), _generic_body(world, b_doc)) if method in ("post", "put", "patch") else None
        targets = {"kb_id": world.kb_b, "document_id": b_doc, "key_id": admin_key_id}
        response = _call(client, method, _fill(path, targets), body)
        carries_b = "{kb_id}" in path or json.dumps(body).find(world.kb_b) >= 0
        if carries_b or path.startswith("/v1/api-keys"):
            assert response.status_code in (403, 404), (method, path, response.status_code, response.text)
        for secret in world.b_secrets():
            assert secret not in _mask(response.text, [world.kb_b, b_doc]), (method, path, secret)
        # Unknown ids of the same shape must get byte-for-byte the same answer: nothing tells B apart.
        twin = {"kb_id": uuid.uuid4().hex, "document_id": uuid.uuid4().hex, "key_id": admin_key_id}
        twin_body = json.loads(json.dumps(body).replace(world.kb_b, twin["kb_id"]).replace(b_doc, twin["document_id"]))
        twin_response = _call(client, method, _fill(path, twin), twin_body)
        assert twin_response.status_code == response.status_code, (method, path)
        assert _mask(twin_response.text, [twin["kb_id"], twin["document_id"]]) == _mask(
            response.text, [world.kb_b, b_doc]
        ), (method, path)
        # B's documents through A's path: as unknown as any other id.
        if "{document_id}" in path:
            across = _call(client, method, _fill(path, {"kb_id": world.kb_a, "document_id": b_doc}), body)
            assert across.status_code == 404, (method, path, across.text)
            assert all(secret not in _mask(across.text, [b_doc]) for secret in world.b_secrets())
    _assert_b_untouched(ragkb, world)


def _assert_b_untouched(ragkb: RunningRagkb, world: World) -> None:
    kb = ragkb.client.get(f"/v1/knowledge-bases/{world.kb_b}").json()
    assert kb["name"] == world.b_name and kb["document_counts"]["done"] == len(world.b_documents)
    titles = {d["title"] for d in ragkb.client.get(f"/v1/knowledge-bases/{world.kb_b}/documents").json()}
    assert titles == {d["title"] for d in world.b_documents}
    keys = {k["name"]: k for k in ragkb.client.get("/v1/api-keys").json()}
    assert keys["writer"]["grants"] == {world.kb_a: "write"} and "escalate" not in keys


def test_a_client_sees_and_searches_only_its_granted_kbs(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    client = as_client(world.reader)
    assert [kb["id"] for kb in client.get("/v1/knowledge-bases").json()] == [world.kb_a]
    response = client.post("/v1/search", json={"query": "lunch", "knowledge_base_ids": [world.kb_a]})
    assert response.status_code == 200 and response.json()["results"]
    assert {hit["knowledge_base_id"] for hit in response.json()["results"]} == {world.kb_a}
    both = client.post("/v1/search", json={"query": "lunch", "knowledge_base_ids": [world.kb_a, world.kb_b]})
    assert both.status_code == 404 and world.b_name not in both.text


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_a_mandatory_label_filter_holds_in_every_search_mode(world: World, as_client: Any, mode: str) -> None:
    client = as_client(world.filtered)
    seen: set[str] = set()
    for filters in ({}, {"labels_any": ["internal"]}, {"labels_any": ["internal", "public"]}, {"doc_types": None}):
        for query in ("canteen lunch budget confidential", "lunch"):
            body = {"query": query, "knowledge_base_ids": [world.kb_a], "mode": mode, "filters": filters, "top_k": 20}
            response = client.post("/v1/search", json=body)
            assert response.status_code == 200, response.text
            for hit in response.json()["results"]:
                assert "public" in hit["labels"], hit
                seen.add(hit["document_id"])
    assert seen == {world.a_public_doc}


def test_a_read_grant_cannot_change_anything(world: World, as_client: Any) -> None:
    client = as_client(world.reader)
    documents = f"/v1/knowledge-bases/{world.kb_a}/documents"
    assert client.get(documents).status_code == 200
    assert client.get(f"{documents}/{world.a_public_doc}").status_code == 200
    upload_json = client.post(documents, json={"text": "sneaky"})
    upload_file = client.post(documents, files={"file": ("a.md", b"# sneaky")})
    patched = client.patch(f"{documents}/{world.a_public_doc}", json={"title": "x"})
    retried = client.post(f"{documents}/{world.a_public_doc}/retry")
    deleted = client.delete(f"{documents}/{world.a_public_doc}")
    for response in (upload_json, upload_file, patched, retried, deleted):
        assert response.status_code == 403, response.text
        assert response.headers["content-type"].startswith("application/problem+json")


def test_admin_only_endpoints_refuse_clients(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    client = as_client(world.writer)
    key_id = ragkb.client.get("/v1/api-keys").json()[0]["id"]
    refused = [
        client.post("/v1/knowledge-bases", json={"name": "mine"}),
        client.patch(f"/v1/knowledge-bases/{world.kb_a}", json={"name": "renamed"}),
        client.delete(f"/v1/knowledge-bases/{world.kb_a}"),
        client.get("/v1/api-keys"),
        client.post("/v1/api-keys", json={"name": "me-too", "role": "admin"}),
        client.patch(f"/v1/api-keys/{key_id}", json={"grants": {}}),
        client.delete(f"/v1/api-keys/{key_id}"),
    ]
    assert [response.status_code for response in refused] == [403] * len(refused)
    assert ragkb.client.get(f"/v1/knowledge-bases/{world.kb_a}").json()["name"].startswith("alpha-")


def test_the_writer_can_write_its_kb(world: World, as_client: Any) -> None:
    client = as_client(world.writer)
    documents = f"/v1/knowledge-bases/{world.kb_a}/documents"
    accepted = client.post(documents, json={"text": "Writers may add notes.", "labels": ["public"]})
    assert accepted.status_code == 202, accepted.text
    assert client.delete(f"{documents}/{accepted.json()['id']}").status_code == 204


def test_grant_changes_apply_at_once(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    created = create_key(ragkb, name="promoted", grants={world.kb_a: "read"})
    client = as_client(created["key"])
    assert client.get(f"/v1/knowledge-bases/{world.kb_b}").status_code == 404
    changed = ragkb.client.patch(f"/v1/api-keys/{created['id']}", json={"grants": {world.kb_b: "read"}})
    assert changed.status_code == 200 and changed.json()["grants"] == {world.kb_b: "read"}
    assert client.get(f"/v1/knowledge-bases/{world.kb_b}").status_code == 200
    assert client.get(f"/v1/knowledge-bases/{world.kb_a}").status_code == 404


def test_the_retriever_refuses_internal_calls_without_the_service_token(ragkb: RunningRagkb, world: World) -> None:
    base = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}"
    count = f"{base}/internal/v1/kbs/{world.kb_a}/count"
    search = f"{base}/internal/v1/search"
    query = {"query": "lunch", "knowledge_base_ids": [world.kb_b]}
    for headers in (
        {},
        {"X-Ragkb-Service-Token": "wrong"},
        {"Authorization": f"Bearer {ragkb.env['RAGKB_SERVICE_TOKEN']}"},
    ):
        assert httpx.get(count, headers=headers).status_code == 401
        refused = httpx.post(search, json=query, headers=headers)
        assert refused.status_code == 401 and "vault" not in refused.text
        assert httpx.delete(f"{base}/internal/v1/kbs/{world.kb_b}", headers=headers).status_code == 401
    assert httpx.get(count, headers=ragkb.service_headers).status_code == 200
    assert httpx.get(f"{base}/health").status_code == 200
    assert httpx.get(f"{base}/ready").status_code == 200


def test_internal_readiness_tells_a_caller_whether_its_token_is_accepted(ragkb: RunningRagkb) -> None:
    url = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1/ready"
    assert httpx.get(url, headers=ragkb.service_headers).status_code == 200
    assert httpx.get(url, headers={"X-Ragkb-Service-Token": "wrong"}).status_code in (401, 403)
    assert httpx.get(url).status_code in (401, 403)


# -- the search path reads the key and the KBs on every search (nothing cached that access depends on) ----------


def search_status(client: httpx.Client, kb_id: str, query: str = "lunch") -> tuple[int, dict[str, Any]]:
    response = client.post("/v1/search", json={"query": query, "knowledge_base_ids": [kb_id], "mode": "keyword"})
    return response.status_code, response.json()


def test_a_revoked_key_cannot_search_from_the_next_request(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    created = create_key(ragkb, name="searcher", grants={world.kb_a: "read"})
    client = as_client(created["key"])
    for _ in range(3):  # the key's own searches just before: nothing they leave behind may outlive the revocation
        assert search_status(client, world.kb_a)[0] == 200
    assert ragkb.client.delete(f"/v1/api-keys/{created['id']}").status_code == 204
    status, problem = search_status(client, world.kb_a)
    assert status == 401 and problem["status"] == 401


def test_a_grant_or_filter_change_applies_to_the_next_search(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    created = create_key(ragkb, name="regranted", grants={world.kb_a: "read"})
    client = as_client(created["key"])
    status, answer = search_status(client, world.kb_a)
    assert status == 200 and {hit["document_id"] for hit in answer["results"]} >= {world.a_internal_doc}
    narrowed = {"grants": {world.kb_a: "read"}, "search_filter": {"labels_any": ["public"]}}
    assert ragkb.client.patch(f"/v1/api-keys/{created['id']}", json=narrowed).status_code == 200
    status, answer = search_status(client, world.kb_a)
    assert status == 200 and {hit["document_id"] for hit in answer["results"]} == {world.a_public_doc}
    assert ragkb.client.patch(f"/v1/api-keys/{created['id']}", json={"grants": {world.kb_b: "read"}}).status_code == 200
    assert search_status(client, world.kb_a)[0] == 404
    assert search_status(client, world.kb_b)[0] == 200


def test_a_kb_settings_change_applies_to_the_next_search(ragkb: RunningRagkb, world: World, as_client: Any) -> None:
    kb_path = f"/v1/knowledge-bases/{world.kb_a}"
    client = as_client(world.reader)
    try:
        for top_k in (1, 2, 1):
            assert (
                ragkb.client.patch(kb_path, json={"retrieval": {"top_k": top_k, "max_blocks": top_k}}).status_code
                == 200
            )
            status, answer = search_status(client, world.kb_a)
            assert status == 200 and len(answer["results"]) == top_k
            assert answer["effective_settings"][world.kb_a]["top_k"] == top_k
    finally:
        ragkb.client.patch(kb_path, json={"retrieval": {"top_k": None, "max_blocks": None}})


def test_a_kb_being_deleted_is_not_searched_from_the_next_request(ragkb: RunningRagkb, as_client: Any) -> None:
    kb_id = ragkb.create_kb(f"doomed-{uuid.uuid4().hex[:8]}")
    accepted = upload(ragkb, kb_id, "The doomed archive mentions lunch once.")
    assert ragkb.wait_document(kb_id, accepted["id"])["status"] == "done"
    client = as_client(create_key(ragkb, name="doomed-reader", grants={kb_id: "read"})["key"])
    assert search_status(client, kb_id)[0] == 200
    assert ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}").status_code == 202
    status, problem = search_status(client, kb_id)
    assert status in (404, 409) and problem["status"] == status
