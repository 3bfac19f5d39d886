"""Observability pieces without the stack (issue 23): the request id a caller may send, the log formats, the
scrape token, and deploy/observability checked against the metrics the code exports. The stack's own metrics,
logs and traces are checked end to end in tests/e2e/test_observability.py."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from litestar import Litestar
from litestar.testing import TestClient
from prometheus_client import REGISTRY
from pydantic import SecretStr

from ragkb_api.rate_limit import refused
from ragkb_cli.stack import PrivateStack, free_port
from ragkb_core import request_context
from ragkb_core.settings import MetricsSettings
from ragkb_http import PROBLEM_HANDLERS
from ragkb_http.observability import ACCESS_LOG_FORMAT, metrics_router, observation_middleware
from ragkb_telemetry.exposition import scrape_registry
from ragkb_telemetry.logs import ConsoleFormatter, ContextFilter, JsonFormatter
from ragkb_worker.health import start_health_server

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "deploy" / "observability"
# Where metric names are defined: the metric objects and the gauges read at scrape time.
METRIC_SOURCES = [
    *(REPO / "libs" / "telemetry" / "src").rglob("*.py"),
    REPO / "services" / "api" / "src" / "ragkb_api" / "app.py",
]
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum")


@pytest.mark.parametrize("sent", ["a" * 129, "two\nlines", "spaced id", "", None, "<script>"])
def test_an_implausible_request_id_is_replaced_by_a_fresh_one(sent: str | None) -> None:
    chosen = request_context.accepted_request_id(sent)
    assert chosen != sent and re.fullmatch(r"[0-9a-f]{32}", chosen)


@pytest.mark.parametrize("sent", ["4bf92f3577b34da6a3ce929d0e0e4736", "req-1:retry/2", "a" * 128])
def test_a_plausible_request_id_is_kept(sent: str) -> None:
    assert request_context.accepted_request_id(sent) == sent


def _record(message: str, **extra: Any) -> logging.LogRecord:
    record = logging.makeLogRecord({"name": "ragkb.test", "levelname": "INFO", "msg": message, **extra})
    ContextFilter().filter(record)
    return record


def test_a_json_line_carries_the_bound_ids_and_the_extra_fields() -> None:
    with request_context.bound(request="req-42", kb="k" * 32, document="d" * 32):
        line = json.loads(JsonFormatter("api").format(_record("search %d KBs", args=(1,), duration_ms=3.5)))
    assert line["message"] == "search 1 KBs" and line["service"] == "api" and line["level"] == "INFO"
    assert (line["request_id"], line["kb_id"], line["document_id"]) == ("req-42", "k" * 32, "d" * 32)
    assert line["duration_ms"] == 3.5
    assert "trace_id" not in line  # no trace without a recording span


def test_a_console_line_ends_with_the_ids_it_is_about() -> None:
    with request_context.bound(request="req-7"):
        text = ConsoleFormatter("worker").format(_record("document ready"))
    assert text.endswith("worker INFO ragkb.test: document ready [request_id=req-7]")


def test_a_stacks_log_tail_leaves_out_the_access_lines_and_keeps_what_the_services_said(tmp_path: Path) -> None:
    # A test polling a document wrote thousands of access lines: the tail it printed hid the worker entirely.
    http = logging.makeLogRecord(
        {"name": "ragkb.http", "levelname": "INFO", "msg": ACCESS_LOG_FORMAT, "args": ("GET", "/v1/x", 200, 3.1)}
    )
    ContextFilter().filter(http)
    refusal = logging.makeLogRecord({"name": "ragkb.http", "levelname": "WARNING", "msg": "POST /v1/search: too large"})
    ContextFilter().filter(refusal)
    worker = ConsoleFormatter("worker").format(_record("re-queued 1 documents"))
    access = ConsoleFormatter("api").format(http)
    stack = PrivateStack(REPO, tmp_path, {})
    stack.log_path.write_text("\n".join([worker, *[access] * 50, ConsoleFormatter("api").format(refusal)]) + "\n")
    assert stack.log_tail().splitlines() == [worker, ConsoleFormatter("api").format(refusal)]


def test_the_ids_are_unbound_after_their_block() -> None:
    with request_context.bound(request="outer"):
        with request_context.bound(request="inner", kb="k"):
            assert request_context.current() == {"request_id": "inner", "kb_id": "k"}
        assert request_context.current() == {"request_id": "outer"}
    assert request_context.current() == {}


def test_a_rate_limit_refusal_is_counted() -> None:
    before = REGISTRY.get_sample_value("ragkb_rate_limit_refusals_total") or 0.0
    assert refused(2.5).status == 429
    assert REGISTRY.get_sample_value("ragkb_rate_limit_refusals_total") == before + 1


def _litestar_with_metrics(settings: MetricsSettings) -> Litestar:
    return Litestar(
        route_handlers=[metrics_router(scrape_registry(), settings)],
        middleware=observation_middleware("api"),
        exception_handlers=PROBLEM_HANDLERS,
        logging_config=None,
    )


def test_metrics_behind_a_token_answer_only_a_scrape_that_sends_it() -> None:
    app = _litestar_with_metrics(MetricsSettings(token=SecretStr("scrape-secret")))
    with TestClient(app) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "scrape-secret" not in refused.text
        answered = client.get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
        assert answered.status_code == 200 and "ragkb_http_requests_total" in answered.text
        assert answered.headers["x-request-id"]


def test_metrics_can_be_switched_off() -> None:
    with TestClient(_litestar_with_metrics(MetricsSettings(enabled=False))) as client:
        assert client.get("/metrics").status_code == 404


def test_the_workers_health_port_serves_metrics_behind_its_token() -> None:
    port = free_port()
    server = start_health_server(
        "127.0.0.1", port, {"nothing": lambda: True}, scrape_registry(), SecretStr("worker-secret")
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert httpx.get(url).status_code == 401
        answered = httpx.get(url, headers={"Authorization": "Bearer worker-secret"})
        assert answered.status_code == 200 and answered.headers["content-type"].startswith("text/plain")
    finally:
        server.shutdown()
        server.server_close()


# -- deploy/observability against the code --------------------------------------------------------------------


def _exported_names() -> set[str]:
    names: set[str] = set()
    for path in METRIC_SOURCES:
        names |= set(re.findall(r'"(ragkb_[a-z_]+)"', path.read_text()))
    return names


def _base_name(sample: str) -> str:
    for suffix in SAMPLE_SUFFIXES:
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((OBSERVABILITY / "grafana" / "dashboards" / "ragkb.json").read_text())
    return loaded


def _alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_metric_the_alerts_and_the_dashboard_use_is_one_ragkb_exports() -> None:
    exported = _exported_names()
    queries = [rule["expr"] for rule in _alert_rules()]
    queries += [target["expr"] for panel in _dashboard()["panels"] for target in panel["targets"]]
    used = {_base_name(name) for query in queries for name in re.findall(r"\bragkb_[a-z_]+", query)}
    assert used, "no ragkb metric used"
    assert sorted(used - exported) == []


def test_every_alert_is_explained_in_the_readme() -> None:
    operating = (REPO / "README.md").read_text().split("## Operating ragkb\n", 1)[1].split("\n## ", 1)[0]
    for rule in _alert_rules():
        assert rule["annotations"]["summary"] and rule["annotations"]["runbook"] == "README.md#operating-ragkb"
        assert f"`{rule['alert']}`" in operating, rule["alert"]


def test_the_dashboard_reads_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load(
        (OBSERVABILITY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    uids = {source["uid"] for source in datasources["datasources"]}
    panels = _dashboard()["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    assert {panel["datasource"]["uid"] for panel in panels} <= uids


def test_the_compose_profile_mounts_files_that_exist_and_scrapes_every_service() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    for name in ("prometheus", "grafana", "jaeger"):
        assert compose["services"][name]["profiles"] == ["observability"]
        for volume in compose["services"][name].get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), source
    prometheus = yaml.safe_load((OBSERVABILITY / "prometheus.yml").read_text())
    targets = {target for job in prometheus["scrape_configs"] for c in job["static_configs"] for target in c["targets"]}
    assert targets == {"api:8000", "retriever:8001", "worker:8002"}
