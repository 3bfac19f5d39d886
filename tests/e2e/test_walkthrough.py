"""The README walk-through, end to end over HTTP against the real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, RunningRagkb

pytestmark = pytest.mark.e2e
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def walkthrough_kb(ragkb: RunningRagkb) -> dict[str, str]:
    kb_id = ragkb.create_kb("walkthrough-handbook")
    documents = {}
    for name in ("shugyo-kisoku.md", "travel-policy.md"):
        accepted = ragkb.upload_file(kb_id, EXAMPLES / name)
        assert accepted["status"] == "pending"
        documents[name] = accepted["id"]
    for document_id in documents.values():
        done = ragkb.wait_document(kb_id, document_id)
        assert done["status"] == "done", done
        assert done["chunk_count"] > 0
        assert set(done["stage_timings"]) == {"parse", "chunk", "embed", "index"}
    return {"kb_id": kb_id, **documents}


def test_japanese_question_finds_the_japanese_passage(ragkb: RunningRagkb, walkthrough_kb: dict[str, str]) -> None:
    results = ragkb.search("有給休暇は何日もらえますか", [walkthrough_kb["kb_id"]])
    top = results[0]
    assert top["document_id"] == walkthrough_kb["shugyo-kisoku.md"]
    assert "年次有給休暇" in top["text"]
    assert top["heading_path"][-1] == "第20条(年次有給休暇)"
    assert top["dense_rank"] is not None and top["keyword_rank"] is not None


def test_english_question_finds_the_english_passage(ragkb: RunningRagkb, walkthrough_kb: dict[str, str]) -> None:
    results = ragkb.search("How long do I have to submit an expense claim?", [walkthrough_kb["kb_id"]])
    top = results[0]
    assert top["document_id"] == walkthrough_kb["travel-policy.md"]
    assert "30 days" in top["text"]
    assert top["source_id"] == "travel-policy.md"
    assert top["title"] == "travel-policy"


def test_a_document_that_fails_to_parse_changes_nothing_else(
    ragkb: RunningRagkb, walkthrough_kb: dict[str, str], tmp_path: Path
) -> None:
    kb_id = walkthrough_kb["kb_id"]
    before = ragkb.search("年次有給休暇", [kb_id], top_k=12)
    broken = tmp_path / "broken.txt"
    broken.write_bytes(bytes(range(128, 256)) * 40)
    accepted = ragkb.upload_file(kb_id, broken)
    failed = ragkb.wait_document(kb_id, accepted["id"])
    assert failed["status"] == "failed"
    assert "cannot be decoded" in failed["error"]
    after = ragkb.search("年次有給休暇", [kb_id], top_k=12)
    assert [r["chunk_id"] for r in after] == [r["chunk_id"] for r in before]
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["document_counts"]["done"] == 2 and kb["document_counts"]["failed"] == 1
    listed = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"status": "failed"}).json()
    assert [d["id"] for d in listed] == [accepted["id"]]
    assert ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}/documents/{accepted['id']}").status_code == 204


def test_everything_survives_a_restart(ragkb: RunningRagkb, walkthrough_kb: dict[str, str]) -> None:
    kb_id = walkthrough_kb["kb_id"]
    before = ragkb.search("在宅勤務は週何日まで", [kb_id])
    ragkb.restart()
    kbs = ragkb.client.get("/v1/knowledge-bases").json()
    assert kb_id in [kb["id"] for kb in kbs]
    document = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{walkthrough_kb['shugyo-kisoku.md']}").json()
    assert document["status"] == "done"
    after = ragkb.search("在宅勤務は週何日まで", [kb_id])
    assert [r["chunk_id"] for r in after] == [r["chunk_id"] for r in before]
    assert "週3日" in after[0]["text"]
