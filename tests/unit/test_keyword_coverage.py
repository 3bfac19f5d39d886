"""The retriever's keyword coverage: IDFs read once per KB generation and term for a while, then again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ragkb_retriever.coverage import KeywordCoverage, TermIdfCache


class CountingIndex:
    """The two index reads the coverage makes, over a fixed KB: term 1 is rare, 2 common, 3 absent."""

    def __init__(self) -> None:
        self.idf_calls: list[list[int]] = []
        self.points = {"a": {1, 2}, "b": {2}, "c": set[int]()}

    def term_idfs(self, kb_id: str, term_ids: Sequence[int], **_: Any) -> dict[int, float]:
        self.idf_calls.append(list(term_ids))
        return {term: {1: 3.0, 2: 1.0}.get(term, 6.0) for term in term_ids}

    def sparse_term_ids(self, kb_id: str, point_ids: Sequence[str], **_: Any) -> dict[str, set[int]]:
        return {point: self.points[point] for point in point_ids if point in self.points}


def test_coverage_of_each_passage_and_a_gone_one_covers_nothing() -> None:
    index = CountingIndex()
    found = KeywordCoverage(index).of("kb", None, [1, 2, 3], ["a", "b", "c", "gone"])  # type: ignore[arg-type]
    assert found == pytest.approx({"a": 0.4, "b": 0.1, "c": 0.0, "gone": 0.0})
    assert KeywordCoverage(index).of("kb", None, [], ["a"]) == {"a": 0.0}  # type: ignore[arg-type]
    assert KeywordCoverage(index).of("kb", None, [1], []) == {}  # type: ignore[arg-type]


def test_idfs_are_reused_per_kb_and_generation_until_they_expire() -> None:
    index = CountingIndex()
    now = [0.0]
    cache = TermIdfCache(index, ttl_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    assert cache.idfs("kb", None, [1, 2]) == {1: 3.0, 2: 1.0}
    assert cache.idfs("kb", None, [2, 3]) == {2: 1.0, 3: 6.0}
    assert index.idf_calls == [[1, 2], [3]]
    cache.idfs("kb", 2, [1])  # another generation of the KB is another index
    cache.idfs("other", None, [1])
    assert index.idf_calls[2:] == [[1], [1]]
    now[0] = 61.0
    cache.idfs("kb", None, [1, 2])
    assert index.idf_calls[-1] == [1, 2]


def test_the_cache_keeps_at_most_its_bound() -> None:
    index = CountingIndex()
    cache = TermIdfCache(index, max_terms=2)  # type: ignore[arg-type]
    cache.idfs("kb", None, [1, 2, 3])
    cache.idfs("kb", None, [1])
    assert index.idf_calls[-1] == [1]  # the oldest went first
