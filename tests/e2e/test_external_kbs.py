"""External knowledge bases, as a user registers and searches them on running stacks: a Qdrant collection another
team wrote with qdrant-client, and a second ragkb stack (other ports, its own Redis database) through its Dify
External Knowledge API, searched together with a native KB under the same grants; writes to them refused.

The collection is a qdrant-client local-mode folder under the stack's RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS (no
Qdrant server binary is installable here), written and closed before the KB is registered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ragkb_analyzer import bm25_encoder_for
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings, EmbeddingSettings
from ragkb_models import load_embedder
from tests.e2e.conftest import REPO, RunningRagkb, e2e_env, external_qdrant_roots
from tests.support.redis_db import private_redis_db

pytestmark = pytest.mark.e2e
COLLECTION = "facilities"
# (text, title, url, tags) of the other team's points.
POINTS = [
    ("The cafeteria on the second floor serves lunch from 11:30 to 14:00.", "Cafeteria", "https://wiki/cafeteria",
     ["public"]),
    ("Meeting rooms on the fifth floor are booked through the room calendar.", "Meeting rooms",
     "https://wiki/rooms", ["internal"]),
]  # fmt: skip
NATIVE_TEXT = "The cafeteria closes early on Fridays, at 13:00, for cleaning."
REMOTE_TEXT = "Cafeteria lunch vouchers are handed out by the front desk every Monday."
READ_ONLY_TYPE = "https://ragkb.dev/problems/read-only-knowledge-base"


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRagkb]:
    """A second ragkb stack: the Dify endpoint the first one reads."""
    workdir = tmp_path_factory.mktemp("ragkb-remote")
    with private_redis_db() as broker:
        redis_url = f"redis://127.0.0.1:6379/{broker.connection_pool.connection_kwargs['db']}"
        stack = RunningRagkb(REPO, workdir, e2e_env(workdir, redis_url))
        stack.start()
        yield stack
        stack.stop()
        stack.client.close()


def write_collection(folder: Path) -> None:
    """As another team writes its collection: e5 passages ("passage: ") in the named vector `dense`, ragkb's
    BM25 terms in `terms`, its own payload keys."""
    embedder = load_embedder(EmbeddingSettings())
    encoder = bm25_encoder_for(KbAnalyzer(), AnalyzerSettings())
    vectors = embedder.embed_passages([f"{title}\n{text}" for text, title, *_ in POINTS])
    client = QdrantClient(path=str(folder))
    client.create_collection(
        COLLECTION,
        vectors_config={"dense": qm.VectorParams(size=embedder.dimension, distance=qm.Distance.COSINE)},
        sparse_vectors_config={"terms": qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
    )
    points = []
    for number, ((text, title, url, tags), vector) in enumerate(zip(POINTS, vectors, strict=True), start=1):
        terms = encoder.encode_document(f"{title}\n{text}", title)
        sparse = qm.SparseVector(indices=terms.indices, values=terms.values)
        payload = {"content": text, "name": title, "link": url, "tags": tags}
        points.append(qm.PointStruct(id=number, vector={"dense": vector.tolist(), "terms": sparse}, payload=payload))
    client.upsert(COLLECTION, points=points, wait=True)
    client.close()  # local mode locks its folder: the retriever opens it next


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def add_text(stack: RunningRagkb, kb_id: str, text: str, title: str) -> None:
    response = stack.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, "title": title, "source_id": f"{title}.md"}
    )
    assert response.status_code == 202, response.text
    assert stack.wait_document(kb_id, response.json()["id"])["status"] == "done"


@pytest.fixture(scope="module")
def kbs(ragkb: RunningRagkb, remote: RunningRagkb) -> dict[str, str]:
    """A native KB, an external Qdrant KB and an external Dify KB (the remote stack's KB) on the first stack."""
    remote_kb = remote.create_kb("remote handbook")
    add_text(remote, remote_kb, REMOTE_TEXT, "vouchers")
    # The remote's key for the first stack: a client key that may read that one KB.
    grant = {"name": "first stack", "role": "client", "grants": {remote_kb: "read"}}
    remote_key = created(remote.client.post("/v1/api-keys", json=grant))["key"]

    native = ragkb.create_kb("external-e2e native")
    add_text(ragkb, native, NATIVE_TEXT, "fridays")
    folder = external_qdrant_roots(ragkb.workdir) / "facilities-team"
    folder.parent.mkdir(parents=True, exist_ok=True)
    write_collection(folder)
    qdrant = {
        "kind": "qdrant",
        "path": str(folder),
        "collection": COLLECTION,
        "fields": {"text": "content", "title": "name", "source": "link", "labels": "tags"},
        "dense_vector": "dense",
        "sparse_vector": "terms",
    }
    registration = {"name": "facilities", "external": {"config": qdrant}}
    qdrant_kb = created(ragkb.client.post("/v1/knowledge-bases", json=registration))
    dify = {"kind": "dify", "endpoint": remote.api_url, "knowledge_id": remote_kb}
    dify_kb = created(
        ragkb.client.post(
            "/v1/knowledge-bases", json={"name": "remote ragkb", "external": {"config": dify, "api_key": remote_key}}
        )
    )
    return {"native": native, "qdrant": qdrant_kb["id"], "dify": dify_kb["id"], "remote_key": remote_key}


def test_get_shows_the_kind_and_config_never_the_key(ragkb: RunningRagkb, kbs: dict[str, str]) -> None:
    dify = ragkb.client.get(f"/v1/knowledge-bases/{kbs['dify']}")
    assert dify.status_code == 200
    body = dify.json()
    assert body["kind"] == "external" and body["external"]["has_api_key"] is True
    assert body["external"]["config"]["kind"] == "dify" and body["embedding_model"] == ""
    assert kbs["remote_key"] not in dify.text
    qdrant = ragkb.client.get(f"/v1/knowledge-bases/{kbs['qdrant']}").json()
    assert (qdrant["kind"], qdrant["embedding_model"]) == ("external", "multilingual-e5-small")
    assert qdrant["external"] == {
        "config": {
            "kind": "qdrant",
            "url": None,
            "path": str(external_qdrant_roots(ragkb.workdir) / "facilities-team"),
            "collection": COLLECTION,
            "fields": {"text": "content", "title": "name", "source": "link", "metadata": [], "labels": "tags"},
            "dense_vector": "dense",
            "sparse_vector": "terms",
        },
        "has_api_key": False,
    }
    assert ragkb.client.get(f"/v1/knowledge-bases/{kbs['native']}").json()["kind"] == "native"


def test_one_search_merges_native_qdrant_and_dify_passages_with_citations(
    ragkb: RunningRagkb, kbs: dict[str, str]
) -> None:
    ids = [kbs["native"], kbs["qdrant"], kbs["dify"]]
    response = ragkb.client.post("/v1/search", json={"query": "When is the cafeteria open?", "knowledge_base_ids": ids})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert not answer["degraded"], answer["degraded_reason"]
    by_kb = {hit["knowledge_base_id"]: hit for hit in reversed(answer["results"])}  # each KB's best
    assert set(by_kb) == set(ids)
    assert by_kb[kbs["native"]]["text"] == NATIVE_TEXT
    cafeteria = by_kb[kbs["qdrant"]]
    assert (cafeteria["title"], cafeteria["source_id"], cafeteria["original_url"]) == (
        "Cafeteria",
        "https://wiki/cafeteria",
        "https://wiki/cafeteria",
    )
    assert cafeteria["knowledge_base_name"] == "facilities"
    remote_hit = by_kb[kbs["dify"]]
    assert (remote_hit["text"], remote_hit["title"], remote_hit["source_id"]) == (
        REMOTE_TEXT,
        "vouchers",
        "vouchers.md",
    )
    assert 0 < remote_hit["relevance"] <= 1  # the remote's relevance, as its Dify answer scores it


def test_a_key_without_a_grant_on_an_external_kb_sees_nothing_of_it(ragkb: RunningRagkb, kbs: dict[str, str]) -> None:
    grant = {"name": "native only", "role": "client", "grants": {kbs["native"]: "read"}}
    with ragkb.client_with(created(ragkb.client.post("/v1/api-keys", json=grant))["key"]) as client:
        listed = {kb["id"] for kb in client.get("/v1/knowledge-bases").json()}
        assert listed == {kbs["native"]}
        for external in (kbs["qdrant"], kbs["dify"]):
            assert client.get(f"/v1/knowledge-bases/{external}").status_code == 404
            search = {"query": "cafeteria", "knowledge_base_ids": [kbs["native"], external]}
            refused = client.post("/v1/search", json=search)
            assert refused.status_code == 404 and refused.json()["missing"] == [external]
        hits = client.post("/v1/search", json={"query": "cafeteria", "knowledge_base_ids": [kbs["native"]]}).json()
        assert {hit["knowledge_base_id"] for hit in hits["results"]} == {kbs["native"]}


def test_a_key_with_a_label_filter_sees_only_what_the_external_store_can_enforce(
    ragkb: RunningRagkb, kbs: dict[str, str]
) -> None:
    grant = {
        "name": "public only",
        "role": "client",
        "grants": {kbs["qdrant"]: "read", kbs["dify"]: "read"},
        "search_filter": {"labels_any": ["public"]},
    }
    search = {"query": "cafeteria meeting rooms vouchers", "knowledge_base_ids": [kbs["qdrant"], kbs["dify"]]}
    with ragkb.client_with(created(ragkb.client.post("/v1/api-keys", json=grant))["key"]) as client:
        hits = client.post("/v1/search", json=search).json()["results"]
    # The collection maps `tags` to labels: its public point only. The remote's passage has no `public` label.
    assert [hit["title"] for hit in hits] == ["Cafeteria"]


def test_writes_to_an_external_kb_are_refused_as_read_only(ragkb: RunningRagkb, kbs: dict[str, str]) -> None:
    kb = kbs["qdrant"]
    attempts = [
        ragkb.client.post(f"/v1/knowledge-bases/{kb}/documents", json={"text": "x"}),
        ragkb.client.post(f"/v1/knowledge-bases/{kb}/documents/batch", json={"documents": [{"text": "x"}]}),
        ragkb.client.patch(f"/v1/knowledge-bases/{kb}", json={"chunking": {"target_tokens": 100}}),
        ragkb.client.post(f"/v1/knowledge-bases/{kb}/reindex", json={}),
        ragkb.client.post(
            f"/v1/knowledge-bases/{kb}/sources",
            json={"name": "site", "config": {"kind": "web", "start_url": "http://127.0.0.1:9/"}},
        ),
        ragkb.client.post(f"/v1/knowledge-bases/{kb}/backup"),
        ragkb.client.get(f"/v1/knowledge-bases/{kb}/consistency"),
    ]
    for response in attempts:
        assert response.status_code == 409, (response.request.url, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["type"] == READ_ONLY_TYPE, response.text
    # What does apply to it may be changed: its name and how it is searched.
    renamed = ragkb.client.patch(f"/v1/knowledge-bases/{kb}", json={"name": "facilities", "retrieval": {"top_k": 5}})
    assert renamed.status_code == 200 and renamed.json()["retrieval"]["top_k"] == 5


def test_an_external_kb_that_does_not_answer_is_refused_at_registration_and_degrades_a_search(
    ragkb: RunningRagkb, remote: RunningRagkb, kbs: dict[str, str]
) -> None:
    dify = {"kind": "dify", "endpoint": remote.api_url, "knowledge_id": "0" * 32}
    refused = ragkb.client.post("/v1/knowledge-bases", json={"name": "nowhere", "external": {"config": dify}})
    assert refused.status_code == 422 and "did not answer" in refused.json()["detail"]
    # A KB that answered when it was registered, whose key the remote then revokes: searches go on without it.
    remote_kb = remote.create_kb("soon unreadable")
    grant = {"name": "revoked later", "role": "client", "grants": {remote_kb: "read"}}
    key = created(remote.client.post("/v1/api-keys", json=grant))
    config = {"kind": "dify", "endpoint": remote.api_url, "knowledge_id": remote_kb}
    body = {"name": "flaky", "external": {"config": config, "api_key": key["key"]}}
    flaky = created(ragkb.client.post("/v1/knowledge-bases", json=body))
    assert remote.client.delete(f"/v1/api-keys/{key['id']}").status_code == 204

    alone = ragkb.client.post("/v1/search", json={"query": "cafeteria", "knowledge_base_ids": [flaky["id"]]})
    assert alone.status_code == 502, alone.text
    assert alone.json()["type"] == "https://ragkb.dev/problems/external-knowledge-base-unavailable"
    merged = ragkb.client.post(
        "/v1/search", json={"query": "cafeteria", "knowledge_base_ids": [kbs["native"], flaky["id"]]}
    ).json()
    assert merged["degraded"] and "flaky" in merged["degraded_reason"]
    assert {hit["knowledge_base_id"] for hit in merged["results"]} == {kbs["native"]}

    deleted = ragkb.client.delete(f"/v1/knowledge-bases/{flaky['id']}")
    assert deleted.status_code == 202
    assert ragkb.wait_job(deleted.json()["id"])["status"] == "succeeded"
    assert ragkb.client.get(f"/v1/knowledge-bases/{flaky['id']}").status_code == 404
