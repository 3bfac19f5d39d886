"""docker-compose.yml is written for a real Docker host (none runs here): check it against the code."""

from __future__ import annotations

import importlib.util
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from ragkb_api.settings import ApiSettings
from ragkb_core.settings_doc import env_variables
from ragkb_retriever.settings import RetrieverSettings
from ragkb_worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]
SERVICES: dict[str, type[BaseSettings]] = {"api": ApiSettings, "worker": WorkerSettings, "retriever": RetrieverSettings}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def test_compose_names_every_service(compose: dict[str, Any]) -> None:
    assert {"redis", "qdrant", "postgres", "api", "worker", "retriever"} <= set(compose["services"])


@pytest.mark.parametrize("service", ["redis", "qdrant", "postgres", "api", "worker", "retriever"])
def test_compose_restarts_and_checks_the_health_of_every_service(compose: dict[str, Any], service: str) -> None:
    definition = compose["services"][service]
    assert definition.get("restart") in {"always", "unless-stopped", "on-failure"}, service
    assert definition["healthcheck"]["test"], service


@pytest.mark.parametrize(("service", "section"), [("api", "api"), ("retriever", "retriever"), ("worker", "worker")])
def test_compose_lets_a_service_drain_before_it_kills(compose: dict[str, Any], service: str, section: str) -> None:
    """`docker compose stop` waits stop_grace_period, then SIGKILLs: it must wait longer than the service
    lets its requests or tasks drain."""
    definition = compose["services"][service]
    drain_s = float(definition["environment"][f"RAGKB_{section.upper()}__DRAIN_S"])
    assert _seconds(definition["stop_grace_period"]) >= drain_s + 10


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60}
    return float(duration[:-1]) * units[duration[-1]]


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_compose_sets_every_variable_the_service_reads(compose: dict[str, Any], service: str) -> None:
    environment = compose["services"][service]["environment"]
    expected = {variable.name for variable in env_variables(SERVICES[service])}
    assert sorted(expected - set(environment)) == []


# OpenTelemetry's own variables, read by its SDK (ragkb_telemetry.tracing), not by a settings class.
OPENTELEMETRY_VARIABLES = {"OTEL_EXPORTER_OTLP_ENDPOINT"}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_compose_sets_no_variable_the_service_ignores(compose: dict[str, Any], service: str) -> None:
    environment = compose["services"][service]["environment"]
    read = {variable.name for variable in env_variables(SERVICES[service])}
    assert sorted(set(environment) - read - OPENTELEMETRY_VARIABLES) == []


def readme_settings() -> set[str]:
    """The variables the README's configuration table names; `__X` after a full name in a cell continues that
    name's section (`RAGKB_TASKS__LEASE_S` / `__SWEEP_INTERVAL_S`)."""
    section = (REPO / "README.md").read_text().split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    names = set()
    for row in section.splitlines():
        if not row.startswith("| `RAGKB_"):
            continue
        prefix = ""
        for token in re.findall(r"`((?:RAGKB_|__)[A-Z0-9_]+)`", row.split("|")[1]):
            name = prefix + token if token.startswith("__") else token
            names.add(name)
            prefix = name.rsplit("__", 1)[0] if "__" in name else ""
    return names


def test_the_readme_lists_every_setting_a_service_reads() -> None:
    read = {variable.name for settings in SERVICES.values() for variable in env_variables(settings)}
    listed = readme_settings()
    assert sorted(read - listed) == [], "settings missing from the README's table"
    assert sorted(listed - read) == [], "the README lists settings no service reads"


def test_services_and_dockerfile_targets_exist(compose: dict[str, Any]) -> None:
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    for name in SERVICES:
        build = compose["services"][name]["build"]
        assert f"AS {build['target']}" in dockerfile
        assert (REPO / build["dockerfile"]).exists()


def test_the_launcher_makes_an_admin_key_once_readable_only_by_its_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("launcher", REPO / "deploy" / "launcher.py")
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "launcher", launcher)  # its dataclasses look their module up there
    spec.loader.exec_module(launcher)
    monkeypatch.chdir(tmp_path)
    first: dict[str, str] = {}
    assert "var/admin.key" in launcher._ensure_secrets(first)
    key_file = tmp_path / "var" / "admin.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert first["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"] == key_file.read_text().strip()
    assert len(first["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]) >= 32 and len(first["RAGKB_SERVICE_TOKEN"]) >= 32
    second: dict[str, str] = {}
    launcher._ensure_secrets(second)
    assert second["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"] == first["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]
    assert second["RAGKB_SERVICE_TOKEN"] != first["RAGKB_SERVICE_TOKEN"]
    configured = {"RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": "x" * 40, "RAGKB_SERVICE_TOKEN": "t" * 40}
    launcher._ensure_secrets(configured)
    assert configured == {"RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": "x" * 40, "RAGKB_SERVICE_TOKEN": "t" * 40}
