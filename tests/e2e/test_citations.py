"""A hit leads back to its source, over HTTP on the real stack: it carries its KB's name, its document's
metadata and a link to the stored original at the passage's page; an answer can be collapsed to one passage
per document."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb
from tests.e2e.test_formats import pdf_bytes

pytestmark = pytest.mark.e2e

PAGES = [
    ["The visitor badge desk is on the ground floor."],
    ["Forklift licences are renewed every three years at the depot office."],
    ["The staff canteen serves breakfast from seven."],
]
METADATA = {"department": "logistics", "revision": 4, "public": True}
KB_NAME = "depot-citations"


@pytest.fixture(scope="module")
def handbook(ragkb: RunningRagkb) -> dict[str, Any]:
    kb_id = ragkb.create_kb(KB_NAME)
    pdf = pdf_bytes(PAGES, header="Depot handbook", footer="page {n}")
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents",
        files={"file": ("handbook.pdf", pdf, "application/pdf")},
        data={"metadata": json.dumps(METADATA)},
    )
    assert response.status_code == 202, response.text
    pdf_id = response.json()["id"]
    # Many passages of one document on the same subject, and one other document on it.
    rules = "\n\n".join(f"Rule {n}: forklifts in aisle {n} keep to walking pace near the racks." for n in range(12))
    manual = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": rules, "source_id": "rules"})
    memo = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents",
        json={"text": "Forklift drivers wear high-visibility vests in the aisles.", "source_id": "memo"},
    )
    ids = [pdf_id, manual.json()["id"], memo.json()["id"]]
    for document_id in ids:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    return {"kb_id": kb_id, "pdf_id": pdf_id, "pdf": pdf, "manual_id": ids[1], "memo_id": ids[2]}


def search(ragkb: RunningRagkb, kb_id: str, query: str, **fields: object) -> dict[str, Any]:
    body = {"query": query, "knowledge_base_ids": [kb_id], **fields}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_hit_carries_its_kb_name_its_documents_metadata_and_a_link_to_the_original_at_its_page(
    ragkb: RunningRagkb, handbook: dict[str, Any]
) -> None:
    top = search(ragkb, handbook["kb_id"], "How often are forklift licences renewed?", top_k=1)["results"][0]
    assert top["document_id"] == handbook["pdf_id"] and top["page"] == 2
    assert top["knowledge_base_name"] == KB_NAME
    assert top["metadata"] == METADATA
    path = f"/v1/knowledge-bases/{handbook['kb_id']}/documents/{handbook['pdf_id']}/original"
    assert top["original_url"] == f"{path}#page=2"
    download = ragkb.client.get(top["original_url"].split("#")[0])
    assert download.status_code == 200 and download.content == handbook["pdf"]


def test_a_citation_of_the_context_tool_links_to_the_original(ragkb: RunningRagkb, handbook: dict[str, Any]) -> None:
    body = {"query": "When does the canteen serve breakfast?", "knowledge_base_ids": [handbook["kb_id"]]}
    response = ragkb.client.post("/v1/context", json=body)
    assert response.status_code == 200, response.text
    first = response.json()["citations"][0]
    assert first["document_id"] == handbook["pdf_id"] and first["original_url"].endswith("/original#page=3")
    assert first["knowledge_base_name"] == KB_NAME


def test_an_answer_collapsed_by_document_holds_each_documents_best_passage_once(
    ragkb: RunningRagkb, handbook: dict[str, Any]
) -> None:
    query = "forklift rules in the aisles"
    passages = search(ragkb, handbook["kb_id"], query, top_k=10)["results"]
    assert len({hit["document_id"] for hit in passages}) < len(passages), "several passages of one document"

    collapsed = search(ragkb, handbook["kb_id"], query, top_k=10, collapse="document", explain=True)
    documents = [hit["document_id"] for hit in collapsed["results"]]
    assert len(documents) == len(set(documents)) == 3
    best_of_each = {hit["document_id"]: hit["chunk_id"] for hit in reversed(passages)}  # the first wins
    assert all(best_of_each.get(hit["document_id"], hit["chunk_id"]) == hit["chunk_id"] for hit in collapsed["results"])
    assert {entry["stage"] for entry in collapsed["dropped"]} >= {"collapse"}


def test_an_unknown_collapse_is_refused(ragkb: RunningRagkb, handbook: dict[str, Any]) -> None:
    body = {"query": "forklift", "knowledge_base_ids": [handbook["kb_id"]], "collapse": "kb"}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
