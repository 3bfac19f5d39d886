"""The guards and hooks every request passes through are async: Litestar runs a sync guard or `before_request`
in a worker thread, and that hand-off cost each request (a search on both services) more than the check it
ran (README: Latency, async hooks)."""

from __future__ import annotations

import inspect
import secrets
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.handlers import HTTPRouteHandler
from litestar.utils.sync import AsyncCallable

from ragkb_api.app import create_app
from ragkb_api.settings import ApiSettings
from ragkb_core.settings import AuthSettings, BlobSettings, DatabaseSettings
from ragkb_http import service_token_guard

pytestmark = [
    # Raised while the app is built (the service processes do not run with warnings as errors): the handlers'
    # inferred dependencies and body markers, which Litestar 3 will want declared differently.
    pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Deprecated 'query' parameter:DeprecationWarning"),
]


def _http_handlers(app: Litestar) -> list[HTTPRouteHandler]:
    return [
        handler
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        if isinstance(handler, HTTPRouteHandler)
    ]


def test_no_route_of_the_api_runs_a_guard_or_before_request_in_a_thread(tmp_path: Path) -> None:
    settings = ApiSettings(
        database=DatabaseSettings(url=f"sqlite:///{tmp_path / 'ragkb.db'}"),
        blobs=BlobSettings(root=tmp_path / "blobs"),
        auth=AuthSettings.model_validate({"bootstrap_admin_key": secrets.token_urlsafe(32)}),
    )
    handlers = _http_handlers(create_app(settings))
    assert any("/v1/search" in handler.paths for handler in handlers)
    for handler in handlers:
        guards = handler.resolve_guards()
        assert guards, handler.paths  # every route is guarded (public ones by declaration)
        assert not any(isinstance(guard, AsyncCallable) for guard in guards), handler.paths
        assert not isinstance(handler.resolve_before_request(), AsyncCallable), handler.paths


def test_the_retrievers_service_token_guard_is_async() -> None:
    assert inspect.iscoroutinefunction(service_token_guard("token"))
