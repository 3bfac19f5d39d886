"""Dense pseudo-relevance feedback through the public API (issue 21): a per-KB setting, validated, overridable
per request; the search runs again with the question's vector moved towards its best passages, while each
passage's relevance stays that of the question as asked."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e

TEXTS = {
    "leave": ("Annual leave", "Employees receive twenty days of paid annual leave each year."),
    "carry": ("Leave carry-over", "Unused annual leave carries over to the next year once, up to five days."),
    "sick": ("Sick leave", "Sick leave is paid from the first day with a doctor's note after three days."),
    "laptops": ("Laptop replacement", "Laptops are replaced every three years by the IT department."),
    "parking": ("Parking", "Parking spaces at the office are assigned by seniority."),
    "expenses": ("Travel expenses", "Travel expenses are reimbursed within thirty days of the trip."),
}


def search(ragkb: RunningRagkb, kb_id: str, settings: dict[str, Any]) -> dict[str, Any]:
    body = {"query": "how many paid vacation days do I get", "knowledge_base_ids": [kb_id], "settings": settings}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def by_chunk(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {hit["chunk_id"]: hit for hit in result["results"]}


def test_feedback_is_a_kb_setting_and_moves_the_question_towards_its_best_passage(ragkb: RunningRagkb) -> None:
    kb_id = ragkb.create_kb_with_texts("feedback", TEXTS)
    for invalid in ({"feedback_passages": 21}, {"feedback_weight": -1}):
        refused = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"retrieval": invalid})
        assert refused.status_code == 422, (invalid, refused.text)
        assert refused.headers["content-type"].startswith("application/problem+json")
    patched = ragkb.client.patch(
        f"/v1/knowledge-bases/{kb_id}", json={"retrieval": {"feedback_passages": 1, "feedback_weight": 0.5}}
    )
    assert patched.status_code == 200, patched.text
    stored = patched.json()["retrieval"]
    assert (stored["feedback_passages"], stored["feedback_weight"]) == (1, 0.5)

    off = search(ragkb, kb_id, {"feedback_passages": 0})
    on = search(ragkb, kb_id, {})
    assert on["effective_settings"][kb_id]["feedback_passages"] == 1
    assert off["effective_settings"][kb_id]["feedback_passages"] == 0
    best = off["results"][0]
    # Moved towards the first pass's best passage, the question is closer to it than before (on the unit sphere,
    # q + β·p is always nearer p than q is).
    assert best["chunk_id"] in by_chunk(on)
    assert by_chunk(on)[best["chunk_id"]]["dense_score"] > best["dense_score"]
    # The relevance of every passage in both answers is still its cosine with the question as asked.
    common = set(by_chunk(on)) & set(by_chunk(off))
    assert len(common) >= 3
    for chunk in common:
        assert by_chunk(on)[chunk]["relevance"] == pytest.approx(by_chunk(off)[chunk]["relevance"], abs=1e-4)
    ragkb.client.delete(f"/v1/knowledge-bases/{kb_id}")
