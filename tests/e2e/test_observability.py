"""Observability on the real stack (issue 23): every service's /metrics parses and moves by what an ingest and a
search did; log lines are JSON with the request id they were sent and no secret; one upload makes one trace
across api, worker and retriever, exported over OTLP/HTTP to a receiver in this test process.

One stack for the module, of its own: it exports traces (OTEL_EXPORTER_OTLP_ENDPOINT) and logs JSON, which
the session's stack does not."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from ragkb_cli.stack import free_port
from tests.e2e.conftest import REPO, RunningRagkb, e2e_env
from tests.support.redis_db import private_redis_db

pytestmark = pytest.mark.e2e

KB_NAME = "observability-handbook"
POLICY = (
    "Travel policy. Employees book economy class for flights under six hours. Hotel nights are reimbursed up to "
    "the city rate; receipts are uploaded within thirty days of the trip."
)
SPAN_WAIT_S = 30.0


# -- an OTLP/HTTP receiver: what a collector would get -------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str


@dataclass
class OtlpReceiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                attributes = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
                service = attributes.get("service.name", "")
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(
                        ReceivedSpan(
                            service, span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()
                        )
                        for span in scope_spans.spans
                    )

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


def _start_receiver() -> tuple[OtlpReceiver, ThreadingHTTPServer]:
    port = free_port()
    receiver = OtlpReceiver(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            if self.path == "/v1/traces":
                receiver.receive(body)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver, server


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    receiver, server = _start_receiver()
    yield receiver
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, otlp: OtlpReceiver) -> Iterator[RunningRagkb]:
    workdir = tmp_path_factory.mktemp("ragkb-observability")
    with private_redis_db() as broker:
        redis_url = f"redis://127.0.0.1:6379/{broker.connection_pool.connection_kwargs['db']}"
        env = e2e_env(workdir, redis_url) | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            # Spans leave within 0.2 s instead of 5 s: the test waits for them.
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "RAGKB_LOG__FORMAT": "json",
        }
        service = RunningRagkb(REPO, workdir, env)
        service.start()
        yield service
        service.stop()
        service.client.close()


# -- scraping ---------------------------------------------------------------------------------------------------

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(url: str) -> tuple[str, Samples]:
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response.text, samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _urls(stack: RunningRagkb) -> dict[str, str]:
    return {
        "api": stack.api_url,
        "retriever": f"http://127.0.0.1:{stack.env['RAGKB_RETRIEVER__PORT']}",
        "worker": f"http://127.0.0.1:{stack.env['RAGKB_WORKER__PORT']}",
    }


def _upload(stack: RunningRagkb, kb_id: str, source_id: str, request_id: str) -> str:
    body = {"source_id": source_id, "title": "Travel policy", "text": POLICY}
    headers = {"X-Request-ID": request_id}
    response = stack.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body, headers=headers)
    assert response.status_code == 202, response.text
    assert response.headers["x-request-id"] == request_id
    return str(response.json()["id"])


def _search(stack: RunningRagkb, kb_id: str, request_id: str) -> httpx.Response:
    body = {"query": "how long to upload receipts", "knowledge_base_ids": [kb_id], "top_k": 3, "mode": "hybrid"}
    response = stack.client.post("/v1/search", json=body, headers={"X-Request-ID": request_id})
    assert response.status_code == 200, response.text
    return response


@pytest.fixture(scope="module")
def kb_id(stack: RunningRagkb) -> str:
    return stack.create_kb(KB_NAME)


def test_a_workers_task_process_loads_its_model_as_it_starts_before_any_task(stack: RunningRagkb) -> None:
    # The module's stack is new and nothing has been uploaded to it yet: a load is the preload's
    # (ragkb_worker.app.preload_runtime), so the first upload does not wait for the model.
    worker = _urls(stack)["worker"]
    deadline = time.monotonic() + 120
    while True:
        samples = _scrape(worker)[1]
        if _value(samples, "ragkb_model_load_seconds", role="embedder", model="multilingual-e5-small") > 0:
            break
        assert time.monotonic() < deadline, "the worker's task process did not load its model as it started"
        time.sleep(0.5)
    assert not [key for key in samples if key[0] == "ragkb_task_duration_seconds_count"]


def test_each_services_metrics_move_by_one_ingest_and_one_search(stack: RunningRagkb, kb_id: str) -> None:
    urls = _urls(stack)
    before = {name: _scrape(url)[1] for name, url in urls.items()}

    document_id = _upload(stack, kb_id, "metrics/policy.md", f"metrics-{uuid.uuid4().hex}")
    document = stack.wait_document(kb_id, document_id)
    assert document["status"] == "done", document
    chunks = document["chunk_count"]
    _search(stack, kb_id, f"metrics-{uuid.uuid4().hex}")

    after = {name: _scrape(url) for name, url in urls.items()}
    texts = {name: text for name, (text, _) in after.items()}
    now = {name: samples for name, (_, samples) in after.items()}

    def moved(scraped: str, name: str, **labels: str) -> float:
        return _value(now[scraped], name, **labels) - _value(before[scraped], name, **labels)

    search = {"service": "api", "method": "POST", "route": "/v1/search", "status": "200"}
    upload = {"service": "api", "method": "POST", "route": "/v1/knowledge-bases/{kb_id}/documents", "status": "202"}
    assert moved("api", "ragkb_http_requests_total", **search) == 1
    assert moved("api", "ragkb_http_request_duration_seconds_count", **search) == 1
    assert moved("api", "ragkb_http_requests_total", **upload) == 1
    for stage in ("auth", "kbs", "retriever", "total"):
        assert moved("api", "ragkb_api_search_stage_seconds_count", stage=stage) == 1, stage
    assert _value(now["api"], "ragkb_queue_depth", queue="ingest") == 0
    assert _value(now["api"], "ragkb_queue_oldest_task_age_seconds", queue="ingest") == 0
    assert _value(now["api"], "ragkb_documents", status="done") >= 1
    assert _value(now["api"], "ragkb_index_points", kb_id=kb_id) == chunks

    internal_search = {"service": "retriever", "method": "POST", "route": "/internal/v1/search", "status": "200"}
    assert moved("retriever", "ragkb_http_requests_total", **internal_search) == 1
    for stage in ("embed", "analyze", "retrieve", "assemble"):
        assert moved("retriever", "ragkb_search_stage_seconds_count", stage=stage, mode="hybrid") == 1, stage
    assert _value(now["retriever"], "ragkb_model_load_seconds", role="embedder", model="multilingual-e5-small") > 0

    assert moved("worker", "ragkb_documents_ingested_total", kb_id=kb_id) == 1
    assert moved("worker", "ragkb_chunks_ingested_total", kb_id=kb_id) == chunks
    for stage in ("parse", "chunk", "embed", "index"):
        assert moved("worker", "ragkb_ingest_stage_seconds_count", stage=stage) == 1, stage
    assert moved("worker", "ragkb_task_duration_seconds_count", task="ragkb.ingest_documents", outcome="success") == 1
    assert moved("worker", "ragkb_task_queue_wait_seconds_count", queue="ingest") == 1

    # Bounded labels: no KB name, no query, no raw path with an id in it.
    for service, text in texts.items():
        assert KB_NAME not in text, service
        assert "receipts" not in text, service
        assert f"/v1/knowledge-bases/{kb_id}/" not in text, service

    # The written shard's WAL is synced to disk within about a second (the whole flush waits for its minute).
    def wal_syncs() -> float:
        return _value(_scrape(urls["retriever"])[1], "ragkb_index_upkeep_seconds_count", operation="wal_sync")

    synced_before = _value(before["retriever"], "ragkb_index_upkeep_seconds_count", operation="wal_sync")
    deadline = time.monotonic() + 15
    while wal_syncs() <= synced_before:
        assert time.monotonic() < deadline, "the retriever did not sync the written shard's WAL"
        time.sleep(0.2)


def _json_lines(stack: RunningRagkb) -> list[dict[str, Any]]:
    lines = []
    for line in stack.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))  # every JSON-looking line must parse
    return lines


def test_a_search_logs_json_lines_with_its_request_id_and_no_key(stack: RunningRagkb, kb_id: str) -> None:
    document_id = _upload(stack, kb_id, "logs/policy.md", f"logs-upload-{uuid.uuid4().hex}")
    assert stack.wait_document(kb_id, document_id)["status"] == "done"
    request_id = f"logs-{uuid.uuid4().hex}"
    response = _search(stack, kb_id, request_id)
    assert response.headers["x-request-id"] == request_id

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        mine = [line for line in _json_lines(stack) if line.get("request_id") == request_id]
        if {line["service"] for line in mine} >= {"api", "retriever"}:
            break
        time.sleep(0.2)
    search_lines = [line for line in mine if line["logger"] == "ragkb.search"]
    assert len(search_lines) == 1, mine
    assert search_lines[0]["kb_ids"] == [kb_id]
    assert search_lines[0]["service"] == "api" and search_lines[0]["level"] == "INFO"
    # The retriever's part of the request is logged under the same id (carried in X-Request-ID).
    assert any(line["service"] == "retriever" and line["route"] == "/internal/v1/search" for line in mine), mine
    secrets = (stack.admin_key, stack.env["RAGKB_SERVICE_TOKEN"])
    for line in _json_lines(stack):
        text = json.dumps(line)
        assert not any(secret in text for secret in secrets), line
    # Neither the query nor the document's text is logged.
    assert not any("receipts" in json.dumps(line) for line in mine)


def test_an_upload_without_a_request_id_gets_one_that_reaches_the_worker(stack: RunningRagkb, kb_id: str) -> None:
    body = {"source_id": "logs/generated.md", "title": "Travel policy", "text": POLICY}
    response = stack.client.post(f"/v1/knowledge-bases/{kb_id}/documents", json=body)
    assert response.status_code == 202, response.text
    request_id = response.headers["x-request-id"]
    assert len(request_id) == 32
    document_id = response.json()["id"]
    assert stack.wait_document(kb_id, document_id)["status"] == "done"
    worker_lines = [line for line in _json_lines(stack) if line["service"] == "worker"]
    ingest = [line for line in worker_lines if line.get("document_id") == document_id]
    assert ingest and all(line["request_id"] == request_id and line["kb_id"] == kb_id for line in ingest), ingest


def _wait_trace(otlp: OtlpReceiver, trace_id: str, services: set[str]) -> list[ReceivedSpan]:
    deadline = time.monotonic() + SPAN_WAIT_S
    while time.monotonic() < deadline:
        spans = otlp.trace(trace_id)
        if {span.service for span in spans} >= services:
            time.sleep(1)  # the last batches of each service
            return otlp.trace(trace_id)
        time.sleep(0.2)
    raise AssertionError(f"trace {trace_id} has spans of {sorted({s.service for s in otlp.trace(trace_id)})} only")


def _ancestors(span: ReceivedSpan, by_id: dict[str, ReceivedSpan]) -> list[ReceivedSpan]:
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def test_one_upload_is_one_trace_from_the_api_through_the_worker_to_the_retriever(
    stack: RunningRagkb, kb_id: str, otlp: OtlpReceiver
) -> None:
    request_id = f"trace-{uuid.uuid4().hex}"
    document_id = _upload(stack, kb_id, "trace/policy.md", request_id)
    assert stack.wait_document(kb_id, document_id)["status"] == "done"
    # The worker's log line of this ingest names the trace it ran in.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        traced = [
            line
            for line in _json_lines(stack)
            if line["service"] == "worker" and line.get("document_id") == document_id and "trace_id" in line
        ]
        if traced:
            break
        time.sleep(0.2)
    assert traced, "the worker logged no trace id for the ingest"
    trace_id = traced[0]["trace_id"]
    assert traced[0]["request_id"] == request_id

    spans = _wait_trace(otlp, trace_id, {"ragkb-api", "ragkb-worker", "ragkb-retriever"})
    by_id = {span.span_id: span for span in spans}
    roots = [span for span in spans if span.parent_span_id not in by_id]
    assert len(roots) == 1 and roots[0].service == "ragkb-api", roots
    assert "POST /v1/knowledge-bases/{kb_id}/documents" in roots[0].name, roots[0]

    # The worker's task runs as a child of the api's publication of it.
    run = next(span for span in spans if span.service == "ragkb-worker" and span.name.startswith("run/"))
    publish = by_id[run.parent_span_id]
    assert publish.service == "ragkb-api" and publish.name.startswith("apply_async/"), publish
    assert roots[0] in _ancestors(publish, by_id)

    # The retriever's write of the document's chunks is a child of the worker's call, inside the task's run.
    write = next(
        span
        for span in spans
        if span.service == "ragkb-retriever" and span.name.startswith("PUT /internal/v1/kbs/{kb_id}/documents/")
    )
    caller = by_id[write.parent_span_id]
    assert caller.service == "ragkb-worker" and caller.name.startswith("PUT"), caller
    assert run in _ancestors(caller, by_id)
    # The worker's database statements are in the trace too.
    worker_spans = [span.name for span in spans if span.service == "ragkb-worker" and run in _ancestors(span, by_id)]
    assert any(name.split(" ")[0] in ("SELECT", "UPDATE", "INSERT") for name in worker_spans), worker_spans


def test_one_search_is_one_trace_from_the_api_through_its_call_to_the_retriever(
    stack: RunningRagkb, kb_id: str, otlp: OtlpReceiver
) -> None:
    # The api calls the retriever's search on its own HTTP client (ragkb_api.retriever_async), not through the
    # instrumented httpx: its client span and the trace context it sends must still join the two services.
    document_id = _upload(stack, kb_id, "trace/search-policy.md", f"upload-{uuid.uuid4().hex}")
    assert stack.wait_document(kb_id, document_id)["status"] == "done"
    request_id = f"search-trace-{uuid.uuid4().hex}"
    _search(stack, kb_id, request_id)
    deadline = time.monotonic() + 10
    traced: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not traced:
        traced = [
            line
            for line in _json_lines(stack)
            if line["service"] == "api" and line.get("request_id") == request_id and "trace_id" in line
        ]
        time.sleep(0.2)
    assert traced, "the api logged no trace id for the search"

    spans = _wait_trace(otlp, traced[0]["trace_id"], {"ragkb-api", "ragkb-retriever"})
    by_id = {span.span_id: span for span in spans}
    roots = [span for span in spans if span.parent_span_id not in by_id]
    assert len(roots) == 1 and roots[0].service == "ragkb-api" and "POST /v1/search" in roots[0].name, roots
    served = next(span for span in spans if span.service == "ragkb-retriever" and "/internal/v1/search" in span.name)
    call = by_id[served.parent_span_id]
    assert call.service == "ragkb-api" and call.name == "POST /internal/v1/search", call
    assert roots[0] in _ancestors(call, by_id)
