"""Request bodies decoded by hand (JSON-RPC, multipart fields, bodies read before their shape is known)."""

from __future__ import annotations

import json
from typing import Any

from litestar import Request
from litestar.exceptions import SerializationException

from ragkb_core.errors import InvalidInput, UnsupportedMediaType


def decode_json(body: bytes | str) -> Any:
    """The JSON value of `body`, or InvalidInput (422) when it is not JSON. Deep nesting (`[[[[…`) makes
    the decoder recurse past Python's limit: that is malformed input too, never a 500."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidInput("the body is not valid JSON") from exc


class JsonBodyRequest(Request[Any, Any, Any]):
    """Litestar's request, whose JSON body (a handler's `data`) is refused with problem details: 415 when the
    body is declared as something other than JSON, 422 when it is not JSON (Litestar says 400 for that, and
    lets the decoder's RecursionError on `[[[[…` through as a 500)."""

    async def json(self) -> Any:
        media_type = self.content_type[0]
        if media_type and media_type != "application/json" and not media_type.endswith("+json"):
            raise UnsupportedMediaType(
                f"send the body as application/json, not {media_type}", supported_media_types=["application/json"]
            )
        try:
            return await super().json()
        except (SerializationException, RecursionError) as exc:
            raise InvalidInput("the body is not valid JSON") from exc
