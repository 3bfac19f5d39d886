"""Browser sessions of the admin console.

Signing in hands the api a key once; the browser then holds only a random session id in an HttpOnly,
SameSite=Strict cookie (Secure over HTTPS). The server keeps the key in Redis, sealed (AES-GCM) with a key
derived from that session id, under the id's sha256: a Redis dump alone reveals no key and no cookie, a
stolen cookie is worthless after sign-out or expiry. Every request re-authenticates the unsealed key like a
Bearer key, so a revoked key ends its sessions at once and a session never has more rights than its key.

A session lasts `idle_timeout_s` past its last request and `max_age_s` at most. Its CSRF token is derived
from the session id (HMAC), so it needs no storage, and it is what a state-changing request must echo in
`X-CSRF-Token` (a cross-site page can neither read the cookie nor the token)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, Field
from redis import Redis
from redis.exceptions import RedisError

from ragkb_core.errors import Unavailable

SESSION_COOKIE = "ragkb_console"
CSRF_HEADER = "x-csrf-token"
# Methods that change nothing: the only ones a cookie-authenticated request may make without the token.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")  # token_urlsafe(32)
_RECORD_PREFIX = "ragkb:console:session:"
_NONCE_BYTES = 12
T = TypeVar("T")


class ConsoleSettings(BaseModel):
    """RAGKB_CONSOLE__IDLE_TIMEOUT_S, RAGKB_CONSOLE__MAX_AGE_S."""

    idle_timeout_s: int = Field(default=1800, ge=60, le=7 * 86400, description="a session ends this long after use")
    max_age_s: int = Field(
        default=12 * 3600, ge=300, le=30 * 86400, description="a session ends this long after sign-in"
    )


@dataclass(frozen=True)
class ConsoleSession:
    """One signed-in browser. `key` is the API key it acts with: in memory for one request, never sent back."""

    session_id: str
    key: str
    label: str
    expires_at: float

    @property
    def csrf_token(self) -> str:
        return csrf_token(self.session_id)


class ConsoleSessions:
    def __init__(self, redis: Redis, settings: ConsoleSettings) -> None:
        self._redis = redis
        self._settings = settings

    @property
    def max_age_s(self) -> int:
        return self._settings.max_age_s

    def open(self, key: str, label: str) -> ConsoleSession:
        session_id = secrets.token_urlsafe(32)
        expires_at = time.time() + self._settings.max_age_s
        record = {"sealed": _seal(session_id, key), "label": label, "expires_at": expires_at}
        ttl = min(self._settings.idle_timeout_s, self._settings.max_age_s)
        self._call(lambda: self._redis.set(_record_name(session_id), json.dumps(record), ex=ttl))
        return ConsoleSession(session_id=session_id, key=key, label=label, expires_at=expires_at)

    def find(self, session_id: str) -> ConsoleSession | None:
        """The live session of this id (its idle timer restarted), or None: unknown, expired or signed out."""
        if not _SESSION_ID.match(session_id):
            return None
        name = _record_name(session_id)
        raw = self._call(lambda: self._redis.get(name))
        if raw is None:
            return None
        record = json.loads(raw)
        remaining = float(record["expires_at"]) - time.time()
        key = _unseal(session_id, str(record["sealed"]))
        if remaining <= 0 or key is None:
            self.close(session_id)
            return None
        ttl = max(1, int(min(self._settings.idle_timeout_s, remaining)))
        self._call(lambda: self._redis.expire(name, ttl))
        return ConsoleSession(session_id, key, str(record["label"]), float(record["expires_at"]))

    def close(self, session_id: str) -> None:
        if _SESSION_ID.match(session_id):
            self._call(lambda: self._redis.delete(_record_name(session_id)))

    @staticmethod
    def _call(action: Callable[[], T]) -> T:
        try:
            return action()
        except RedisError as exc:
            raise Unavailable(f"console sessions are unavailable: {type(exc).__name__}") from exc


def csrf_token(session_id: str) -> str:
    digest = hmac.new(session_id.encode(), b"ragkb-console-csrf", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def csrf_matches(session_id: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token(session_id).encode(), presented.encode())


def _record_name(session_id: str) -> str:
    # Stored under a hash: whoever can list Redis keys learns no session id.
    return _RECORD_PREFIX + hashlib.sha256(session_id.encode()).hexdigest()


def _sealing_key(session_id: str) -> bytes:
    return hashlib.sha256(b"ragkb-console-seal\x00" + session_id.encode()).digest()


def _seal(session_id: str, key: str) -> str:
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_sealing_key(session_id)).encrypt(nonce, key.encode(), _record_name(session_id).encode())
    return base64.b64encode(nonce + sealed).decode()


def _unseal(session_id: str, sealed: str) -> str | None:
    raw = base64.b64decode(sealed)
    try:
        key = AESGCM(_sealing_key(session_id)).decrypt(
            raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _record_name(session_id).encode()
        )
    except InvalidTag:
        return None
    return key.decode()
