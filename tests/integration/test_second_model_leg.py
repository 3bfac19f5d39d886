"""A KB's second model (KbChunking.second_model) in both index adapters: its collections hold a second named
vector, its searches run a third leg on it, fused with the dense and keyword legs by the KB's fusion, and both
engines answer alike. Checked against plain-Python oracles: the leg is the exact cosine ranking of the points
that have the vector and that the scope lets through, and the fusion is the documented DBSF / RRF over three
legs."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import InvalidInput
from ragkb_core.fusion import leg_parts
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.filters import kb_filter
from ragkb_retriever.index.port import IndexHit, IndexPoint, SecondQuery, VectorIndex
from ragkb_retriever.index.server import ServerIndex

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

KB = "5e7a"
DENSE = 16
SECOND = 8
VOCABULARY = 40
POINTS = 60
CANDIDATES = 25
LIMIT = 10
RRF_K = 61


def _unit(rng: random.Random, size: int) -> list[float]:
    vector = [rng.gauss(0, 1) for _ in range(size)]
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector]


def _points(rng: random.Random) -> list[IndexPoint]:
    points = []
    for ordinal in range(POINTS):
        document_id = f"doc{ordinal % 6}"
        terms = sorted(rng.sample(range(VOCABULARY), 5))
        payload: dict[str, Any] = {
            "kb_id": KB,
            "document_id": document_id,
            "source_id": f"{document_id}.md",
            "version": 1,
            "ordinal": ordinal,
            "text": f"passage {ordinal}",
            "labels": ["even"] if ordinal % 2 == 0 else [],
            "doc_type": "knowledge",
        }
        points.append(
            IndexPoint(
                id=ids.point_id(KB, f"{document_id}.md", 1, ordinal),
                dense=_unit(rng, DENSE),
                sparse=SparseTerms(indices=terms, values=[round(rng.uniform(0.3, 2.0), 3) for _ in terms]),
                payload=payload,
                # The last few were written before the KB had a second model's vector for them: they are found by
                # the other legs only.
                second=_unit(rng, SECOND) if ordinal < POINTS - 5 else None,
            )
        )
    return points


RNG = random.Random(7)
WRITTEN = _points(RNG)
QUESTION = (_unit(RNG, DENSE), SparseTerms(indices=[1, 2, 3, 5, 8], values=[1.0] * 5), _unit(RNG, SECOND))


def _loaded(index: VectorIndex) -> VectorIndex:
    index.create_kb(KB, DENSE, second_size=SECOND)
    index.upsert(KB, WRITTEN)
    return index


def _cosine_ranking(question: list[float], scope: ScopeFilter) -> list[tuple[str, float]]:
    def allowed(point: IndexPoint) -> bool:
        return scope.labels_any is None or bool(set(point.payload["labels"]) & set(scope.labels_any))

    scored = [
        (point.id, sum(a * b for a, b in zip(question, point.second, strict=True)))
        for point in WRITTEN
        if point.second is not None and allowed(point)
    ]
    return sorted(scored, key=lambda item: -item[1])[:CANDIDATES]


def _fusion_oracle(legs: list[list[IndexHit]], weights: list[float], fusion: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for leg, weight in zip(legs, weights, strict=True):
        parts = leg_parts([hit.score for hit in leg], "rrf" if fusion == "rrf" else "dbsf", weight, RRF_K - 1)
        for hit, part in zip(leg, parts, strict=True):
            totals[hit.id] = totals.get(hit.id, 0.0) + part
    return totals


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("fusion", ["dbsf", "rrf"])
@pytest.mark.parametrize("scope", [ScopeFilter(), ScopeFilter(labels_any=["even"])])
def test_the_third_leg_is_the_second_models_exact_ranking_fused_with_its_weight(
    engine: str, fusion: str, scope: ScopeFilter, request: pytest.FixtureRequest
) -> None:
    index = _loaded(request.getfixturevalue(engine))
    dense, sparse, second = QUESTION
    results = index.search(
        KB,
        dense,
        sparse,
        scope,
        LIMIT,
        CANDIDATES,
        RRF_K,
        fusion=fusion,
        second=SecondQuery(second, 1.5),  # type: ignore[arg-type]
    )
    expected = _cosine_ranking(second, scope)
    assert [hit.id for hit in results.second] == [point_id for point_id, _ in expected]
    for hit, (_, cosine) in zip(results.second, expected, strict=True):
        assert hit.score == pytest.approx(cosine, abs=1e-5)
    assert results.dense and results.keyword
    totals = _fusion_oracle([results.dense, results.keyword, results.second], [1.0, 1.0, 1.5], fusion)
    best = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:LIMIT]
    assert [hit.id for hit in results.fused] == [point_id for point_id, _ in best]
    for hit in results.fused:
        assert hit.score == pytest.approx(totals[hit.id], rel=1e-6)
        assert hit.payload["kb_id"] == KB  # the answer carries its payloads
    if scope.labels_any:
        assert all("even" in hit.payload["labels"] for hit in results.fused)


def test_both_engines_answer_a_three_leg_search_alike(edge: EdgeIndex, server: ServerIndex) -> None:
    dense, sparse, second = QUESTION
    answers = [
        _loaded(index).search(
            KB, dense, sparse, ScopeFilter(), LIMIT, CANDIDATES, RRF_K, fusion="dbsf", second=SecondQuery(second, 1.5)
        )
        for index in (edge, server)
    ]
    for leg in ("fused", "dense", "keyword", "second"):
        edge_hits, server_hits = (getattr(answer, leg) for answer in answers)
        assert [hit.id for hit in edge_hits] == [hit.id for hit in server_hits], leg
        for one, other in zip(edge_hits, server_hits, strict=True):
            assert one.score == pytest.approx(other.score, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_the_second_leg_alone_with_the_dense_leg_is_fused_and_points_keep_their_second_vectors(
    engine: str, request: pytest.FixtureRequest
) -> None:
    """A question without keyword terms: the dense and second legs are fused. A page of points carries the second
    vectors as written (what a backup and a re-index read), none where a point has none."""
    index = _loaded(request.getfixturevalue(engine))
    dense, _, second = QUESTION
    results = index.search(KB, dense, None, ScopeFilter(), LIMIT, CANDIDATES, RRF_K, second=SecondQuery(second, 1.0))
    assert not results.keyword and results.dense and results.second
    totals = _fusion_oracle([results.dense, results.second], [1.0, 1.0], "rrf")
    assert results.fused[0].score == pytest.approx(max(totals.values()), rel=1e-6)
    page = index.scroll_page(KB, kb_filter(KB), POINTS, with_vectors=True)
    by_id = {point.id: point for point in WRITTEN}
    assert len(page.points) == POINTS
    for point in page.points:
        written = by_id[point.id].second
        if written is None:
            assert point.second is None
        else:
            assert point.second == pytest.approx(written, abs=1e-6)


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_a_generation_gets_a_second_vector_or_not_as_asked(engine: str, request: pytest.FixtureRequest) -> None:
    """A re-index may add a second model (a generation with its vector) or drop it (one without); a write of
    second vectors into a generation without one is refused, not silently stored without them."""
    index = _loaded(request.getfixturevalue(engine))
    with_second = index.create_generation(KB, DENSE, second_size=SECOND)
    index.upsert(KB, WRITTEN[:10], generation=with_second)
    dense, sparse, second = QUESTION
    found = index.search(
        KB, dense, sparse, ScopeFilter(), LIMIT, 5, RRF_K, generation=with_second, second=SecondQuery(second, 1.5)
    )
    assert len(found.second) == 5
    without = index.create_generation(KB, DENSE)
    index.upsert(KB, [_without_second(point) for point in WRITTEN[:10]], generation=without)
    assert index.count(KB, generation=without) == 10
    with pytest.raises(InvalidInput, match="no such vector"):
        index.upsert(KB, WRITTEN[:1], generation=without)
    assert index.count(KB, generation=without) == 10


def _without_second(point: IndexPoint) -> IndexPoint:
    return IndexPoint(point.id, point.dense, point.sparse, point.payload)
