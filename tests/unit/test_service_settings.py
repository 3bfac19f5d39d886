"""Where each service listens and how long it drains: a service's own defaults hold field by field, so setting
one variable of a section (RAGKB_RETRIEVER__HOST) does not move the others (the port) to another class's
defaults."""

from __future__ import annotations

import pytest

from ragkb_api.settings import ApiSettings
from ragkb_retriever.settings import RetrieverSettings
from ragkb_worker.settings import WorkerSettings


def test_each_service_has_its_own_port_and_drain_bound() -> None:
    api, retriever, worker = ApiSettings().api, RetrieverSettings().retriever, WorkerSettings().worker
    assert (api.port, retriever.port, worker.port) == (8000, 8001, 8002)
    assert (api.drain_s, retriever.drain_s, worker.drain_s) == (10, 10, 30)


def test_setting_only_the_host_keeps_the_services_port(monkeypatch: pytest.MonkeyPatch) -> None:
    for section in ("API", "RETRIEVER", "WORKER"):
        monkeypatch.setenv(f"RAGKB_{section}__HOST", "0.0.0.0")
    api, retriever, worker = ApiSettings().api, RetrieverSettings().retriever, WorkerSettings().worker
    assert (api.port, retriever.port, worker.port) == (8000, 8001, 8002)
    assert worker.drain_s == 30
