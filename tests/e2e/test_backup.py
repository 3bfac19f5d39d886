"""Backup and restore of a KB, round trip through the real processes: the archive (downloaded with the CLI)
restored as a new KB answers every search exactly as the original did, holds the same documents (a failed one
stays failed, with its reason), the same originals, and is consistent. A restore that cannot succeed (a name
in use, a damaged archive) leaves nothing behind."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e

DOCUMENTS = {
    "lighthouse.md": "# Lighthouse\n\nThe lighthouse keeper climbs 214 steps to polish the lens every evening.\n\n"
    "## Storms\n\nDuring storms the foghorn sounds every thirty seconds until dawn.\n",
    "bakery.md": "# Bakery\n\nThe village bakery sells rye bread on Tuesdays and almond croissants on Sundays.\n",
    "observatory.md": "# Observatory\n\nThe observatory dome opens at dusk when the sky is clear of clouds.\n",
    "規程.md": "# 図書室の規程\n\n図書室の本は二週間まで借りることができます。延長は一回までです。\n",
}
QUERIES = ["how many steps does the keeper climb", "almond croissants", "foghorn storms", "図書室 延長", "dome at dusk"]


def cli(ragkb: RunningRagkb, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGKB_URL": ragkb.api_url, "RAGKB_API_KEY": ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]}
    command = [sys.executable, "-m", "ragkb_cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def answers(ragkb: RunningRagkb, kb_id: str) -> list[list[tuple[Any, ...]]]:
    """What each query answers, without the ids a restore renews."""
    return [
        [
            (
                hit["source_id"],
                hit["title"],
                hit["ordinal"],
                hit["text"],
                hit["labels"],
                hit["metadata"],
                round(hit["score"], 5),
            )
            for hit in ragkb.search(query, [kb_id], top_k=8)
        ]
        for query in QUERIES
    ]


def documents(ragkb: RunningRagkb, kb_id: str) -> dict[str, dict[str, Any]]:
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents").json()
    keep = ("status", "title", "labels", "metadata", "chunk_count", "error", "media_type", "size_bytes")
    return {document["source_id"]: {key: document.get(key) for key in keep} for document in listed}


def kb_names(ragkb: RunningRagkb) -> list[str]:
    return [kb["name"] for kb in ragkb.client.get("/v1/knowledge-bases").json()]


@pytest.fixture(scope="module")
def original(ragkb: RunningRagkb, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A KB with four documents done (one with labels and metadata) and one that failed to parse."""
    folder = tmp_path_factory.mktemp("backup-source")
    kb_id = ragkb.create_kb("backup-kb")
    accepted = []
    for name, text in DOCUMENTS.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        fields = {"labels": "coast,night", "metadata": '{"region": "north"}'} if name == "lighthouse.md" else {}
        accepted.append(ragkb.upload_file(kb_id, path, **fields))
    broken = folder / "broken.txt"
    broken.write_bytes(bytes(range(128, 256)) * 40)
    accepted.append(ragkb.upload_file(kb_id, broken))
    for document in accepted:
        ragkb.wait_document(kb_id, document["id"])
    return kb_id


def test_a_restored_kb_answers_every_search_as_the_original(ragkb: RunningRagkb, original: str, tmp_path: Path) -> None:
    backed_up = cli(ragkb, tmp_path, "kb", "backup", "backup-kb", "-o", "kb.tar.gz")
    assert backed_up.returncode == 0, backed_up.stderr
    archive = tmp_path / "kb.tar.gz"
    with tarfile.open(archive, "r:gz") as tar:
        names = tar.getnames()
    assert names[:2] == ["manifest.json", "documents.jsonl"]
    assert sum(name.startswith("points/") for name in names) == len(DOCUMENTS)

    restored = cli(ragkb, tmp_path, "kb", "restore", str(archive), "--name", "backup-kb-restored")
    assert restored.returncode == 0, restored.stderr
    assert "5 documents" in restored.stdout and "0 queued" in restored.stdout
    copy = next(kb["id"] for kb in ragkb.client.get("/v1/knowledge-bases").json() if kb["name"] == "backup-kb-restored")

    assert copy != original
    assert answers(ragkb, copy) == answers(ragkb, original)
    assert all(answers(ragkb, original))  # every query found something: the comparison compared answers
    assert documents(ragkb, copy) == documents(ragkb, original)
    assert documents(ragkb, copy)["broken.txt"]["status"] == "failed"
    settings = ("chunking", "retrieval", "analyzer", "sync", "embedding_model", "analyzer_version")
    source_kb, copy_kb = (ragkb.client.get(f"/v1/knowledge-bases/{kb}").json() for kb in (original, copy))
    assert {key: copy_kb[key] for key in settings} == {key: source_kb[key] for key in settings}
    report = ragkb.client.get(f"/v1/knowledge-bases/{copy}/consistency").json()
    assert report["consistent"], report["findings"]
    assert report["documents"] == len(DOCUMENTS) + 1


def test_a_restored_document_serves_its_original_and_can_be_replaced(
    ragkb: RunningRagkb, original: str, tmp_path: Path
) -> None:
    copy = next(kb["id"] for kb in ragkb.client.get("/v1/knowledge-bases").json() if kb["name"] == "backup-kb-restored")
    listed = ragkb.client.get(f"/v1/knowledge-bases/{copy}/documents").json()
    bakery = next(document for document in listed if document["source_id"] == "bakery.md")
    downloaded = ragkb.client.get(f"/v1/knowledge-bases/{copy}/documents/{bakery['id']}/original")
    assert downloaded.status_code == 200
    assert downloaded.content.decode("utf-8") == DOCUMENTS["bakery.md"]
    # A new version of a restored document replaces the restored points (no orphan left behind).
    path = tmp_path / "bakery.md"
    path.write_text("# Bakery\n\nThe bakery now sells pretzels every morning.\n", encoding="utf-8")
    replaced = ragkb.upload_file(copy, path)
    assert replaced["id"] == bakery["id"]
    assert ragkb.wait_document(copy, bakery["id"])["status"] == "done"
    assert ragkb.search("pretzels", [copy])[0]["source_id"] == "bakery.md"
    assert ragkb.client.get(f"/v1/knowledge-bases/{copy}/consistency").json()["consistent"]


def test_a_restore_that_cannot_succeed_leaves_nothing_behind(
    ragkb: RunningRagkb, original: str, tmp_path: Path
) -> None:
    archive = ragkb.client.post(f"/v1/knowledge-bases/{original}/backup")
    assert archive.status_code == 200
    assert archive.headers["content-type"].startswith("application/gzip")
    before = kb_names(ragkb)

    taken = ragkb.client.post("/v1/knowledge-bases/restore", files={"file": ("kb.tar.gz", archive.content)})
    assert taken.status_code == 409, taken.text  # "backup-kb" exists
    damaged = archive.content[: len(archive.content) // 2]
    cut = ragkb.client.post(
        "/v1/knowledge-bases/restore", files={"file": ("kb.tar.gz", damaged)}, data={"name": "backup-kb-cut"}
    )
    assert cut.status_code == 422, cut.text
    assert cut.headers["content-type"].startswith("application/problem+json")
    linked = io.BytesIO()
    with tarfile.open(fileobj=linked, mode="w:gz") as tar:
        link = tarfile.TarInfo("manifest.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    evil = ragkb.client.post(
        "/v1/knowledge-bases/restore", files={"file": ("kb.tar.gz", linked.getvalue())}, data={"name": "evil"}
    )
    assert evil.status_code == 422, evil.text
    not_gzip = ragkb.client.post("/v1/knowledge-bases/restore", files={"file": ("kb.tar.gz", gzip.compress(b"x"))})
    assert not_gzip.status_code == 422, not_gzip.text
    assert kb_names(ragkb) == before
    with ragkb.client_with(None) as anonymous:
        assert anonymous.post(f"/v1/knowledge-bases/{original}/backup").status_code == 401
