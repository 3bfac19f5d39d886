"""Issue 21 through the public API: a new title is searched, Dify's metadata condition scopes the search
before ranking, hits carry a 0–1 relevance with a per-KB floor."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def upload_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: object) -> str:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def keyword_search(ragkb: RunningRagkb, kb_id: str, query: str) -> list[dict[str, Any]]:
    body = {"query": query, "knowledge_base_ids": [kb_id], "mode": "keyword"}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_a_patched_title_is_what_searches_match(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("retitled")
    document_id = upload_text(ragkb, kb_id, "Opening hours and rules of the site.", title="Quarrington depot")
    assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    assert [hit["document_id"] for hit in keyword_search(ragkb, kb_id, "Quarrington")] == [document_id]

    patched = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}", json={"title": "Wexcombe"})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["title"], patched.json()["version"]) == ("Wexcombe", 2)
    rebuilt = ragkb.wait_document(kb_id, document_id)
    assert (rebuilt["status"], rebuilt["indexed_version"], rebuilt["title"]) == ("done", 2, "Wexcombe")

    renamed = keyword_search(ragkb, kb_id, "Wexcombe")
    assert [hit["document_id"] for hit in renamed] == [document_id] and renamed[0]["title"] == "Wexcombe"
    assert keyword_search(ragkb, kb_id, "Quarrington") == []
    # Metadata alone is changed in place: no new version.
    labelled = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}", json={"labels": ["x"]})
    assert labelled.json()["version"] == 2 and labelled.json()["status"] == "done"


def test_a_selective_dify_condition_still_answers_top_k_records(ragkb: RunningRagkb) -> None:
    """Issue 21: the condition was applied to 4 × top_k hits after the search, so three matching documents
    ranked below twelve others were never answered."""
    kb_id = ragkb.create_kb("dify-selective")
    strong = "Espresso brewing: grind espresso beans fine, tamp the espresso, pull the espresso shot in 25 s."
    documents = [upload_text(ragkb, kb_id, f"{strong} Note {n}.", metadata={"team": "bar"}) for n in range(14)]
    rare = [
        upload_text(
            ragkb, kb_id, f"Shift {n} rota; the espresso machine is cleaned at close.", metadata={"team": "ops-night"}
        )
        for n in range(3)
    ]
    for document_id in [*documents, *rare]:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    condition = {"conditions": [{"name": ["team"], "comparison_operator": "start with", "value": "ops"}]}
    body = {
        "knowledge_id": kb_id,
        "query": "how to brew espresso",
        "retrieval_setting": {"top_k": 3, "score_threshold": 0},
        "metadata_condition": condition,
    }
    records = ragkb.client.post("/retrieval", json=body).json()["records"]
    assert sorted(record["metadata"]["document_id"] for record in records) == sorted(rare)
    assert {record["metadata"]["team"] for record in records} == {"ops-night"}
    unconditioned = ragkb.client.post("/retrieval", json={**body, "metadata_condition": None}).json()["records"]
    assert not {record["metadata"]["document_id"] for record in unconditioned} & set(rare)
