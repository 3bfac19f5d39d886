"""Deleting a knowledge base is a job: the KB is `deleting` at once, the worker deletes its index, documents
and the blobs only it used, and another KB of the same stack (one blob shared with it) is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ragkb_core.blobs import BlobStore
from tests.e2e.conftest import RunningRagkb
from tests.e2e.test_sync import read_events

pytestmark = pytest.mark.e2e

SHARED = "# Bicycle parking\n\nBicycles are parked in the basement rack behind building C; tags are free.\n"
ONLY_A = {
    "expenses.md": "# Travel expenses\n\nTaxi receipts are claimed within thirty days of the trip.\n",
    "badges.md": "# Visitor badges\n\nVisitors wear a red badge and are escorted at all times.\n",
}
ONLY_B = "# Canteen\n\nThe canteen serves ramen on Thursdays and curry on Fridays.\n"


def _big_text() -> str:
    """A document the worker needs a few seconds for: it holds the task queue while the deletion waits."""
    paragraphs = [
        f"## Section {n}\n\nThe archive room {n} keeps quarterly reports, contracts and minutes of meeting {n}; "
        f"each box is labelled with the department, the year and a retention period of {n % 9 + 1} years."
        for n in range(300)
    ]
    return "# Archive handbook\n\n" + "\n\n".join(paragraphs) + "\n"


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


def test_deleting_a_kb_is_a_job_that_leaves_other_kbs_whole(ragkb: RunningRagkb, tmp_path: Path) -> None:
    client, blobs = ragkb.client, BlobStore(Path(ragkb.env["RAGKB_BLOBS__ROOT"]))
    kb_a, kb_b = ragkb.create_kb("doomed-kb"), ragkb.create_kb("kept-kb")
    shared = _write(tmp_path, "parking.md", SHARED)
    a_docs = [ragkb.upload_file(kb_a, shared)]
    a_docs += [ragkb.upload_file(kb_a, _write(tmp_path, name, text)) for name, text in ONLY_A.items()]
    b_docs = [ragkb.upload_file(kb_b, shared), ragkb.upload_file(kb_b, _write(tmp_path, "canteen.md", ONLY_B))]
    for kb_id, document in [(kb_a, d) for d in a_docs] + [(kb_b, d) for d in b_docs]:
        assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    assert a_docs[0]["sha256"] == b_docs[0]["sha256"]  # one blob, used by both KBs

    # The worker is kept busy by a large document of B; A gets one more document, still queued when the
    # deletion is accepted: no worker may index it afterwards.
    b_docs.append(ragkb.upload_file(kb_b, _write(tmp_path, "archive.md", _big_text())))
    late = ragkb.upload_file(kb_a, _write(tmp_path, "late.md", "# Late\n\nA note about umbrellas in the lobby.\n"))
    a_docs.append(late)

    accepted = client.delete(f"/v1/knowledge-bases/{kb_a}")
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()
    assert (job["kind"], job["knowledge_base_id"], job["status"]) == ("kb_delete", kb_a, "running")
    assert job["progress"]["total"] == len(a_docs)

    _assert_deleting(ragkb, kb_a, kb_b, job["id"])

    events = read_events(ragkb, job["id"])
    progress = [data for kind, data in events if kind == "progress" and data["source_id"] is not None]
    assert {(p["action"], p["status"]) for p in progress} == {("delete", "done")}
    assert sorted(p["source_id"] for p in progress) == sorted(d["source_id"] for d in a_docs)
    assert progress[-1]["current"] == progress[-1]["total"] == len(a_docs)
    kind, complete = events[-1]
    assert (kind, complete["status"], complete["counts"]["deleted"], complete["errors"]) == (
        "complete",
        "succeeded",
        len(a_docs),
        [],
    )
    finished = ragkb.wait_job(job["id"])
    assert finished["status"] == "succeeded"
    assert finished["progress"] == {"current": len(a_docs), "total": len(a_docs)}
    assert finished["started_at"] is not None and finished["finished_at"] is not None

    _assert_gone(ragkb, kb_a, a_docs)
    assert not blobs.exists(late["sha256"])
    assert all(not blobs.exists(document["sha256"]) for document in a_docs[1:])
    _assert_untouched(ragkb, kb_b, b_docs)
    assert blobs.exists(b_docs[0]["sha256"])  # the shared original survives with B's document

    # The name is free again, and deleting what is gone is a 404 like any unknown KB.
    _problem(client.delete(f"/v1/knowledge-bases/{kb_a}"), 404)
    client.delete(f"/v1/knowledge-bases/{ragkb.create_kb('doomed-kb')}")
    client.delete(f"/v1/knowledge-bases/{kb_b}")


def _assert_deleting(ragkb: RunningRagkb, kb_a: str, kb_b: str, job_id: str) -> None:
    """While B's large document holds the worker, A is `deleting`: it reads, but takes no writes or searches."""
    client = ragkb.client
    shown = client.get(f"/v1/knowledge-bases/{kb_a}").json()
    assert (shown["status"], shown["deletion_job_id"]) == ("deleting", job_id)
    listed = {kb["id"]: kb["status"] for kb in client.get("/v1/knowledge-bases").json()}
    assert (listed[kb_a], listed[kb_b]) == ("deleting", "active")
    base = f"/v1/knowledge-bases/{kb_a}"
    refused = [
        client.post(f"{base}/documents", json={"text": "too late", "source_id": "nope"}),
        client.post(f"{base}/sync", json={"files": []}),
        client.post(f"{base}/reindex", json={}),
        client.post(f"{base}/retry-failed"),
        client.patch(base, json={"description": "still here?"}),
        client.post("/v1/search", json={"query": "taxi receipts", "knowledge_base_ids": [kb_a]}),
        client.post("/v1/search", json={"query": "taxi receipts", "knowledge_base_ids": [kb_b, kb_a]}),
    ]
    for response in refused:
        assert "being deleted" in _problem(response, 409)["detail"]
    assert "cannot be cancelled" in _problem(client.post(f"/v1/jobs/{job_id}/cancel"), 409)["detail"]
    # DELETE again while it runs answers the same job (and queues it again: a lost task is picked up).
    again = client.delete(base)
    assert (again.status_code, again.json()["id"]) == (202, job_id)


def _assert_gone(ragkb: RunningRagkb, kb_a: str, a_docs: list[dict[str, Any]]) -> None:
    client = ragkb.client
    _problem(client.get(f"/v1/knowledge-bases/{kb_a}"), 404)
    assert kb_a not in {kb["id"] for kb in client.get("/v1/knowledge-bases").json()}
    _problem(client.get(f"/v1/knowledge-bases/{kb_a}/documents"), 404)
    for document in a_docs:
        _problem(client.get(f"/v1/knowledge-bases/{kb_a}/documents/{document['id']}"), 404)
    missing = _problem(client.post("/v1/search", json={"query": "taxi", "knowledge_base_ids": [kb_a]}), 404)
    assert missing["missing"] == [kb_a]
    # The retriever holds no index for it (the late document was never written into one).
    count = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1/kbs/{kb_a}/count"
    assert httpx.get(count, headers=ragkb.service_headers).status_code == 404


def _assert_untouched(ragkb: RunningRagkb, kb_b: str, b_docs: list[dict[str, Any]]) -> None:
    for document in b_docs:
        assert ragkb.wait_document(kb_b, document["id"])["status"] == "done"
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_b}/documents").json()
    assert sorted(d["id"] for d in listed) == sorted(d["id"] for d in b_docs)
    parking = ragkb.search("where are bicycles parked", [kb_b])
    assert parking and parking[0]["document_id"] == b_docs[0]["id"]
    assert ragkb.search("ramen on Thursdays", [kb_b])[0]["document_id"] == b_docs[1]["id"]
