"""Reference documents (the authoritative originals) over the live API, and hostile source ids."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e


def post_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: Any) -> httpx.Response:
    return ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})


def accepted(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def kb(ragkb: RunningRagkb) -> str:
    return ragkb.create_kb(f"reference-{uuid.uuid4().hex[:8]}")


def test_a_reference_cannot_be_replaced_by_an_upload_but_can_be_deleted_and_registered_again(
    ragkb: RunningRagkb, kb: str
) -> None:
    original = accepted(post_text(ragkb, kb, "Rule 1: badges are worn.", source_id="rules", doc_type="reference"))
    replaced = post_text(ragkb, kb, "Rule 1: badges are optional.", source_id="rules", doc_type="reference")
    assert replaced.status_code == 409
    assert "delete it and register it again" in replaced.json()["detail"]
    as_knowledge = post_text(ragkb, kb, "Rule 1: badges are worn.", source_id="rules")
    assert as_knowledge.status_code == 409
    # The same content again is no replacement (that is how a failed reference is retried).
    assert (
        accepted(post_text(ragkb, kb, "Rule 1: badges are worn.", source_id="rules", doc_type="reference"))["id"]
        == original["id"]
    )
    ragkb.wait_document(kb, original["id"])
    assert ragkb.client.delete(f"/v1/knowledge-bases/{kb}/documents/{original['id']}").status_code == 204
    again = accepted(post_text(ragkb, kb, "Rule 1: badges are optional.", source_id="rules", doc_type="reference"))
    assert ragkb.wait_document(kb, again["id"])["status"] == "done"


def test_a_knowledge_source_id_cannot_be_uploaded_again_as_reference(ragkb: RunningRagkb, kb: str) -> None:
    accepted(post_text(ragkb, kb, "Notes on badges.", source_id="notes"))
    response = post_text(ragkb, kb, "Notes on badges.", source_id="notes", doc_type="reference")
    assert response.status_code == 409


def test_patch_changes_a_references_labels_and_title_but_never_its_doc_type(ragkb: RunningRagkb, kb: str) -> None:
    document = accepted(post_text(ragkb, kb, "Rule 2: doors close at 8.", source_id="r2", doc_type="reference"))
    path = f"/v1/knowledge-bases/{kb}/documents/{document['id']}"
    changed = ragkb.client.patch(path, json={"title": "Doors", "labels": ["rules"]})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["title"], changed.json()["labels"]) == ("Doors", ["rules"])
    assert ragkb.client.patch(path, json={"doc_type": "knowledge"}).status_code == 409
    assert ragkb.client.patch(path, json={"doc_type": "knowledge", "title": "x"}).status_code == 409
    assert ragkb.client.patch(path, json={"doc_type": "reference"}).status_code == 200
    assert ragkb.client.get(path).json()["doc_type"] == "reference"


def test_labels_of_references_and_of_knowledge_stay_apart_in_both_directions(ragkb: RunningRagkb, kb: str) -> None:
    reference = accepted(post_text(ragkb, kb, "Rule 3.", source_id="r3", doc_type="reference", labels=["official"]))
    knowledge = accepted(post_text(ragkb, kb, "Tip 3.", source_id="t3", labels=["tips"]))
    # upload: knowledge with a reference label, reference with a knowledge label
    refused = post_text(ragkb, kb, "Tip 4.", source_id="t4", labels=["official", "more"])
    assert refused.status_code == 409
    assert refused.json()["conflicting_labels"] == ["official"]
    refused = post_text(ragkb, kb, "Rule 4.", source_id="r4", doc_type="reference", labels=["tips"])
    assert (refused.status_code, refused.json()["conflicting_labels"]) == (409, ["tips"])
    # PATCH labels, both directions
    documents = f"/v1/knowledge-bases/{kb}/documents"
    refused = ragkb.client.patch(f"{documents}/{knowledge['id']}", json={"labels": ["tips", "official"]})
    assert (refused.status_code, refused.json()["conflicting_labels"]) == (409, ["official"])
    refused = ragkb.client.patch(f"{documents}/{reference['id']}", json={"labels": ["tips"]})
    assert (refused.status_code, refused.json()["conflicting_labels"]) == (409, ["tips"])
    # Another KB is another namespace.
    other = ragkb.create_kb(f"reference-other-{uuid.uuid4().hex[:8]}")
    accepted(post_text(ragkb, other, "Tip 5.", source_id="t5", labels=["official"]))


def test_a_hostile_source_id_and_filename_are_opaque_and_write_nothing_outside_the_blob_root(
    ragkb: RunningRagkb, kb: str
) -> None:
    workdir = Path(ragkb.env["RAGKB_TEST_CWD"])
    blob_root = Path(ragkb.env["RAGKB_BLOBS__ROOT"])
    before = {path for path in workdir.parent.rglob("*") if not path.is_relative_to(blob_root)}
    document = accepted(post_text(ragkb, kb, "Hostile ids are just ids.", source_id="../../etc/passwd"))
    assert document["source_id"] == "../../etc/passwd"
    response = ragkb.client.post(
        f"/v1/knowledge-bases/{kb}/documents", files={"file": ("../../../tmp/evil.md", b"# Evil\n\nStill text.")}
    )
    assert accepted(response)["filename"] == "evil.md"
    for path in blob_root.rglob("*"):
        assert path.is_dir() or path.name.startswith(".incoming-") or len(path.name) == 64, path
    assert blob_root.joinpath(document["sha256"][:2], document["sha256"][2:4], document["sha256"]).is_file()
    created = {path for path in workdir.parent.rglob("*") if not path.is_relative_to(blob_root)} - before
    # The database, its journal, the index and the log may grow; no file named after the hostile input appears.
    assert [path for path in created if path.name in ("passwd", "evil.md")] == []
    assert not Path("/etc/passwd").read_text().startswith("Hostile")


def test_concurrent_writers_cannot_put_one_label_on_both_kinds(ragkb: RunningRagkb, kb: str) -> None:
    def upload(n: int) -> int:
        doc_type = "reference" if n % 2 else "knowledge"
        return post_text(
            ragkb, kb, f"Entry {n}.", source_id=f"entry-{n}", labels=["shared"], doc_type=doc_type
        ).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(upload, range(16)))
    assert set(statuses) <= {202, 409} and 202 in statuses
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb}/documents").json()
    assert len({d["doc_type"] for d in listed if "shared" in d["labels"]}) == 1
