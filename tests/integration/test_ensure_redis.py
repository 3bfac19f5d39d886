"""deploy/ensure-redis.sh (what `make run` and `make test` call): a Redis it starts keeps the queue across a
restart; a Redis that was already running is used as it is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import free_port, redis_server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def ensure_redis(url: str, cwd: Path) -> str:
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "ensure-redis.sh")],
        cwd=cwd,
        env={**os.environ, "RAGKB_REDIS__URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_a_redis_it_starts_keeps_the_queue_across_a_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    assert "started" in ensure_redis(url, tmp_path)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.lpush("ingest", b"a queued task message")
        client.shutdown()  # a clean stop (the append-only file is written every second, and at shutdown)
        assert "started" in ensure_redis(url, tmp_path)
        assert client.lrange("ingest", 0, -1) == [b"a queued task message"]
        assert (tmp_path / "var" / "redis" / "appendonlydir").is_dir()
    finally:
        client.shutdown(nosave=True)
        client.close()


def test_a_running_redis_is_used_as_it_is(tmp_path: Path) -> None:
    with redis_server(tmp_path / "theirs") as theirs:
        assert "answering" in ensure_redis(theirs.url, tmp_path)
        with theirs.client() as client:
            assert client.config_get("appendonly") == {"appendonly": "no"}  # not reconfigured
    assert not (tmp_path / "var").exists()
