"""The consistency check finds what breaks the agreement of the index with the database, and the repair puts it
right, idempotently. The index is broken through the real retriever's internal API, as a crash between two
writes would leave it: one document's points gone, a superseded version's points left behind, points of a
document the database never had."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx
import pytest

from ragkb_core.ids import new_id
from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e

DOCUMENTS = {
    "ferry.md": "# Ferry timetable\n\nThe island ferry leaves the north pier at 07:40 and 16:15 on weekdays.\n",
    "archive.md": "# Archive room\n\nThe archive room keeps signed contracts for ten years in fireproof cabinets.\n",
    "greenhouse.md": "# Greenhouse\n\nTomato seedlings in the greenhouse are watered at dawn with rainwater.\n",
}


def internal(ragkb: RunningRagkb) -> httpx.Client:
    base = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1"
    return httpx.Client(base_url=base, headers=ragkb.service_headers, timeout=60)


def check(ragkb: RunningRagkb, kb_id: str) -> dict[str, Any]:
    response = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/consistency")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def repair(ragkb: RunningRagkb, kb_id: str) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/consistency/repair")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def findings(report: dict[str, Any]) -> set[tuple[str, str, int | None]]:
    return {(finding["kind"], finding["document_id"], finding["version"]) for finding in report["findings"]}


def cli(ragkb: RunningRagkb, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RAGKB_URL": ragkb.api_url,
        "RAGKB_API_KEY": ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"],
    }
    command = [sys.executable, "-m", "ragkb_cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def indexed_kb(ragkb: RunningRagkb, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A KB with three documents done: file name → document id."""
    folder = tmp_path_factory.mktemp("consistency")
    kb_id = ragkb.create_kb("consistency-kb")
    ids: dict[str, str] = {}
    for name, text in DOCUMENTS.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        ids[name] = str(ragkb.upload_file(kb_id, path)["id"])
    for document_id in ids.values():
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    return kb_id, ids


def test_a_kb_as_the_worker_left_it_is_consistent(ragkb: RunningRagkb, indexed_kb: tuple[str, dict[str, str]]) -> None:
    kb_id, ids = indexed_kb
    report = check(ragkb, kb_id)
    assert report["consistent"], report["findings"]
    assert report["documents"] == len(ids)
    assert report["points"] >= len(ids)
    answered = cli(ragkb, "kb", "check", "consistency-kb")
    assert answered.returncode == 0, answered.stderr
    assert "consistent" in answered.stdout


def test_a_broken_index_is_found_and_repaired_once(ragkb: RunningRagkb, indexed_kb: tuple[str, dict[str, str]]) -> None:
    kb_id, ids = indexed_kb
    lost, superseded = ids["ferry.md"], ids["archive.md"]
    ghost = new_id()
    with internal(ragkb) as retriever:
        # What a crash leaves behind: a superseded version's points, and points of a document never recorded.
        archive = retriever.get(f"/kbs/{kb_id}/documents/{superseded}/points", params={"version": 1}).json()
        old = {**archive, "version": 7}
        assert retriever.put(f"/kbs/{kb_id}/documents/{superseded}", json=old).status_code == 200
        stray = {**archive, "document_id": ghost, "source_id": "ghost.md"}
        assert retriever.put(f"/kbs/{kb_id}/documents/{ghost}", json=stray).status_code == 200
        # And a document's points gone.
        assert retriever.delete(f"/kbs/{kb_id}/documents/{lost}").status_code == 204

    broken = check(ragkb, kb_id)
    assert not broken["consistent"]
    assert findings(broken) == {
        ("missing_points", lost, 1),
        ("orphan_version", superseded, 7),
        ("orphan_document", ghost, None),
    }
    answered = cli(ragkb, "kb", "check", kb_id)
    assert answered.returncode == 1
    assert "3 findings" in answered.stdout
    assert f"missing_points {lost}" in answered.stdout
    assert all(hit["document_id"] != lost for hit in ragkb.search("island ferry north pier", [kb_id]))

    repaired = repair(ragkb, kb_id)
    assert repaired["requeued"] == [lost]
    assert repaired["deleted_versions"] == [{"document_id": superseded, "version": 7}]
    assert repaired["deleted_documents"] == [ghost]
    assert repaired["after"]["consistent"], repaired["after"]["findings"]

    assert ragkb.wait_document(kb_id, lost)["status"] == "done"
    assert check(ragkb, kb_id)["consistent"]
    assert ragkb.search("island ferry north pier", [kb_id])[0]["document_id"] == lost
    again = cli(ragkb, "kb", "check", kb_id, "--repair")
    assert again.returncode == 0, again.stderr
    assert "re-queued 0 documents, deleted 0 orphan versions and 0 orphan documents" in again.stdout


def test_checking_a_kb_needs_an_admin_and_an_existing_kb(
    ragkb: RunningRagkb, indexed_kb: tuple[str, dict[str, str]]
) -> None:
    kb_id, _ = indexed_kb
    missing = ragkb.client.get(f"/v1/knowledge-bases/{new_id()}/consistency")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    with ragkb.client_with(None) as anonymous:
        assert anonymous.get(f"/v1/knowledge-bases/{kb_id}/consistency").status_code == 401
        assert anonymous.post(f"/v1/knowledge-bases/{kb_id}/consistency/repair").status_code == 401
