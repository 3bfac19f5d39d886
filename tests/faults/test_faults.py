"""Faults under load, on the real stack: a service SIGKILLed (the launcher starts it again) or Redis killed and
started again empty, while uploads and searches run. After each: every document ends done or failed with a
reason, the consistency check is clean, no document holds more than its one version's chunks, and every
answer the callers got was right or a 503 with Retry-After (never a 500, never a wrong answer).

`make test` runs the first (a worker killed mid-batch, about two minutes); `make test-faults` runs them all."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.conftest import FaultStack
from tests.faults.workload import Tally, Workload, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.faults]
# How long the load keeps running once the fault is injected (the restart happens inside it).
FAULT_WINDOW_S = 12.0
# Where `make test-faults` collects each fault's figures (for the README).
REPORT = os.environ.get("RAGKB_FAULT_REPORT")
_next_number = [0]


def processing(stack: FaultStack, kb: str) -> bool:
    return any(document["status"] == "processing" for document in stack.documents(kb))


def run_fault(stack: FaultStack, kb: str, name: str, inject: Callable[[], None], *, api_down: bool = False) -> Tally:
    load = Workload(stack.api_url, stack.admin_key, kb, first_number=_next_number[0]).start()
    try:
        wait_until(lambda: load.tally.outcomes["upload accepted"] >= 3, 120, "the first uploads accepted")
        wait_until(lambda: processing(stack, kb), 120, "a document being processed")
        started = time.monotonic()
        inject()
        time.sleep(FAULT_WINDOW_S)
        wait_until(stack.ready_now, 300, f"the stack ready after the fault; log:\n{stack.log_tail()}")
        recovered_s = time.monotonic() - started
    finally:
        tally = load.stop()
        _next_number[0] = load.next_number
    documents = stack.wait_settled(kb)
    check_outcome(stack, kb, tally, documents, api_down=api_down)
    record(name, tally, documents, recovered_s)
    return tally


def check_outcome(stack: FaultStack, kb: str, tally: Tally, documents: list[dict[str, Any]], *, api_down: bool) -> None:
    assert tally.violations == [], tally.violations[:10]
    if not api_down:
        refused = {key: count for key, count in tally.outcomes.items() if "connection refused" in key}
        assert not refused, f"the api was up and yet did not answer: {refused}"
    assert tally.outcomes["search correct"] > 0
    by_id = {document["id"]: document for document in documents}
    assert set(tally.accepted) <= set(by_id), "an accepted document is gone"
    for document in documents:
        assert document["status"] in ("done", "failed")
        if document["status"] == "failed":
            assert document["error"], f"failed without a reason: {document}"
    report = stack.consistency(kb)
    assert report["consistent"], report["findings"]
    census = stack.census(kb)
    for document in documents:
        versions = census.get(document["id"], {})
        if document["status"] == "done":  # one version, each chunk once
            assert versions == {str(document["indexed_version"]): document["chunk_count"]}, (document, versions)


def record(name: str, tally: Tally, documents: list[dict[str, Any]], recovered_s: float) -> None:
    figures = {
        "fault": name,
        "recovered_s": round(recovered_s, 1),
        "documents": len(documents),
        "failed": sum(document["status"] == "failed" for document in documents),
        "outcomes": dict(tally.outcomes),
    }
    print(json.dumps(figures))
    if REPORT:
        with Path(REPORT).open("a", encoding="utf-8") as report:
            report.write(json.dumps(figures) + "\n")


def test_a_worker_killed_mid_batch(stack: FaultStack, kb: str) -> None:
    run_fault(stack, kb, "worker SIGKILL mid-batch", lambda: stack.signal_service("ragkb_worker", signal.SIGKILL))


@pytest.mark.full_fault_suite
def test_the_retriever_killed_mid_write(stack: FaultStack, kb: str) -> None:
    tally = run_fault(
        stack, kb, "retriever SIGKILL mid-write", lambda: stack.signal_service("ragkb_retriever", signal.SIGKILL)
    )
    assert tally.outcomes["search 503 with Retry-After"] > 0, "no search met the retriever down: a fault missed"


@pytest.mark.full_fault_suite
def test_the_api_killed_mid_upload(stack: FaultStack, kb: str, tmp_path: Path) -> None:
    large = tmp_path / "handbook.md"
    large.write_text("# Handbook\n\n" + "The corridor lamps are checked weekly by the caretaker.\n" * 25_000)
    answers: list[int | str] = []

    def upload_large() -> None:
        try:
            with large.open("rb") as handle, stack.client_with(stack.admin_key) as client:
                files = {"file": (large.name, handle)}
                answers.append(client.post(f"/v1/knowledge-bases/{kb}/documents", files=files).status_code)
        except httpx.TransportError as exc:
            answers.append(type(exc).__name__)

    def kill_mid_upload() -> None:
        uploader = threading.Thread(target=upload_large, daemon=True)
        uploader.start()
        time.sleep(0.05)
        stack.signal_service("ragkb_api", signal.SIGKILL)
        uploader.join(timeout=60)

    run_fault(stack, kb, "api SIGKILL mid-upload", kill_mid_upload, api_down=True)
    assert answers and answers[0] in (202, "RemoteProtocolError", "ReadError", "WriteError", "ConnectError"), answers


@pytest.mark.full_fault_suite
def test_redis_killed_and_started_again_empty(stack: FaultStack, kb: str) -> None:
    def restart_redis() -> None:
        stack.redis_server.kill()
        time.sleep(3)
        stack.redis_server.start()

    run_fault(stack, kb, "Redis SIGKILL, restarted empty", restart_redis)
