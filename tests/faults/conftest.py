"""A private stack for the fault suite: the launcher (`make run`) with a redis-server of its own, which the
suite kills and starts again (no other test or developer shares it)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from ragkb_cli.stack import free_port
from tests.e2e.conftest import REPO, RunningRagkb, e2e_env
from tests.faults.workload import ORACLE, wait_until

# The full suite runs with `make test-faults` (this variable set); `make test` runs the tests not marked
# `full_fault_suite` only: one representative fault, about two minutes.
FULL_SUITE = os.environ.get("RAGKB_FAULT_SUITE") == "full"
SETTLE_TIMEOUT_S = 420.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL_SUITE:
        return
    skip = pytest.mark.skip(reason="part of the full fault suite: make test-faults")
    for item in items:
        if "full_fault_suite" in item.keywords:
            item.add_marker(skip)


class RedisServer:
    """A redis-server this suite owns: SIGKILLed as a crash would, started again on the same port (empty: no
    persistence, so every queued message is lost, the harshest case)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly",
                   "no", "--dir", str(self._workdir)]  # fmt: skip
        with (self._workdir / "redis.log").open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._answers, 10, "redis-server answering")

    def kill(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=30)

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False


class FaultStack(RunningRagkb):
    """The stack, its Redis, and the checks every fault ends with."""

    redis_server: RedisServer

    def internal(self) -> httpx.Client:
        base = f"http://127.0.0.1:{self.env['RAGKB_RETRIEVER__PORT']}/internal/v1"
        return httpx.Client(base_url=base, headers=self.service_headers, timeout=60)

    def documents(self, kb_id: str) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        while True:
            page = self.client.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"offset": len(listed)})
            assert page.status_code == 200, page.text
            listed += page.json()
            if len(listed) >= int(page.headers.get("x-total-count", len(listed))) or not page.json():
                return listed

    def wait_settled(self, kb_id: str) -> list[dict[str, Any]]:
        """Every document of the KB done or failed (the accepted ones and any the fault cut off mid-answer)."""
        wait_until(self.ready_now, SETTLE_TIMEOUT_S, f"the stack ready again; log:\n{self.log_tail()}")
        unsettled: list[str] = []

        def settled() -> bool:
            nonlocal unsettled
            unsettled = [d["id"] for d in self.documents(kb_id) if d["status"] not in ("done", "failed")]
            return not unsettled

        try:
            wait_until(settled, SETTLE_TIMEOUT_S, "every document done or failed", poll_s=2)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {len(unsettled)} left, e.g. {unsettled[:3]}; log:\n{self.log_tail()}"
            ) from exc
        return self.documents(kb_id)

    def consistency(self, kb_id: str) -> dict[str, Any]:
        report = self.client.get(f"/v1/knowledge-bases/{kb_id}/consistency")
        assert report.status_code == 200, report.text
        body: dict[str, Any] = report.json()
        return body

    def census(self, kb_id: str) -> dict[str, dict[str, int]]:
        with self.internal() as retriever:
            census: dict[str, dict[str, int]] = retriever.get(f"/kbs/{kb_id}/points").json()["documents"]
        return census

    def ready_now(self) -> bool:
        try:
            return httpx.get(f"{self.api_url}/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    yield from fault_stack(tmp_path_factory.mktemp("ragkb-faults"))


def fault_stack(workdir: Path, **overrides: str) -> Iterator[FaultStack]:
    """The launcher on `workdir` with a redis-server of its own; `overrides` (environment) win."""
    redis_server = RedisServer(workdir)
    redis_server.start()
    env = e2e_env(workdir, redis_server.url)
    # Lost queue messages (a Redis that comes back empty) are sent again soon, not after the default 300 s.
    env["RAGKB_TASKS__PENDING_REQUEUE_AFTER_S"] = "20"
    env.update(overrides)
    service = FaultStack(REPO, workdir, env)
    service.redis_server = redis_server
    try:
        service.start()
        yield service
    finally:
        service.stop()
        service.client.close()
        redis_server.stop()


@pytest.fixture(scope="module")
def kb(stack: FaultStack) -> str:
    """The KB every fault lands on, holding the oracle documents the searches must keep finding."""
    kb_id = stack.create_kb("faults")
    for source_id, (text, _) in ORACLE.items():
        response = stack.client.post(
            f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, "source_id": source_id}
        )
        assert response.status_code == 202, response.text
        stack.wait_document(kb_id, str(response.json()["id"]))
    return kb_id
