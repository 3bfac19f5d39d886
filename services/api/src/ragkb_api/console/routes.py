"""The console's pages, assets and session endpoints. Everything else the console shows comes from /v1."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from anyio.to_thread import run_sync
from litestar import Controller, MediaType, Request, Response, delete, get, post
from litestar.datastructures import Cookie
from pydantic import BaseModel, Field, ValidationError

from ragkb_api.access import Caller, key_prefix
from ragkb_api.console.sessions import (
    CSRF_HEADER,
    SESSION_COOKIE,
    ConsoleSession,
    ConsoleSessions,
    csrf_matches,
)
from ragkb_api.guards import CONSOLE_SESSION_STATE
from ragkb_api.keys.service import BOOTSTRAP_KEY_ID, ApiKeyService
from ragkb_core.errors import Forbidden, InvalidInput, Unauthorized, UnsupportedMediaType
from ragkb_http import PUBLIC, access, decode_json

# Scripts, styles and images of this origin only, and no inline code of any kind: data the API returns can
# only ever become text. Calls go to this origin (the v1 API and the job event streams).
CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONSOLE_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
SHELL = "console.html"


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


@cache
def assets() -> dict[str, Asset]:
    """The console's static files, read once: names are fixed here, never taken from a request as a path."""
    found = {}
    for entry in files("ragkb_api.console").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in ASSET_TYPES:
            body = entry.read_bytes()
            found[entry.name] = Asset(body, ASSET_TYPES[suffix], '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
    return found


@cache
def shell_html() -> str:
    return files("ragkb_api.console").joinpath(SHELL).read_text(encoding="utf-8")


class SignIn(BaseModel):
    key: str = Field(min_length=1, max_length=512)


class ConsoleSessionOut(BaseModel):
    """Who the console acts as. Never the key: only its display label."""

    label: str
    key_id: str
    role: str
    grants: dict[str, str]
    csrf_token: str
    expires_at: float
    csrf_header: str = CSRF_HEADER


class ConsoleController(Controller):
    path = "/console"
    include_in_schema = False

    @get(["/", "/{view:path}"], sync_to_thread=False, opt=access(PUBLIC), security=[{}])
    def shell(self) -> Response[str]:
        """The one page of the console; its script routes /console/... views in the browser."""
        return Response(
            shell_html(), media_type=MediaType.HTML, headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"}
        )

    @get("/assets/{name:str}", sync_to_thread=False, opt=access(PUBLIC), security=[{}])
    def asset(self, name: str, request: Request[Any, Any, Any]) -> Response[bytes]:
        found = assets().get(name)
        if found is None:
            return Response(b"", status_code=404, headers=SECURITY_HEADERS)
        headers = {**SECURITY_HEADERS, "ETag": found.etag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == found.etag:
            return Response(b"", status_code=304, headers=headers)
        return Response(found.body, media_type=found.media_type, headers=headers)

    @post("/session", status_code=201, opt=access(PUBLIC), security=[{}])
    async def sign_in(
        self, request: Request[Any, Any, Any], key_service: ApiKeyService, console_sessions: ConsoleSessions
    ) -> Response[ConsoleSessionOut]:
        # JSON only: a cross-site form cannot send it without a CORS preflight, which this origin never allows.
        if request.content_type[0] != "application/json":
            raise UnsupportedMediaType(
                'sign in with application/json {"key": ...}', supported_media_types=["application/json"]
            )
        key = _sign_in_body(await request.body()).key.strip()
        caller = await run_sync(key_service.authenticate, key)
        label = await run_sync(_label, key_service, caller, key)
        session = await run_sync(console_sessions.open, key, label)
        secure = request.url.scheme == "https"
        cookie = Cookie(
            key=SESSION_COOKIE,
            value=session.session_id,
            path="/",
            max_age=console_sessions.max_age_s,
            httponly=True,
            secure=secure,
            samesite="strict",
        )
        return Response(
            _session_out(session, caller), status_code=201, cookies=[cookie], headers={"Cache-Control": "no-store"}
        )

    @get("/session", sync_to_thread=False, opt=access("caller"))
    def current(self, request: Request[Any, Any, Any], caller: Caller) -> Response[ConsoleSessionOut]:
        session: ConsoleSession | None = request.state.get(CONSOLE_SESSION_STATE)
        if session is None:
            raise Unauthorized("no console session: sign in at /console")
        return Response(_session_out(session, caller), headers={"Cache-Control": "no-store"})

    # Public to the guard so that a session whose key was revoked can still be ended; the CSRF check is here.
    @delete("/session", status_code=204, opt=access(PUBLIC), security=[{}])
    async def sign_out(self, request: Request[Any, Any, Any], console_sessions: ConsoleSessions) -> Response[None]:
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            if not csrf_matches(session_id, request.headers.get(CSRF_HEADER)):
                raise Forbidden(f"signing out needs the session's {CSRF_HEADER} header")
            await run_sync(console_sessions.close, session_id)
        expired = Cookie(key=SESSION_COOKIE, value="", path="/", max_age=0, httponly=True, samesite="strict")
        return Response(None, status_code=204, cookies=[expired])


def _sign_in_body(body: bytes) -> SignIn:
    try:
        return SignIn.model_validate(decode_json(body))
    except (InvalidInput, ValidationError) as exc:
        raise InvalidInput('sign in with {"key": "<API key>"}') from exc


def _label(key_service: ApiKeyService, caller: Caller, key: str) -> str:
    """How the console names the signed-in key: its name when the key has a row, else what it is."""
    if caller.key_id == BOOTSTRAP_KEY_ID:
        return "bootstrap admin key"
    named = key_service.name_of(caller.key_id)
    return named or f"rk_{key_prefix(key)}"


def _session_out(session: ConsoleSession, caller: Caller) -> ConsoleSessionOut:
    return ConsoleSessionOut(
        label=session.label,
        key_id=caller.key_id,
        role=caller.role,
        grants=dict(caller.grants),
        csrf_token=session.csrf_token,
        expires_at=session.expires_at,
    )
