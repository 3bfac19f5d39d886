"""The admin console's browser sessions, through the real app (Litestar's TestClient) on real Redis and SQLite:
cookie flags, what Redis holds, CSRF on every state-changing cookie request, Bearer clients untouched, sign-out,
expiry and revocation."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import pytest
import redis
from litestar.testing import TestClient

from ragkb_api.app import create_app
from ragkb_api.console.sessions import SESSION_COOKIE
from ragkb_api.settings import ApiSettings
from ragkb_core.settings import AuthSettings, BlobSettings, DatabaseSettings, RedisSettings
from tests.support.redis_db import private_redis_db

pytestmark = [
    pytest.mark.integration,
    # Raised while the app is built in-process (see test_api_limits.py): not this test's subject.
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Deprecated 'query' parameter:DeprecationWarning"),
]
ADMIN_KEY = secrets.token_urlsafe(32)
BEARER = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def store() -> Iterator[redis.Redis]:
    with private_redis_db() as connection:
        yield connection


@pytest.fixture
def settings(tmp_path: Path, store: redis.Redis) -> ApiSettings:
    db = store.connection_pool.connection_kwargs["db"]
    return ApiSettings(
        database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'ragkb.db'}"),
        blobs=BlobSettings(root=tmp_path / "blobs"),
        redis=RedisSettings(url=f"redis://127.0.0.1:6379/{db}"),
        auth=AuthSettings.model_validate({"bootstrap_admin_key": ADMIN_KEY}),
    )


@pytest.fixture
def client(settings: ApiSettings) -> Iterator[TestClient[object]]:
    with TestClient(app=create_app(settings)) as test_client:
        yield test_client


def sign_in(client: TestClient[object], key: str = ADMIN_KEY) -> dict[str, object]:
    response = client.post("/console/session", json={"key": key})
    assert response.status_code == 201, response.text
    body: dict[str, object] = response.json()
    return body


def set_cookie(response: object) -> SimpleCookie:
    cookie: SimpleCookie = SimpleCookie()
    cookie.load(response.headers["set-cookie"])  # type: ignore[attr-defined]
    return cookie


def session_records(store: redis.Redis) -> list[bytes]:
    return list(store.scan_iter("ragkb:console:session:*"))


def test_sign_in_sets_an_httponly_strict_cookie_and_never_returns_the_key(client: TestClient[object]) -> None:
    response = client.post("/console/session", json={"key": ADMIN_KEY})
    assert response.status_code == 201
    morsel = set_cookie(response)[SESSION_COOKIE]
    assert morsel["httponly"] and morsel["samesite"].lower() == "strict" and morsel["path"] == "/"
    assert not morsel["secure"]  # plain HTTP here: a Secure cookie would never come back
    assert 0 < int(morsel["max-age"]) <= 12 * 3600
    body = response.json()
    assert body["role"] == "admin" and body["csrf_token"] and ADMIN_KEY not in response.text
    assert response.headers["cache-control"] == "no-store"


def test_over_https_the_cookie_is_secure(settings: ApiSettings) -> None:
    with TestClient(app=create_app(settings), base_url="https://testserver.local") as secure_client:
        response = secure_client.post("/console/session", json={"key": ADMIN_KEY})
    assert response.status_code == 201
    assert set_cookie(response)[SESSION_COOKIE]["secure"]


def test_redis_holds_neither_the_key_nor_the_session_id(client: TestClient[object], store: redis.Redis) -> None:
    sign_in(client)
    session_id = client.cookies[SESSION_COOKIE]
    [name] = session_records(store)
    raw = store.get(name)
    assert raw is not None
    assert ADMIN_KEY.encode() not in raw and session_id.encode() not in raw and session_id.encode() not in name
    assert 0 < store.ttl(name) <= 1800


def test_the_cookie_authenticates_reads_and_the_session_names_its_token(client: TestClient[object]) -> None:
    signed_in = sign_in(client)
    assert client.get("/v1/knowledge-bases").status_code == 200
    current = client.get("/console/session")
    assert current.status_code == 200
    assert current.json()["csrf_token"] == signed_in["csrf_token"]
    assert current.json()["label"] == "bootstrap admin key"


def test_a_state_changing_cookie_request_needs_the_csrf_token(client: TestClient[object]) -> None:
    token = str(sign_in(client)["csrf_token"])
    body = {"name": "from-the-console", "role": "client"}
    missing = client.post("/v1/api-keys", json=body)
    assert missing.status_code == 403
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert "x-csrf-token" in missing.json()["detail"]
    assert client.post("/v1/api-keys", json=body, headers={"X-CSRF-Token": token[:-2] + "xx"}).status_code == 403
    assert client.delete("/v1/api-keys/anything").status_code == 403
    assert client.post("/v1/api-keys", json=body, headers={"X-CSRF-Token": token}).status_code == 201


def test_bearer_clients_need_no_token_even_beside_a_session_cookie(client: TestClient[object]) -> None:
    sign_in(client)
    created = client.post("/v1/api-keys", json={"name": "bearer-made", "role": "client"}, headers=BEARER)
    assert created.status_code == 201
    client.cookies.clear()
    assert (
        client.post("/v1/api-keys", json={"name": "bearer-only", "role": "client"}, headers=BEARER).status_code == 201
    )


def test_a_wrong_key_or_a_form_post_opens_no_session(client: TestClient[object], store: redis.Redis) -> None:
    wrong = client.post("/console/session", json={"key": "rk_0123456789ab_not-a-key"})
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    form = client.post("/console/session", data={"key": ADMIN_KEY})
    assert form.status_code == 415 and "set-cookie" not in form.headers
    assert session_records(store) == []


def test_sign_out_ends_the_session_for_good(client: TestClient[object], store: redis.Redis) -> None:
    token = str(sign_in(client)["csrf_token"])
    session_id = client.cookies[SESSION_COOKIE]
    assert client.delete("/console/session").status_code == 403  # no token: not signed out
    out = client.delete("/console/session", headers={"X-CSRF-Token": token})
    assert out.status_code == 204
    assert set_cookie(out)[SESSION_COOKIE]["max-age"] == "0"
    assert session_records(store) == []
    client.cookies.set(SESSION_COOKIE, session_id)  # the old cookie, replayed
    assert client.get("/v1/knowledge-bases").status_code == 401


def test_an_idle_or_expired_session_ends(client: TestClient[object], store: redis.Redis) -> None:
    sign_in(client)
    [name] = session_records(store)
    store.expire(name, 1)
    time.sleep(1.5)
    assert client.get("/v1/knowledge-bases").status_code == 401
    sign_in(client)
    [name] = session_records(store)
    record = json.loads(store.get(name) or b"{}")
    store.set(name, json.dumps({**record, "expires_at": time.time() - 1}), keepttl=True)
    assert client.get("/v1/knowledge-bases").status_code == 401
    assert session_records(store) == []


def test_a_revoked_key_ends_its_sessions_at_once(client: TestClient[object]) -> None:
    # The admin acts with Bearer (which wins over the cookie); the cookie jar is the other key's browser.
    created = client.post("/v1/api-keys", json={"name": "short-lived", "role": "admin"}, headers=BEARER).json()
    token = str(sign_in(client, created["key"])["csrf_token"])
    assert client.get("/console/session").json()["label"] == "short-lived"
    assert client.get("/v1/api-keys").status_code == 200
    assert client.delete(f"/v1/api-keys/{created['id']}", headers=BEARER).status_code == 204
    assert client.get("/v1/api-keys").status_code == 401
    # Still possible to sign out: the session is removed even though its key is no longer valid.
    assert client.delete("/console/session", headers={"X-CSRF-Token": token}).status_code == 204


def test_a_client_keys_session_has_exactly_its_keys_rights(client: TestClient[object]) -> None:
    created = client.post("/v1/api-keys", json={"name": "reader", "role": "client"}, headers=BEARER).json()
    token = str(sign_in(client, created["key"])["csrf_token"])
    assert client.get("/console/session").json()["role"] == "client"
    assert client.get("/v1/knowledge-bases").json() == []
    assert client.get("/v1/api-keys").status_code == 403
    refused = client.post("/v1/api-keys", json={"name": "x", "role": "admin"}, headers={"X-CSRF-Token": token})
    assert refused.status_code == 403


def test_an_unknown_session_cookie_is_refused(client: TestClient[object]) -> None:
    client.cookies.set(SESSION_COOKIE, secrets.token_urlsafe(32))
    assert client.get("/v1/knowledge-bases").status_code == 401
    client.cookies.set(SESSION_COOKIE, "../../etc/passwd")
    assert client.get("/v1/knowledge-bases").status_code == 401
