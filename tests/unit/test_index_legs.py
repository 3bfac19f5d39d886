"""Which legs a search runs, and how their results become LegResults: shared by both adapters."""

from __future__ import annotations

import pytest

from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import InvalidInput
from ragkb_retriever.index.port import (
    DenseLeg,
    FuseHere,
    IndexHit,
    KeywordLeg,
    Step,
    assemble,
    engine_legs,
    plan_legs,
    run_legs,
)

VECTOR = [0.1, 0.2]
TERMS = SparseTerms(indices=[7], values=[1.0])
OPEN = ScopeFilter()


def _plan(dense: list[float] | None, sparse: SparseTerms | None, scope: ScopeFilter = OPEN) -> tuple[Step, ...]:
    return plan_legs(dense, sparse, scope, limit=3, candidate_limit=10, rrf_k=61)


def _hits(*ids: str) -> list[IndexHit]:
    return [IndexHit(id=point_id, score=1.0 / (rank + 1), payload={}) for rank, point_id in enumerate(ids)]


def test_a_hybrid_search_runs_both_legs_once_and_fuses_them_here() -> None:
    dense, keyword = DenseLeg(VECTOR), KeywordLeg(TERMS)
    steps = _plan(VECTOR, TERMS)
    assert steps == (dense, keyword, FuseHere("rrf", (1.0, 1.0), 61))
    assert engine_legs(steps) == [dense, keyword]  # not a third request that would run both legs again


def test_without_a_dense_vector_only_the_keyword_leg_runs() -> None:
    assert _plan(None, TERMS) == (KeywordLeg(TERMS),)


@pytest.mark.parametrize("sparse", [None, SparseTerms(indices=[], values=[])])
def test_without_query_terms_only_the_dense_leg_runs(sparse: SparseTerms | None) -> None:
    assert _plan(VECTOR, sparse) == (DenseLeg(VECTOR),)


def test_nothing_runs_without_a_query_or_with_a_scope_that_grants_nothing() -> None:
    assert _plan(None, None) == ()
    assert _plan(VECTOR, TERMS, ScopeFilter(document_ids=[])) == ()


@pytest.mark.parametrize(("limit", "candidates", "rrf_k"), [(0, 10, 61), (3, 0, 61), (3, 10, 0)])
def test_limits_and_k_below_one_are_rejected(limit: int, candidates: int, rrf_k: int) -> None:
    with pytest.raises(InvalidInput):
        plan_legs(VECTOR, TERMS, OPEN, limit=limit, candidate_limit=candidates, rrf_k=rrf_k)


def test_a_hybrid_batch_maps_each_result_to_its_leg_and_fuses_them_by_rrf() -> None:
    legs = _plan(VECTOR, TERMS)
    results = assemble(legs, [_hits("a", "b"), _hits("c", "a")], limit=2)
    assert [hit.id for hit in results.dense] == ["a", "b"]
    assert [hit.id for hit in results.keyword] == ["c", "a"]
    # Qdrant's k = 61, rank from 0: a 1/61 + 1/62, c 1/61, b 1/62.
    assert [hit.id for hit in results.fused] == ["a", "c"]
    assert results.fused[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_weighted_rrf_scales_each_legs_ranks_and_ties_go_by_id() -> None:
    steps = (DenseLeg(VECTOR), KeywordLeg(TERMS), FuseHere("rrf", (2.0, 1.0), 61))
    results = assemble(steps, [_hits("b", "x"), _hits("a", "b")], limit=4)
    # dense weight 2: rank0 r → 1 / ((r + 1) / 2 + 60); keyword: 1 / (r + 61).
    expected = {"b": 1 / 60.5 + 1 / 62, "x": 1 / 61, "a": 1 / 61}
    assert [hit.id for hit in results.fused] == ["b", "a", "x"]  # a and x tie: by id
    assert [hit.score for hit in results.fused] == pytest.approx([expected[i] for i in ("b", "a", "x")])


def test_a_single_leg_is_its_own_fusion_cut_to_the_limit() -> None:
    dense_only = assemble((DenseLeg(VECTOR),), [_hits("a", "b", "c", "d")], limit=3)
    assert [hit.id for hit in dense_only.fused] == ["a", "b", "c"]
    assert dense_only.keyword == []
    keyword_only = assemble((KeywordLeg(TERMS),), [_hits("x", "y")], limit=3)
    assert [hit.id for hit in keyword_only.fused] == ["x", "y"]
    assert keyword_only.dense == []


def test_dbsf_weighted_or_not_is_fused_here() -> None:
    dense, keyword = DenseLeg(VECTOR), KeywordLeg(TERMS)
    plain = plan_legs(VECTOR, TERMS, OPEN, limit=3, candidate_limit=10, rrf_k=61, fusion="dbsf")
    assert plain == (dense, keyword, FuseHere("dbsf", (1.0, 1.0), 61))
    weighted = plan_legs(VECTOR, TERMS, OPEN, limit=3, candidate_limit=10, rrf_k=61, weights=(1.0, 1.5), fusion="dbsf")
    assert weighted == (dense, keyword, FuseHere("dbsf", (1.0, 1.5), 61))
    assert engine_legs(weighted) == [dense, keyword]  # the engine runs the legs, not the fusion


def test_weighted_dbsf_scales_each_legs_normalised_scores() -> None:
    steps = (DenseLeg(VECTOR), KeywordLeg(TERMS), FuseHere("dbsf", (1.0, 2.0), 61))
    dense = [IndexHit("a", 0.9, {}), IndexHit("b", 0.8, {}), IndexHit("c", 0.7, {})]
    keyword = [IndexHit("c", 12.0, {}), IndexHit("d", 6.0, {})]
    results = assemble(steps, [dense, keyword], limit=3)
    # dense: mean 0.8, σ 0.1 → a 2/3, b 1/2, c 1/3; keyword: mean 9, σ √18 → c, d = 1/2 ± 3/(6√18), times 2.
    keyword_c = 0.5 + 3 / (6 * 18**0.5)
    assert [hit.id for hit in results.fused] == ["c", "d", "a"]
    assert results.fused[0].score == pytest.approx(1 / 3 + 2 * keyword_c, rel=1e-6)
    assert results.fused[1].score == pytest.approx(2 * (1 - keyword_c), rel=1e-6)


def test_a_keyword_leg_already_run_is_taken_as_given_and_the_engine_runs_the_dense_leg_alone() -> None:
    steps = _plan(VECTOR, TERMS)
    asked: list[list[object]] = []

    def engine(legs: list[DenseLeg | KeywordLeg]) -> list[list[IndexHit]]:
        asked.append(list(legs))
        return [_hits("a", "b") for _ in legs]

    given = _hits("c", "a")
    assert run_legs(steps, given, engine) == [_hits("a", "b"), given]
    assert asked == [[DenseLeg(VECTOR)]]
    assert run_legs(steps, None, engine) == [_hits("a", "b"), _hits("a", "b")]
    assert asked[-1] == [DenseLeg(VECTOR), KeywordLeg(TERMS)]
    # A search whose only leg is the one already run asks the engine for nothing.
    assert run_legs(_plan(None, TERMS), given, engine) == [given]
    assert len(asked) == 2
