"""Issue 28's findings on documents, end to end on the real stack: deep metadata (2), a filtered write key
widening its own scope (3) and seeing documents outside it (11), refused uploads leaving their original
behind (4), and quick re-uploads stranding documents in `processing` (7)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def blob_files(ragkb: RunningRagkb) -> set[str]:
    root = Path(ragkb.env["RAGKB_BLOBS__ROOT"])
    return {path.name for path in root.glob("??/??/*")}


def client_key(ragkb: RunningRagkb, grants: dict[str, str], search_filter: dict[str, Any] | None = None) -> str:
    response = ragkb.client.post(
        "/v1/api-keys", json={"name": "probe", "role": "client", "grants": grants, "search_filter": search_filter}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


def upload_text(ragkb: RunningRagkb, kb_id: str, source_id: str, text: str, **fields: Any) -> dict[str, Any]:
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents", json={"source_id": source_id, "text": text, **fields}
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def test_deep_metadata_is_refused_before_anything_is_stored_and_the_kb_keeps_working(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("hostile-metadata")
    deep: dict[str, Any] = {}
    level = deep
    for _ in range(300):
        level["a"] = {}
        level = level["a"]
    blobs_before = blob_files(ragkb)
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents", json={"source_id": "deep", "text": "deep text", "metadata": deep}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "nests at most" in response.text
    assert blob_files(ragkb) == blobs_before
    listing = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents")
    assert (listing.status_code, listing.json()) == (200, [])
    multipart = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents",
        files={"file": ("deep.md", b"# Deep\n\ntext")},
        data={"metadata": '{"a": ' * 50 + "1" + "}" * 50},
    )
    assert multipart.status_code == 422, multipart.text


def test_a_filtered_write_key_cannot_see_touch_or_widen_into_other_documents(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("hostile-scope")
    private = upload_text(ragkb, kb_id, "salaries", "Salaries are secret.", labels=["private"])
    public = upload_text(ragkb, kb_id, "handbook", "The handbook is public.", labels=["public"])
    ragkb.wait_document(kb_id, private["id"])
    ragkb.wait_document(kb_id, public["id"])
    key = client_key(ragkb, {kb_id: "write"}, {"labels_any": ["public"]})
    base = f"/v1/knowledge-bases/{kb_id}/documents"
    with ragkb.client_with(key) as client:
        # Finding 11: the documents API lists and reads only what the key's searches could find.
        assert [doc["id"] for doc in client.get(base).json()] == [public["id"]]
        hidden = client.get(f"{base}/{private['id']}")
        unknown = client.get(f"{base}/{'0' * 32}")
        assert hidden.status_code == unknown.status_code == 404
        # Finding 3: no relabelling it inside, no deleting, retrying or replacing it.
        assert client.patch(f"{base}/{private['id']}", json={"labels": ["public"]}).status_code == 404
        assert client.delete(f"{base}/{private['id']}").status_code == 404
        assert client.post(f"{base}/{private['id']}/retry").status_code == 404
        replaced = client.post(base, json={"source_id": "salaries", "text": "overwritten", "labels": ["public"]})
        assert replaced.status_code == 403, replaced.text
        # ...nor putting its own documents, or new ones, outside the filter.
        assert client.patch(f"{base}/{public['id']}", json={"labels": ["private"]}).status_code == 403
        outside = client.post(base, json={"source_id": "new", "text": "new text", "labels": ["private"]})
        assert outside.status_code == 403
        assert outside.json()["allowed_labels"] == ["public"]
        # A sync plans only the documents inside: the private one is no orphan of its manifest.
        plan = client.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": [], "dry_run": True}).json()
        assert [entry["source_id"] for entry in plan["delete"]] == ["handbook"]
        # Inside the filter, the key works as before.
        assert client.patch(f"{base}/{public['id']}", json={"labels": ["public", "hr"]}).status_code == 200
    document = ragkb.client.get(f"{base}/{private['id']}").json()
    assert (document["labels"], document["version"]) == (["private"], 1)


def test_refused_uploads_leave_no_stored_original(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("hostile-blobs")
    reference = upload_text(ragkb, kb_id, "rules", "Rule one.", doc_type="reference", labels=["rules"])
    ragkb.wait_document(kb_id, reference["id"])
    blobs_before = blob_files(ragkb)
    base = f"/v1/knowledge-bases/{kb_id}/documents"
    refusals = [
        {"source_id": "rules", "text": "A replaced reference " + "x" * 1000, "doc_type": "reference"},
        {"source_id": "rules", "text": "Now knowledge " + "y" * 1000},
        {"source_id": "notes", "text": "Crossing labels " + "z" * 1000, "labels": ["rules"]},
    ]
    for body in refusals:
        assert ragkb.client.post(base, json=body).status_code == 409
    assert blob_files(ragkb) == blobs_before


def test_quick_re_uploads_all_reach_done_and_close_their_runs(ragkb: RunningRagkb) -> None:
    """Finding 7: pairs of uploads of one source_id 0.3 s apart left documents `processing` until their lease
    ran out, and the first upload's run `queued` or `running` forever."""
    kb_id = ragkb.create_kb("hostile-reupload")
    pairs = 10
    for n in range(pairs):
        upload_text(ragkb, kb_id, f"doc-{n}", f"First version of document {n}.")
        time.sleep(0.3)
        upload_text(ragkb, kb_id, f"doc-{n}", f"Second version of document {n}, rewritten.")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        listing = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json()
        if all(doc["status"] == "done" and doc["indexed_version"] == 2 for doc in listing):
            break
        time.sleep(0.5)
    assert [(doc["status"], doc["indexed_version"]) for doc in listing] == [("done", 2)] * pairs
    runs = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/jobs", params={"kind": "ingest"}).json()
    assert len(runs) == 2 * pairs
    by_document: dict[str, list[str]] = {}
    for run in sorted(runs, key=lambda run: run["created_at"]):
        by_document.setdefault(run["document_id"], []).append(run["status"])
    # Every run has ended: the first version's finished before the second came, or was closed when it did.
    assert len(by_document) == pairs
    assert all(first in ("succeeded", "cancelled") and last == "succeeded" for first, last in by_document.values())
