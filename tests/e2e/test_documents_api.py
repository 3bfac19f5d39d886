"""Document lifecycle and error contract of the public API, over HTTP against the real processes."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import MAX_BATCH_DOCUMENTS, RunningRagkb

pytestmark = pytest.mark.e2e
PROBLEM = "application/problem+json"


def upload_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: object) -> dict[str, object]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    body: dict[str, object] = response.json()
    return body


def test_json_upload_versions_and_delete(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("versions")
    first = upload_text(
        ragkb, kb_id, "The cafeteria opens at 8 am.", source_id="notes/cafeteria", labels=["facilities"]
    )
    assert ragkb.wait_document(kb_id, str(first["id"]))["version"] == 1

    same = upload_text(ragkb, kb_id, "The cafeteria opens at 8 am.", source_id="notes/cafeteria", labels=["facilities"])
    assert same["unchanged"] is True and same["id"] == first["id"] and same["version"] == 1

    second = upload_text(ragkb, kb_id, "The cafeteria now opens at 7 am.", source_id="notes/cafeteria")
    assert second["id"] == first["id"] and second["version"] == 2
    done = ragkb.wait_document(kb_id, str(first["id"]))
    assert (done["status"], done["indexed_version"]) == ("done", 2)
    results = ragkb.search("When does the cafeteria open?", [kb_id])
    assert [r["text"] for r in results] == ["The cafeteria now opens at 7 am."]

    assert ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}/documents/{first['id']}").status_code == 204
    assert ragkb.search("When does the cafeteria open?", [kb_id]) == []
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{first['id']}").status_code == 404


def test_search_is_scoped_to_the_requested_kbs(ragkb: RunningRagkb) -> None:
    kb_a, kb_b = ragkb.create_kb("scope-a"), ragkb.create_kb("scope-b")
    doc_a = upload_text(ragkb, kb_a, "Parking permits are issued by the facilities team.")
    doc_b = upload_text(ragkb, kb_b, "Parking permits cost 40 euros a month.")
    ragkb.wait_document(kb_a, str(doc_a["id"]))
    ragkb.wait_document(kb_b, str(doc_b["id"]))
    assert {r["knowledge_base_id"] for r in ragkb.search("parking permits", [kb_a])} == {kb_a}
    both = ragkb.search("parking permits", [kb_a, kb_b])
    assert {r["knowledge_base_id"] for r in both} == {kb_a, kb_b}


def test_deleting_a_kb_removes_it_and_its_index(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("short-lived")
    document = upload_text(ragkb, kb_id, "Temporary knowledge.")
    ragkb.wait_document(kb_id, str(document["id"]))
    accepted = ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")
    assert (accepted.status_code, accepted.json()["kind"]) == (202, "kb_delete")
    assert ragkb.wait_job(accepted.json()["id"])["status"] == "succeeded"
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").status_code == 404
    response = ragkb.client.post("/v1/search", json={"query": "Temporary", "knowledge_base_ids": [kb_id]})
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/knowledge-bases/nope", None),
        ("DELETE", "/v1/knowledge-bases/nope", None),
        ("GET", "/v1/knowledge-bases/nope/documents", None),
        ("POST", "/v1/knowledge-bases/nope/documents", {"text": "x"}),
        ("POST", "/v1/search", {"query": "x", "knowledge_base_ids": ["nope"]}),
    ],
)
def test_unknown_ids_are_404_problems(ragkb: RunningRagkb, method: str, path: str, body: object) -> None:
    response = ragkb.client.request(method, path, json=body)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["status"] == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "   "},
        {"name": 42},
        {"name": "x" * 300},
    ],
)
def test_invalid_kb_bodies_are_422(ragkb: RunningRagkb, body: object) -> None:
    response = ragkb.client.post("/v1/knowledge-bases", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM)


def test_duplicate_kb_name_is_409(ragkb: RunningRagkb) -> None:
    ragkb.create_kb("twice")
    response = ragkb.client.post("/v1/knowledge-bases", json={"name": "twice"})
    assert response.status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"query": "", "knowledge_base_ids": ["x"]},
        {"query": "ok", "knowledge_base_ids": []},
        {"query": "ok", "knowledge_base_ids": ["x"], "top_k": 0},
        {"query": "q" * 5000, "knowledge_base_ids": ["x"]},
        {"knowledge_base_ids": ["x"]},
    ],
)
def test_invalid_searches_are_422(ragkb: RunningRagkb, body: object) -> None:
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 422, response.text
    assert "Traceback" not in response.text


def test_bad_uploads_get_clear_errors_and_store_nothing(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("bad-uploads")
    documents = f"/v1/knowledge-bases/{kb_id}/documents"
    oversize = ragkb.client.post(documents, files={"file": ("big.txt", b"a" * (3 * 1024 * 1024))})
    assert oversize.status_code == 413 and oversize.headers["content-type"].startswith(PROBLEM)
    binary = ragkb.client.post(documents, files={"file": ("image.gif", b"GIF89a" + b"\0" * 100)})
    assert binary.status_code == 415 and ".md" in binary.json()["supported_extensions"]
    assert ragkb.client.post(documents, json={"text": ""}).status_code == 422
    assert (
        ragkb.client.post(documents, content=b"{not json", headers={"content-type": "application/json"}).status_code
        == 422
    )
    assert ragkb.client.post(documents, data={"title": "no file"}, files={"other": ("x", b"y")}).status_code == 422
    bad_labels = ragkb.client.post(documents, files={"file": ("a.md", b"# A\ntext")}, data={"labels": "[1, 2]"})
    assert bad_labels.status_code == 422
    bad_metadata = ragkb.client.post(documents, files={"file": ("a.md", b"# A\ntext")}, data={"metadata": "[]"})
    assert bad_metadata.status_code == 422
    assert ragkb.client.get(documents).json() == []


def test_a_batch_upload_accepts_each_good_item_and_refuses_each_bad_one_alone(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("batch")
    batch = f"/v1/knowledge-bases/{kb_id}/documents/batch"
    items = [
        {"text": "Bicycles may be parked in the basement.", "source_id": "bikes", "labels": ["facilities"]},
        {"text": "", "source_id": "empty"},
        "not a document",
        {"text": "Visitors sign in at the front desk.", "source_id": "visitors", "title": "Visitors"},
    ]
    response = ragkb.client.post(batch, json={"documents": items})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["accepted"], answer["failed"]) == (2, 2)
    results = answer["results"]
    assert [(r["index"], r["source_id"]) for r in results] == [(0, "bikes"), (1, None), (2, None), (3, "visitors")]
    assert [r["error"]["status"] for r in results if r["error"]] == [422, 422]
    assert results[1]["error"]["errors"][0]["loc"] == ["text"]
    for result in (results[0], results[3]):
        assert ragkb.wait_document(kb_id, result["document"]["id"])["status"] == "done"
    assert ragkb.search("where can I park my bicycle?", [kb_id], top_k=1)[0]["source_id"] == "bikes"
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json()
    assert sorted(document["source_id"] for document in listed) == ["bikes", "visitors"]

    again = ragkb.client.post(batch, json={"documents": items[:1]}).json()
    assert again["results"][0]["document"]["unchanged"] is True

    too_many = ragkb.client.post(batch, json={"documents": items[:1] * (MAX_BATCH_DOCUMENTS + 1)})
    assert too_many.status_code == 422 and too_many.headers["content-type"].startswith(PROBLEM)
    assert f"at most {MAX_BATCH_DOCUMENTS} documents" in too_many.json()["detail"]
    assert ragkb.client.post(batch, json={"documents": []}).status_code == 422
    assert ragkb.client.post(batch, json=items).status_code == 422
    assert ragkb.client.post(batch, content=b"text", headers={"content-type": "text/plain"}).status_code == 415
    unknown = ragkb.client.post("/v1/knowledge-bases/kb_missing/documents/batch", json={"documents": items[:1]})
    assert unknown.status_code == 404


def test_hostile_file_names_are_reduced_to_a_base_name(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("hostile")
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents", files={"file": ("../../etc/passwd.txt", b"root text")}
    )
    assert response.status_code == 202
    assert response.json()["filename"] == "passwd.txt"


def test_every_service_reports_health_and_readiness(ragkb: RunningRagkb) -> None:
    assert ragkb.client.get("/health").json() == {"status": "ok"}
    ready = ragkb.client.get("/ready").json()
    assert ready["checks"] == {"database": True, "redis": True, "retriever": True}
    assert "/v1/search" in ragkb.client.get("/schema/openapi.json").json()["paths"]


def test_concurrent_versions_of_one_document_leave_exactly_one_version_indexed(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("concurrent-versions")
    texts = [f"Revision {n}: the library closes at {n + 5} pm.\n\nIt reopens at 9 am." for n in range(6)]

    def upload(text: str) -> dict[str, object]:
        return upload_text(ragkb, kb_id, text, source_id="notes/library")

    with ThreadPoolExecutor(6) as pool:
        accepted = list(pool.map(upload, texts))
    assert len({a["id"] for a in accepted}) == 1
    document_id = str(accepted[0]["id"])
    final = wait_for_version(ragkb, kb_id, document_id, version=6)
    assert final["status"] == "done"
    retriever = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1/kbs/{kb_id}/count"
    indexed = httpx.get(retriever, params={"document_id": document_id}, headers=ragkb.service_headers).json()["count"]
    assert indexed == final["chunk_count"]
    results = ragkb.search("When does the library close?", [kb_id], top_k=10)
    assert {r["version"] for r in results} == {6}


def wait_for_version(ragkb: RunningRagkb, kb_id: str, document_id: str, version: int) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        document = ragkb.wait_document(kb_id, document_id)
        if document["indexed_version"] == version and document["status"] == "done":
            return document
        time.sleep(0.5)
    raise AssertionError(f"version {version} never became live: {document}")


def test_kb_chunking_settings_are_validated_stored_and_changeable(ragkb: RunningRagkb) -> None:
    created = ragkb.client.post(
        "/v1/knowledge-bases",
        json={
            "name": "tuned",
            "chunking": {"target_tokens": 128, "max_tokens": 200, "noise_patterns": ["^Page \\d+$"]},
        },
    )
    assert created.status_code == 201, created.text
    kb = created.json()
    assert kb["chunking"] == {
        "target_tokens": 128,
        "max_tokens": 200,
        "overlap_tokens": 32,
        "noise_patterns": ["^Page \\d+$"],
        "ocr": True,
        "passage_precision": "auto",
        "second_model": None,
    }
    invalid = [
        {"noise_patterns": ["(unclosed"]},
        {"target_tokens": 300, "max_tokens": 200},
        {"target_tokens": 64, "overlap_tokens": 64},
        {"max_tokens": 4000},
        {"passage_precision": "int4"},
        {"second_model": "no-such-model"},
    ]
    for chunking in invalid:
        response = ragkb.client.post("/v1/knowledge-bases", json={"name": "bad-chunking", "chunking": chunking})
        assert response.status_code == 422, (chunking, response.text)
    changed = ragkb.client.patch(f"/v1/knowledge-bases/{kb['id']}", json={"chunking": {"target_tokens": 64}})
    assert changed.status_code == 200 and changed.json()["chunking"]["target_tokens"] == 64
    renamed = ragkb.client.patch(f"/v1/knowledge-bases/{kb['id']}", json={"name": "tuned-2", "description": "d"})
    assert (renamed.json()["name"], renamed.json()["description"]) == ("tuned-2", "d")
    ragkb.create_kb("taken")
    assert ragkb.client.patch(f"/v1/knowledge-bases/{kb['id']}", json={"name": "taken"}).status_code == 409
    assert ragkb.client.patch(f"/v1/knowledge-bases/{kb['id']}", json={}).status_code == 422
    assert ragkb.client.patch("/v1/knowledge-bases/nope", json={"name": "x"}).status_code == 404


def test_kbs_with_int8_passages_answer_as_their_float32_twin_does(ragkb: RunningRagkb) -> None:
    text = "The server room door code changes on the first Monday of every month."
    kbs = {}
    for precision in ("float32", "int8", "int8-mixed", "int8-block", "auto"):
        created = ragkb.client.post(
            "/v1/knowledge-bases",
            json={"name": f"precision-{precision}", "chunking": {"passage_precision": precision}},
        )
        assert created.status_code == 201, created.text
        kbs[precision] = kb_id = created.json()["id"]
        ragkb.wait_document(kb_id, str(upload_text(ragkb, kb_id, text, source_id="door.md")["id"]))
    scores = {}
    for precision, kb_id in kbs.items():
        response = ragkb.client.post(
            "/v1/search",
            json={"query": "when does the door code change", "knowledge_base_ids": [kb_id], "mode": "semantic"},
        )
        assert response.status_code == 200, response.text
        (hit,) = response.json()["results"]
        assert hit["text"] == text
        scores[precision] = hit["score"]
    # The same passage, embedded by an int8 graph: its cosine to the query moves a little, no more.
    for precision in ("int8", "int8-mixed", "int8-block"):
        assert scores[precision] != scores["float32"]
        assert abs(scores[precision] - scores["float32"]) < 0.01, scores
    assert len({scores["int8"], scores["int8-mixed"], scores["int8-block"]}) == 3  # three graphs
    # Blockwise int8 stays closest to float32.
    assert abs(scores["int8-block"] - scores["float32"]) < abs(scores["int8-mixed"] - scores["float32"]), scores
    # auto: one of the two exact graphs, whichever the worker's CPU runs faster.
    assert scores["auto"] in (scores["float32"], scores["int8-block"]), scores


def test_kb_noise_patterns_drop_boilerplate_lines(ragkb: RunningRagkb) -> None:
    created = ragkb.client.post(
        "/v1/knowledge-bases", json={"name": "noisy", "chunking": {"noise_patterns": ["^CONFIDENTIAL"]}}
    )
    kb_id = created.json()["id"]
    text = (
        "CONFIDENTIAL - internal use only\nThe server room door code changes every month.\nCONFIDENTIAL - do not share"
    )
    document = upload_text(ragkb, kb_id, text)
    done = ragkb.wait_document(kb_id, str(document["id"]))
    assert done["ingest_report"]["dropped"].get("noise") == 2
    top = ragkb.search("server room door code", [kb_id])[0]
    assert "CONFIDENTIAL" not in top["text"] and "door code" in top["text"]


@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_search_filters_scope_every_mode_before_ranking(ragkb: RunningRagkb, mode: str) -> None:
    kb_id = scoped_kb(ragkb)
    body: dict[str, object] = {"query": "badge office hours", "knowledge_base_ids": [kb_id], "mode": mode}
    by_label = ragkb.client.post("/v1/search", json={**body, "filters": {"labels_any": ["hr"]}}).json()["results"]
    assert by_label and {tuple(r["labels"]) for r in by_label} == {("hr",)}
    by_type = ragkb.client.post("/v1/search", json={**body, "filters": {"doc_types": ["reference"]}}).json()
    assert by_type["results"] and {r["doc_type"] for r in by_type["results"]} == {"reference"}
    one = by_label[0]["document_id"]
    by_document = ragkb.client.post("/v1/search", json={**body, "filters": {"document_ids": [one]}}).json()
    assert {r["document_id"] for r in by_document["results"]} == {one}
    nothing = ragkb.client.post("/v1/search", json={**body, "filters": {"labels_any": ["no-such-label"]}}).json()
    assert nothing["results"] == []


_SCOPED_KB: dict[str, str] = {}


def scoped_kb(ragkb: RunningRagkb) -> str:
    """Three documents that all answer the query, told apart only by label and type."""
    if "id" not in _SCOPED_KB:
        kb_id = ragkb.create_kb("scoped")
        documents = [
            upload_text(ragkb, kb_id, "The badge office is open from 9 to 5.", labels=["hr"]),
            upload_text(ragkb, kb_id, "Badge office hours: weekdays 9 to 5.", labels=["security"]),
            upload_text(ragkb, kb_id, "Regulation: the badge office keeps office hours.", doc_type="reference"),
        ]
        for document in documents:
            ragkb.wait_document(kb_id, str(document["id"]))
        _SCOPED_KB["id"] = kb_id
    return _SCOPED_KB["id"]


def test_an_unknown_mode_is_422(ragkb: RunningRagkb) -> None:
    body = {"query": "x", "knowledge_base_ids": ["x"], "mode": "magic"}
    assert ragkb.client.post("/v1/search", json=body).status_code == 422
