"""docker-compose.yml is written for a real Docker host (none runs here): check it against the code."""

from __future__ import annotations

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
    for name in ("redis", "qdrant", "postgres", "api", "retriever"):
        assert "healthcheck" in compose["services"][name], name


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_compose_sets_every_variable_the_service_reads(compose: dict[str, Any], service: str) -> None:
    environment = compose["services"][service]["environment"]
    expected = {variable.name for variable in env_variables(SERVICES[service])}
    assert sorted(expected - set(environment)) == []


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_compose_sets_no_variable_the_service_ignores(compose: dict[str, Any], service: str) -> None:
    environment = compose["services"][service]["environment"]
    read = {variable.name for variable in env_variables(SERVICES[service])}
    assert sorted(set(environment) - read) == []


def test_services_and_dockerfile_targets_exist(compose: dict[str, Any]) -> None:
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    for name in SERVICES:
        build = compose["services"][name]["build"]
        assert f"AS {build['target']}" in dockerfile
        assert (REPO / build["dockerfile"]).exists()
