"""bench/quality.py --compare: two results files compared question by question."""

from __future__ import annotations

from typing import Any

from tests.support.bench import bench_module

QUALITY = bench_module("quality")


def _row(run: str, per_query: dict[str, float] | None) -> dict[str, Any]:
    row: dict[str, Any] = {"corpus": "scifact", "run": run}
    if per_query is not None:
        row[QUALITY.PER_QUERY] = per_query
    return row


def _cells(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_the_difference_is_paired_per_question_with_its_interval() -> None:
    baseline = [_row("semantic", {f"q{i}": 0.5 for i in range(40)})]
    # Every question 0.1 better: the mean difference is 0.1 and so is every resample's.
    candidate = [_row("semantic", {f"q{i}": 0.6 for i in range(40)})]
    (row,) = _cells(QUALITY.comparison(baseline, candidate))
    assert row == ["scifact", "semantic", "40", "0.5000", "0.6000", "+0.1000 [+0.1000, +0.1000]"]


def test_an_interval_spans_zero_when_the_questions_disagree() -> None:
    baseline = [_row("hybrid", {f"q{i}": 0.5 for i in range(100)})]
    candidate = [_row("hybrid", {f"q{i}": 0.5 + (0.2 if i % 2 else -0.2) for i in range(100)})]
    (row,) = _cells(QUALITY.comparison(baseline, candidate))
    difference, interval = row[5].split(" ", 1)
    low, high = (float(bound) for bound in interval.strip("[]").split(", "))
    assert float(difference) == 0.0 and low < 0 < high


def test_runs_without_the_same_questions_on_both_sides_are_left_out() -> None:
    baseline = [
        _row("semantic", {"q1": 0.5}),
        _row("hybrid", {"q1": 0.5, "q2": 0.5}),
        _row("keyword", None),  # a file written before the per-question scores
    ]
    candidate = [_row("semantic", {"q1": 0.7}), _row("hybrid", {"q1": 0.5}), _row("keyword", {"q1": 0.5})]
    rows = _cells(QUALITY.comparison(baseline, candidate))
    assert [row[1] for row in rows] == ["semantic"]
