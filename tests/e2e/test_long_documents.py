"""Long documents in parallel, on the real stack: a stack of its own with two task processes, a low split
threshold (6 pages, 3 pages a range) and a real HTTP proxy between the services and the retriever
(tests/support/retriever_proxy.py), which records each document write and can refuse one. A long PDF reaches
`done` with exactly the chunks the unsplit pipeline cuts, its progress counting ranges; the same file again is
`unchanged`; task processes killed mid-range cost only the ranges they held, built again, and the refused
write of the version is retried without building any range again; the whole worker killed with SIGKILL
mid-range loses nothing and duplicates no chunk."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

from ragkb_cli.api import wait_until_ended
from ragkb_cli.stack import PrivateStack, free_port, private_stack
from ragkb_core import formats
from ragkb_core.kb_settings import KbChunking
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import EmbeddingSettings, RetrieverClientSettings
from ragkb_models import EmbedderPool
from ragkb_worker.chunking import Chunker
from ragkb_worker.parsing import parse
from tests.e2e.conftest import POLL_S, REPO, service_pids
from tests.support.retriever_proxy import ProxyState, retriever_proxy

pytestmark = pytest.mark.e2e

SPLIT_ABOVE_PAGES = 6
PAGES_PER_RANGE = 3
# Editions uploaded and killed until a kill lands in a range (test_a_failed_range_is_built_again_alone...).
KILL_TRIES = 3
TOPICS = ["forklift", "badge", "parking", "canteen", "laptop", "visitor", "fire drill", "travel", "printer", "locker"]


@dataclass
class LongStack:
    stack: PrivateStack
    proxy: ProxyState
    http: httpx.Client
    retriever: RetrieverClient

    def create_kb(self, name: str) -> str:
        response = self.http.post("/v1/knowledge-bases", json={"name": name})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def upload(self, kb_id: str, data: bytes, source_id: str = "manual.pdf") -> dict[str, Any]:
        response = self.http.post(
            f"/v1/knowledge-bases/{kb_id}/documents",
            files={"file": ("manual.pdf", data, "application/pdf")},
            data={"source_id": source_id},
        )
        assert response.status_code == 202, response.text
        body: dict[str, Any] = response.json()
        return body

    def document(self, kb_id: str, document_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()
        return body

    def wait_done(self, kb_id: str, document_id: str, timeout_s: float = 300) -> dict[str, Any]:
        document = wait_until_ended(lambda: self.document(kb_id, document_id), timeout_s, POLL_S)
        assert document["status"] == "done", f"{document}\nlog:\n{self.stack.log_tail()}"
        return document

    def task_processes(self) -> list[int]:
        """The worker's task processes: the children of its main process."""
        workers = service_pids(str(self.stack.workdir), "ragkb_worker")
        return [pid for pid in workers if parent_of(pid) in workers]

    def chunks(self, kb_id: str, document: dict[str, Any]) -> list[tuple[Any, ...]]:
        points = self.retriever.export_document(kb_id, document["id"], document["version"])
        return sorted(
            (c.ordinal, c.text, c.page, tuple(c.heading_path), c.char_start, c.char_end) for c in points.chunks
        )


@pytest.fixture(scope="module")
def long_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LongStack]:
    workdir = tmp_path_factory.mktemp("ragkb-long")
    retriever_port, proxy_port = free_port(), free_port()
    overrides = {
        "RAGKB_TEST_CWD": str(workdir),
        "RAGKB_RETRIEVER__PORT": str(retriever_port),
        # The api and the worker reach the retriever through the proxy.
        "RAGKB_RETRIEVER__URL": f"http://127.0.0.1:{proxy_port}",
        "RAGKB_LONG_DOCUMENTS__SPLIT_ABOVE_PAGES": str(SPLIT_ABOVE_PAGES),
        "RAGKB_LONG_DOCUMENTS__PAGES_PER_RANGE": str(PAGES_PER_RANGE),
        # Two task processes, one core each: the ranges of one document run side by side.
        "RAGKB_TASKS__CONCURRENCY": "2",
        "RAGKB_EMBEDDING__THREADS": "1",
        "RAGKB_TASKS__LEASE_S": "20",
        "RAGKB_TASKS__SWEEP_INTERVAL_S": "2",
    }
    with (
        retriever_proxy(f"http://127.0.0.1:{retriever_port}", proxy_port) as proxy,
        private_stack(REPO, workdir, **overrides) as stack,
    ):
        headers = {"Authorization": f"Bearer {stack.admin_key}"}
        token = SecretStr(stack.env["RAGKB_SERVICE_TOKEN"])
        retriever = RetrieverClient(RetrieverClientSettings(url=f"http://127.0.0.1:{retriever_port}"), token)
        with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as http:
            yield LongStack(stack, proxy, http, retriever)
        retriever.close()


@pytest.fixture(scope="module")
def unsplit_chunking() -> Chunker:
    """The chunker an unsplit document goes through (the default model's tokenizer, the KB's defaults)."""
    return Chunker(EmbedderPool(EmbeddingSettings()).get(), KbChunking())


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def manual_pdf(pages: int, edition: str = "") -> bytes:
    """A text PDF whose every page is about its own topic and number, with a running footer."""
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    for number in range(1, pages + 1):
        topic = TOPICS[number % len(TOPICS)]
        lines = [f"Section {number}: {topic} rules {edition}".strip()]
        lines += [f"Rule {number}.{n}: the {topic} procedure step {n} applies to building {number}." for n in range(12)]
        drawing.setFont("Helvetica", 10)
        for row, line in enumerate(lines):
            drawing.drawString(50, 780 - 18 * row, line)
        drawing.drawString(280, 30, f"Staff manual - {number}")
        drawing.showPage()
    drawing.save()
    return buffer.getvalue()


def expected_chunks(chunker: Chunker, data: bytes) -> list[tuple[Any, ...]]:
    chunks, _ = chunker.chunk(parse(formats.PDF, data))
    return [(n, c.text, c.page, c.heading_path, c.char_start, c.char_end) for n, c in enumerate(chunks)]


def ranges_of(pages: int) -> int:
    return -(-pages // PAGES_PER_RANGE)


def test_a_long_pdf_is_built_in_ranges_with_its_unsplit_chunks_and_again_is_unchanged(
    long_stack: LongStack, unsplit_chunking: Chunker
) -> None:
    kb_id, data = long_stack.create_kb("long-pdf"), manual_pdf(24)
    accepted = long_stack.upload(kb_id, data)
    progress: list[int] = []
    while (document := long_stack.document(kb_id, accepted["id"]))["status"] not in ("done", "failed"):
        if document["ranges"] and (not progress or progress[-1] != document["ranges"]["done"]):
            progress.append(document["ranges"]["done"])
        time.sleep(POLL_S)
    assert document["status"] == "done", document
    assert document["ranges"] == {"done": ranges_of(24), "total": ranges_of(24)}
    assert progress == sorted(progress) and progress[0] < ranges_of(24), progress

    expected = expected_chunks(unsplit_chunking, data)
    assert long_stack.chunks(kb_id, document) == expected
    assert document["chunk_count"] == len(expected) == long_stack.retriever.count_points(kb_id, document["id"])
    # The ingest job counted the same ranges.
    jobs = long_stack.http.get(f"/v1/knowledge-bases/{kb_id}/jobs", params={"kind": "ingest"}).json()
    job = next(job for job in jobs if job["document_id"] == document["id"])
    assert job["status"] == "succeeded"
    assert job["progress"] == {"current": ranges_of(24), "total": ranges_of(24)}
    # Searchable on its pages, and the same bytes again change nothing.
    hits = long_stack.http.post(
        "/v1/search", json={"query": "badge procedure building 21", "knowledge_base_ids": [kb_id], "top_k": 3}
    ).json()["results"]
    assert 21 in [hit["page"] for hit in hits]
    again = long_stack.upload(kb_id, data)
    assert again["unchanged"] is True and again["version"] == document["version"]


def test_a_failed_range_is_built_again_alone_and_nothing_is_lost_or_twice(
    long_stack: LongStack, unsplit_chunking: Chunker
) -> None:
    kb_id = long_stack.create_kb("long-pdf-task-killed")
    # A kill that lands while both processes are between two ranges (a range of these pages takes ~0.1 s on a fast
    # machine) fails no range: then another edition is uploaded and killed again.
    for edition in range(KILL_TRIES):
        data = manual_pdf(60, edition=f"tasks killed {edition}")
        accepted = long_stack.upload(kb_id, data)
        wait_for_ranges(long_stack, kb_id, accepted["id"], at_least=2)
        # The task processes, not their parent: each dies mid-range (at most one range each), as an OOM kill does.
        task_processes = long_stack.task_processes()
        assert len(task_processes) == 2
        for pid in task_processes:
            kill_quietly(pid)

        document = long_stack.wait_done(kb_id, accepted["id"], timeout_s=420)
        # Whatever the kill hit, nothing is lost or built twice.
        expected = expected_chunks(unsplit_chunking, data)
        assert long_stack.chunks(kb_id, document) == expected
        assert long_stack.retriever.count_points(kb_id, document["id"]) == len(expected) == document["chunk_count"]
        retried = document["ingest_report"]["ranges_retried"]
        if retried:
            break
    assert 1 <= len(retried) <= 2 and all(entry["attempts"] == 2 for entry in retried), retried


def test_a_refused_write_of_the_version_is_retried_without_building_any_range_again(long_stack: LongStack) -> None:
    kb_id = long_stack.create_kb("long-pdf-flaky")
    long_stack.proxy.refuse_once(page=1)  # the version's one write: every range's points at once
    accepted = long_stack.upload(kb_id, manual_pdf(18, edition="flaky"))
    document = long_stack.wait_done(kb_id, accepted["id"])

    writes = long_stack.proxy.writes_of(document["id"])
    assert [(write.status, write.chunks) for write in writes] == [
        (503, document["chunk_count"]),
        (200, document["chunk_count"]),
    ]
    assert document["ingest_report"]["ranges_retried"] == []
    assert document["ranges"] == {"done": ranges_of(18), "total": ranges_of(18)}
    assert document["chunk_count"] == long_stack.retriever.count_points(kb_id, document["id"])


def test_the_worker_killed_mid_range_loses_nothing_and_duplicates_no_chunk(
    long_stack: LongStack, unsplit_chunking: Chunker
) -> None:
    kb_id, data = long_stack.create_kb("long-pdf-killed"), manual_pdf(60, edition="killed")
    accepted = long_stack.upload(kb_id, data)
    wait_for_ranges(long_stack, kb_id, accepted["id"], at_least=2)
    for pid in service_pids(
        str(long_stack.stack.workdir), "ragkb_worker"
    ):  # the whole worker: the launcher restarts it
        kill_quietly(pid)

    document = long_stack.wait_done(kb_id, accepted["id"], timeout_s=420)
    expected = expected_chunks(unsplit_chunking, data)
    assert document["ranges"] == {"done": ranges_of(60), "total": ranges_of(60)}
    assert long_stack.chunks(kb_id, document) == expected
    assert long_stack.retriever.count_points(kb_id, document["id"]) == len(expected) == document["chunk_count"]


def wait_for_ranges(long_stack: LongStack, kb_id: str, document_id: str, at_least: int) -> None:
    deadline = time.monotonic() + 180
    while (long_stack.document(kb_id, document_id)["ranges"] or {}).get("done", 0) < at_least:
        assert time.monotonic() < deadline, long_stack.stack.log_tail()
        time.sleep(0.1)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # one of the task processes went with its parent
        os.kill(pid, signal.SIGKILL)
