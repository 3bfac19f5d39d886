"""Dify's metadata conditions, applied to a document's metadata."""

from __future__ import annotations

import pytest

from ragkb_api.dify.conditions import condition_holds

METADATA = {"team": "ops", "year": 2024, "tags": "a,b", "date": "2024-05-01"}


@pytest.mark.parametrize(
    ("names", "operator", "value", "holds"),
    [
        (["team"], "is", "ops", True),
        (["team"], "is not", "ops", False),
        (["team"], "contains", "p", True),
        (["team"], "start with", "o", True),
        (["team"], "end with", "x", False),
        (["missing"], "empty", None, True),
        (["team"], "not empty", None, True),
        (["year"], ">", "2000", True),
        (["year"], "≤", "2023", False),
        (["year"], "=", "2024", True),
        (["team"], ">", "1", False),  # not a number: never compares
        (["date"], "before", "2025-01-01", True),
        (["missing", "team"], "is", "ops", True),
        (["team"], "no such operator", "ops", False),
    ],
)
def test_condition(names: list[str], operator: str, value: str | None, holds: bool) -> None:
    assert condition_holds(METADATA, names, operator, value) is holds
