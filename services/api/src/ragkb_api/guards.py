"""Authentication and authorisation of every public route, in one place: a guard on the whole app.

It resolves the caller from `Authorization: Bearer <key>`, or else from the admin console's session cookie
(ragkb_api.console.sessions), whose key is authenticated exactly like a Bearer one (401 when missing,
unknown, revoked or expired). A cookie-authenticated request that changes something must also carry the
session's CSRF token (403 without it); Bearer clients are untouched by cookies and tokens, since a browser
never attaches an Authorization header on its own. The guard then checks what the route declares it needs
(`opt=access(...)`, admin when undeclared) against the caller's role and its grant for the path's `kb_id`
(403, or 404 for a KB the caller may not read), and leaves the caller in the request state for the
handlers that scope their answers (KB list, search). An authenticated caller then spends one token of its
key's rate limit (429 when spent; ragkb_api.rate_limit); refused and public requests cost none.

Dify's `/retrieval` is authenticated here too, from its header alone, before its body is read: an
unauthenticated client never gets the body decoded. Its refusals take Dify's error shape (ragkb_api.dify)."""

from __future__ import annotations

import time
from typing import Any

from anyio.to_thread import run_sync
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from ragkb_api.access import DEFAULT_ACCESS, Caller, authorize, bearer_token
from ragkb_api.console.sessions import CSRF_HEADER, SAFE_METHODS, SESSION_COOKIE, ConsoleSessions, csrf_matches
from ragkb_api.dify.service import DIFY_ACCESS, DifyService
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.rate_limit import RateLimiter
from ragkb_api.timing import AUTH_MS_STATE
from ragkb_core.errors import Forbidden, Unauthorized
from ragkb_http import PUBLIC, declared_access

CALLER_STATE = "caller"
# The console session a request was authenticated with (absent for Bearer requests).
CONSOLE_SESSION_STATE = "console_session"


class AccessGuard:
    def __init__(self, keys: ApiKeyService, limiter: RateLimiter, sessions: ConsoleSessions, dify: DifyService) -> None:
        self._keys = keys
        self._limiter = limiter
        self._sessions = sessions
        self._dify = dify

    async def __call__(self, connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        needed = declared_access(handler, default=DEFAULT_ACCESS)
        if needed == PUBLIC:
            return
        if needed == DIFY_ACCESS:
            # A database read and a Redis call: off the event loop. The KB is checked by the search.
            connection.state[CALLER_STATE] = await run_sync(
                self._dify.authenticate, connection.headers.get("authorization")
            )
            return
        presented = bearer_token(connection.headers.get("authorization"))
        if presented is None and SESSION_COOKIE in connection.cookies:
            # A Redis read: off the event loop.
            presented = await run_sync(self._console_key, connection)
        # The key's read and the rate limit's Redis call, both on the event loop where that is safe
        # (ragkb_api.loop_reads; an asyncio Redis client): no worker-thread hand-off on the default stack.
        started = time.perf_counter()
        caller = await self._keys.authenticate_async(presented)
        await self._limiter.take_async(caller.key_id)
        authorize(caller, needed, connection.path_params.get("kb_id"))
        connection.state[CALLER_STATE] = caller
        connection.state[AUTH_MS_STATE] = (time.perf_counter() - started) * 1000

    def _console_key(self, connection: ASGIConnection[Any, Any, Any, Any]) -> str:
        session_id = connection.cookies[SESSION_COOKIE]
        session = self._sessions.find(session_id)
        if session is None:
            raise Unauthorized("the console session has expired or was signed out: sign in again")
        if connection.scope.get("method", "GET") not in SAFE_METHODS and not csrf_matches(
            session_id, connection.headers.get(CSRF_HEADER)
        ):
            raise Forbidden(f"a console request that changes something must carry its session's {CSRF_HEADER} header")
        connection.state[CONSOLE_SESSION_STATE] = session
        return session.key


def provide_caller(request: Request[Any, Any, Any]) -> Caller:
    """The caller the guard authenticated (every non-public route has one)."""
    caller: Caller = request.state[CALLER_STATE]
    return caller
