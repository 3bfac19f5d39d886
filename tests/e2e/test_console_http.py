"""The admin console as HTTP sees it: public pages that hold no data under a strict policy, assets that cannot
run anything but themselves, and the old /search-test address leading into it. (The browser tests are in
test_console_browser.py.)"""

from __future__ import annotations

import re

import pytest

from ragkb_api.console.routes import assets
from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def test_every_console_address_serves_the_same_shell_under_a_strict_policy(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        pages = [anonymous.get(path) for path in ("/console", "/console/kbs", "/console/kbs/x/documents/y")]
    assert len({page.text for page in pages}) == 1
    for page in pages:
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy and "style-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy and "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"


def test_the_shell_and_its_modules_run_nothing_inline_and_parse_no_markup(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        shell = anonymous.get("/console").text
        served = {name: anonymous.get(f"/console/assets/{name}") for name in assets()}
    # Every script is a file of this origin; no inline script, handler or style attribute.
    assert re.findall(r"<script(?![^>]*\bsrc=\"/console/assets/)", shell) == []
    assert not re.search(r"\son[a-z]+=|\sstyle=", shell)
    assert {"app.js", "api.js", "dom.js", "i18n.js", "console.css"} <= set(served)
    for name, response in served.items():
        assert response.status_code == 200, name
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        if not name.endswith(".js"):
            continue
        code = response.text
        assert response.headers["content-type"].startswith("text/javascript")
        # Data reaches the page as text only; nothing is evaluated.
        for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert forbidden not in code, (name, forbidden)
        assert "sessionStorage" not in code
        # localStorage holds the language choice only.
        assert "localStorage" not in code or name == "i18n.js"
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", code), name


def test_assets_are_revalidated_cheaply_and_unknown_names_are_not_found(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        first = anonymous.get("/console/assets/app.js")
        again = anonymous.get("/console/assets/app.js", headers={"If-None-Match": first.headers["etag"]})
        missing = anonymous.get("/console/assets/..%2F..%2Fapp.py")
        unknown = anonymous.get("/console/assets/nope.js")
    assert first.headers["cache-control"] == "no-cache" and again.status_code == 304 and again.content == b""
    assert missing.status_code == 404 and unknown.status_code == 404


def test_the_old_search_test_page_leads_to_the_console(ragkb: RunningRagkb) -> None:
    with ragkb.client_with(None) as anonymous:
        response = anonymous.get("/search-test")
    assert response.status_code == 302 and response.headers["location"] == "/console/search"


def test_the_endpoint_the_search_page_calls_needs_an_admin_key(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("search-test-page")
    body = {"query": "anything", "expected_document_ids": ["nope"]}
    with ragkb.client_with(None) as anonymous:
        refused = anonymous.post(f"/v1/knowledge-bases/{kb_id}/search-test", json=body)
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/search-test", json=body).status_code == 200
