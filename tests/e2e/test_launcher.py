"""`make run`'s launcher as a supervisor, over HTTP against the real processes: a killed api or retriever comes
back and serves; SIGTERM (twice, as `make` forwards its own) drains what is in flight and then leaves no process
and no port behind; a Redis restart does not stall pending documents until the 300 s re-queue."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragkb_cli.stack import STOP_TIMEOUT_S
from ragkb_retriever.app import INDEX_WARMED
from tests.e2e.conftest import REPO, RunningRagkb, e2e_env, service_pids
from tests.e2e.test_resilience import large_manual
from tests.support.redis_server import RedisServer, redis_server

pytestmark = pytest.mark.e2e

COMES_BACK_TIMEOUT_S = 240
# The stack sweeps every 2 s (tests/e2e/conftest.py), so the documents are sent again within a sweep or two of
# the worker's return; the rest is room for a loaded CI machine (the worker's reconnection, the embedding). Far
# below the 300 s re-queue of pending documents, and below the tens of seconds that documents pending since
# just before the restart used to wait (Redis counts its uptime in whole seconds: ragkb_worker.sweeper).
AFTER_BROKER_RESTART_TIMEOUT_S = 60
# The own stack's worker lets running tasks finish this long after SIGTERM (short: a test waits it out).
WORKER_DRAIN_S = 3
# The own stack's lease: half the session stack's (tests/e2e/conftest.py).
LEASE_S = 10


def upload_text(ragkb: RunningRagkb, kb_id: str, text: str, **fields: object) -> dict[str, Any]:
    response = ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"text": text, **fields})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


# -- a service that dies is started again ----------------------------------------------------------------


@pytest.mark.parametrize(("module", "name"), [("ragkb_api", "api"), ("ragkb_retriever", "retriever")])
def test_a_killed_service_is_started_again_and_serves(ragkb: RunningRagkb, module: str, name: str) -> None:
    kb_id = ragkb.create_kb(f"survives-killed-{name}")
    document = upload_text(ragkb, kb_id, "The spare keys hang in the porter's lodge, left of the door.")
    ragkb.wait_document(kb_id, document["id"])
    before = set(service_pids(ragkb.env["RAGKB_TEST_CWD"], module))
    warmed_before = ragkb.log_path.read_text().count(INDEX_WARMED)

    ragkb.signal_service(module, signal.SIGKILL)

    top = search_until_it_answers(ragkb, "Where are the spare keys?", kb_id)
    assert top["document_id"] == document["id"]
    after = set(service_pids(ragkb.env["RAGKB_TEST_CWD"], module))
    assert after and not after & before, "a new process serves"
    assert f"launcher: {name} exited (signal SIGKILL)" in ragkb.log_path.read_text()
    # Said at the launcher's next look, which may come a moment after the first answer.
    wait_until(lambda: f"launcher: {name} is ready again" in ragkb.log_path.read_text(), 10, lambda: "not said")
    if name == "retriever":
        # The new retriever loaded the KBs' indexes as it started, so no KB's first search waits for its load.
        wait_until(lambda: ragkb.log_path.read_text().count(INDEX_WARMED) > warmed_before, 30, lambda: "not warmed")
    # Writes work again too: the retriever's index and the api's queue are back.
    second = upload_text(ragkb, kb_id, "The bicycle shed closes at ten.")
    assert ragkb.wait_document(kb_id, second["id"])["status"] == "done"


def test_a_search_while_the_retriever_is_down_is_a_503_problem_and_searches_answer_once_it_is_back(
    ragkb: RunningRagkb,
) -> None:
    # The api calls the retriever from its event loop over kept-alive connections (ragkb_api.retriever_async):
    # the connection the kill breaks, and the refused new one, must end as the same 503 the sync client gave.
    kb_id = ragkb.create_kb("search-retriever-down")
    document = upload_text(ragkb, kb_id, "The boiler room key is kept by the caretaker on duty.")
    ragkb.wait_document(kb_id, document["id"])
    body = {"query": "Who keeps the boiler room key?", "knowledge_base_ids": [kb_id], "top_k": 3}
    assert ragkb.client.post("/v1/search", json=body).status_code == 200  # a connection is now kept alive

    ragkb.signal_service("ragkb_retriever", signal.SIGKILL)
    response = ragkb.client.post("/v1/search", json=body, headers={"X-Request-ID": "retriever-down-1"})

    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["x-request-id"] == "retriever-down-1"
    problem = response.json()
    assert problem["status"] == 503
    assert "retriever" in problem["detail"]
    assert search_until_it_answers(ragkb, "Who keeps the boiler room key?", kb_id)["document_id"] == document["id"]


def search_until_it_answers(ragkb: RunningRagkb, query: str, kb_id: str) -> dict[str, Any]:
    body = {"query": query, "knowledge_base_ids": [kb_id], "top_k": 3}
    deadline = time.monotonic() + COMES_BACK_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = ragkb.client.post("/v1/search", json=body)
            if response.status_code == 200 and response.json()["results"]:
                result: dict[str, Any] = response.json()["results"][0]
                return result
            last = f"{response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as error:
            last = repr(error)
        time.sleep(0.5)
    raise AssertionError(f"no search answered within {COMES_BACK_TIMEOUT_S} s; last: {last}")


# -- a stack of the module's own, started with `make run`, on a Redis it may restart ---------------------------


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningRagkb, RedisServer]]:
    workdir = tmp_path_factory.mktemp("ragkb-own")
    with redis_server(workdir / "redis") as broker:
        env = e2e_env(workdir, broker.url) | {
            "RAGKB_WORKER__DRAIN_S": str(WORKER_DRAIN_S),
            # The document a stopped worker cut short is queued again when its lease runs out: by the time the
            # launcher has the worker back. A lease that runs out mid-embedding on a loaded machine only queues
            # a second message, which finds the document done (one task process here).
            "RAGKB_TASKS__LEASE_S": str(LEASE_S),
        }
        stack = RunningRagkb(REPO, workdir, env)
        stack.start(via_make=True)
        try:
            yield stack, broker
        finally:
            stack.stop()
            stack.client.close()
            # Whatever a failed test left behind (a paused or orphaned service) must not outlive the module.
            for line in stack_processes(stack.env["RAGKB_TEST_CWD"]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(line.split()[0]), signal.SIGKILL)


def test_documents_pending_when_redis_restarts_are_queued_again_at_once(
    own_stack: tuple[RunningRagkb, RedisServer],
) -> None:
    stack, broker = own_stack
    kb_id = stack.create_kb("redis-restart")
    with stack.paused("ragkb_worker"):  # the messages wait in Redis, and die with it
        documents = [upload_text(stack, kb_id, f"Locker {n} holds the spare fuses of floor {n}.") for n in range(5)]
        queued = int(broker.client().llen("ingest"))
        assert queued >= len(documents) - 1  # (one may sit in a blocked read)
        broker.restart()  # started as this machine's Redis is: nothing persisted
        assert int(broker.client().llen("ingest")) == 0
    started = time.monotonic()
    for document in documents:
        done = stack.wait_document(kb_id, document["id"], timeout_s=AFTER_BROKER_RESTART_TIMEOUT_S)
        assert done["status"] == "done", done
    assert time.monotonic() - started < AFTER_BROKER_RESTART_TIMEOUT_S
    if queued == len(documents):
        # Every message died with the broker: only the sweeper's re-send can have brought them back. A message
        # held in a blocked read survives the restart instead, and its task may take all five as its batch
        # before the sweeper looks (seen once in a full run), so then nothing is left to re-send.
        assert "re-sending" in stack.log_path.read_text()


def test_a_worker_told_to_stop_mid_task_stops_within_its_bound_and_the_document_still_ends_done(
    own_stack: tuple[RunningRagkb, RedisServer],
) -> None:
    stack, _ = own_stack
    kb_id = stack.create_kb("worker-drain")
    # ~170 chunks: still embedding well past the drain bound, and built again once more after the stop.
    document = upload_text(stack, kb_id, large_manual(paragraphs=1000), source_id="ops/manual")
    wait_until(lambda: document_status(stack, kb_id, document["id"]) == "processing", 120, lambda: "never claimed")
    worker_pids = service_pids(stack.env["RAGKB_TEST_CWD"], "ragkb_worker")
    main = os.getpgid(worker_pids[0])  # the launcher starts each service as the leader of its process group

    os.kill(main, signal.SIGTERM)  # Celery's warm shutdown: it would wait for the task however long it takes
    stopped_at = time.monotonic()
    wait_until(lambda: not set(worker_pids) & set(service_pids(stack.env["RAGKB_TEST_CWD"], "ragkb_worker")),
               WORKER_DRAIN_S + 20, lambda: "the worker outlived its drain bound")  # fmt: skip
    assert time.monotonic() - stopped_at < WORKER_DRAIN_S + 20
    assert document_status(stack, kb_id, document["id"]) != "done", "the task finished before its bound"
    # The launcher starts it again, and the cut-short document is queued again (its lease runs out).
    assert stack.wait_document(kb_id, document["id"], timeout_s=300)["status"] == "done"
    assert "launcher: worker exited" in stack.log_path.read_text()


def document_status(stack: RunningRagkb, kb_id: str, document_id: str) -> str:
    status: str = stack.client.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()["status"]
    return status


def test_sigterm_twice_to_make_run_drains_then_stops_every_process_and_it_starts_again(
    own_stack: tuple[RunningRagkb, RedisServer],
) -> None:
    stack, _ = own_stack
    assert stack.process is not None
    kb_id = stack.create_kb("drained")
    upload = SlowUpload(stack, kb_id, {"text": "The night porter starts at 22:00.", "source_id": "porter"})
    upload.start()
    upload.wait_until_sending()
    time.sleep(1)  # the api has the request's head; its body is still coming
    # A hung retriever: it acts on no signal until it is continued. The launcher must reach it all the same.
    stack.signal_service("ragkb_retriever", signal.SIGSTOP)

    # What a process manager or a CI timeout does to `make run` (make forwards it to the launcher once more);
    # the second comes while the launcher is stopping its services.
    group = os.getpgid(stack.process.pid)
    os.killpg(group, signal.SIGTERM)
    time.sleep(1)
    os.killpg(group, signal.SIGTERM)
    time.sleep(1)  # the api drains
    response = upload.finish()
    assert response.status_code == 202, response.text

    stack.process.wait(timeout=STOP_TIMEOUT_S)  # make itself
    marker = stack.env["RAGKB_TEST_CWD"]
    wait_until(lambda: not stack_processes(marker), STOP_TIMEOUT_S, lambda: f"still running: {stack_processes(marker)}")
    for variable in ("RAGKB_API__PORT", "RAGKB_RETRIEVER__PORT", "RAGKB_WORKER__PORT"):
        assert port_is_free(int(stack.env[variable])), variable
    log = stack.log_path.read_text()
    assert "launcher: SIGTERM received; stopping (further signals are ignored)" in log
    assert "launcher: stopped" in log

    stack.start()  # a second start finds its ports and its index free
    assert stack.wait_document(kb_id, response.json()["id"])["status"] == "done"  # the drained upload was kept


class SlowUpload(threading.Thread):
    """A JSON upload whose body arrives in two parts, the second only when `finish()` is called: a request in
    flight for as long as the test wants."""

    def __init__(self, stack: RunningRagkb, kb_id: str, document: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self._client = httpx.Client(base_url=str(stack.client.base_url), timeout=60, headers=stack.client.headers)
        self._path = f"/v1/knowledge-bases/{kb_id}/documents"
        self._payload = json.dumps(document).encode()
        self._sending = threading.Event()
        self._go_on = threading.Event()
        self._response: httpx.Response | None = None
        self._error: Exception | None = None

    def run(self) -> None:
        try:
            headers = {"content-type": "application/json"}
            self._response = self._client.post(self._path, content=self._body(), headers=headers)
        except Exception as error:  # handed to the test by finish()
            self._error = error
        finally:
            self._client.close()

    def _body(self) -> Iterator[bytes]:
        yield self._payload[:10]
        self._sending.set()
        self._go_on.wait(timeout=60)
        yield self._payload[10:]

    def wait_until_sending(self) -> None:
        assert self._sending.wait(timeout=30), "the upload never started"

    def finish(self) -> httpx.Response:
        self._go_on.set()
        self.join(timeout=60)
        if self._error is not None:
            raise self._error
        assert self._response is not None, "the upload did not end"
        return self._response


def stack_processes(marker_cwd: str) -> list[str]:
    """Every process of the stack started in `marker_cwd` (make, the launcher, the services, their pools),
    whatever its command line: they all carry the stack's environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if f"RAGKB_TEST_CWD={marker_cwd}".encode() not in (entry / "environ").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # exited, waiting for its parent (this test) to collect it
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name} {command[:80]}")
        except OSError:
            continue
    return found


def port_is_free(port: int) -> bool:
    """Free for a server that binds it as the services do (SO_REUSEADDR: connections in TIME_WAIT don't count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(condition: Callable[[], bool], timeout_s: float, describe: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(describe())
        time.sleep(0.5)
