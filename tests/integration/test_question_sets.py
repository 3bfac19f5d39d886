"""Question sets through the real app (Litestar's TestClient) on a real SQLite database, and evaluations
with a hand-written fake search: storage, BEIR upload and export, refusals, access, comparison."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.app import create_app
from ragkb_api.evaluations.beir import Question as BeirQuestion
from ragkb_api.evaluations.beir import from_json
from ragkb_api.evaluations.question_sets import QuestionSetService
from ragkb_api.evaluations.schemas import EvaluationRequest, RunSpec
from ragkb_api.evaluations.service import EvaluationService
from ragkb_api.rate_limit import RateLimitSettings, TokenBuckets
from ragkb_api.search.schemas import SearchRequest, SearchResponse
from ragkb_api.settings import ApiSettings
from ragkb_core.contracts import SearchHit
from ragkb_core.errors import NotFound
from ragkb_core.settings import AuthSettings, BlobSettings, DatabaseSettings, LimitSettings
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head, transaction
from ragkb_store.db.models import KnowledgeBase

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Deprecated 'query' parameter:DeprecationWarning"),
]
ADMIN_KEY = secrets.token_urlsafe(32)
# The evaluations here test scoring, not the rate limit (tests/integration/test_api_limits.py does).
UNLIMITED = TokenBuckets(RateLimitSettings(requests_per_minute=0))
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
KB_ID = "a" * 32
SET = {
    "name": "smoke",
    "queries": [{"id": "q1", "text": "leave policy"}, {"id": "q2", "text": "laptops"}],
    "qrels": {"q1": {"leave": 1, "remote": 2}, "q2": {"laptops": 1}},
}


def _add_kb(sessions: sessionmaker[Session], kb_id: str = KB_ID) -> None:
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id[:4]}", embedding_model="m", analyzer_version="v"))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[object]]:
    url = f"sqlite:///{tmp_path / 'ragkb.db'}"
    settings = ApiSettings(
        database=DatabaseSettings(url=url),
        blobs=BlobSettings(root=tmp_path / "blobs"),
        auth=AuthSettings.model_validate({"bootstrap_admin_key": ADMIN_KEY}),
    )
    with TestClient(app=create_app(settings)) as test_client:
        _add_kb(build_session_factory(build_engine(DatabaseSettings(url=url))))
        yield test_client


def _sets(client: TestClient[object]) -> str:
    return f"/v1/knowledge-bases/{KB_ID}/question-sets"


def test_a_json_set_is_stored_listed_exported_and_deleted(client: TestClient[object]) -> None:
    created = client.post(_sets(client), json=SET, headers=ADMIN)
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["query_count"], body["judgement_count"], body["quality_gate"]) == (2, 3, False)
    assert [s["id"] for s in client.get(_sets(client), headers=ADMIN).json()] == [body["id"]]
    detail = client.get(f"{_sets(client)}/{body['id']}", headers=ADMIN).json()
    assert detail["qrels"] == SET["qrels"] and detail["queries"] == SET["queries"]
    beir = client.get(f"{_sets(client)}/{body['id']}", params={"format": "beir"}, headers=ADMIN).json()
    assert beir["qrels_tsv"].splitlines()[0] == "query-id\tcorpus-id\tscore"
    assert client.post(_sets(client), json=SET, headers=ADMIN).status_code == 409
    # The export uploads again as the same set.
    files = {"queries": ("queries.jsonl", beir["queries_jsonl"]), "qrels": ("train.tsv", beir["qrels_tsv"])}
    again = client.post(_sets(client), files=files, data={"name": "again", "quality_gate": "true"}, headers=ADMIN)
    assert again.status_code == 201, again.text
    assert (again.json()["query_count"], again.json()["quality_gate"]) == (2, True)
    assert client.delete(f"{_sets(client)}/{body['id']}", headers=ADMIN).status_code == 204
    assert client.get(f"{_sets(client)}/{body['id']}", headers=ADMIN).status_code == 404


def test_one_set_at_a_time_is_the_quality_gate(client: TestClient[object]) -> None:
    first = client.post(_sets(client), json={**SET, "quality_gate": True}, headers=ADMIN).json()
    second = client.post(_sets(client), json={**SET, "name": "other"}, headers=ADMIN).json()
    patched = client.patch(f"{_sets(client)}/{second['id']}", json={"quality_gate": True}, headers=ADMIN)
    assert patched.json()["quality_gate"] is True
    gates = {s["id"]: s["quality_gate"] for s in client.get(_sets(client), headers=ADMIN).json()}
    assert gates == {first["id"]: False, second["id"]: True}


def test_malformed_beir_files_answer_422_naming_the_line(client: TestClient[object]) -> None:
    files = {"queries": ("queries.jsonl", '{"_id": "1", "text": "q"}\n{oops\n'), "qrels": ("t.tsv", "1\td\t1\n")}
    refused = client.post(_sets(client), files=files, data={"name": "bad"}, headers=ADMIN)
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "queries.jsonl line 2" in refused.json()["detail"]
    unjudged = client.post(_sets(client), json={**SET, "qrels": {"q1": {"d": 1}}}, headers=ADMIN)
    assert unjudged.status_code == 422 and "q2" in unjudged.json()["detail"]


def test_a_read_only_key_may_read_sets_but_not_change_them(client: TestClient[object]) -> None:
    set_id = client.post(_sets(client), json=SET, headers=ADMIN).json()["id"]
    key = client.post("/v1/api-keys", json={"name": "r", "grants": {KB_ID: "read"}}, headers=ADMIN).json()["key"]
    reader = {"Authorization": f"Bearer {key}"}
    assert client.get(f"{_sets(client)}/{set_id}", headers=reader).status_code == 200
    assert client.post(_sets(client), json={**SET, "name": "x"}, headers=reader).status_code == 403
    assert client.delete(f"{_sets(client)}/{set_id}", headers=reader).status_code == 403
    stranger = client.post("/v1/api-keys", json={"name": "s"}, headers=ADMIN).json()["key"]
    assert client.get(_sets(client), headers={"Authorization": f"Bearer {stranger}"}).status_code == 404


class FakeSearch:
    """Answers from a fixed ranking of passages per (mode, query); records what it was asked."""

    def __init__(self, rankings: dict[tuple[str | None, str], list[str]]) -> None:
        self.rankings = rankings
        self.requests: list[SearchRequest] = []

    def search(self, request: SearchRequest, caller: Caller) -> SearchResponse:
        self.requests.append(request)
        hits = [_hit(source_id, rank) for rank, source_id in enumerate(self.rankings[(request.mode, request.query)])]
        return SearchResponse(query=request.query, results=hits, took_ms=1.0, mode=request.mode or "hybrid")


def _hit(source_id: str, rank: int) -> SearchHit:
    return SearchHit(
        chunk_id=f"{source_id}-{rank}",
        text="t",
        score=1 / (rank + 1),
        knowledge_base_id=KB_ID,
        document_id=source_id,
        source_id=source_id,
        title=source_id,
        version=1,
        ordinal=rank,
    )


def test_an_evaluation_reduces_passages_to_documents_and_compares_two_runs(tmp_path: Path) -> None:
    engine = build_engine(DatabaseSettings(url=f"sqlite:///{tmp_path / 'e.db'}"))
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    _add_kb(sessions)
    sets = QuestionSetService(sessions, LimitSettings())
    questions = [BeirQuestion("q1", "leave policy"), BeirQuestion("q2", "laptops")]
    set_id = sets.create(KB_ID, "s", from_json(questions, SET["qrels"], 100)).id  # type: ignore[arg-type]
    search = FakeSearch(
        {
            # Two passages of `parking` first: the reduction ranks `leave` second, not third.
            ("hybrid", "leave policy"): ["parking", "parking", "leave", "remote"],
            ("hybrid", "laptops"): ["laptops"],
            ("keyword", "leave policy"): ["remote", "leave"],
            ("keyword", "laptops"): ["parking"],
        }
    )
    request = EvaluationRequest(question_set_id=set_id, mode="hybrid", compare=RunSpec(mode="keyword"), depth=20)
    result = EvaluationService(sets, search, UNLIMITED).evaluate(KB_ID, request, Caller(key_id="k", role="admin"))
    assert {r.top_k for r in search.requests} == {20}
    per_query = {q.query_id: q for q in result.per_query}
    assert per_query["q1"].ranked == ["parking", "leave", "remote"]
    assert per_query["q1"].metrics["mrr@10"] == 0.5
    assert set(result.metrics) == {"ndcg@10", "recall@100", "recall@20", "mrr@10"}
    assert result.compare is not None
    assert result.compare.per_metric["mrr@10"].model_dump() == {
        "delta": round(result.compare.metrics["mrr@10"] - result.metrics["mrr@10"], 4),
        "wins": 1,
        "losses": 1,
        "ties": 0,
    }
    with pytest.raises(NotFound):
        EvaluationService(sets, search, UNLIMITED).evaluate(
            KB_ID, EvaluationRequest(question_set_id="nope"), Caller(key_id="k", role="admin")
        )
