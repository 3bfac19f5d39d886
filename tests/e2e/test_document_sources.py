"""A document's stored original, its passages as indexed, and a KB's index size, over HTTP on the real stack,
with the grants of reading a document."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
SECTIONS = 40


@pytest.fixture(scope="module")
def indexed(ragkb: RunningRagkb, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    kb_id = ragkb.create_kb("document-sources")
    folder = tmp_path_factory.mktemp("sources")
    path = folder / "upload.md"
    text = "\n\n".join(f"## 第{n}条\n\n" + f"条文 {n} の本文。" * 60 for n in range(1, SECTIONS + 1))
    path.write_text("# 規程\n\n" + text, encoding="utf-8")
    named = folder / "renamed"
    named.mkdir()
    hostile = named / '規程 "最新";\r\n版.md'
    hostile.write_bytes(path.read_bytes())
    document = ragkb.upload_file(kb_id, hostile)
    assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    return {"kb_id": kb_id, "document_id": document["id"], "path": str(hostile)}


def test_the_original_downloads_byte_for_byte_under_its_own_name(ragkb: RunningRagkb, indexed: dict[str, str]) -> None:
    response = ragkb.client.get(f"/v1/knowledge-bases/{indexed['kb_id']}/documents/{indexed['document_id']}/original")
    assert response.status_code == 200
    assert response.content == Path(indexed["path"]).read_bytes()
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="') and "\r" not in disposition and "\n" not in disposition
    assert unquote(disposition.split("filename*=UTF-8''")[1]) == Path(indexed["path"]).name
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-type"].startswith("text/markdown")


def test_the_chunks_page_through_the_served_version_in_order(ragkb: RunningRagkb, indexed: dict[str, str]) -> None:
    base = f"/v1/knowledge-bases/{indexed['kb_id']}/documents/{indexed['document_id']}/chunks"
    document = ragkb.client.get(f"/v1/knowledge-bases/{indexed['kb_id']}/documents/{indexed['document_id']}").json()
    seen = []
    offset: int | None = 0
    while offset is not None:
        page = ragkb.client.get(base, params={"offset": offset, "limit": 7}).json()
        assert page["total"] == document["chunk_count"] and page["indexed_version"] == document["version"]
        seen += page["chunks"]
        offset = page["next_offset"]
    assert [chunk["ordinal"] for chunk in seen] == list(range(document["chunk_count"]))
    assert document["chunk_count"] > 7
    assert seen[0]["heading_path"][0] == "規程" and "条文" in seen[-1]["text"]
    assert all(chunk["char_end"] > chunk["char_start"] for chunk in seen)
    assert ragkb.client.get(base, params={"limit": 500}).status_code == 422


def test_the_index_size_counts_the_live_generations_passages(ragkb: RunningRagkb, indexed: dict[str, str]) -> None:
    info = ragkb.client.get(f"/v1/knowledge-bases/{indexed['kb_id']}/index").json()
    document = ragkb.client.get(f"/v1/knowledge-bases/{indexed['kb_id']}/documents/{indexed['document_id']}").json()
    assert info["chunks"] == document["chunk_count"] and info["live_generation"] == 1 and info["generations"] == [1]


def test_these_reads_follow_the_grants_of_reading_a_document(ragkb: RunningRagkb, indexed: dict[str, str]) -> None:
    kb_id, document_id = indexed["kb_id"], indexed["document_id"]
    paths = [
        f"/v1/knowledge-bases/{kb_id}/documents/{document_id}/original",
        f"/v1/knowledge-bases/{kb_id}/documents/{document_id}/chunks",
        f"/v1/knowledge-bases/{kb_id}/index",
    ]
    other_kb = ragkb.create_kb("document-sources-other")
    reader = ragkb.client.post(
        "/v1/api-keys", json={"name": "sources-reader", "role": "client", "grants": {kb_id: "read"}}
    )
    stranger = ragkb.client.post(
        "/v1/api-keys", json={"name": "sources-stranger", "role": "client", "grants": {other_kb: "write"}}
    )
    with ragkb.client_with(reader.json()["key"]) as granted, ragkb.client_with(stranger.json()["key"]) as other:
        with ragkb.client_with(None) as anonymous:
            for path in paths:
                assert granted.get(path).status_code == 200, path
                assert other.get(path).status_code == 404, path
                assert anonymous.get(path).status_code == 401, path
        wrong_kb = f"/v1/knowledge-bases/{other_kb}/documents/{document_id}/original"
        assert other.get(wrong_kb).status_code == 404  # a document of another KB is not found through this one
