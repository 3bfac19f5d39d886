"""Authentication and authorisation of every public route, in one place: a guard on the whole app.

It resolves the caller from `Authorization: Bearer <key>` (401 when missing, unknown or revoked), checks what
the route declares it needs (`opt=access(...)`, admin when undeclared) against the caller's role and its
grant for the path's `kb_id` (403, or 404 for a KB the caller may not read), and leaves the caller in the
request state for the handlers that scope their answers (KB list, search). An authenticated caller then
spends one request of its key's rate limit (429 when spent; ragkb_api.rate_limit); refused and public requests
cost none."""

from __future__ import annotations

from typing import Any

from anyio.to_thread import run_sync
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from ragkb_api.access import DEFAULT_ACCESS, Caller, authorize, bearer_token
from ragkb_api.rate_limit import RateLimiter
from ragkb_api.services import ApiKeyService
from ragkb_http import PUBLIC, declared_access

CALLER_STATE = "caller"


class AccessGuard:
    def __init__(self, keys: ApiKeyService, limiter: RateLimiter) -> None:
        self._keys = keys
        self._limiter = limiter

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        needed = declared_access(handler, default=DEFAULT_ACCESS)
        if needed == PUBLIC:
            return
        presented = bearer_token(connection.headers.get("authorization"))
        # A database read and a Redis call: off the event loop.
        caller = await run_sync(self._authenticated_within_limit, presented)
        authorize(caller, needed, connection.path_params.get("kb_id"))
        connection.state[CALLER_STATE] = caller

    def _authenticated_within_limit(self, presented: str | None) -> Caller:
        caller = self._keys.authenticate(presented)
        self._limiter.take(caller.key_id)
        return caller


def provide_caller(request: Request[Any, Any, Any]) -> Caller:
    """The caller the guard authenticated (every non-public route has one)."""
    caller: Caller = request.state[CALLER_STATE]
    return caller
