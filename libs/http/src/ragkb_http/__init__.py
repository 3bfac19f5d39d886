"""HTTP plumbing shared by the Litestar services (api, retriever)."""

from ragkb_http.health import ReadinessCheck, health_router
from ragkb_http.problems import PROBLEM_HANDLERS, problem_response

__all__ = ["PROBLEM_HANDLERS", "ReadinessCheck", "health_router", "problem_response"]
