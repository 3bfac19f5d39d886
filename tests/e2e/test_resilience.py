"""Updates, metadata changes, retries and a worker killed mid-ingest — over HTTP against the real processes."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def upload_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: object) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def indexed_points(ragkb: RunningRagkb, kb_id: str, document_id: str) -> int:
    url = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1/kbs/{kb_id}/count"
    count: int = httpx.get(url, params={"document_id": document_id}, headers=ragkb.service_headers).json()["count"]
    return count


def test_metadata_changes_reach_the_index_without_reembedding(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("patching")
    document = upload_text(ragkb, kb_id, "Visitors register at the front desk.", source_id="visitors", labels=["a"])
    done = ragkb.wait_document(kb_id, document["id"])
    path = f"/v1/knowledge-bases/{kb_id}/documents/{document['id']}"

    changed = ragkb.client.patch(path, json={"labels": ["security"], "metadata": {"v": 2}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["labels"] == ["security"]
    assert (changed.json()["version"], changed.json()["indexed_at"]) == (done["version"], done["indexed_at"])
    assert ragkb.search("Where do visitors register?", [kb_id])[0]["labels"] == ["security"]

    # A title is embedded and keyword-indexed: changing it indexes the document again, as a new version.
    retitled = ragkb.client.patch(path, json={"title": "Visitor policy"})
    assert retitled.status_code == 200, retitled.text
    assert ragkb.wait_document(kb_id, document["id"])["version"] == done["version"] + 1
    top = ragkb.search("Where do visitors register?", [kb_id])[0]
    assert (top["title"], top["labels"]) == ("Visitor policy", ["security"])

    renamed = ragkb.client.patch(path, json={"source_id": "policies/visitors"})
    assert renamed.json()["source_id"] == "policies/visitors"
    assert ragkb.search("Where do visitors register?", [kb_id])[0]["source_id"] == "policies/visitors"

    other = upload_text(ragkb, kb_id, "Another note.", source_id="other")
    assert ragkb.client.patch(path, json={"source_id": "other"}).status_code == 409
    assert ragkb.client.patch(path, json={}).status_code == 422
    assert ragkb.client.patch(path, json={"labels": "not-a-list"}).status_code == 422
    assert ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}/documents/nope", json={"title": "x"}).status_code == 404
    ragkb.wait_document(kb_id, other["id"])


def test_a_failed_document_can_be_retried(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("retrying")
    broken = tmp_path / "broken.txt"
    broken.write_bytes(bytes(range(128, 256)) * 40)
    document = ragkb.upload_file(kb_id, broken)
    assert ragkb.wait_document(kb_id, document["id"])["status"] == "failed"
    path = f"/v1/knowledge-bases/{kb_id}/documents/{document['id']}"
    retried = ragkb.client.post(f"{path}/retry")
    assert retried.status_code == 202 and retried.json()["status"] == "pending"
    again = ragkb.wait_document(kb_id, document["id"])
    assert (again["status"], again["attempts"]) == ("failed", 1)

    good = upload_text(ragkb, kb_id, "Fine text.")
    ragkb.wait_document(kb_id, good["id"])
    assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents/{good['id']}/retry").status_code == 409


def test_worker_killed_mid_ingest_recovers_with_exactly_one_version(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("killed-worker")
    first = upload_text(ragkb, kb_id, "The backup server stands in rack 7 of the basement.", source_id="ops/manual")
    ragkb.wait_document(kb_id, first["id"])
    searches = SearchLoop(ragkb, "Where is the backup server?", kb_id, first["id"])
    searches.start()
    try:
        # Two embedding slices (~170 chunks): still embedding seconds after the kill below, and built again in
        # half the time of the three slices this took before (the rebuild after the kill is most of the test).
        upload_text(ragkb, kb_id, large_manual(paragraphs=1000), source_id="ops/manual")
        wait_for_status(ragkb, kb_id, first["id"], "processing")
        time.sleep(2)
        status = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{first['id']}").json()["status"]
        assert status == "processing", "the document finished before the worker could be killed"
        kill_worker_processes(ragkb)
        final = wait_for_version(ragkb, kb_id, first["id"], version=2, timeout_s=300)
    finally:
        searches.stop()
    assert final["attempts"] >= 2
    assert indexed_points(ragkb, kb_id, first["id"]) == final["chunk_count"]
    assert searches.failures == [] and searches.count > 0
    assert {r["version"] for r in ragkb.search("Where is the backup server?", [kb_id], top_k=20)} == {2}


class SearchLoop(threading.Thread):
    """Searches while the update runs: every answer must still contain the document."""

    def __init__(self, ragkb: RunningRagkb, query: str, kb_id: str, document_id: str) -> None:
        super().__init__(daemon=True)
        self._client = httpx.Client(base_url=str(ragkb.client.base_url), timeout=30, headers=ragkb.client.headers)
        self._body = {"query": query, "knowledge_base_ids": [kb_id], "top_k": 5}
        self._document_id = document_id
        self._stopping = threading.Event()
        self.failures: list[str] = []
        self.count = 0

    def run(self) -> None:
        while not self._stopping.is_set():
            response = self._client.post("/v1/search", json=self._body)
            self.count += 1
            if response.status_code != 200:
                self.failures.append(f"{response.status_code}: {response.text[:200]}")
            elif self._document_id not in {r["document_id"] for r in response.json()["results"]}:
                self.failures.append("the document was missing from the results")
            self._stopping.wait(0.5)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)
        self._client.close()


def large_manual(paragraphs: int) -> str:
    topics = ["cooling", "power", "network", "storage", "access", "monitoring"]
    body = [
        f"Section {n}: the {topics[n % len(topics)]} procedure number {n} requires a checklist, two people "
        f"and a log entry in the operations journal; escalate to the duty manager after {n % 9 + 1} failed tries."
        for n in range(paragraphs)
    ]
    return "The backup server stands in rack 7 of the basement.\n\n" + "\n\n".join(body)


def wait_for_status(ragkb: RunningRagkb, kb_id: str, document_id: str, status: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()["status"] == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"document never reached {status}")


def wait_for_version(
    ragkb: RunningRagkb, kb_id: str, document_id: str, version: int, timeout_s: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    document: dict[str, Any] = {}
    while time.monotonic() < deadline:
        document = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()
        if document["status"] == "done" and document["indexed_version"] == version:
            return document
        time.sleep(0.5)
    raise AssertionError(f"version {version} never became live: {document}")


def kill_worker_processes(ragkb: RunningRagkb) -> None:
    """SIGKILL the worker of this test's service — its main process and its pool — as a crash would."""
    ragkb.signal_service("ragkb_worker", signal.SIGKILL)


def test_a_failed_update_leaves_the_previous_version_serving(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("failed-update")
    good = tmp_path / "guide.txt"
    good.write_text("The fire assembly point is the north car park.")
    first = ragkb.upload_file(kb_id, good)
    ragkb.wait_document(kb_id, first["id"])
    good.write_bytes(bytes(range(128, 256)) * 40)
    second = ragkb.upload_file(kb_id, good)
    assert (second["id"], second["version"]) == (first["id"], 2)
    failed = ragkb.wait_document(kb_id, first["id"])
    assert (failed["status"], failed["indexed_version"]) == ("failed", 1)
    top = ragkb.search("Where is the fire assembly point?", [kb_id])[0]
    assert (top["document_id"], top["version"]) == (first["id"], 1)
