"""The api's per-key rate limit, through the real app (Litestar's TestClient) on a real SQLite database and
the buckets in a real Redis (the default store)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from ragkb_api.app import create_app
from ragkb_api.rate_limit import RateLimitSettings
from ragkb_api.settings import ApiSettings
from ragkb_core.settings import AuthSettings, BlobSettings, DatabaseSettings, RedisSettings
from ragkb_store.db.engine import build_engine, build_session_factory
from tests.integration.test_question_sets import KB_ID
from tests.integration.test_question_sets import _add_kb as add_kb
from tests.support.redis_db import private_redis_db

pytestmark = [
    pytest.mark.integration,
    # Raised while the app is built in-process (the service processes do not run with warnings as errors):
    # the handlers' inferred dependencies and body markers, which Litestar 3 will want
    # declared differently. Not this test's subject.
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Deprecated 'query' parameter:DeprecationWarning"),
]
ADMIN_KEY = secrets.token_urlsafe(32)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[object]]:
    with private_redis_db() as redis_db:
        yield from _client(tmp_path, redis_db.connection_pool.connection_kwargs["db"])


def _client(tmp_path: Path, redis_db: int) -> Iterator[TestClient[object]]:
    settings = ApiSettings(
        database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'ragkb.db'}"),
        blobs=BlobSettings(root=tmp_path / "blobs"),
        redis=RedisSettings(url=f"redis://127.0.0.1:6379/{redis_db}"),
        auth=AuthSettings.model_validate({"bootstrap_admin_key": ADMIN_KEY}),
        rate_limit=RateLimitSettings(requests_per_minute=1, burst=2),
    )
    with TestClient(app=create_app(settings)) as test_client:
        yield test_client


def test_a_key_past_its_burst_gets_429_problem_details_with_retry_after(client: TestClient[object]) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert [client.get("/v1/knowledge-bases", headers=auth).status_code for _ in range(2)] == [200, 200]
    refused = client.get("/v1/knowledge-bases", headers=auth)
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert refused.json()["title"] == "Too many requests"


def test_unauthenticated_and_open_requests_cost_no_token(client: TestClient[object]) -> None:
    for _ in range(5):
        assert client.get("/v1/knowledge-bases").status_code == 401
        assert client.get("/v1/knowledge-bases", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/health").status_code == 200
        assert client.get("/schema/openapi.json").status_code == 200
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert client.get("/v1/knowledge-bases", headers=auth).status_code == 200


def _tool_call(request_id: int) -> dict[str, object]:
    arguments = {"knowledge_base_ids": ["a" * 32]}  # no such KB: the tool answers so, from the database
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "query_files", "arguments": arguments},
    }


def test_every_mcp_tool_call_spends_a_token_and_a_batch_is_refused(client: TestClient[object]) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    batch = client.post("/mcp", json=[_tool_call(n) for n in range(50)], headers=auth)
    assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
    # The refused batch spent one token, like any request; the one left pays for one tool call, not more.
    called = client.post("/mcp", json=_tool_call(1), headers=auth)
    assert called.status_code == 200 and "do not exist" in called.json()["result"]["content"][0]["text"]
    spent = client.post("/mcp", json=_tool_call(2), headers=auth)
    assert spent.status_code == 429 and spent.headers["retry-after"]


def test_dify_answers_a_spent_key_in_difys_error_shape(client: TestClient[object]) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"knowledge_id": "a" * 32, "query": "leave", "retrieval_setting": {"top_k": 1}}
    answers = [client.post("/retrieval", json=body, headers=auth) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [404, 404, 429]
    assert answers[2].json()["error_code"] == 3001 and set(answers[2].json()) == {"error_code", "error_msg"}
    assert 1 <= int(answers[2].headers["retry-after"]) <= 60


@pytest.fixture
def five_token_client(tmp_path: Path) -> Iterator[TestClient[object]]:
    with private_redis_db() as redis_db:
        settings = ApiSettings(
            database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'ragkb.db'}"),
            blobs=BlobSettings(root=tmp_path / "blobs"),
            redis=RedisSettings(url=f"redis://127.0.0.1:6379/{redis_db.connection_pool.connection_kwargs['db']}"),
            auth=AuthSettings.model_validate({"bootstrap_admin_key": ADMIN_KEY}),
            rate_limit=RateLimitSettings(requests_per_minute=1, burst=5),
        )
        with TestClient(app=create_app(settings)) as test_client:
            add_kb(build_session_factory(build_engine(settings.database)), KB_ID)
            yield test_client


def test_an_evaluation_spends_a_token_per_search_and_is_refused_before_searching(
    five_token_client: TestClient[object],
) -> None:
    client, auth = five_token_client, {"Authorization": f"Bearer {ADMIN_KEY}"}
    queries = [{"id": f"q{n}", "text": f"question {n}"} for n in range(4)]
    question_set = {"name": "four", "queries": queries, "qrels": {q["id"]: {"doc": 1} for q in queries}}
    created = client.post(f"/v1/knowledge-bases/{KB_ID}/question-sets", json=question_set, headers=auth)
    assert created.status_code == 201, created.text  # 4 tokens left
    evaluation = {"question_set_id": created.json()["id"]}
    refused = client.post(f"/v1/knowledge-bases/{KB_ID}/evaluations", json=evaluation, headers=auth)
    # The request itself took one (3 left); its 4 searches need 4: refused, none run, none spent.
    assert refused.status_code == 429, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert int(refused.headers["retry-after"]) == 60
    assert [client.get("/v1/knowledge-bases", headers=auth).status_code for _ in range(4)] == [200, 200, 200, 429]
