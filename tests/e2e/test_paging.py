"""Every list endpoint pages the same way: `limit` and `offset`, the total in X-Total-Count, the next page in
a Link header; documents also filter by label and doc_type on the server."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def follow(client: httpx.Client, path: str, **params: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Every item of a list, page by page through the Link headers; and each page's size."""
    items: list[dict[str, Any]] = []
    sizes = []
    response = client.get(path, params=params)
    while True:
        assert response.status_code == 200, response.text
        page = response.json()
        items += page
        sizes.append(len(page))
        assert int(response.headers["x-total-count"]) >= len(items)
        link = response.headers.get("link")
        if link is None:
            return items, sizes
        match = re.fullmatch(r'<([^>]+)>; rel="next"', link)
        assert match, link
        response = client.get(match.group(1))


def test_documents_page_and_filter_on_the_server(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("paging-documents")
    base = f"/v1/knowledge-bases/{kb_id}/documents"
    documents = [
        {"source_id": f"doc-{n}", "text": f"Document number {n}.", "labels": ["even" if n % 2 == 0 else "odd"]}
        for n in range(5)
    ]
    assert ragkb.client.post(f"{base}/batch", json={"documents": documents}).json()["accepted"] == 5
    first = ragkb.client.get(base, params={"limit": 2})
    assert first.headers["x-total-count"] == "5"
    assert [doc["source_id"] for doc in first.json()] == ["doc-0", "doc-1"]
    items, sizes = follow(ragkb.client, base, limit=2)
    assert ([doc["source_id"] for doc in items], sizes) == ([f"doc-{n}" for n in range(5)], [2, 2, 1])
    even, _ = follow(ragkb.client, base, label="even", limit=2)
    assert [doc["source_id"] for doc in even] == ["doc-0", "doc-2", "doc-4"]
    references = ragkb.client.get(base, params={"doc_type": "reference"})
    assert (references.json(), references.headers["x-total-count"]) == ([], "0")
    past_the_end = ragkb.client.get(base, params={"offset": 10})
    assert (past_the_end.json(), "link" in past_the_end.headers) == ([], False)
    assert ragkb.client.get(base, params={"limit": 0}).status_code in (400, 422)


def test_knowledge_bases_keys_question_sets_and_jobs_page(ragkb: RunningRagkb) -> None:
    for n in range(3):
        ragkb.create_kb(f"paging-kb-{n}")
    kbs, sizes = follow(ragkb.client, "/v1/knowledge-bases", limit=1)
    assert len(kbs) == int(ragkb.client.get("/v1/knowledge-bases").headers["x-total-count"])
    assert set(sizes) == {1} and len({kb["id"] for kb in kbs}) == len(kbs)
    for n in range(2):
        created = ragkb.client.post("/v1/api-keys", json={"name": f"paging-{n}", "role": "admin"})
        assert created.status_code == 201
    keys, _ = follow(ragkb.client, "/v1/api-keys", limit=1)
    assert {"paging-0", "paging-1"} <= {key["name"] for key in keys}
    kb_id = kbs[-1]["id"]
    for n in range(2):
        body = {"name": f"set-{n}", "queries": [{"id": "q", "text": "what"}], "qrels": {"q": {"d": 1}}}
        assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=body).status_code == 201
    sets, sizes = follow(ragkb.client, f"/v1/knowledge-bases/{kb_id}/question-sets", limit=1)
    assert ([s["name"] for s in sets], sizes) == (["set-0", "set-1"], [1, 1])
    for n in range(3):
        ragkb.client.post(
            f"/v1/knowledge-bases/{kb_id}/documents", json={"source_id": f"d{n}", "text": f"text {n}"}
        ).raise_for_status()
    runs, sizes = follow(ragkb.client, f"/v1/knowledge-bases/{kb_id}/jobs", kind="ingest", limit=2)
    assert (len(runs), sizes) == (3, [2, 1])
