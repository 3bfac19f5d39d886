"""Evaluations on the real stack: a small KB, a question set with known relevant documents, and an
evaluation whose metrics equal those computed here, independently, from the search API's own answers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.e2e.conftest import RunningRagkb

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DOCS = {
    "leave": ("Annual leave", "Employees receive twenty days of paid annual leave each year."),
    "sick": ("Sick leave", "Sick leave needs a doctor's note after three days away from work."),
    "expenses": ("Travel expenses", "Travel expenses are reimbursed within thirty days of the trip."),
    "per-diem": ("Per diem", "Meals on business trips are covered by a daily allowance, the per diem."),
    "laptops": ("Laptop replacement", "Laptops are replaced every three years by the IT department."),
    "passwords": ("Password rules", "Passwords must be rotated every ninety days and never shared."),
    "vpn": ("VPN access", "Remote access to internal systems goes through the company VPN."),
    "parking": ("Parking", "Parking spaces at the office are assigned by seniority."),
    "canteen": ("Canteen", "The canteen serves lunch from noon to two o'clock on weekdays."),
    "fire": ("Fire safety", "Fire drills take place twice a year; assembly point is the car park."),
    "onboarding": ("Onboarding", "New employees meet their mentor on the first day and get a badge."),
    "payroll": ("Payroll", "Salaries are paid on the twenty-fifth of every month by bank transfer."),
}
QUERIES = [
    {"id": "q1", "text": "how many days of paid holiday do employees get"},
    {"id": "q2", "text": "reimbursement of travel costs"},
    {"id": "q3", "text": "when is the laptop replaced"},
    {"id": "q4", "text": "connecting remotely to internal systems"},
    {"id": "q5", "text": "when is salary paid"},
]
QRELS = {
    "q1": {"leave": 2, "sick": 1},
    "q2": {"expenses": 2, "per-diem": 1},
    "q3": {"laptops": 1},
    "q4": {"vpn": 1, "passwords": 0},
    "q5": {"payroll": 1},
}


def ndcg_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    dcg = sum((2 ** relevant.get(doc, 0) - 1) / math.log2(i + 2) for i, doc in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum((2**grade - 1) / math.log2(i + 2) for i, grade in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def mrr_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    return next((1 / (i + 1) for i, doc in enumerate(ranked[:10]) if relevant.get(doc, 0) > 0), 0.0)


@pytest.fixture(scope="module")
def kb_id(ragkb: RunningRagkb) -> str:
    return ragkb.create_kb_with_texts("evaluations", DOCS)


@pytest.fixture(scope="module")
def set_id(ragkb: RunningRagkb, kb_id: str) -> str:
    body = {"name": "policies", "queries": QUERIES, "qrels": QRELS}
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _ranked_by_search_api(ragkb: RunningRagkb, kb_id: str, query: str, mode: str) -> list[str]:
    body = {"query": query, "knowledge_base_ids": [kb_id], "mode": mode, "top_k": 100, "settings": {"rerank": False}}
    response = ragkb.client.post("/v1/search", json=body)
    assert response.status_code == 200, response.text
    return list(dict.fromkeys(hit["source_id"] for hit in response.json()["results"]))


def test_an_evaluation_scores_what_the_search_api_answers(ragkb: RunningRagkb, kb_id: str, set_id: str) -> None:
    body = {
        "question_set_id": set_id,
        "mode": "hybrid",
        "settings": {"rerank": False},
        "compare": {"mode": "keyword", "settings": {"rerank": False}},
    }
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/evaluations", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert (result["queries"], result["depth"], result["mode"]) == (5, 100, "hybrid")
    assert set(result["metrics"]) == {"ndcg@10", "recall@100", "mrr@10"}
    for run, mode in ((result, "hybrid"), (result["compare"], "keyword")):
        per_query = {entry["query_id"]: entry for entry in run["per_query"]}
        ndcgs = []
        for query in QUERIES:
            ranked = _ranked_by_search_api(ragkb, kb_id, query["text"], mode)
            entry = per_query[query["id"]]
            assert entry["ranked"] == ranked[:10]
            ndcgs.append(ndcg_at_10(ranked, QRELS[query["id"]]))
            assert entry["metrics"]["ndcg@10"] == pytest.approx(ndcgs[-1], abs=1e-4)
            assert entry["metrics"]["mrr@10"] == pytest.approx(mrr_at_10(ranked, QRELS[query["id"]]), abs=1e-4)
        assert run["metrics"]["ndcg@10"] == pytest.approx(sum(ndcgs) / len(ndcgs), abs=1e-4)
    # The semantic leg finds paraphrases: the comparison reports per-query wins, losses and ties.
    comparison = result["compare"]["per_metric"]["ndcg@10"]
    assert comparison["wins"] + comparison["losses"] + comparison["ties"] == 5
    expected_delta = result["compare"]["metrics"]["ndcg@10"] - result["metrics"]["ndcg@10"]
    assert comparison["delta"] == pytest.approx(expected_delta, abs=2e-4)
    assert result["metrics"]["ndcg@10"] > 0.5


def test_a_malformed_beir_upload_answers_422_naming_the_line(ragkb: RunningRagkb, kb_id: str) -> None:
    files = {
        "queries": ("queries.jsonl", '{"_id": "q1", "text": "leave"}\n'),
        "qrels": ("test.tsv", "query-id\tcorpus-id\tscore\nq1\tleave\n"),
    }
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", files=files, data={"name": "bad"})
    assert response.status_code == 422
    assert "qrels.tsv line 2" in response.json()["detail"]


def test_an_unknown_question_set_is_404(ragkb: RunningRagkb, kb_id: str) -> None:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/evaluations", json={"question_set_id": "0" * 32})
    assert response.status_code == 404


def test_a_read_only_key_may_evaluate_but_not_create_sets(ragkb: RunningRagkb, kb_id: str, set_id: str) -> None:
    created = ragkb.client.post("/v1/api-keys", json={"name": "eval-reader", "grants": {kb_id: "read"}})
    assert created.status_code == 201, created.text
    body = {"question_set_id": set_id, "settings": {"rerank": False}, "max_queries": 2}
    with ragkb.client_with(created.json()["key"]) as reader:
        evaluation = reader.post(f"/v1/knowledge-bases/{kb_id}/evaluations", json=body, timeout=120)
        new_set = {"name": "mine", "queries": QUERIES, "qrels": QRELS}
        refused = reader.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=new_set)
    assert evaluation.status_code == 200, evaluation.text
    assert evaluation.json()["queries"] == 2
    assert refused.status_code == 403
