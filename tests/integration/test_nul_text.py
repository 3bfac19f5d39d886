"""NUL characters in request text, through the real app (Litestar's TestClient) on SQLite and PostgreSQL
(which cannot store a NUL in a text column: before the refusal, these writes answered 500 there and were
stored with the NUL on SQLite)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from ragkb_api.app import create_app
from ragkb_api.rate_limit import RateLimitSettings
from ragkb_api.settings import ApiSettings
from ragkb_core.settings import AuthSettings, BlobSettings, DatabaseSettings
from tests.integration.test_question_sets import _add_kb
from tests.support.in_process import migrated_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Deprecated 'query' parameter:DeprecationWarning"),
]
ADMIN = {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}
KB_ID = "b" * 32


@pytest.fixture
def client(database_url: str, tmp_path: Path) -> Iterator[TestClient[object]]:
    settings = ApiSettings(
        database=DatabaseSettings(url=database_url),
        blobs=BlobSettings(root=tmp_path / "blobs"),
        auth=AuthSettings.model_validate({"bootstrap_admin_key": ADMIN["Authorization"].split()[1]}),
        rate_limit=RateLimitSettings(store="memory"),
    )
    with migrated_sessions(database_url) as sessions, TestClient(app=create_app(settings)) as test_client:
        _add_kb(sessions, KB_ID)
        yield test_client


def test_nul_in_names_queries_and_filters_is_refused_with_422_on_either_database(client: TestClient[object]) -> None:
    sets = f"/v1/knowledge-bases/{KB_ID}/question-sets"
    question_set = {"name": "smoke", "queries": [{"id": "q1", "text": "leave\x00"}], "qrels": {"q1": {"leave": 1}}}
    beir = {
        "queries": ("queries.jsonl", b'{"_id": "q1", "text": "leave\\u0000"}\n'),
        "qrels": ("t.tsv", b"q1\tleave\t1\n"),
    }
    answers = {
        "key name": client.post("/v1/api-keys", json={"name": "ops\x00", "role": "admin"}, headers=ADMIN),
        "key filter label": client.post(
            "/v1/api-keys",
            json={"name": "ops", "role": "client", "search_filter": {"labels_any": ["a\x00"]}},
            headers=ADMIN,
        ),
        "question text": client.post(sets, json=question_set, headers=ADMIN),
        "beir query": client.post(sets, files=beir, data={"name": "beir"}, headers=ADMIN),
        "beir name": client.post(sets, files=beir, data={"name": "be\x00ir"}, headers=ADMIN),
        "label filter": client.get(f"/v1/knowledge-bases/{KB_ID}/documents?label=a%00", headers=ADMIN),
    }
    assert {name: response.status_code for name, response in answers.items()} == dict.fromkeys(answers, 422)
    assert all(r.headers["content-type"].startswith("application/problem+json") for r in answers.values())
    assert answers["beir query"].json()["detail"] == "queries.jsonl line 1: holds a NUL character"
    assert [key["name"] for key in client.get("/v1/api-keys", headers=ADMIN).json()] == []
    assert client.get(sets, headers=ADMIN).json() == []
