"""Tuning a KB on the real stack: the answers a tune computes from the retriever's legs are the search's own,
a tune job cross-validates on a question set and reports its folds and held-out gain, and applying, patching and
reverting are numbered settings versions."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ragkb_cli.__main__ import main
from ragkb_core.fusion import AnswerShape, FusionSettings, QueryLegs, answer, relevance, same_up_to_ties
from ragkb_core.kb_settings import KbRetrieval, RelevanceCalibration
from tests.e2e.conftest import RunningRagkb
from tests.e2e.test_evaluations import DOCS as HANDBOOK

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The evaluations' HR handbook, and two Japanese documents beside it.
DOCS = {
    **HANDBOOK,
    "kyuka": ("年次有給休暇", "従業員には毎年二十日の年次有給休暇が与えられる。"),
    "tsukin": ("通勤手当", "通勤にかかる交通費は毎月の給与とともに支給される。"),
}
# Mostly paraphrases: the dense leg finds them, the keyword leg rarely does.
QUERIES = {
    "q1": ("how much holiday do staff get", {"leave": 2, "kyuka": 1}),
    "q2": ("getting my money back for a work trip", {"expenses": 2, "per-diem": 1}),
    "q3": ("when do I get a new computer", {"laptops": 1}),
    "q4": ("working from home on company servers", {"vpn": 1}),
    "q5": ("when does my wage arrive", {"payroll": 1}),
    "q6": ("where do I put my car", {"parking": 1}),
    "q7": ("what time is food served", {"canteen": 1}),
    "q8": ("evacuation exercises", {"fire": 1}),
    "q9": ("my first day at the company", {"onboarding": 1}),
    "q10": ("電車代は払ってもらえますか", {"tsukin": 1}),
    "q11": ("being ill and missing work", {"sick": 1}),
    "q12": ("how often must credentials change", {"passwords": 1}),
}
# Settings far from the defaults, so that a tune has something to find: the keyword leg dominates, few
# candidates, a short answer (a relevant document out of the top 3 costs nDCG).
POOR_SETTINGS = {
    "fusion": "rrf",
    "rrf_k": 1,
    "dense_weight": 0.05,
    "keyword_weight": 1.0,
    "candidate_multiplier": 1,
    "top_k": 3,
    "max_blocks": 3,
}


@pytest.fixture(scope="module")
def kb_id(ragkb: RunningRagkb) -> str:
    return ragkb.create_kb_with_texts("tuning", DOCS)


@pytest.fixture(scope="module")
def set_id(ragkb: RunningRagkb, kb_id: str) -> str:
    queries = [{"id": query_id, "text": text} for query_id, (text, _) in QUERIES.items()]
    qrels = {query_id: judged for query_id, (_, judged) in QUERIES.items()}
    body = {"name": "paraphrases", "queries": queries, "qrels": qrels}
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def legs_of(
    ragkb: RunningRagkb, kb_id: str, texts: list[str], depth: int, retrieval: KbRetrieval | None = None
) -> dict[str, Any]:
    retriever = f"http://127.0.0.1:{ragkb.env['RAGKB_RETRIEVER__PORT']}/internal/v1/legs"
    kb = {"kb_id": kb_id} | ({"retrieval": retrieval.model_dump()} if retrieval else {})
    body = {"kb": kb, "queries": texts, "depth": depth}
    response = httpx.post(retriever, json=body, headers=ragkb.service_headers, timeout=120)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


# The legs a tune reads are those of the KB's second pass when it has dense feedback (on by default): the vector
# moved by the first pass of its *current* settings. A setting whose own first pass differs would move it otherwise
# (and the legs' dense scores are the moved vector's, where the served relevance reads the question's own), so the
# computed answer is exactly the served one for the KB's own settings with feedback ({}), and for any other
# setting without it.
NO_FEEDBACK = {"feedback_passages": 0}


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"fusion": "rrf", "rrf_k": 10, "keyword_weight": 1.5, "candidate_multiplier": 2, "top_k": 5, "max_blocks": 5}
        | NO_FEEDBACK,
        {"fusion": "dbsf", "dense_weight": 0.7, "keyword_weight": 1.3, "candidate_multiplier": 1, "top_k": 4}
        | NO_FEEDBACK,
        {"min_relevance": "the median relevance of the questions' best passages", "top_k": 8, "max_blocks": 8}
        | NO_FEEDBACK,
    ],
)
def test_the_answer_computed_from_the_legs_is_what_the_search_answers(
    ragkb: RunningRagkb, kb_id: str, overrides: dict[str, Any]
) -> None:
    texts = [text for text, _ in QUERIES.values()]
    if "min_relevance" in overrides:
        overrides = overrides | {"min_relevance": median_best_relevance(ragkb, kb_id, texts)}
    retrieval = KbRetrieval.model_validate(KbRetrieval().model_dump() | overrides)
    found = legs_of(ragkb, kb_id, texts, depth=retrieval.top_k * retrieval.candidate_multiplier, retrieval=retrieval)
    calibration = RelevanceCalibration.model_validate(found["calibration"]) if found["calibration"] else None
    shape = AnswerShape(top_k=retrieval.top_k, max_blocks=retrieval.max_blocks, min_relevance=retrieval.min_relevance)
    non_empty = 0
    for text, legs in zip(texts, found["legs"], strict=True):
        body = {"query": text, "knowledge_base_ids": [kb_id], "settings": overrides}
        response = ragkb.client.post("/v1/search", json=body)
        assert response.status_code == 200, response.text
        served = [(hit["chunk_id"], hit["score"]) for hit in response.json()["results"]]
        computed = answer(QueryLegs.model_validate(legs), FusionSettings.of(retrieval), shape, calibration)
        assert same_up_to_ties(served, [hit.chunk_id for hit in computed]), (text, served, computed)
        non_empty += bool(served)
    # A floor at the median keeps some answers and empties others; without one every question has an answer.
    assert 0 < non_empty < len(texts) if "min_relevance" in overrides else non_empty == len(texts)


def median_best_relevance(ragkb: RunningRagkb, kb_id: str, texts: list[str]) -> float:
    # The question's own cosines (without feedback the dense leg's scores are those) and keyword coverages.
    found = legs_of(ragkb, kb_id, texts, depth=1, retrieval=KbRetrieval(feedback_passages=0))
    calibration = RelevanceCalibration.model_validate(found["calibration"])
    best = sorted(
        relevance(legs["dense"][0]["score"], calibration, legs["dense"][0]["coverage"]) for legs in found["legs"]
    )
    return round((best[len(best) // 2 - 1] + best[len(best) // 2]) / 2, 6)


def read_events(ragkb: RunningRagkb, job_id: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    with ragkb.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=300) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("event:"):
                kind = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                events.append((kind, json.loads(line.partition(":")[2])))
    return events


@pytest.fixture(scope="module")
def tuned(ragkb: RunningRagkb, kb_id: str, set_id: str) -> dict[str, Any]:
    """A tune of the KB under poor settings, followed to its end; its result."""
    patched = ragkb.client.patch(
        f"/v1/knowledge-bases/{kb_id}", json={"retrieval": POOR_SETTINGS, "reason": "a poor start"}
    )
    assert patched.status_code == 200, patched.text
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/tune", json={"question_set_id": set_id, "folds": 4})
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["kind"], job["progress"]["total"]) == ("tune", len(QUERIES))
    events = read_events(ragkb, job["id"])
    assert events[-1][0] == "complete" and events[-1][1]["status"] == "succeeded", (events, ragkb.log_tail())
    assert any(kind == "progress" and data["current"] == len(QUERIES) for kind, data in events), events
    result = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/tune/{job['id']}")
    assert result.status_code == 200, result.text
    body: dict[str, Any] = result.json()
    assert body["job"]["status"] == "succeeded"
    return body


def test_a_tune_reports_each_fold_the_held_out_gain_with_an_interval_and_a_recommendation(
    tuned: dict[str, Any],
) -> None:
    result = tuned["result"]
    assert result["queries"] == len(QUERIES) and result["folds"] == 4
    assert [fold["fold"] for fold in result["fold_results"]] == [0, 1, 2, 3]
    assert sum(fold["queries"] for fold in result["fold_results"]) == len(QUERIES)
    assert result["current"]["fusion"] == "rrf" and result["current"]["dense_weight"] == 0.05
    held_out = result["held_out"]
    assert held_out["ci_low"] <= held_out["gain"] <= held_out["ci_high"]
    assert held_out["wins"] + held_out["losses"] + held_out["ties"] == len(QUERIES)
    # Computed answers under the current settings are the search's own (checked by the job on the first 20).
    assert result["search_check"] == {"queries": len(QUERIES), "identical": len(QUERIES)}
    # The dense leg finds paraphrases: a tune away from a keyword-dominated fusion gains.
    assert result["changes"] and result["recommended_ndcg_at_10"] > result["current_ndcg_at_10"]
    assert result["leg_depth"] == 3 * 25 and result["candidates"] == 151
    assert "analyzer" in result["not_searched"]


def versions(ragkb: RunningRagkb, kb_id: str) -> list[dict[str, Any]]:
    response = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/settings/versions")
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()
    return found


def test_applying_a_tune_then_reverting_it_are_settings_versions(
    ragkb: RunningRagkb, kb_id: str, tuned: dict[str, Any]
) -> None:
    history = versions(ragkb, kb_id)
    # Newest first: the PATCH to the poor settings, then the KB's creation.
    assert [(v["version"], v["origin"]) for v in history] == [(2, "patch"), (1, "create")]
    assert history[0]["reason"] == "a poor start" and history[0]["current"] and history[0]["author_key_id"]
    job_id = tuned["job"]["id"]
    applied = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/tune/{job_id}/apply")
    assert applied.status_code == 200, applied.text
    version = applied.json()
    recommended = tuned["result"]["recommended"]
    assert (version["version"], version["origin"], version["tune_job_id"]) == (3, "tune", job_id)
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    for field in ("fusion", "rrf_k", "dense_weight", "keyword_weight", "candidate_multiplier"):
        assert kb["retrieval"][field] == recommended[field]
    assert kb["retrieval"]["top_k"] == 3  # what the tune does not search stays
    # The settings moved on since the tune ran: applying it again is refused.
    again = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/tune/{job_id}/apply")
    assert again.status_code == 409 and again.headers["content-type"].startswith("application/problem+json")
    reverted = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/settings/versions/2/revert", json={"reason": "back to the poor start"}
    )
    assert reverted.status_code == 200, reverted.text
    assert (reverted.json()["version"], reverted.json()["origin"], reverted.json()["reverted_to"]) == (4, "revert", 2)
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["retrieval"]["dense_weight"] == 0.05 and kb["retrieval"]["fusion"] == "rrf"
    assert [v["version"] for v in versions(ragkb, kb_id)] == [4, 3, 2, 1]
    assert ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/settings/versions/9/revert").status_code == 404


def test_bad_tune_requests_are_problem_details(ragkb: RunningRagkb, kb_id: str, set_id: str) -> None:
    path = f"/v1/knowledge-bases/{kb_id}/tune"
    unknown = ragkb.client.post(path, json={"question_set_id": "0" * 32})
    assert unknown.status_code == 404 and unknown.headers["content-type"].startswith("application/problem+json")
    too_few = ragkb.client.post(path, json={"question_set_id": set_id, "folds": 7})
    assert too_few.status_code == 422 and "at least 14 questions" in too_few.json()["detail"]
    too_deep = ragkb.client.post(path, json={"question_set_id": set_id, "space": {"candidate_multiplier": [0]}})
    assert too_deep.status_code == 422
    assert ragkb.client.get(f"{path}/{'0' * 32}").status_code == 404


def test_only_admin_keys_tune_apply_and_revert(ragkb: RunningRagkb, kb_id: str, set_id: str) -> None:
    created = ragkb.client.post(
        "/v1/api-keys", json={"role": "client", "name": "tune-writer", "grants": {kb_id: "write"}}
    )
    assert created.status_code == 201, created.text
    base = f"/v1/knowledge-bases/{kb_id}"
    with ragkb.client_with(created.json()["key"]) as writer:
        assert writer.post(f"{base}/tune", json={"question_set_id": set_id}).status_code == 403
        assert writer.post(f"{base}/settings/versions/1/revert").status_code == 403
        assert writer.post(f"{base}/tune/{'0' * 32}/apply").status_code == 403
        # Reading the history is a reader's right.
        assert writer.get(f"{base}/settings/versions").status_code == 200


def test_the_cli_tunes_prints_the_fold_table_and_applies(
    ragkb: RunningRagkb, kb_id: str, set_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the revert above, the KB is back on the poor settings: the CLI's tune recommends a change."""
    argv = ["--url", ragkb.api_url, "--key", ragkb.admin_key, "tune", "tuning", "--question-set", "paraphrases"]
    assert main([*argv, "--folds", "3", "--apply"]) == 0
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if line[:4].strip().isdigit()]
    assert len(table) == 3, printed
    assert "held-out nDCG@10" in printed and "95% CI [" in printed
    applied = versions(ragkb, kb_id)[0]
    assert applied["origin"] == "tune" and f"applied as settings version {applied['version']}" in printed
