"""Fair queueing as a user meets it: while one KB's bulk import is being worked through, a single upload into
another KB is done long before the import is, and each KB's queue shows its documents per lane."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import MAX_BATCH_DOCUMENTS, POLL_S, RunningRagkb

pytestmark = pytest.mark.e2e

IMPORT_DOCUMENTS = 200


def queue_of(ragkb: RunningRagkb, kb_id: str) -> dict[str, Any]:
    response = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/queue")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def import_in_batches(ragkb: RunningRagkb, kb_id: str, count: int) -> None:
    """`count` short documents, MAX_BATCH_DOCUMENTS a request: batches above the interactive size, bulk work."""
    for start in range(0, count, MAX_BATCH_DOCUMENTS):
        documents = [
            {"source_id": f"import-{n}", "text": imported_record(n)}
            for n in range(start, min(start + MAX_BATCH_DOCUMENTS, count))
        ]
        response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": documents})
        assert response.status_code == 200, response.text
        assert response.json()["failed"] == 0


def imported_record(n: int) -> str:
    """A short document, but not a one-liner: short documents are built in batches of 16 (RAGKB_BATCHING__*), so
    one-liners went in about as fast as the test could upload them and left no backlog to measure against."""
    return " ".join(
        f"Imported record {n} about warehouse shelf {n % 37}, bin {k}: stock counted, labels checked, aisle swept."
        for k in range(6)
    )


def seconds_until_drained(ragkb: RunningRagkb, kb_id: str, timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        lanes = queue_of(ragkb, kb_id)
        if not any(lanes[lane]["pending"] or lanes[lane]["processing"] for lane in ("interactive", "bulk")):
            return time.monotonic() - started
        time.sleep(POLL_S)
    raise AssertionError(f"KB {kb_id} still has documents queued after {timeout_s} s; log:\n{ragkb.log_tail()}")


def test_a_single_upload_is_done_long_before_another_kbs_bulk_import(ragkb: RunningRagkb) -> None:
    importing, uploading = ragkb.create_kb("fair-import"), ragkb.create_kb("fair-upload")
    import_in_batches(ragkb, importing, IMPORT_DOCUMENTS)
    imported = queue_of(ragkb, importing)
    assert imported["interactive"] == {"pending": 0, "processing": 0}
    assert imported["bulk"]["pending"] + imported["bulk"]["processing"] > IMPORT_DOCUMENTS // 2

    started = time.monotonic()
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{uploading}/documents/batch",
        json={"documents": [{"source_id": "note.md", "text": "The loading dock opens at seven."}]},
    )
    assert response.status_code == 200, response.text
    document_id = response.json()["results"][0]["document"]["id"]
    assert ragkb.wait_document(uploading, document_id, timeout_s=120)["status"] == "done"
    upload_s = time.monotonic() - started
    still_importing = queue_of(ragkb, importing)["bulk"]
    assert still_importing["pending"] > 0, "the import was done before the upload: nothing was measured"

    import_s = upload_s + seconds_until_drained(ragkb, importing, timeout_s=600)
    assert upload_s < import_s / 3, (upload_s, import_s)
    assert ragkb.search("When does the loading dock open?", [uploading], top_k=1)[0]["text"].startswith("The loading")


def test_the_queue_of_an_unknown_kb_is_a_problem(ragkb: RunningRagkb) -> None:
    response = ragkb.client.get("/v1/knowledge-bases/0123456789abcdef0123456789abcdef/queue")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
