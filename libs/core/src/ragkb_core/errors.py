"""The domain error hierarchy. HTTP maps it to problem details once (ragkb_http); the worker maps it to
retry-or-fail once (ragkb_worker.failures)."""

from __future__ import annotations

from typing import Any


class RagkbError(Exception):
    """Base of every error ragkb raises on purpose. `status` is the HTTP status it maps to."""

    status: int = 500
    title: str = "Internal error"
    # Transient errors are retried by the worker with backoff; the rest fail the item at once.
    transient: bool = False

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides the problem body (e.g. Retry-After)."""
        return {}

    @property
    def type_slug(self) -> str:
        return self.title.lower().replace(" ", "-")


class InvalidInput(RagkbError):
    status = 422
    title = "Invalid input"


class NotFound(RagkbError):
    status = 404
    title = "Not found"


class Conflict(RagkbError):
    status = 409
    title = "Conflict"


class PayloadTooLarge(RagkbError):
    status = 413
    title = "Payload too large"


class UnsupportedMediaType(RagkbError):
    status = 415
    title = "Unsupported media type"


class ParseFailed(RagkbError):
    """A document's content cannot be turned into text: permanent, never retried."""

    status = 422
    title = "Parse failed"


class ReadOnlyKnowledgeBase(Conflict):
    """A write to an external KB (ragkb_core.external): its index is managed where it lives, ragkb only reads."""

    title = "Read-only knowledge base"


class ExternalUnavailable(RagkbError):
    """An external KB's Qdrant or Dify endpoint did not answer, or answered with an error: a bad gateway, not
    ragkb's own failure (a search over other KBs too answers without it, marked degraded)."""

    status = 502
    title = "External knowledge base unavailable"


class Unavailable(RagkbError):
    """A dependency (retriever, database, broker) did not answer: transient, retried. The answer says when to
    try again: a restarted service is back within seconds (the launcher restarts it at once)."""

    status = 503
    title = "Service unavailable"
    transient = True
    retry_after_s = 5

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class Unauthorized(RagkbError):
    """No credentials, or credentials that name no live key (unknown, malformed or revoked)."""

    status = 401
    title = "Unauthorized"


class Forbidden(RagkbError):
    """A known caller asked for something its role or grants do not allow."""

    status = 403
    title = "Forbidden"


class TooManyRequests(RagkbError):
    """A caller spent its request budget (per-key rate limit); it may try again after `retry_after_s`."""

    status = 429
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after_s: int) -> None:
        super().__init__(detail, retry_after_s=retry_after_s)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}
