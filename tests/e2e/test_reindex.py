"""Re-index through the public API on the real stack: a new generation is built from the stored originals while
the old one serves (a search loop never fails nor comes back empty), changes made meanwhile are caught up,
the switch brings the new settings, and a rollback restores the previous generation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from statistics import mean
from typing import Any

import pytest

from tests.e2e.conftest import MINILM, RunningRagkb

PARAGRAPH = (
    "Section {n}. Employees file travel expense claims within thirty days of the trip. Receipts are scanned and "
    "attached to the claim; the approver checks the cost centre and the budget owner signs. Claims over the "
    "limit need a second approval from finance, and reimbursements are paid with the next salary."
)
SMALL_CHUNKS = {"target_tokens": 32, "max_tokens": 48, "overlap_tokens": 4}


@dataclass
class SearchLoop:
    """Searches the KB over and over in a thread and keeps every failure and every empty answer."""

    ragkb: RunningRagkb
    kb_id: str
    failures: list[str] = field(default_factory=list)
    answers: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with self.ragkb.client_with(self.ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]) as client:
            while not self._stop.is_set():
                body = {"query": "travel expense claims receipts", "knowledge_base_ids": [self.kb_id]}
                try:
                    response = client.post("/v1/search", json=body)
                except Exception as exc:  # every failure is what this loop records
                    self.failures.append(repr(exc))
                    continue
                if response.status_code != 200:
                    self.failures.append(f"{response.status_code} {response.text[:200]}")
                elif not response.json()["results"]:
                    self.failures.append("empty answer")
                self.answers += 1
                time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


def _upload(ragkb: RunningRagkb, kb_id: str, source_id: str, paragraphs: int) -> str:
    text = "\n\n".join(PARAGRAPH.format(n=n) for n in range(paragraphs))
    body = {"source_id": source_id, "title": source_id, "text": text}
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _passage_lengths(ragkb: RunningRagkb, kb_id: str) -> list[int]:
    body = {"query": "travel expense claims", "knowledge_base_ids": [kb_id], "top_k": 20}
    return [len(hit["text"]) for hit in ragkb.client.post("/v1/search", json=body).json()["results"]]


@pytest.fixture
def loaded_kb(ragkb: RunningRagkb) -> Iterator[tuple[str, dict[str, str]]]:
    kb_id = ragkb.create_kb(f"reindex-{time.monotonic_ns()}")
    ids = {f"doc-{n}": _upload(ragkb, kb_id, f"doc-{n}", paragraphs=6) for n in range(6)}
    for document_id in ids.values():
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    yield kb_id, ids
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")


def test_reindex_switches_without_a_failed_search_and_rollback_restores(
    ragkb: RunningRagkb, loaded_kb: tuple[str, dict[str, str]]
) -> None:
    kb_id, ids = loaded_kb
    before = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    long_passages = _passage_lengths(ragkb, kb_id)
    loop = SearchLoop(ragkb, kb_id)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/reindex", json={"chunking": SMALL_CHUNKS})
        assert response.status_code == 202, response.text
        job = response.json()
        assert job["kind"] == "reindex" and job["progress"]["total"] == len(ids)
        again = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/reindex", json={})
        assert again.status_code == 409
        # Changes while the new generation is built: both must be in it when it serves.
        added = _upload(ragkb, kb_id, "added-during", paragraphs=2)
        assert ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}/documents/{ids['doc-0']}").status_code == 204
        assert ragkb.wait_document(kb_id, added)["status"] == "done"
        finished = ragkb.wait_job(job["id"])
    finally:
        loop.stop()
        thread.join(timeout=10)
    assert finished["status"] == "succeeded", finished
    assert finished["counts"]["reindexed"] >= len(ids) - 1
    assert loop.answers > 10 and not loop.failures, loop.failures[:5]

    after = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert after["chunking"]["target_tokens"] == SMALL_CHUNKS["target_tokens"]
    assert before["chunking"]["target_tokens"] != SMALL_CHUNKS["target_tokens"]
    short_passages = _passage_lengths(ragkb, kb_id)
    assert mean(short_passages) < 0.6 * mean(long_passages)  # results come from the new generation
    found = {hit["document_id"] for hit in _search_all(ragkb, kb_id)}
    assert added in found and ids["doc-0"] not in found

    rolled = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback")
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["chunking"]["target_tokens"] == before["chunking"]["target_tokens"]
    assert mean(_passage_lengths(ragkb, kb_id)) == pytest.approx(mean(long_passages), rel=0.2)
    # A document deleted during the re-index stays deleted in the generation rolled back to.
    assert ids["doc-0"] not in {hit["document_id"] for hit in _search_all(ragkb, kb_id)}


def test_reindex_refuses_a_model_not_allowed_and_rollback_without_a_previous(
    ragkb: RunningRagkb, loaded_kb: tuple[str, dict[str, str]]
) -> None:
    kb_id, _ = loaded_kb
    refused = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/reindex", json={"embedding_model": "another-model"})
    assert refused.status_code == 422 and refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert f"allowed: multilingual-e5-small, {MINILM}" in problem["detail"]
    nothing = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback")
    assert nothing.status_code == 409


def _search_all(ragkb: RunningRagkb, kb_id: str) -> list[dict[str, Any]]:
    hits: list[dict[str, Any]] = []
    for mode in ("semantic", "keyword"):
        body = {"query": "travel expense claims", "knowledge_base_ids": [kb_id], "top_k": 100, "mode": mode}
        hits += ragkb.client.post("/v1/search", json=body).json()["results"]
    return hits


# Each note: one line that answers its question, then a paragraph every note shares. A noise pattern that drops
# the answering lines (a boilerplate rule written too broadly) leaves notes that differ only in their titles.
GATE_FACTS = {
    "note-1": (
        "Fact: the canteen serves vegetarian curry every Tuesday.",
        "What does the canteen serve on Tuesday?",
    ),
    "note-2": ("Fact: bicycles are parked in the underground garage behind gate B.", "Where do I park my bicycle?"),
    "note-3": ("Fact: the fire drill takes place on the first Monday of March.", "When is the fire drill?"),
    "note-4": ("Fact: printer toner is ordered through the facilities desk.", "How do I order printer toner?"),
    "note-5": ("Fact: visitors receive a badge at reception and must return it.", "What happens to visitor badges?"),
    "note-6": ("Fact: the library lends laptops for up to two weeks.", "How long can I borrow a laptop?"),
}
SHARED = (
    "This note belongs to the office handbook. Questions about it go to the office manager, who keeps the "
    "handbook up to date and announces changes in the weekly newsletter."
)
DROP_FACTS = {"noise_patterns": ["^Fact:"]}


@pytest.fixture
def gated_kb(ragkb: RunningRagkb) -> Iterator[str]:
    kb_id = ragkb.create_kb(f"gate-{time.monotonic_ns()}")
    ids = []
    for source_id, (fact, _) in GATE_FACTS.items():
        body = {"source_id": source_id, "title": source_id, "text": f"{fact}\n\n{SHARED}"}
        response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body)
        assert response.status_code == 202, response.text
        ids.append(str(response.json()["id"]))
    for document_id in ids:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    question_set = {
        "name": "handbook",
        "queries": [{"id": source_id, "text": question} for source_id, (_, question) in GATE_FACTS.items()],
        "qrels": {source_id: {source_id: 1} for source_id in GATE_FACTS},
        "quality_gate": True,
    }
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=question_set)
    assert response.status_code == 201, response.text
    yield kb_id
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")


def _reindex(ragkb: RunningRagkb, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/reindex", json=body)
    assert response.status_code == 202, response.text
    return ragkb.wait_job(response.json()["id"])


def _top_text(ragkb: RunningRagkb, kb_id: str) -> str:
    body = {"query": "When is the fire drill?", "knowledge_base_ids": [kb_id], "top_k": 1}
    return str(ragkb.client.post("/v1/search", json=body).json()["results"][0]["text"])


def test_quality_gate_refuses_a_worse_generation_until_skipped(ragkb: RunningRagkb, gated_kb: str) -> None:
    kb_id = gated_kb
    same = _reindex(ragkb, kb_id, {})
    assert same["status"] == "succeeded", same
    check = same["quality_check"]
    assert check["skipped"] is None and check["passed"] and check["queries"] == len(GATE_FACTS)
    assert check["new_ndcg_at_10"] >= check["old_ndcg_at_10"] - check["tolerance"]
    serving = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()

    refused = _reindex(ragkb, kb_id, {"chunking": DROP_FACTS})
    assert refused["status"] == "failed", refused
    check = refused["quality_check"]
    assert not check["passed"] and check["old_ndcg_at_10"] > 0.9 and check["new_ndcg_at_10"] < 0.85, check
    message = " ".join(error["message"] for error in refused["errors"])
    assert "quality gate" in message
    assert f"{check['old_ndcg_at_10']:.4f}" in message and f"{check['new_ndcg_at_10']:.4f}" in message
    # The old generation still serves, with its settings, and the rollback target is unchanged.
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"] == serving["chunking"]
    assert "fire drill" in _top_text(ragkb, kb_id)

    forced = _reindex(ragkb, kb_id, {"chunking": DROP_FACTS, "skip_quality_gate": True})
    assert forced["status"] == "succeeded", forced
    assert forced["quality_check"]["skipped"] and forced["quality_check"]["old_ndcg_at_10"] is None
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"]["noise_patterns"] == ["^Fact:"]
    assert "Fact:" not in _top_text(ragkb, kb_id)
    # The rollback goes back to the generation that passed the gate.
    assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback").status_code == 200
    assert "fire drill" in _top_text(ragkb, kb_id)


# Notes a question finds by meaning (the dense leg), in English: all-MiniLM-L6-v2 reads English only.
MODEL_NOTES = {
    "bicycles": "Bicycles are parked in the underground garage behind gate B; the garage opens at six.",
    "canteen": "The canteen serves vegetarian curry every Tuesday and fish on Fridays.",
    "fire-drill": "The fire drill takes place on the first Monday of March; everyone leaves by the stairs.",
    "laptops": "The library lends laptops for up to two weeks; a renewal needs the librarian's approval.",
}
# all-MiniLM-L6-v2 reads at most 256 tokens: chunks that fit its window.
MINILM_CHUNKS = {"target_tokens": 128, "max_tokens": 200, "overlap_tokens": 16}


def _add_note(ragkb: RunningRagkb, kb_id: str, source_id: str, text: str) -> str:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"source_id": source_id, "text": text})
    assert response.status_code == 202, response.text
    document_id = str(response.json()["id"])
    assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    return document_id


def _semantic_sources(ragkb: RunningRagkb, query: str, kb_ids: list[str]) -> list[str]:
    body = {"query": query, "knowledge_base_ids": kb_ids, "mode": "semantic", "top_k": 10}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    return [hit["source_id"] for hit in response.json()["results"]]


def test_reindex_changes_the_embedding_model_and_rollback_restores_it(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb(f"model-{time.monotonic_ns()}")
    other_kb = ragkb.create_kb(f"model-other-{time.monotonic_ns()}")
    try:
        for source_id, text in MODEL_NOTES.items():
            _add_note(ragkb, kb_id, source_id, text)
        _add_note(ragkb, other_kb, "visitors", "Visitors receive a badge at reception and must return it.")
        before = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
        assert before["embedding_model"] == "multilingual-e5-small"

        body = {"embedding_model": MINILM, "chunking": MINILM_CHUNKS}
        switched = _reindex(ragkb, kb_id, body)
        assert switched["status"] == "succeeded", switched
        assert switched["counts"]["reindexed"] == len(MODEL_NOTES)
        after = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
        assert after["embedding_model"] == MINILM and after["chunking"]["max_tokens"] == 200
        # The query is embedded with the KB's new model: the dense leg alone still finds the right note.
        assert _semantic_sources(ragkb, "Where do I park my bike?", [kb_id])[0] == "bicycles"
        # A document added now is embedded with the KB's current model too.
        added = _add_note(ragkb, kb_id, "printer", "Printer toner is ordered through the facilities desk.")
        assert _semantic_sources(ragkb, "How do I get new toner for the printer?", [kb_id])[0] == "printer"
        # KBs of two models in one search: each searched with a vector of its own model.
        both = _semantic_sources(ragkb, "Where do I park my bike?", [kb_id, other_kb])
        assert "bicycles" in both and "visitors" in both
        assert ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}/documents/{added}").status_code == 204

        rolled = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback")
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["embedding_model"] == "multilingual-e5-small"
        again = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
        assert again["embedding_model"] == "multilingual-e5-small" and again["chunking"] == before["chunking"]
        assert _semantic_sources(ragkb, "Where do I park my bike?", [kb_id])[0] == "bicycles"
        assert ragkb.search("When is the fire drill?", [kb_id])[0]["source_id"] == "fire-drill"
    finally:
        ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")
        ragkb.client.delete(f"/v1/knowledge-bases/{other_kb}")


def _keyword_sources(ragkb: RunningRagkb, query: str, kb_id: str) -> list[str]:
    body = {"query": query, "knowledge_base_ids": [kb_id], "mode": "keyword", "top_k": 10}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    return [hit["source_id"] for hit in response.json()["results"]]


def test_a_version_1_kb_keeps_its_terms_until_a_reindex_brings_the_new_analyzer(ragkb: RunningRagkb) -> None:
    # A KB built before analyzer version 2 reads back as words "ascii-lower" (migration 0010); made so here.
    response = ragkb.client.post(
        "/v1/knowledge-bases", json={"name": f"analyzer-v1-{time.monotonic_ns()}", "analyzer": {"words": "ascii-lower"}}
    )
    assert response.status_code == 201, response.text
    kb_id = response.json()["id"]
    try:
        _add_note(ragkb, kb_id, "korean", "학생들이 학교에서 공부합니다. Students are running to school.")
        _add_note(ragkb, kb_id, "other", "Visitors receive a badge at reception.")
        old = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
        assert old["analyzer_version"].endswith("latin-lower/1+cjk-bigram")
        # Version 1 has no Korean terms and no stemming: the index it built cannot find these.
        assert _keyword_sources(ragkb, "학교", kb_id) == [] and _keyword_sources(ragkb, "run", kb_id) == []

        switched = _reindex(ragkb, kb_id, {"analyzer": {}})
        assert switched["status"] == "succeeded", switched
        new = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
        assert new["analyzer"]["words"] == "unicode" and new["analyzer_version"] != old["analyzer_version"]
        assert _keyword_sources(ragkb, "학교", kb_id) == ["korean"]
        assert _keyword_sources(ragkb, "run", kb_id) == ["korean"]

        rolled = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback")
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["analyzer_version"] == old["analyzer_version"]
        assert _keyword_sources(ragkb, "학교", kb_id) == []
    finally:
        ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")
