"""HTTP plumbing shared by the Litestar services (api, retriever)."""

from ragkb_http.bodies import JsonBodyRequest, NulInText, decode_json, refuse_nul, refuse_nul_in_url
from ragkb_http.guards import ACCESS_OPT, PUBLIC, access, declared_access, service_token_guard
from ragkb_http.health import health_router
from ragkb_http.problems import PROBLEM_HANDLERS, dependency_error_handlers, problem_response
from ragkb_http.query import DeclaredQueryParameters

__all__ = [
    "ACCESS_OPT",
    "PROBLEM_HANDLERS",
    "PUBLIC",
    "DeclaredQueryParameters",
    "JsonBodyRequest",
    "NulInText",
    "access",
    "declared_access",
    "decode_json",
    "dependency_error_handlers",
    "health_router",
    "problem_response",
    "refuse_nul",
    "refuse_nul_in_url",
    "service_token_guard",
]
