"""Request bodies decoded by hand (JSON-RPC, multipart fields, bodies read before their shape is known)."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar
from urllib.parse import unquote_plus

from litestar import Request
from litestar.exceptions import SerializationException, ValidationException
from pydantic import BaseModel
from pydantic import ValidationError as ModelValidationError

from ragkb_core.errors import InvalidInput, UnsupportedMediaType

NUL = "\x00"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
# A NUL inside a JSON string is the escape `\u0000` (a raw control character is not JSON): one not itself escaped,
# i.e. after an even number of backslashes (`\\u0000` is a backslash and the text "u0000").
_ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
# pydantic's error types for a body that is not JSON at all, or nests past its parser's limit.
_NOT_JSON = frozenset({"json_invalid", "recursion_loop"})


class NulInText(InvalidInput):
    """A NUL character in request text: no name, label, query or metadata needs one, and PostgreSQL cannot
    store one in a text column (it would fail the write with a 500)."""

    def __init__(self) -> None:
        super().__init__("text in a request may not contain NUL characters (\\u0000)")


def refuse_nul(value: T) -> T:
    """`value` (a decoded JSON value, form fields, a URL) unchanged, or NulInText when any string or key in it
    holds a NUL. Iterative: the value may nest as deeply as its decoder allowed."""
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if NUL in item:
                raise NulInText()
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return value


def decode_json(body: bytes | str) -> Any:
    """The JSON value of `body`, or InvalidInput (422) when it is not JSON or holds a NUL character. Deep
    nesting (`[[[[…`) makes the decoder recurse past Python's limit: that is malformed input too, never a 500."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidInput("the body is not valid JSON") from exc
    return refuse_nul(value)


class JsonBodyRequest(Request[Any, Any, Any]):
    """Litestar's request, whose JSON body (a handler's `data`) is refused with problem details: 415 when the
    body is declared as something other than JSON, 422 when it is not JSON (Litestar says 400 for that, and
    lets the decoder's RecursionError on `[[[[…` through as a 500) or when any text in it holds a NUL."""

    async def json(self) -> Any:
        self._require_json()
        try:
            value = await super().json()
        except (SerializationException, RecursionError) as exc:
            raise InvalidInput("the body is not valid JSON") from exc
        return refuse_nul(value)

    async def model(self, model_type: type[M]) -> M:
        """The body as `model_type`, validated from its bytes by pydantic's own JSON parser, with the answers a
        handler's `data: Model` gives (415, 422 for what is not JSON, holds a NUL or does not validate, with the
        same `errors`). Litestar decodes a `data` body to Python objects first and validates those after, which
        cost the retriever's search route ~0.1 ms more (a one-off check: the route behind uvicorn with a stand-in
        search service, 2026-12-07)."""
        self._require_json()
        body = await self.body()
        if _ESCAPED_NUL.search(body):
            raise NulInText()
        try:
            return model_type.model_validate_json(body)
        except ModelValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            if any(error["type"] in _NOT_JSON for error in errors):
                raise InvalidInput("the body is not valid JSON") from exc
            raise ValidationException(
                detail=f"Validation failed for {self.method} {self.url.path}",
                extra=[_error_message(error) for error in errors],
            ) from exc

    def _require_json(self) -> None:
        media_type = self.content_type[0]
        if media_type and media_type != "application/json" and not media_type.endswith("+json"):
            raise UnsupportedMediaType(
                f"send the body as application/json, not {media_type}", supported_media_types=["application/json"]
            )


def _error_message(error: Any) -> dict[str, str]:
    """One pydantic error as Litestar words a body's: its message, and the dotted path of the field."""
    message = {"message": str(error["msg"])}
    if error["loc"]:
        message["key"] = ".".join(str(part) for part in error["loc"])
    return message


def refuse_nul_in_url(request: Request[Any, Any, Any]) -> None:
    """An app's `before_request`: 422 for a NUL in the path or the query string (`%00`), before any parameter
    reaches a handler or a database query."""
    refuse_nul(request.scope["path"])
    refuse_nul(unquote_plus(request.scope.get("query_string", b"").decode("latin-1")))
