"""Two api replicas (two `python -m ragkb_api` processes) on one PostgreSQL and one Redis give a key one rate
limit between them: the burst is spent once across both, and the replica that refuses says when to retry."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from ragkb_cli.stack import free_port
from tests.support.redis_db import private_redis_db

pytestmark = pytest.mark.e2e
BURST = 6
START_TIMEOUT_S = 120


def _api_env(tmp_path: Path, database_url: str, redis_db: int, admin_key: str) -> dict[str, str]:
    return {
        **os.environ,
        "RAGKB_DATABASE__URL": database_url,
        "RAGKB_REDIS__URL": f"redis://127.0.0.1:6379/{redis_db}",
        "RAGKB_BLOBS__ROOT": str(tmp_path / "blobs"),
        "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": admin_key,
        "RAGKB_SERVICE_TOKEN": secrets.token_urlsafe(32),
        # One token a minute after the burst: nothing comes back while the test runs.
        "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "1",
        "RAGKB_RATE_LIMIT__BURST": str(BURST),
        "RAGKB_RATE_LIMIT__STORE": "redis",
    }


def _start_api(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "ragkb_api"],
            env=env | {"RAGKB_API__PORT": str(port)},
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    return process, f"http://127.0.0.1:{port}"


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    # /health, not /ready: no retriever runs here, and the rate limit needs none.
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"api exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"api not healthy in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def two_replicas(tmp_path: Path, postgres_url: str) -> Iterator[tuple[list[str], str]]:
    admin_key = secrets.token_urlsafe(32)
    with private_redis_db() as redis_db, ExitStack() as stack:
        env = _api_env(tmp_path, postgres_url, redis_db.connection_pool.connection_kwargs["db"], admin_key)
        # Both start at once on a database no replica has migrated yet, as a Deployment's pods do.
        started = [_start_api(env, tmp_path / f"api-{n}.log") for n in (1, 2)]
        for process, _ in started:
            stack.callback(_stop, process)
        for number, (process, url) in enumerate(started, 1):
            _wait_healthy(process, url, tmp_path / f"api-{number}.log")
        yield [url for _, url in started], admin_key


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_two_api_replicas_share_one_budget_per_key(two_replicas: tuple[list[str], str]) -> None:
    urls, admin_key = two_replicas
    headers = {"Authorization": f"Bearer {admin_key}"}
    answers: dict[str, list[httpx.Response]] = {url: [] for url in urls}
    for _ in range(BURST):  # 2 × BURST requests, alternating between the replicas
        for url in urls:
            answers[url].append(httpx.get(f"{url}/v1/knowledge-bases", headers=headers, timeout=30))
    statuses = [response.status_code for responses in answers.values() for response in responses]
    assert sorted(set(statuses)) == [200, 429]
    assert statuses.count(200) == BURST  # one burst for the key, not one per replica
    for responses in answers.values():
        assert any(response.status_code == 200 for response in responses)  # both replicas served
        for refused in (response for response in responses if response.status_code == 429):
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert 1 <= int(refused.headers["retry-after"]) <= 60
