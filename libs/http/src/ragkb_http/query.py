"""Query parameters an operation does not declare are refused (422), not silently ignored: a misspelt
`limt=5` or `kb=…` would otherwise answer as if it had not been sent, and a client would never learn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litestar import Request

from ragkb_core.errors import InvalidInput

HTTP_METHODS = ("get", "put", "post", "delete", "patch")


class DeclaredQueryParameters:
    """The query parameters of each operation, read from the app's OpenAPI document once it is complete
    (`learn`); as a `before_request` step, refuses a request that sends any other. Routes outside the
    document (the console's pages, /schema) are not checked."""

    def __init__(self) -> None:
        self._declared: dict[tuple[str, str], frozenset[str]] = {}

    def learn(self, document: Mapping[str, Any]) -> None:
        for path, item in document.get("paths", {}).items():
            for method in HTTP_METHODS:
                operation = item.get(method)
                if operation is not None:
                    self._declared[(method.upper(), path)] = _query_names(operation)

    def refuse_unknown(self, request: Request[Any, Any, Any]) -> None:
        declared = self._declared.get((request.method, request.scope.get("path_template", "")))
        if declared is None:
            return
        unknown = sorted(set(request.query_params) - declared)
        if unknown:
            allowed = ", ".join(sorted(declared)) or "none"
            raise InvalidInput(f"unknown query parameter(s): {', '.join(unknown)} (this operation takes: {allowed})")


def _query_names(operation: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(
        parameter["name"] for parameter in operation.get("parameters", []) if parameter.get("in") == "query"
    )
