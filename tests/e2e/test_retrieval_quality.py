"""Issue 21 through the public API: a new title is searched, Dify's metadata condition scopes the search
before ranking, hits carry a 0–1 relevance with a per-KB floor."""

from __future__ import annotations

from typing import Any

import pytest

from ragkb_core.fusion import AnswerShape, FusionSettings, QueryLegs, answer, same_up_to_ties
from ragkb_core.kb_settings import COVERAGE_MIN_RELEVANCE, PACKAGED_E5_COVERAGE_RELEVANCE, KbRetrieval
from tests.e2e.conftest import RunningRagkb
from tests.e2e.test_tune import legs_of

pytestmark = pytest.mark.e2e


def upload_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: object) -> str:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def keyword_search(ragkb: RunningRagkb, kb_id: str, query: str) -> list[dict[str, Any]]:
    body = {"query": query, "knowledge_base_ids": [kb_id], "mode": "keyword"}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_a_patched_title_is_what_searches_match(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb("retitled")
    document_id = upload_text(ragkb, kb_id, "Opening hours and rules of the site.", title="Quarrington depot")
    assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    assert [hit["document_id"] for hit in keyword_search(ragkb, kb_id, "Quarrington")] == [document_id]

    patched = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}", json={"title": "Wexcombe"})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["title"], patched.json()["version"]) == ("Wexcombe", 2)
    rebuilt = ragkb.wait_document(kb_id, document_id)
    assert (rebuilt["status"], rebuilt["indexed_version"], rebuilt["title"]) == ("done", 2, "Wexcombe")

    renamed = keyword_search(ragkb, kb_id, "Wexcombe")
    assert [hit["document_id"] for hit in renamed] == [document_id] and renamed[0]["title"] == "Wexcombe"
    assert keyword_search(ragkb, kb_id, "Quarrington") == []
    # Metadata alone is changed in place: no new version.
    labelled = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}", json={"labels": ["x"]})
    assert labelled.json()["version"] == 2 and labelled.json()["status"] == "done"


def test_a_selective_dify_condition_still_answers_top_k_records(ragkb: RunningRagkb) -> None:
    """Issue 21: the condition was applied to 4 × top_k hits after the search, so three matching documents
    ranked below twelve others were never answered."""
    kb_id = ragkb.create_kb("dify-selective")
    strong = "Espresso brewing: grind espresso beans fine, tamp the espresso, pull the espresso shot in 25 s."
    documents = [upload_text(ragkb, kb_id, f"{strong} Note {n}.", metadata={"team": "bar"}) for n in range(14)]
    rare = [
        upload_text(
            ragkb, kb_id, f"Shift {n} rota; the espresso machine is cleaned at close.", metadata={"team": "ops-night"}
        )
        for n in range(3)
    ]
    for document_id in [*documents, *rare]:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    condition = {"conditions": [{"name": ["team"], "comparison_operator": "start with", "value": "ops"}]}
    body = {
        "knowledge_id": kb_id,
        "query": "how to brew espresso",
        "retrieval_setting": {"top_k": 3, "score_threshold": 0},
        "metadata_condition": condition,
    }
    records = ragkb.client.post("/retrieval", json=body).json()["records"]
    assert sorted(record["metadata"]["document_id"] for record in records) == sorted(rare)
    assert {record["metadata"]["team"] for record in records} == {"ops-night"}
    unconditioned = ragkb.client.post("/retrieval", json={**body, "metadata_condition": None}).json()["records"]
    assert not {record["metadata"]["document_id"] for record in unconditioned} & set(rare)


def test_hits_carry_a_relevance_and_nothing_relevant_is_an_empty_answer(ragkb: RunningRagkb) -> None:
    """Issue 21: a question about something the KB does not hold got 12 passages (no floor without a reranker),
    and Dify's 0–1 score_threshold was compared with fused scores that exceed 1."""
    kb_id = ragkb.create_kb("relevance-floor")
    texts = [
        "Espresso is brewed by forcing hot water through finely ground coffee at about nine bars of pressure.",
        "A flat white is an espresso with steamed milk and a thin layer of microfoam.",
        "Descale the espresso machine every month so that limescale does not block the boiler.",
    ]
    for document_id in [upload_text(ragkb, kb_id, text) for text in texts]:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"

    on_topic = ragkb.search("how is espresso brewed", [kb_id])
    assert on_topic and all(0 <= hit["relevance"] <= 1 for hit in on_topic)
    assert on_topic[0]["text"] == texts[0]
    body = {"query": "When is the deadline to file quarterly sales tax?", "knowledge_base_ids": [kb_id]}
    unrelated = ragkb.client.post("/v1/search", json=body).json()["results"]
    assert len(unrelated) == 3  # no floor set: every passage answers, however unrelated
    # Relevance tells them apart: a floor between the two answers the unrelated question with nothing.
    assert max(hit["relevance"] for hit in unrelated) < on_topic[0]["relevance"]
    floor = (max(hit["relevance"] for hit in unrelated) + on_topic[0]["relevance"]) / 2
    patched = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"retrieval": {"min_relevance": floor}})
    assert patched.status_code == 200, patched.text
    assert ragkb.client.post("/v1/search", json=body).json()["results"] == []
    explained = ragkb.client.post("/v1/search", json={**body, "explain": True}).json()
    assert explained["dropped"] and {drop["stage"] for drop in explained["dropped"]} == {"relevance"}
    kept = ragkb.search("how is espresso brewed", [kb_id])
    assert kept[0]["text"] == texts[0] and all(hit["relevance"] >= floor for hit in kept)
    no_floor = ragkb.client.post("/v1/search", json={**body, "settings": {"min_relevance": 0}}).json()["results"]
    assert len(no_floor) == 3

    # Dify: each record's score is the 0–1 relevance, and its score_threshold is the floor of the request.
    dify = {"knowledge_id": kb_id, "query": "how is espresso brewed", "retrieval_setting": {"top_k": 3}}
    records = ragkb.client.post("/retrieval", json=dify).json()["records"]
    assert records and all(0 <= record["score"] <= 1 for record in records)
    strict = {**dify, "retrieval_setting": {"top_k": 3, "score_threshold": records[0]["score"]}}
    assert len(ragkb.client.post("/retrieval", json=strict).json()["records"]) == 1


# A small English and Japanese handbook, and questions about it and about things it does not hold.
HANDBOOK = [
    "Error E4012 on the label printer means the ribbon cassette is empty; replace the cassette and press reset.",
    "Expense reports for client visits are submitted in the finance portal within 30 days of the trip.",
    "New employees receive ten days of paid leave in their first year, rising by one day each year.",
    "就業規則により、新入社員には入社半年後に10日間の有給休暇が付与されます。",
    "経費精算は毎月25日が締め日で、領収書の原本を経理部に提出してください。",
]
ON_TOPIC = {
    "E4012": 0,
    "how do I submit an expense report for a client visit": 1,
    "有給休暇は何日もらえますか": 3,
    "経費精算の締め日はいつですか": 4,
}
OFF_TOPIC = [
    "What is the boiling point of liquid nitrogen?",
    "Who won the football world cup in 1998?",
    "富士山の標高は何メートルですか",
    "日本で一番長い川はどこですか",
]


def test_the_coverage_calibration_answers_questions_about_absent_things_with_nothing(ragkb: RunningRagkb) -> None:
    """Issue 21: with the keyword-coverage calibration and its cross-validated floor (no reranker), a question the
    KB cannot answer gets no passage, in English and Japanese, while its own questions, a bare error code among
    them (found by its keyword, not its cosine), keep their answer first."""
    retrieval = {
        "relevance_calibration": PACKAGED_E5_COVERAGE_RELEVANCE.model_dump(),
        "min_relevance": COVERAGE_MIN_RELEVANCE,
    }
    response = ragkb.client.post("/v1/knowledge-bases", json={"name": "recommended-floor", "retrieval": retrieval})
    assert response.status_code == 201, response.text
    kb_id = str(response.json()["id"])
    for document_id in [upload_text(ragkb, kb_id, text) for text in HANDBOOK]:
        assert ragkb.wait_document(kb_id, document_id)["status"] == "done"
    for question, expected in ON_TOPIC.items():
        found = ragkb.search(question, [kb_id])
        assert found and found[0]["text"] == HANDBOOK[expected], (question, found)
    for question in OFF_TOPIC:
        body = {"query": question, "knowledge_base_ids": [kb_id], "explain": True}
        answered = ragkb.client.post("/v1/search", json=body).json()
        assert answered["results"] == [], (question, answered["results"])
        assert {drop["stage"] for drop in answered["dropped"]} == {"relevance"}
        # Without the floor every passage answers, each with a relevance under it.
        unfloored = ragkb.client.post("/v1/search", json={**body, "settings": {"min_relevance": 0}}).json()
        assert unfloored["results"] and all(hit["relevance"] < COVERAGE_MIN_RELEVANCE for hit in unfloored["results"])
    # A tune computes the same cuts: the legs carry each candidate's keyword coverage.
    settings = KbRetrieval.model_validate(ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["retrieval"])
    questions = [*ON_TOPIC, *OFF_TOPIC]
    found = legs_of(ragkb, kb_id, questions, depth=settings.top_k * settings.candidate_multiplier, retrieval=settings)
    assert found["calibration"] == PACKAGED_E5_COVERAGE_RELEVANCE.model_dump()
    shape = AnswerShape(top_k=settings.top_k, max_blocks=settings.max_blocks, min_relevance=settings.min_relevance)
    for question, legs in zip(questions, found["legs"], strict=True):
        assert all(candidate["coverage"] is not None for candidate in legs["dense"] + legs["keyword"])
        body = {"query": question, "knowledge_base_ids": [kb_id]}
        served = [
            (hit["chunk_id"], hit["score"]) for hit in ragkb.client.post("/v1/search", json=body).json()["results"]
        ]
        computed = answer(
            QueryLegs.model_validate(legs), FusionSettings.of(settings), shape, PACKAGED_E5_COVERAGE_RELEVANCE
        )
        assert same_up_to_ties(served, [hit.chunk_id for hit in computed]), (question, served, computed)
