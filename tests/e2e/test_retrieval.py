"""Retrieval through the public API on the real stack: per-KB settings, scope in every mode and in explain,
reranking with a locally built cross-encoder (order, threshold, budget, degradation), quotas, many KBs and
max_blocks, search-test and analyze."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from sentence_transformers import CrossEncoder

from tests.e2e.conftest import RunningRagkb

MODES = ("hybrid", "semantic", "keyword")

KNOWLEDGE = {
    "leave": ("Annual leave policy", "Employees receive twenty days of paid annual leave each year.", ["hr", "policy"]),
    "expenses": ("Travel expenses", "Travel expenses are reimbursed within thirty days of the trip.", ["finance"]),
    "laptops": ("Laptop replacement", "Laptops are replaced every three years by the IT department.", ["it"]),
    "security": ("Password rules", "Passwords must be rotated and never shared with anyone.", ["it", "policy"]),
    "parking": ("Parking", "Parking spaces at the office are assigned by seniority and leave status.", ["facilities"]),
    "remote": ("Remote work", "Remote work requires approval; paid leave rules still apply at home.", ["hr"]),
}
# Long authoritative texts that match leave questions strongly: without quotas they crowd out knowledge.
REFERENCES = {
    f"reg-{n}": (
        f"Leave regulation article {n}",
        f"Article {n}. Paid annual leave: an employee is granted paid annual leave days; annual leave requests "
        f"are filed in advance; unused annual leave carries over once. Leave article {n} applies to every employee.",
    )
    for n in range(1, 5)
}


@dataclass
class Corpus:
    kb_id: str
    other_kb_id: str
    ids: dict[str, str]  # source_id → document id

    def source_of(self, document_id: str) -> str:
        return next(source for source, found in self.ids.items() if found == document_id)


def _upload_text(ragkb: RunningRagkb, kb_id: str, source_id: str, title: str, text: str, **fields: Any) -> str:
    body = {"source_id": source_id, "title": title, "text": text, **fields}
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


@pytest.fixture(scope="module")
def corpus(ragkb: RunningRagkb) -> Iterator[Corpus]:
    kb_id = _create_kb(ragkb, "retrieval-main", {})
    other_kb_id = _create_kb(ragkb, "retrieval-other", {})
    ids: dict[str, str] = {}
    for year, (source_id, (title, text, labels)) in enumerate(KNOWLEDGE.items(), start=2020):
        metadata = {"year": year, "team": labels[0]}
        ids[source_id] = _upload_text(ragkb, kb_id, source_id, title, text, labels=labels, metadata=metadata)
    for source_id, (title, text) in REFERENCES.items():
        ids[source_id] = _upload_text(ragkb, kb_id, source_id, title, text, labels=["regulation"], doc_type="reference")
    ids["other-leave"] = _upload_text(
        ragkb, other_kb_id, "other-leave", "Leave in the other KB", "Paid annual leave is twenty-five days here."
    )
    for source_id, document_id in ids.items():
        owner = other_kb_id if source_id == "other-leave" else kb_id
        assert ragkb.wait_document(owner, document_id)["status"] == "done"
    yield Corpus(kb_id=kb_id, other_kb_id=other_kb_id, ids=ids)
    for owner in (kb_id, other_kb_id):
        ragkb.client.delete(f"/v1/knowledge-bases/{owner}")


def _create_kb(ragkb: RunningRagkb, name: str, retrieval: dict[str, Any], **extra: Any) -> str:
    response = ragkb.client.post("/v1/knowledge-bases", json={"name": name, "retrieval": retrieval, **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _search(
    ragkb: RunningRagkb, kb_ids: list[str], query: str = "paid annual leave days", **body: Any
) -> dict[str, Any]:
    response = ragkb.client.post("/v1/search", json={"query": query, "knowledge_base_ids": kb_ids, **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _every_document_id(result: dict[str, Any]) -> set[str]:
    """Every document a search response names anywhere: answer, dropped candidates, leg rankings."""
    found = {hit["document_id"] for hit in result["results"]}
    found |= {entry["hit"]["document_id"] for entry in result.get("dropped") or []}
    found |= {entry["document_id"] for leg in result.get("legs") or [] for entry in leg["entries"]}
    return found


def _reranking_kb(ragkb: RunningRagkb, name: str, **retrieval: Any) -> str:
    settings = {"rerank": True, "reranker_model": ragkb.env["RAGKB_TEST_TINY_RERANKER"], **retrieval}
    kb_id = _create_kb(ragkb, name, settings)
    for source_id, (title, text, labels) in KNOWLEDGE.items():
        document_id = _upload_text(ragkb, kb_id, source_id, title, text, labels=labels)
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    return kb_id


# -- settings -----------------------------------------------------------------------------------------


def test_a_kbs_own_bm25_k1_and_b_weigh_its_keyword_search(ragkb: RunningRagkb) -> None:
    """b is BM25's length normalisation: with b 0 a term found once weighs the same in a short and a long
    chunk; with b 0.9 the short chunk's weighs clearly more. Each KB indexes with its own k1 and b."""
    short = "The harbour ferry leaves at noon."
    long = "The harbour ferry leaves at noon. " + " ".join(f"Shelter {n} opens near the quay." for n in range(30))
    scores = {}
    for b in (0.0, 0.9):
        response = ragkb.client.post(
            "/v1/knowledge-bases", json={"name": f"bm25-b-{b}", "analyzer": {"bm25_k1": 1.5, "bm25_b": b}}
        )
        assert response.status_code == 201, response.text
        kb = response.json()
        assert (kb["analyzer"]["bm25_k1"], kb["analyzer"]["bm25_b"]) == (1.5, b)
        assert f"+bm25-k1.5-b{b:g}/2" in kb["analyzer_version"]
        for source_id, text in (("short", short), ("long", long)):
            body = {"source_id": source_id, "title": "Timetable", "text": text}
            accepted = ragkb.client.post(f"/v1/knowledge-bases/{kb['id']}/documents", json=body)
            assert accepted.status_code == 202, accepted.text
            assert ragkb.wait_document(kb["id"], accepted.json()["id"])["status"] == "done"
        hits = _search(ragkb, [kb["id"]], query="ferry", mode="keyword")["results"]
        scores[b] = {hit["source_id"]: hit["score"] for hit in hits}
        refused = ragkb.client.patch(f"/v1/knowledge-bases/{kb['id']}", json={"analyzer": {"bm25_b": 0.5}})
        assert refused.status_code == 409 and "re-index" in refused.json()["detail"]
        ragkb.client.delete(f"/v1/knowledge-bases/{kb['id']}")
    assert scores[0.0]["short"] == pytest.approx(scores[0.0]["long"], rel=1e-4)
    assert scores[0.9]["short"] > 1.3 * scores[0.9]["long"]


def test_retrieval_settings_are_per_kb_validated_and_patched_in_place(ragkb: RunningRagkb) -> None:
    kb_id = _create_kb(ragkb, "retrieval-settings", {"top_k": 5, "score_threshold": 0.2})
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["retrieval"]["top_k"] == 5 and kb["retrieval"]["rrf_k"] == 60 and kb["retrieval"]["max_blocks"] == 12
    assert kb["analyzer"] == {
        "japanese": "sudachi",
        "sudachi_mode_a_subwords": False,
        "char_bigrams": True,
        "words": "unicode",
        "languages": ["english"],
        "stop_words": True,
        "title_weight": 2,
        "bm25_k1": 0.9,
        "bm25_b": 0.6,
    }
    assert kb["analyzer_version"] == "sudachi-c-norm+uax29-fold-stop-english+title2+bm25-k0.9-b0.6/2+cjk-bigram"
    assert kb["retrieval"]["keyword_weight"] == kb["retrieval"]["dense_weight"] == 1
    assert kb["retrieval"]["fusion"] == "dbsf"

    patched = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"retrieval": {"top_k": 3}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["retrieval"]["top_k"] == 3 and patched.json()["retrieval"]["score_threshold"] == 0.2
    reset = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"retrieval": {"score_threshold": None}})
    assert reset.json()["retrieval"]["score_threshold"] == 0

    for invalid in ({"top_k": 0}, {"score_threshold": 2}, {"dense_weight": 0, "keyword_weight": 0}):
        refused = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"retrieval": invalid})
        assert refused.status_code == 422, (invalid, refused.text)
        assert refused.headers["content-type"].startswith("application/problem+json")
    analyzer_change = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"analyzer": {"char_bigrams": False}})
    assert analyzer_change.status_code == 409 and "re-index" in analyzer_change.json()["detail"]
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["retrieval"]["top_k"] == 3
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")


def test_the_answer_says_how_it_was_made(ragkb: RunningRagkb, corpus: Corpus) -> None:
    result = _search(ragkb, [corpus.kb_id], settings={"top_k": 4, "max_blocks": 4})
    assert result["mode"] == "hybrid" and result["reranked"] is False and result["degraded"] is False
    assert set(result["timings_ms"]) == {"embed", "analyze", "retrieve", "assemble"}  # no reranker ran
    assert result["effective_settings"][corpus.kb_id]["top_k"] == 4
    top = result["results"][0]
    assert top["fused_rank"] == 1 and top["score"] == top["fused_score"]
    assert top["dense_rank"] is not None or top["keyword_rank"] is not None
    assert result["dropped"] is None and result["legs"] is None


# -- scope --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_scope_never_leaks_in_any_mode_nor_in_explain(ragkb: RunningRagkb, corpus: Corpus, mode: str) -> None:
    scopes: list[tuple[dict[str, Any], set[str]]] = [
        ({"labels_all": ["it", "policy"]}, {"security"}),
        ({"labels_any": ["finance", "facilities"]}, {"expenses", "parking"}),
        ({"metadata": {"team": "hr"}}, {"leave", "remote"}),
        ({"metadata": {"year": 2022}}, {"laptops"}),
        ({"doc_types": ["reference"]}, set(REFERENCES)),
        ({"document_ids": [corpus.ids["parking"]]}, {"parking"}),
    ]
    for filters, allowed_sources in scopes:
        result = _search(ragkb, [corpus.kb_id], mode=mode, filters=filters, explain=True, settings={"top_k": 20})
        allowed = {corpus.ids[source] for source in allowed_sources}
        assert _every_document_id(result) <= allowed, filters
        # The keyword leg finds only passages sharing a term with the question; the dense leg always finds.
        assert result["results"] or mode == "keyword", filters


def test_a_kb_filtered_to_three_documents_returns_its_best_top_k_from_them(ragkb: RunningRagkb, corpus: Corpus) -> None:
    three = [corpus.ids[source] for source in ("laptops", "parking", "expenses")]
    result = _search(ragkb, [corpus.kb_id], filters={"document_ids": three}, settings={"top_k": 3, "max_blocks": 3})
    assert {hit["document_id"] for hit in result["results"]} == set(three)


def test_search_test_traces_expected_documents_and_respects_scope(ragkb: RunningRagkb, corpus: Corpus) -> None:
    expected = [corpus.ids["leave"], corpus.ids["laptops"]]
    body = {
        "query": "paid annual leave days",
        "expected_document_ids": expected,
        "filters": {"doc_types": ["knowledge"]},
    }
    response = ragkb.client.post(f"/v1/knowledge-bases/{corpus.kb_id}/search-test", json=body)
    assert response.status_code == 200, response.text
    runs = {run["name"]: run for run in response.json()["runs"]}
    assert list(runs) == ["semantic", "keyword", "hybrid", "hybrid+rerank"]
    references = {corpus.ids[source] for source in REFERENCES}
    for run in runs.values():
        assert not _every_document_id(run["result"]) & references
        assert "retrieve" in run["result"]["timings_ms"]
        leave = next(trace for trace in run["expected"] if trace["document_id"] == corpus.ids["leave"])
        assert leave["answer_rank"] is not None and "rank" in leave["explanation"]
    assert runs["keyword"]["expected"][0]["keyword_rank"] is not None
    assert runs["semantic"]["expected"][0]["dense_rank"] is not None
    # This KB has no reranker: the rerank run says so instead of failing or silently pretending.
    assert runs["hybrid+rerank"]["result"]["degraded"] is True and runs["hybrid+rerank"]["result"]["degraded_reason"]
    client_key = ragkb.client.post(
        "/v1/api-keys", json={"name": "search-test-client", "grants": {corpus.kb_id: "read"}}
    )
    with ragkb.client_with(client_key.json()["key"]) as client:
        refused = client.post(f"/v1/knowledge-bases/{corpus.kb_id}/search-test", json=body)
    assert refused.status_code in (403, 404)


# -- many KBs, max_blocks, quotas ---------------------------------------------------------------------


def test_many_kbs_are_merged_and_cut_to_max_blocks(ragkb: RunningRagkb, corpus: Corpus) -> None:
    result = _search(ragkb, [corpus.kb_id, corpus.other_kb_id], settings={"top_k": 4, "max_blocks": 3}, explain=True)
    assert len(result["results"]) == 3
    assert set(result["effective_settings"]) == {corpus.kb_id, corpus.other_kb_id}
    scores = [hit["score"] for hit in result["results"]]
    assert scores == sorted(scores, reverse=True)
    dropped_stages = {entry["stage"] for entry in result["dropped"]}
    assert "max_blocks" in dropped_stages
    everything = [hit["knowledge_base_id"] for hit in result["results"]] + [
        entry["hit"]["knowledge_base_id"] for entry in result["dropped"]
    ]
    assert set(everything) == {corpus.kb_id, corpus.other_kb_id}
    assert len(everything) == 4 + 1  # each KB's top_k (the other KB holds one passage), nothing lost


def test_quotas_keep_references_from_crowding_out_knowledge(ragkb: RunningRagkb, corpus: Corpus) -> None:
    unlimited = _search(ragkb, [corpus.kb_id], settings={"top_k": 4, "max_blocks": 4})
    assert [hit["doc_type"] for hit in unlimited["results"]].count("reference") >= 3  # the crowding this prevents
    quotas = {"top_k": 4, "max_blocks": 4, "doc_type_quotas": {"reference": 1, "knowledge": 3}}
    result = _search(ragkb, [corpus.kb_id], settings=quotas, explain=True)
    types = [hit["doc_type"] for hit in result["results"]]
    assert types.count("reference") == 1 and types.count("knowledge") == 3
    assert any(entry["stage"] == "quota" and entry["hit"]["doc_type"] == "reference" for entry in result["dropped"])


# -- reranking ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reranking_kb(ragkb: RunningRagkb) -> Iterator[str]:
    kb_id = _reranking_kb(ragkb, "retrieval-rerank")
    yield kb_id
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")


def test_reranked_order_follows_the_model_scores(ragkb: RunningRagkb, reranking_kb: str) -> None:
    query = "how many days of paid leave"
    result = _search(ragkb, [reranking_kb], query=query, settings={"top_k": 4})
    assert result["reranked"] is True and result["degraded"] is False
    assert result["reranker_model"] == ragkb.env["RAGKB_TEST_TINY_RERANKER"]
    hits = result["results"]
    assert len(hits) == 4 and all(0 <= hit["rerank_score"] <= 1 for hit in hits)
    assert [hit["score"] for hit in hits] == sorted((hit["rerank_score"] for hit in hits), reverse=True)
    # The model itself, loaded here, scores the same (title > headings, then the passage) pairs the same way.
    model = CrossEncoder(ragkb.env["RAGKB_TEST_TINY_RERANKER"], max_length=256)
    logits = model.predict(
        [(query, f"{hit['title']}\n{hit['text']}") for hit in hits], activation_fn=torch.nn.Identity()
    )
    expected = [1 / (1 + math.exp(-float(logit))) for logit in logits]
    assert [round(score, 4) for score in expected] == [round(hit["rerank_score"], 4) for hit in hits]


def test_threshold_applies_to_reranker_scores_and_only_when_reranking(ragkb: RunningRagkb, reranking_kb: str) -> None:
    everything = _search(ragkb, [reranking_kb], settings={"top_k": 6})["results"]
    scores = sorted(hit["rerank_score"] for hit in everything)
    threshold = (scores[2] + scores[3]) / 2  # half of the passages fall under it
    result = _search(ragkb, [reranking_kb], settings={"top_k": 6, "score_threshold": threshold}, explain=True)
    assert all(hit["rerank_score"] >= threshold for hit in result["results"]) and len(result["results"]) == 3
    assert sum(entry["stage"] == "threshold" for entry in result["dropped"]) == 3
    without_reranking = _search(
        ragkb, [reranking_kb], settings={"top_k": 6, "score_threshold": threshold, "rerank": False}, explain=True
    )
    assert len(without_reranking["results"]) == 6 and not without_reranking["dropped"]
    assert without_reranking["reranked"] is False and without_reranking["degraded"] is False


def test_over_budget_returns_the_fused_order_marked_degraded(ragkb: RunningRagkb, reranking_kb: str) -> None:
    fused = _search(ragkb, [reranking_kb], settings={"top_k": 4, "rerank": False})
    result = _search(ragkb, [reranking_kb], settings={"top_k": 4, "rerank_budget_ms": 0})
    assert result["degraded"] is True and "budget" in result["degraded_reason"]
    assert result["reranked"] is False and all(hit["rerank_score"] is None for hit in result["results"])
    assert [hit["chunk_id"] for hit in result["results"]] == [hit["chunk_id"] for hit in fused["results"]]


def test_a_reranker_that_is_not_allowed_degrades_with_the_reason(ragkb: RunningRagkb, corpus: Corpus) -> None:
    settings = {"rerank": True}
    response = ragkb.client.patch(
        f"/v1/knowledge-bases/{corpus.other_kb_id}", json={"retrieval": {"reranker_model": "/nowhere/model"}}
    )
    assert response.status_code == 200
    result = _search(ragkb, [corpus.other_kb_id], settings=settings)
    assert result["degraded"] is True and "not allowed" in result["degraded_reason"]
    assert result["results"]  # never an error: the fused order is the answer
    ragkb.client.patch(f"/v1/knowledge-bases/{corpus.other_kb_id}", json={"retrieval": {"reranker_model": None}})


# -- Japanese analysis --------------------------------------------------------------------------------


def test_analyze_shows_each_kbs_terms(ragkb: RunningRagkb, corpus: Corpus) -> None:
    bigram_kb = _create_kb(ragkb, "retrieval-bigram", {}, analyzer={"japanese": "char-bigram"})
    text = "年次有給休暇の申請"
    sudachi = ragkb.client.post("/v1/analyze", json={"knowledge_base_id": corpus.kb_id, "text": text})
    bigram = ragkb.client.post("/v1/analyze", json={"knowledge_base_id": bigram_kb, "text": text})
    assert sudachi.status_code == 200 and bigram.status_code == 200, (sudachi.text, bigram.text)
    assert sudachi.json()["analyzer_version"] != bigram.json()["analyzer_version"]
    # The default analyzer: Sudachi words, then character bigrams as extra terms; the plain one: bigrams only.
    assert {"年次有給休暇", "申請"} <= set(sudachi.json()["tokens"])
    assert "年次有給休暇" not in bigram.json()["tokens"] and set(bigram.json()["tokens"]) < set(
        sudachi.json()["tokens"]
    )
    document_id = _upload_text(ragkb, bigram_kb, "jp", "就業規則", "年次有給休暇は入社六か月後に十日付与される。")
    assert ragkb.wait_document(bigram_kb, document_id)["status"] == "done"
    found = _search(ragkb, [bigram_kb], query="有給休暇", mode="keyword")["results"]
    assert [hit["document_id"] for hit in found] == [document_id]
    # Every other script is searchable too (analyzer version 2, the default of a new KB).
    words = ragkb.client.post("/v1/analyze", json={"knowledge_base_id": bigram_kb, "text": "Müller's 학교 Привет"})
    assert set(words.json()["tokens"]) >= {"muller", "학교", "привет"}
    unknown = ragkb.client.post("/v1/analyze", json={"knowledge_base_id": "f" * 32, "text": text})
    assert unknown.status_code == 404
    ragkb.client.delete(f"/v1/knowledge-bases/{bigram_kb}")
