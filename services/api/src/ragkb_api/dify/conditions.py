"""Dify's `metadata_condition`: conditions on a document's metadata, combined with `and` or `or`. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _compare(check: Callable[[float, float], bool]) -> Callable[[Any, str | None], bool]:
    def compare(actual: Any, expected: str | None) -> bool:
        left, right = _number(actual), _number(expected)
        return left is not None and right is not None and check(left, right)

    return compare


OPERATORS: dict[str, Callable[[Any, str | None], bool]] = {
    "is": lambda actual, expected: actual is not None and str(actual) == expected,
    "is not": lambda actual, expected: actual is None or str(actual) != expected,
    "contains": lambda actual, expected: actual is not None and str(expected or "") in str(actual),
    "not contains": lambda actual, expected: actual is None or str(expected or "") not in str(actual),
    "start with": lambda actual, expected: actual is not None and str(actual).startswith(expected or ""),
    "end with": lambda actual, expected: actual is not None and str(actual).endswith(expected or ""),
    "empty": lambda actual, _: actual in (None, "", [], {}),
    "not empty": lambda actual, _: actual not in (None, "", [], {}),
    "=": _compare(lambda left, right: left == right),
    "≠": _compare(lambda left, right: left != right),
    ">": _compare(lambda left, right: left > right),
    "<": _compare(lambda left, right: left < right),
    "≥": _compare(lambda left, right: left >= right),
    "≤": _compare(lambda left, right: left <= right),
    # Dates as ISO 8601 strings compare in time order.
    "before": lambda actual, expected: actual is not None and expected is not None and str(actual) < expected,
    "after": lambda actual, expected: actual is not None and expected is not None and str(actual) > expected,
}


def condition_holds(metadata: dict[str, Any], names: list[str], operator: str, value: str | None) -> bool:
    """True when any of the named metadata fields satisfies `operator` (Dify names one field per condition,
    as a list). An unknown operator never holds."""
    check = OPERATORS.get(operator)
    return check is not None and any(check(metadata.get(name), value) for name in names)
