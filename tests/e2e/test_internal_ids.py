"""The retriever's internal API refuses malformed ids as input (422 problem details) before they reach the
index, where a KB id becomes part of a file name (a NUL or 300 characters used to answer 500)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e

MALFORMED_IDS = ["kb\x00id", "k" * 300, "KB-with.dots", "0" * 31]


@pytest.fixture(scope="module")
def retriever(ragkb: RunningRagkb) -> Iterator[httpx.Client]:
    base_url = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1"
    with httpx.Client(base_url=base_url, headers=ragkb.service_headers, timeout=30) as client:
        yield client


@pytest.mark.parametrize("bad_id", MALFORMED_IDS, ids=["nul", "300-chars", "not-hex", "31-hex"])
def test_the_internal_api_refuses_a_malformed_kb_id_as_input(
    ragkb: RunningRagkb, retriever: httpx.Client, bad_id: str
) -> None:
    kb = quote(bad_id, safe="")
    calls = [
        ("PUT", f"/kbs/{kb}", {}),
        ("DELETE", f"/kbs/{kb}", {}),
        ("GET", f"/kbs/{kb}/generations", {}),
        ("POST", f"/kbs/{kb}/generations", {"json": {}}),
        ("GET", f"/kbs/{kb}/count", {}),
        ("POST", f"/kbs/{kb}/context", {"json": {"chunk_id": "6b1f3c2e-8a44-5d0e-9b7a-2f4c1e9d7a10"}}),
        ("DELETE", f"/kbs/{kb}/documents/{'d' * 32}", {}),
        ("POST", "/search/", {"json": {"query": "anything", "knowledge_bases": [{"kb_id": bad_id}]}}),
    ]
    for method, path, extra in calls:
        response = retriever.request(method, path, **extra)
        assert response.status_code == 422, f"{method} {path[:60]}: {response.status_code} {response.text[:200]}"
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["title"] == "Invalid input"


@pytest.mark.parametrize("bad_id", MALFORMED_IDS, ids=["nul", "300-chars", "not-hex", "31-hex"])
def test_the_internal_api_refuses_a_malformed_document_id_as_input(
    ragkb: RunningRagkb, retriever: httpx.Client, bad_id: str
) -> None:
    kb_id = ragkb.create_kb(f"malformed-document-id-{len(bad_id)}")
    document = quote(bad_id, safe="")
    calls = [
        ("DELETE", f"/kbs/{kb_id}/documents/{document}", {}),
        ("PATCH", f"/kbs/{kb_id}/documents/{document}", {"json": {"title": "x"}}),
        ("GET", f"/kbs/{kb_id}/count", {"params": {"document_id": bad_id}}),
    ]
    for method, path, extra in calls:
        response = retriever.request(method, path, **extra)
        assert response.status_code == 422, f"{method} {path[:60]}: {response.status_code} {response.text[:200]}"
    # Well-formed ids still work as before.
    assert retriever.get(f"/kbs/{kb_id}/count", params={"document_id": "d" * 32}).json() == {"count": 0}
