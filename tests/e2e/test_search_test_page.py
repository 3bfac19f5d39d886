"""The admin search-test page: public HTML with no data, locked down by its headers, calling the admin API."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def test_the_page_is_served_without_a_key_under_a_strict_policy(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        page = anonymous.get("/search-test")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"


def test_the_page_calls_the_admin_api_and_inserts_data_as_text_only(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        html = anonymous.get("/search-test").text
    assert "/v1/knowledge-bases" in html and "/search-test" in html
    assert "Authorization" in html and "sessionStorage" in html
    # Data goes in through textContent only: no markup parsing of anything the API returns.
    assert "innerHTML" not in html and "outerHTML" not in html and "insertAdjacentHTML" not in html
    assert "document.write" not in html and "eval(" not in html
    # Offline: nothing loads from elsewhere.
    assert "http://" not in html and "https://" not in html and "src=" not in html


def test_the_endpoint_the_page_calls_needs_an_admin_key(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("search-test-page")
    body = {"query": "anything", "expected_document_ids": ["nope"]}
    with ragkb.client_with(None) as anonymous:
        refused = anonymous.post(f"/v1/knowledge-bases/{kb_id}/search-test", json=body)
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/search-test", json=body).status_code == 200
