"""Route access declarations and the retriever's service-token guard.

Every route handler declares who may call it in its `opt` (`opt=access("public")`); a guard on the whole
app reads that declaration, and a handler that declares nothing is treated as the most restricted kind:
an endpoint added later is born closed.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from ragkb_core.errors import Unauthorized
from ragkb_core.retriever_client import SERVICE_TOKEN_HEADER

ACCESS_OPT = "access"
PUBLIC = "public"

# Async, as every guard and hook of our apps: Litestar runs a sync one in a worker thread, a hand-off that cost
# each request more than the check itself (tests/unit/test_app_hooks.py keeps them async).
Guard = Callable[[ASGIConnection[Any, Any, Any, Any], BaseRouteHandler], Awaitable[None]]


def access(level: str) -> dict[str, Any]:
    """The `opt` of a route handler that `level` callers may reach (e.g. "public", "read", "admin")."""
    return {ACCESS_OPT: level}


def declared_access(handler: BaseRouteHandler, default: str) -> str:
    return str(handler.opt.get(ACCESS_OPT, default))


def service_token_guard(token: str) -> Guard:
    """Internal services only: every non-public route needs the shared token, compared in constant time."""
    expected = token.encode("utf-8")

    async def guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        if declared_access(handler, default="service") == PUBLIC:
            return
        presented = connection.headers.get(SERVICE_TOKEN_HEADER, "").encode("utf-8")
        if not hmac.compare_digest(presented, expected):
            raise Unauthorized(f"internal API: send the service token in {SERVICE_TOKEN_HEADER}")

    return guard
