"""Deleting a knowledge base is a job: the KB is `deleting` at once, the worker deletes its index, documents
and the blobs only it used, and another KB of the same stack (one blob shared with it) is left as it was. A
deletion that fails (the retriever does not answer) leaves the KB `deleting` and is finished by DELETE again;
a second copy of the task does nothing; a KB being re-indexed is not deleted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragkb_core.settings import RedisSettings
from ragkb_store.blobs import BlobStore
from ragkb_store.queue import DELETE_KB, INGEST_QUEUE, make_celery
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


def test_a_deletion_failed_while_the_retriever_hung_is_finished_by_delete_again(
    ragkb: RunningRagkb, tmp_path: Path
) -> None:
    client, blobs = ragkb.client, BlobStore(Path(ragkb.env["RAGKB_BLOBS__ROOT"]))
    kb_a, kb_b = ragkb.create_kb("doomed-while-hung"), ragkb.create_kb("kept-while-hung")
    shared = _write(tmp_path, "parking.md", SHARED)
    only_a = _write(tmp_path, "expenses.md", ONLY_A["expenses.md"])
    a_docs = [ragkb.upload_file(kb_a, shared), ragkb.upload_file(kb_a, only_a)]
    b_docs = [ragkb.upload_file(kb_b, shared)]
    for kb_id, document in [(kb_a, d) for d in a_docs] + [(kb_b, d) for d in b_docs]:
        assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    base = f"/v1/knowledge-bases/{kb_a}"

    # The retriever answers nothing: the worker's drop of the index times out (RAGKB_RETRIEVER__TIMEOUT_S, 30 s)
    # and the job fails with that reason. The api needs no retriever for any of this.
    with ragkb.paused("ragkb_retriever"):
        accepted = client.delete(base)
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["id"]
        failed = ragkb.wait_job(job_id, timeout_s=180)
        assert failed["status"] == "failed", failed
        [error] = failed["errors"]
        assert "retriever unreachable" in error["message"] and "DELETE it again" in error["message"], error
        assert failed["progress"] == {"current": 0, "total": len(a_docs)}
        shown = client.get(base).json()
        assert (shown["status"], shown["deletion_job_id"]) == ("deleting", job_id)
        refused = client.post(f"{base}/documents", json={"text": "still here?", "source_id": "late.md"})
        assert "being deleted" in _problem(refused, 409)["detail"]
        assert len(client.get(f"{base}/documents").json()) == len(a_docs)  # it failed before any document went

    # DELETE again resumes the same job, which finishes now that the retriever answers.
    again = client.delete(base)
    assert again.status_code == 202, again.text
    assert (again.json()["id"], again.json()["status"], again.json()["errors"]) == (job_id, "running", [])
    finished = ragkb.wait_job(job_id)
    assert (finished["status"], finished["errors"]) == ("succeeded", [])
    assert finished["progress"] == {"current": len(a_docs), "total": len(a_docs)}
    assert finished["counts"]["deleted"] == len(a_docs)

    _assert_gone(ragkb, kb_a, a_docs)
    assert not blobs.exists(a_docs[1]["sha256"])
    _assert_untouched_shared(ragkb, kb_b, b_docs)
    assert blobs.exists(b_docs[0]["sha256"])  # the only blob left of A's: B's document has it too

    # A second copy of the task (a redelivery, or a DELETE while it ran) finds the job finished: it does nothing.
    queue = make_celery(RedisSettings(url=ragkb.env["RAGKB_REDIS__URL"]))
    task_id = queue.send_task(DELETE_KB, args=[job_id], queue=INGEST_QUEUE).id
    line = _wait_log(ragkb, f"Task {DELETE_KB}[{task_id}] succeeded")
    assert f"'job_id': '{job_id}', 'status': 'skipped'" in line, line
    assert ragkb.wait_job(job_id) == finished
    _assert_untouched_shared(ragkb, kb_b, b_docs)
    client.delete(f"/v1/knowledge-bases/{kb_b}")


def test_a_kb_being_reindexed_is_not_deleted(ragkb: RunningRagkb, tmp_path: Path) -> None:
    client = ragkb.client
    kb_id = ragkb.create_kb("reindexed-not-deleted")
    document = ragkb.upload_file(kb_id, _write(tmp_path, "canteen.md", ONLY_B))
    assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    base = f"/v1/knowledge-bases/{kb_id}"

    # The worker is stopped: the re-index stays running (its documents queued) while the deletion is asked for.
    with ragkb.paused("ragkb_worker"):
        started = client.post(f"{base}/reindex", json={})
        assert started.status_code == 202, started.text
        reindex = started.json()["id"]
        refused = _problem(client.delete(base), 409)
        assert "re-index" in refused["detail"] and reindex in refused["detail"], refused
        shown = client.get(base).json()
        assert (shown["status"], shown["deletion_job_id"]) == ("active", None)
        assert ragkb.search("ramen on Thursdays", [kb_id])[0]["document_id"] == document["id"]

    assert ragkb.wait_job(reindex)["status"] == "succeeded"
    accepted = client.delete(base)
    assert accepted.status_code == 202, accepted.text
    assert ragkb.wait_job(accepted.json()["id"])["status"] == "succeeded"
    _problem(client.get(base), 404)


def _assert_untouched_shared(ragkb: RunningRagkb, kb_b: str, b_docs: list[dict[str, Any]]) -> None:
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_b}/documents").json()
    assert [(d["id"], d["status"]) for d in listed] == [(d["id"], "done") for d in b_docs]
    parking = ragkb.search("where are bicycles parked", [kb_b])
    assert parking and parking[0]["document_id"] == b_docs[0]["id"]


def _wait_log(ragkb: RunningRagkb, text: str, timeout_s: float = 60) -> str:
    """The first line of the stack's log that holds `text` (Celery logs every task it ran, with its result)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in ragkb.log_path.read_text(errors="replace").splitlines():
            if text in line:
                return line
        time.sleep(0.3)
    raise AssertionError(f"no log line with {text!r} in {timeout_s} s")
