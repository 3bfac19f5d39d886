"""Manifest sync, jobs and their event stream, driven over HTTP as the sync client drives them."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb
from tests.e2e.test_resilience import indexed_points, kill_worker_processes

pytestmark = pytest.mark.e2e


def manifest_of(folder: Path) -> list[dict[str, Any]]:
    return [
        {
            "source_id": path.relative_to(folder).as_posix(),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "size": path.stat().st_size,
            "mtime": path.stat().st_mtime,
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    ]


def sync(ragkb: RunningRagkb, kb_id: str, folder: Path, **extra: Any) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": manifest_of(folder), **extra})
    assert response.status_code == 200, response.text
    plan: dict[str, Any] = response.json()
    for item in plan["upload"]:
        path = folder / item["source_id"]
        with path.open("rb") as handle:
            uploaded = ragkb.client.post(
                f"/v1/knowledge-bases/{kb_id}/documents",
                files={"file": (path.name, handle)},
                data={"source_id": item["source_id"]},
            )
        assert uploaded.status_code == 202, uploaded.text
    return plan


def read_events(ragkb: RunningRagkb, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    with ragkb.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=300) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                kind = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                events.append((kind, json.loads(line.partition(":")[2])))
    return events


def write_folder(folder: Path, count: int = 20) -> None:
    for n in range(count):
        path = folder / ("notes" if n % 2 else "guides") / f"doc-{n:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Document {n}\n\nThe harbour office opens at {n % 12 + 1} o'clock on weekdays.\n")
    (folder / ".hidden.md").write_text("a hidden file is never uploaded\n")
    (folder / "tool.exe").write_bytes(b"MZ not for a knowledge base")


def test_syncing_a_folder_twice_then_its_changes(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("sync-folder")
    folder = tmp_path / "folder"
    write_folder(folder)

    first = sync(ragkb, kb_id, folder)
    assert first["counts"] == {"upload": 20, "unchanged": 0, "delete": 0, "excluded": 2}
    assert {item["reason"] for item in first["upload"]} == {"new"}
    excluded = {item["source_id"]: item["reason"] for item in first["excluded"]}
    assert excluded == {
        ".hidden.md": "matches exclude pattern '(^|/)\\.'",
        "tool.exe": "extension .exe is not eligible",
    }
    events = read_events(ragkb, first["job_id"])
    progress = [data for kind, data in events if kind == "progress"]
    currents = [data["current"] for data in progress]
    assert currents == sorted(currents) and currents[-1] == 20 and {data["total"] for data in progress} == {20}
    kind, complete = events[-1]
    assert kind == "complete"
    assert complete["counts"] == {"uploaded": 20, "unchanged": 0, "deleted": 0, "failed": 0, "reindexed": 0}
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["document_counts"]["done"] == complete["counts"]["uploaded"] + complete["counts"]["unchanged"]
    assert sum(kb["document_counts"].values()) == 20

    second = sync(ragkb, kb_id, folder)
    assert (second["upload"], second["delete"], len(second["unchanged"])) == ([], [], 20)
    assert ragkb.wait_job(second["job_id"])["counts"] == {
        "uploaded": 0,
        "unchanged": 20,
        "deleted": 0,
        "failed": 0,
        "reindexed": 0,
    }

    (folder / "guides" / "doc-00.md").write_text("# Document 0\n\nThe harbour office now opens at noon.\n")
    (folder / "notes" / "doc-01.md").unlink()
    (folder / "notes" / "added.md").write_text("# Added\n\nFerries leave from pier four.\n")
    third = sync(ragkb, kb_id, folder)
    assert sorted((item["source_id"], item["reason"]) for item in third["upload"]) == [
        ("guides/doc-00.md", "changed"),
        ("notes/added.md", "new"),
    ]
    assert [item["source_id"] for item in third["delete"]] == ["notes/doc-01.md"]
    job = ragkb.wait_job(third["job_id"])
    assert (job["status"], job["counts"]) == (
        "succeeded",
        {"uploaded": 2, "unchanged": 18, "deleted": 1, "failed": 0, "reindexed": 0},
    )
    documents = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json()
    assert len(documents) == 20 and ".hidden.md" not in {d["source_id"] for d in documents}
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/jobs").json()[0]["id"] == third["job_id"]


def test_a_dry_run_changes_nothing_and_a_newly_excluded_file_is_deleted(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("sync-exclude")
    folder = tmp_path / "folder"
    write_folder(folder, count=3)
    ragkb.wait_job(sync(ragkb, kb_id, folder)["job_id"])
    patched = ragkb.client.patch(
        f"/v1/knowledge-bases/{kb_id}", json={"sync": {"exclude_patterns": ["(^|/)\\.", "^notes/"]}}
    )
    assert patched.status_code == 200 and patched.json()["sync"]["exclude_patterns"][-1] == "^notes/"
    dry = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": manifest_of(folder), "dry_run": True})
    assert dry.json()["job_id"] is None and [d["source_id"] for d in dry.json()["delete"]] == ["notes/doc-01.md"]
    assert len(ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json()) == 3
    plan = sync(ragkb, kb_id, folder)
    assert [d["source_id"] for d in plan["delete"]] == ["notes/doc-01.md"] and plan["upload"] == []
    assert ragkb.wait_job(plan["job_id"])["counts"]["deleted"] == 1


@pytest.mark.parametrize("pattern", ["(unclosed", "x" * 600])
def test_an_invalid_exclude_pattern_is_refused_when_the_kb_is_configured(ragkb: RunningRagkb, pattern: str) -> None:
    created = ragkb.client.post(
        "/v1/knowledge-bases", json={"name": "bad-pattern", "sync": {"exclude_patterns": [pattern]}}
    )
    assert created.status_code == 422, created.text
    kb_id = ragkb.create_kb(f"patch-pattern-{len(pattern)}")
    patched = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"sync": {"exclude_patterns": [pattern]}})
    assert patched.status_code == 422, patched.text
    assert patched.headers["content-type"].startswith("application/problem+json")


def test_cancel_stops_waiting_and_keeps_what_was_uploaded(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("sync-cancel")
    folder = tmp_path / "folder"
    write_folder(folder, count=4)
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": manifest_of(folder)})
    job_id = response.json()["job_id"]
    cancelled = ragkb.client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert ragkb.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
    kind, complete = read_events(ragkb, job_id)[-1]
    assert kind == "complete" and complete["status"] == "cancelled"


def test_retry_failed_requeues_every_failed_document_as_a_job(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("sync-retry")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "broken.txt").write_bytes(bytes(range(128, 256)) * 40)
    (folder / "fine.md").write_text("# Fine\n\nThis one parses.\n")
    job = ragkb.wait_job(sync(ragkb, kb_id, folder)["job_id"])
    assert (job["status"], job["counts"]["failed"], job["counts"]["uploaded"]) == ("failed", 1, 1)
    assert job["errors"][0]["source_id"] == "broken.txt" and "cannot be decoded" in job["errors"][0]["message"]
    again = sync(ragkb, kb_id, folder)
    assert again["upload"] == [{"source_id": "broken.txt", "reason": "retry"}]
    ragkb.wait_job(again["job_id"])
    retry = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/retry-failed")
    assert retry.status_code == 202 and retry.json()["kind"] == "retry"
    assert retry.json()["progress"]["total"] == 1
    finished = ragkb.wait_job(retry.json()["id"])
    assert finished["counts"]["failed"] == 1 and finished["errors"][0]["source_id"] == "broken.txt"


def test_a_reader_cannot_sync_and_a_stranger_cannot_see_the_job(ragkb: RunningRagkb, tmp_path: Path) -> None:
    kb_id = ragkb.create_kb("sync-access")
    other_kb = ragkb.create_kb("sync-access-other")
    folder = tmp_path / "folder"
    write_folder(folder, count=1)
    job_id = sync(ragkb, kb_id, folder)["job_id"]

    def client_key(grants: dict[str, str]) -> str:
        body = {"name": f"k-{len(grants)}-{time.monotonic_ns()}", "role": "client", "grants": grants}
        response = ragkb.client.post("/v1/api-keys", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["key"])

    with (
        ragkb.client_with(client_key({kb_id: "read"})) as reader,
        ragkb.client_with(client_key({other_kb: "write"})) as stranger,
    ):
        assert reader.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": []}).status_code == 403
        assert reader.post(f"/v1/knowledge-bases/{kb_id}/retry-failed").status_code == 403
        assert reader.get(f"/v1/jobs/{job_id}").status_code == 200
        assert reader.post(f"/v1/jobs/{job_id}/cancel").status_code == 403
        unknown = stranger.get("/v1/jobs/" + "0" * 32)
        ungranted = stranger.get(f"/v1/jobs/{job_id}")
        assert unknown.status_code == ungranted.status_code == 404
        assert stranger.get(f"/v1/jobs/{job_id}/events").status_code == 404
        assert stranger.post(f"/v1/knowledge-bases/{kb_id}/sync", json={"files": []}).status_code == 404


def test_a_sync_survives_its_worker_being_killed(ragkb: RunningRagkb, tmp_path: Path) -> None:
    """SIGKILL the worker in the middle of a sync of a few hundred files: the launcher restarts it, the job
    completes on its own, no document is left processing, none has chunks of two versions."""
    kb_id = ragkb.create_kb("sync-killed-worker")
    for n in range(240):
        path = tmp_path / f"part-{n // 60}" / f"note-{n:03d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Note {n}\n\nShipment {n} leaves dock {n % 7} on day {n % 31 + 1}.\n")
    plan = sync(ragkb, kb_id, tmp_path)
    assert len(plan["upload"]) == 240
    deadline = time.monotonic() + 120
    while ragkb.client.get(f"/v1/jobs/{plan['job_id']}").json()["progress"]["current"] < 20:
        assert time.monotonic() < deadline, "the sync did not start"
        time.sleep(0.2)
    kill_worker_processes(ragkb)
    job = ragkb.wait_job(plan["job_id"], timeout_s=600)
    assert job["status"] == "succeeded", job
    assert job["counts"]["uploaded"] == 240 and job["progress"]["current"] == job["progress"]["total"] == 240
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["document_counts"]["done"] == 240 and kb["document_counts"]["processing"] == 0
    for document in ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json():
        total = indexed_points(ragkb, kb_id, document["id"])
        assert total == document["chunk_count"] >= 1, document  # one version's chunks, no more
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")
