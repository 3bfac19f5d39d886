"""Readiness checks shared by every service's `/ready` (the Litestar ones and the worker's small server)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

# name → a callable that returns True when that dependency answers.
ReadinessChecks = Mapping[str, Callable[[], bool]]


def run_checks(checks: ReadinessChecks) -> dict[str, bool]:
    return {name: _safe(check) for name, check in checks.items()}


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except Exception:  # a readiness probe reports failure, it never raises
        return False
