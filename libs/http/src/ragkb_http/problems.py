"""The one place where errors become HTTP responses: RFC 9457 problem details, never a stack trace."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.types import ExceptionHandlersMap

from ragkb_core.errors import RagkbError, Unavailable

PROBLEM_MEDIA_TYPE = "application/problem+json"
_log = logging.getLogger("ragkb.http")


def problem_response(
    status: int,
    title: str,
    detail: str,
    request: Request[Any, Any, Any],
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[dict[str, Any]]:
    body = {
        "type": f"https://ragkb.dev/problems/{title.lower().replace(' ', '-')}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        **extra,
    }
    return Response(content=body, status_code=status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)


def _domain_error(request: Request[Any, Any, Any], exc: RagkbError) -> Response[dict[str, Any]]:
    if exc.status >= 500:
        _log.warning("%s %s: %s", request.method, request.url.path, exc.detail)
    return problem_response(exc.status, exc.title, exc.detail, request, exc.headers, **exc.extra)


def _validation_error(request: Request[Any, Any, Any], exc: ValidationException) -> Response[dict[str, Any]]:
    # Litestar answers 400 for invalid bodies and parameters; ragkb's contract is 422 for invalid input.
    errors = exc.extra if isinstance(exc.extra, list) else []
    return problem_response(422, "Invalid input", _validation_detail(exc), request, errors=errors)


def _validation_detail(exc: ValidationException) -> str:
    detail = str(exc.detail)
    return detail if detail and detail != "Bad Request" else "the request is not valid"


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[dict[str, Any]]:
    title = "Not found" if isinstance(exc, NotFoundException) else _title_for(exc.status_code)
    return problem_response(exc.status_code, title, str(exc.detail), request, exc.headers)


def _unexpected_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    _log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "Internal error", "an unexpected error occurred; it has been logged", request)


def _title_for(status: int) -> str:
    titles = {
        400: "Bad request",
        401: "Unauthorized",
        403: "Forbidden",
        405: "Method not allowed",
        413: "Payload too large",
        415: "Unsupported media type",
        429: "Too many requests",
    }
    return titles.get(status, "Request failed" if status < 500 else "Internal error")


def _dependency_error(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """A dependency's own error (the database or the broker went away mid-request) is what Unavailable says:
    503 with Retry-After, never a 500; the caller's request may be sent again."""
    return _domain_error(request, Unavailable(f"a dependency did not answer: {type(exc).__name__}"))


def dependency_error_handlers(*exception_types: type[Exception]) -> ExceptionHandlersMap:
    """Handlers that answer these exceptions (a service's database driver's, broker client's) with 503."""
    return dict.fromkeys(exception_types, _dependency_error)


PROBLEM_HANDLERS: ExceptionHandlersMap = {
    RagkbError: _domain_error,
    ValidationException: _validation_error,
    HTTPException: _http_error,
    Exception: _unexpected_error,
}
