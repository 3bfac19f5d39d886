"""Short documents built in batches (ragkb_worker: one model call, one index write, one commit for many), over
HTTP against the real processes: a bad document of a batch fails alone with its reason while the others go
live, and a worker killed mid-batch loses no document and duplicates no chunk."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from tests.e2e.conftest import MAX_BATCH_DOCUMENTS, RunningRagkb
from tests.e2e.test_resilience import indexed_points, kill_worker_processes, large_manual, upload_text

pytestmark = pytest.mark.e2e


def documents_of(ragkb: RunningRagkb, kb_id: str) -> list[dict[str, Any]]:
    response = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"limit": 100})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()
    return items


def wait_all_ended(ragkb: RunningRagkb, kb_id: str, count: int, timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        documents = documents_of(ragkb, kb_id)
        if len(documents) == count and all(d["status"] in ("done", "failed") for d in documents):
            return documents
        time.sleep(0.5)
    raise AssertionError(f"not every document ended: {[(d['source_id'], d['status']) for d in documents]}")


def keep_worker_busy(ragkb: RunningRagkb, kb_id: str) -> None:
    """A long document first: while the (one) task process builds it, the uploads that follow wait together."""
    busy = upload_text(ragkb, kb_id, large_manual(paragraphs=150), source_id="busy/manual")
    deadline = time.monotonic() + 60
    path = f"/v1/knowledge-bases/{kb_id}/documents/{busy['id']}"
    while ragkb.client.get(path).json()["status"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_bad_document_fails_alone_and_the_rest_of_its_batch_goes_live(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("batch-with-a-bad-document")
    keep_worker_busy(ragkb, kb_id)
    broken = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/documents",
        files={"file": ("broken.pdf", b"%PDF-1.7\n" + secrets.token_bytes(4096), "application/pdf")},
    )
    assert broken.status_code == 202, broken.text
    for n in range(6):
        upload_text(ragkb, kb_id, f"Locker {n} of the east wing holds the spare keys of floor {n}.", source_id=f"l{n}")

    documents = {d["source_id"]: d for d in wait_all_ended(ragkb, kb_id, 8, timeout_s=180)}

    failed = documents.pop("broken.pdf")
    assert failed["status"] == "failed" and "PDF" in failed["error"], failed
    assert all(d["status"] == "done" for d in documents.values()), documents
    batched = [d for d in documents.values() if d["ingest_report"].get("batch_documents", 1) > 1]
    assert batched, "the waiting uploads were not built together"
    for document in documents.values():
        assert indexed_points(ragkb, kb_id, document["id"]) == document["chunk_count"]
        assert set(document["stage_timings"]) >= {"parse", "chunk", "embed", "index"}
    hits = ragkb.search("Which locker holds the spare keys of floor 4?", [kb_id], top_k=3)
    assert hits[0]["document_id"] == documents["l4"]["id"]


def test_worker_killed_mid_batch_loses_no_document_and_duplicates_no_chunk(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("killed-mid-batch")
    keep_worker_busy(ragkb, kb_id)
    texts = [
        {"source_id": f"procedure-{n}", "text": large_manual(paragraphs=12).replace("rack 7", f"rack {n}")}
        for n in range(20)
    ]
    for start in range(0, len(texts), MAX_BATCH_DOCUMENTS):
        documents = texts[start : start + MAX_BATCH_DOCUMENTS]
        response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": documents})
        assert response.status_code == 200 and response.json()["failed"] == 0, response.text
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        statuses = [d["status"] for d in documents_of(ragkb, kb_id) if d["source_id"] != "busy/manual"]
        if statuses.count("processing") > 1:  # a batch is being built: its documents are all claimed
            break
        time.sleep(0.05)
    assert statuses.count("processing") > 1, f"no batch was seen being built: {statuses}"
    kill_worker_processes(ragkb)

    documents = wait_all_ended(ragkb, kb_id, 21, timeout_s=300)

    assert all(d["status"] == "done" and d["version"] == 1 for d in documents), documents
    assert any(d["attempts"] >= 2 for d in documents), "no document was rebuilt after the kill"
    for document in documents:
        assert indexed_points(ragkb, kb_id, document["id"]) == document["chunk_count"] > 0
    hits = ragkb.search("Where is the backup server?", [kb_id], top_k=30)
    assert len({hit["chunk_id"] for hit in hits}) == len(hits)
