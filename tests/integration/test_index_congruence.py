"""EdgeIndex and ServerIndex (on qdrant-client's local mode) must answer alike: the same writes and the
same searches through both, compared with each other and with plain-Python oracles of each leg and of
the fusion. Ties in a ranking may be ordered differently by the two engines; they are compared as sets.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragkb_core import ids
from ragkb_core.contracts import DocType, ScopeFilter, SparseTerms
from ragkb_core.errors import NotFound
from ragkb_core.kb_settings import FusionMethod
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.filters import kb_filter
from ragkb_retriever.index.port import IndexHit, IndexPoint, LegResults, VectorIndex
from ragkb_retriever.index.server import ServerIndex
from ragkb_retriever.indexing import read_document_chunks

pytestmark = [
    pytest.mark.integration,
    # Local mode says payload indexes do nothing there; ServerIndex creates them for a real server.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

DIM = 32
VOCABULARY = 150
RRF_K = 61  # Qdrant's k for the paper's k = 60
LIMIT = 12
CANDIDATES = 40
KBS = ("0a1b", "2c3d", "4e5f")
LABELS = ("hr", "legal", "it", "sales")


# -- the corpus -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    kb_id: str
    document_id: str
    labels: list[str]
    doc_type: DocType
    versions: tuple[int, ...]
    centroid: list[float]
    topic: list[int]


def _documents(rng: random.Random) -> list[Document]:
    documents = []
    for kb_id in KBS:
        for number in range(8):
            documents.append(
                Document(
                    kb_id=kb_id,
                    document_id=f"{kb_id}-doc{number}",
                    labels=rng.sample(LABELS, rng.randint(0, 2)),
                    doc_type="reference" if number % 3 == 0 else "knowledge",
                    versions=(1, 2) if number % 2 == 0 else (1,),
                    centroid=[rng.gauss(0, 1) for _ in range(DIM)],
                    topic=rng.sample(range(VOCABULARY), 15),
                )
            )
    return documents


def _chunk_sparse(rng: random.Random, topic: list[int]) -> SparseTerms:
    terms = sorted({*rng.sample(topic, rng.randint(4, 10)), *rng.sample(range(VOCABULARY), 2)})
    return SparseTerms(indices=terms, values=[round(rng.uniform(0.2, 2.5), 4) for _ in terms])


def _points(rng: random.Random, document: Document, version: int) -> list[IndexPoint]:
    points = []
    for ordinal in range(rng.randint(8, 16)):
        source_id = f"docs/{document.document_id}.md"
        payload: dict[str, Any] = {
            "kb_id": document.kb_id,
            "document_id": document.document_id,
            "source_id": source_id,
            "version": version,
            "ordinal": ordinal,
            "text": f"chunk {ordinal} of {document.document_id} v{version} 日本語も",
            "title": f"Title of {document.document_id}",
            "heading_path": ["Intro", f"Part {ordinal // 4}"],
            "page": ordinal // 5 if ordinal % 2 else None,
            "char_start": ordinal * 100,
            "char_end": ordinal * 100 + 99,
            "labels": document.labels,
            "doc_type": document.doc_type,
            "metadata": {"author": "x", "tags": ["a", "b"], "n": ordinal},
            "analyzer_version": "sudachi-c+bigram/1",
        }
        points.append(
            IndexPoint(
                id=ids.point_id(document.kb_id, source_id, version, ordinal),
                dense=[value + rng.gauss(0, 0.6) for value in document.centroid],
                sparse=_chunk_sparse(rng, document.topic),
                payload=payload,
            )
        )
    return points


@dataclass(frozen=True)
class Corpus:
    documents: list[Document]
    writes: list[tuple[str, list[IndexPoint]]]  # (kb_id, one document version's points), in order


def _corpus() -> Corpus:
    rng = random.Random(20240601)
    documents = _documents(rng)
    writes = [(doc.kb_id, _points(rng, doc, version)) for doc in documents for version in doc.versions]
    return Corpus(documents, writes)


CORPUS = _corpus()


def _load(index: VectorIndex, corpus: Corpus = CORPUS) -> None:
    for kb_id in KBS:
        index.create_kb(kb_id, DIM)
    for kb_id, points in corpus.writes:
        index.upsert(kb_id, points)


# -- the searches ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    kb_id: str
    dense: list[float] | None
    sparse: SparseTerms | None
    scope: ScopeFilter

    def run(
        self,
        index: VectorIndex,
        *,
        leg_payloads: bool = True,
        weights: tuple[float, float] = (1.0, 1.0),
        fusion: FusionMethod = "rrf",
    ) -> LegResults:
        return index.search(
            self.kb_id,
            self.dense,
            self.sparse,
            self.scope,
            LIMIT,
            CANDIDATES,
            RRF_K,
            leg_payloads=leg_payloads,
            weights=weights,
            fusion=fusion,
        )


def _scopes(kb_id: str, rng: random.Random) -> list[ScopeFilter]:
    own = [doc.document_id for doc in CORPUS.documents if doc.kb_id == kb_id]
    foreign = [doc.document_id for doc in CORPUS.documents if doc.kb_id != kb_id]
    return [
        ScopeFilter(),
        ScopeFilter(document_ids=rng.sample(own, 3)),
        ScopeFilter(labels_any=["hr", "it"]),
        ScopeFilter(doc_types=["reference"]),
        ScopeFilter(labels_any=["legal"], doc_types=["knowledge"], document_ids=rng.sample(own, 5)),
        ScopeFilter(labels_all=["hr", "it"]),
        ScopeFilter(metadata={"n": 3}),
        ScopeFilter(metadata={"author": "x"}, labels_all=["legal"], doc_types=["knowledge"]),
        ScopeFilter(document_ids=foreign[:4]),  # another KB's documents: nothing to see here
        ScopeFilter(labels_any=[]),  # an empty allow-list grants nothing
    ]


def _searches() -> list[Search]:
    rng = random.Random(7)
    searches = []
    for kb_id in KBS:
        for scope in _scopes(kb_id, rng):
            doc = rng.choice([doc for doc in CORPUS.documents if doc.kb_id == kb_id])
            dense = [value + rng.gauss(0, 0.8) for value in doc.centroid]
            # A set: the random extra term may also be one of the topic's (a query term is sent once).
            terms = sorted({*rng.sample(doc.topic, 3), *rng.sample(range(VOCABULARY), 1)})
            sparse = SparseTerms(indices=terms, values=[1.0] * len(terms))
            searches += [
                Search(kb_id, dense, sparse, scope),
                Search(kb_id, dense, None, scope),
                Search(kb_id, None, sparse, scope),
            ]
    return searches


SEARCHES = _searches()


# -- comparing rankings ---------------------------------------------------------------------------


def _tie_groups(hits: Sequence[IndexHit]) -> list[tuple[float, set[str]]]:
    groups: list[tuple[float, set[str]]] = []
    for hit in hits:
        if groups and math.isclose(groups[-1][0], hit.score, rel_tol=1e-5):
            groups[-1][1].add(hit.id)
        else:
            groups.append((hit.score, {hit.id}))
    return groups


def assert_same_ranking(first: Sequence[IndexHit], second: Sequence[IndexHit]) -> None:
    """Same scores in the same order; equal-scored hits as sets, except that a tie cut by the limit
    may have kept different members (then only their number must agree)."""
    first_groups, second_groups = _tie_groups(first), _tie_groups(second)
    assert len(first) == len(second)
    assert len(first_groups) == len(second_groups), (first_groups, second_groups)
    last = len(first_groups) - 1
    for position, ((score_a, ids_a), (score_b, ids_b)) in enumerate(zip(first_groups, second_groups, strict=True)):
        assert math.isclose(score_a, score_b, rel_tol=1e-4, abs_tol=1e-6), (position, score_a, score_b)
        assert ids_a == ids_b or (position == last and len(ids_a) == len(ids_b)), (position, ids_a, ids_b)


def assert_same_payloads(first: Sequence[IndexHit], second: Sequence[IndexHit]) -> None:
    by_id = {hit.id: hit.payload for hit in second}
    for hit in first:
        if hit.id in by_id:
            assert hit.payload == by_id[hit.id]


def assert_congruent(edge: LegResults, server: LegResults) -> None:
    assert_same_ranking(edge.dense, server.dense)
    assert_same_ranking(edge.keyword, server.keyword)
    assert_same_ranking(edge.fused, server.fused)
    for edge_hits, server_hits in ((edge.dense, server.dense), (edge.keyword, server.keyword)):
        assert_same_payloads(edge_hits, server_hits)


# -- oracles --------------------------------------------------------------------------------------


def rrf_oracle(legs: Sequence[Sequence[IndexHit]], k: int, weights: Sequence[float] = (1.0, 1.0)) -> dict[str, float]:
    """Qdrant's RRF as documented in port.py: sum over legs of 1 / ((rank + 1) / w + k - 1), rank counted
    from 0 — with w = 1, 1 / (k + rank)."""
    scores: dict[str, float] = {}
    for leg, weight in zip(legs, weights, strict=True):
        for rank, hit in enumerate(leg):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / ((rank + 1) / weight + k - 1)
    return scores


def _in_scope(payload: dict[str, Any], kb_id: str, scope: ScopeFilter) -> bool:
    return (
        payload["kb_id"] == kb_id
        and (scope.document_ids is None or payload["document_id"] in scope.document_ids)
        and (scope.labels_any is None or bool(set(payload["labels"]) & set(scope.labels_any)))
        and (scope.doc_types is None or payload["doc_type"] in scope.doc_types)
        and set(scope.labels_all or ()) <= set(payload["labels"])
        and all(payload["metadata"].get(key) == value for key, value in (scope.metadata or {}).items())
    )


def _live_points(corpus: Corpus, kb_id: str, deleted: Collection[str] = ()) -> list[IndexPoint]:
    return [point for kb, points in corpus.writes if kb == kb_id for point in points if point.id not in deleted]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def dense_oracle(points: list[IndexPoint], search: Search) -> list[tuple[str, float]]:
    assert search.dense is not None
    visible = [point for point in points if _in_scope(point.payload, search.kb_id, search.scope)]
    scored = [(point.id, _cosine(point.dense, search.dense)) for point in visible]
    return sorted(scored, key=lambda item: -item[1])[:CANDIDATES]


def _idf(points: list[IndexPoint]) -> dict[int, float]:
    """idf = ln((N - n + 0.5) / (n + 0.5) + 1) over `points`, as Qdrant's IDF modifier computes it."""
    frequency = Counter(term for point in points for term in point.sparse.indices)
    total = len(points)
    return {term: math.log((total - n + 0.5) / (n + 0.5) + 1) for term, n in frequency.items()}


def keyword_oracle(points: list[IndexPoint], search: Search) -> list[tuple[str, float]]:
    """BM25 as Qdrant scores a sparse vector with the IDF modifier, IDF over the KB's live points:
    the sum over shared terms of query weight * idf * document weight."""
    assert search.sparse is not None
    idf = _idf(points)
    query = dict(zip(search.sparse.indices, search.sparse.values, strict=True))
    scored = []
    for point in points:
        terms = dict(zip(point.sparse.indices, point.sparse.values, strict=True))
        shared = query.keys() & terms.keys()
        if shared and _in_scope(point.payload, search.kb_id, search.scope):
            scored.append((point.id, sum(query[term] * idf[term] * terms[term] for term in shared)))
    return sorted(scored, key=lambda item: -item[1])[:CANDIDATES]


def _as_hits(scored: list[tuple[str, float]]) -> list[IndexHit]:
    return [IndexHit(id=point_id, score=score, payload={}) for point_id, score in scored]


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def both(edge: EdgeIndex, server: ServerIndex) -> tuple[EdgeIndex, ServerIndex]:
    _load(edge)
    _load(server)
    return edge, server


def _assert_all_congruent(edge: VectorIndex, server: VectorIndex, searches: Sequence[Search] = SEARCHES) -> None:
    for search in searches:
        assert_congruent(search.run(edge), search.run(server))


# -- tests ----------------------------------------------------------------------------------------


def test_both_engines_rank_every_leg_alike(both: tuple[EdgeIndex, ServerIndex]) -> None:
    edge, server = both
    _assert_all_congruent(edge, server)


def test_the_searches_exercise_hybrid_single_leg_and_empty_answers(both: tuple[EdgeIndex, ServerIndex]) -> None:
    results = [search.run(both[0]) for search in SEARCHES]
    assert sum(1 for result in results if result.dense and result.keyword) >= 10
    assert sum(1 for result in results if not result.fused) >= 2 * len(KBS)  # foreign and empty scopes
    assert all(len(result.fused) <= LIMIT for result in results)


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_scope_filters_never_leak_into_any_leg(engine: str, request: pytest.FixtureRequest) -> None:
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    for search in SEARCHES:
        results = search.run(index)
        for hit in [*results.dense, *results.keyword, *results.fused]:
            assert _in_scope(hit.payload, search.kb_id, search.scope), (search.scope, hit.payload)


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.0, 1.5)])
def test_a_search_without_leg_payloads_answers_the_same_and_reads_only_the_answers_payloads(
    engine: str, weights: tuple[float, float], request: pytest.FixtureRequest
) -> None:
    """What a search that explains nothing asks for: the same legs (ids and scores) and the same fused answer,
    with payloads on the answer only, also when one leg is the answer or the fusion is computed here (weighted
    DBSF)."""
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    single_legs = 0
    for search in SEARCHES:
        full = search.run(index, weights=weights, fusion="dbsf")
        lean = search.run(index, leg_payloads=False, weights=weights, fusion="dbsf")
        # Equal scores may come back in either order from one call to the next: compared as tie groups.
        assert_same_ranking(lean.fused, full.fused)
        assert_same_payloads(lean.fused, full.fused)
        assert all(hit.payload["kb_id"] == search.kb_id for hit in lean.fused)
        for full_leg, lean_leg in ((full.dense, lean.dense), (full.keyword, lean.keyword)):
            assert_same_ranking(lean_leg, full_leg)
            assert all(hit.payload == {} for hit in lean_leg)
        single_legs += bool(full.fused) and not (full.dense and full.keyword)
    assert single_legs > 0


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_each_leg_is_the_exact_ranking_of_the_points_in_scope(engine: str, request: pytest.FixtureRequest) -> None:
    """Filtering happens before ranking: a leg holds the best `candidate_limit` points in scope, not
    the in-scope remainder of a ranking over the whole KB."""
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    for search in SEARCHES:
        results = search.run(index)
        points = _live_points(CORPUS, search.kb_id)
        if search.dense is not None:
            assert_same_ranking(results.dense, _as_hits(dense_oracle(points, search)))
        if search.sparse is not None:
            assert_same_ranking(results.keyword, _as_hits(keyword_oracle(points, search)))


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_plain_python_rrf_reproduces_the_engines_fusion(engine: str, request: pytest.FixtureRequest) -> None:
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    hybrid = [search for search in SEARCHES if search.dense is not None and search.sparse is not None]
    checked = 0
    for search in hybrid:
        results = search.run(index)
        expected = rrf_oracle([results.dense, results.keyword], RRF_K)
        for hit in results.fused:
            assert math.isclose(hit.score, expected[hit.id], rel_tol=1e-5)
        best = sorted(expected.items(), key=lambda item: -item[1])[:LIMIT]
        assert_same_ranking(results.fused, _as_hits(best))
        checked += bool(results.fused)
    assert checked > 10


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("weights", [(2.0, 0.5), (0.7, 1.3)])
def test_weighted_rrf_is_the_documented_formula(
    engine: str, weights: tuple[float, float], request: pytest.FixtureRequest
) -> None:
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    hybrid = [search for search in SEARCHES if search.dense is not None and search.sparse is not None]
    checked = 0
    for search in hybrid:
        results = index.search(
            search.kb_id, search.dense, search.sparse, search.scope, LIMIT, CANDIDATES, RRF_K, weights=weights
        )
        expected = rrf_oracle([results.dense, results.keyword], RRF_K, weights)
        for hit in results.fused:
            assert math.isclose(hit.score, expected[hit.id], rel_tol=1e-5)
        best = sorted(expected.items(), key=lambda item: -item[1])[:LIMIT]
        assert_same_ranking(results.fused, _as_hits(best))
        checked += bool(results.fused)
    assert checked > 10


def dbsf_oracle(legs: Sequence[Sequence[IndexHit]], weights: Sequence[float] = (1.0, 1.0)) -> dict[str, float]:
    """Distribution-based score fusion as Qdrant documents it: each leg's scores mapped from [mean − 3σ,
    mean + 3σ] (sample σ) onto [0, 1], a single result or no spread scoring 0.5, then summed (each times its
    leg's weight: ragkb's extension, the engine's DBSF has no weights)."""
    scores: dict[str, float] = {}
    for leg, weight in zip(legs, weights, strict=True):
        values = [hit.score for hit in leg]
        if not values:
            continue
        mean = sum(values) / len(values)
        spread = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
        for hit in leg:
            normalised = 0.5 if spread == 0 else (hit.score - (mean - 3 * spread)) / (6 * spread)
            scores[hit.id] = scores.get(hit.id, 0.0) + weight * normalised
    return scores


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.0, 1.5), (0.6, 1.0)])
def test_dbsf_is_the_documented_formula(
    engine: str, weights: tuple[float, float], request: pytest.FixtureRequest
) -> None:
    """Unweighted, the engine's own fusion; weighted, ragkb's from the same legs (port.fuse)."""
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    hybrid = [search for search in SEARCHES if search.dense is not None and search.sparse is not None]
    checked = 0
    for search in hybrid:
        results = index.search(
            search.kb_id,
            search.dense,
            search.sparse,
            search.scope,
            LIMIT,
            CANDIDATES,
            RRF_K,
            weights=weights,
            fusion="dbsf",
        )
        expected = dbsf_oracle([results.dense, results.keyword], weights)
        for hit in results.fused:
            assert math.isclose(hit.score, expected[hit.id], rel_tol=1e-4, abs_tol=1e-6), (engine, hit.id)
        best = sorted(expected.items(), key=lambda item: -item[1])[:LIMIT]
        assert_same_ranking(results.fused, _as_hits(best))
        checked += bool(results.fused)
    assert checked > 10


def test_the_top_hit_of_both_legs_scores_two_over_k(both: tuple[EdgeIndex, ServerIndex]) -> None:
    """Pins Qdrant's rank origin: a point first in both legs scores 2 / k, not 2 / (k + 1)."""
    edge, server = both
    doc = CORPUS.documents[0]
    _, points = next(write for write in CORPUS.writes if write[1][0].payload["document_id"] == doc.document_id)
    target = points[0]
    search = Search(doc.kb_id, target.dense, target.sparse, ScopeFilter(document_ids=[doc.document_id]))
    for index in (edge, server):
        results = search.run(index)
        assert results.dense[0].id == target.id
        if results.keyword[0].id == target.id:
            assert results.fused[0].score == pytest.approx(2 / RRF_K, rel=1e-6)


def test_deleting_all_but_the_kept_version(both: tuple[EdgeIndex, ServerIndex]) -> None:
    doc = next(doc for doc in CORPUS.documents if doc.versions == (1, 2))
    for index in both:
        old, new = index.count(doc.kb_id, doc.document_id, 1), index.count(doc.kb_id, doc.document_id, 2)
        assert old > 0 and new > 0
        index.delete_document(doc.kb_id, doc.document_id, keep_version=2)
        assert index.count(doc.kb_id, doc.document_id, 1) == 0
        assert index.count(doc.kb_id, doc.document_id, 2) == new
        assert index.count(doc.kb_id, doc.document_id) == new
    deleted = {point.id for point in _version_points(doc, 1)}
    _assert_all_congruent(*both)
    _assert_matches_oracles(both, doc.kb_id, deleted)


def test_deleting_a_whole_document_or_only_one_version(both: tuple[EdgeIndex, ServerIndex]) -> None:
    whole, partial = [doc for doc in CORPUS.documents if doc.kb_id == KBS[1] and doc.versions == (1, 2)][:2]
    for index in both:
        before = index.count(KBS[1])
        index.delete_document(KBS[1], whole.document_id)
        remaining_v2 = index.count(KBS[1], partial.document_id, 2)
        index.delete_document(KBS[1], partial.document_id, only_version=1)
        assert index.count(KBS[1], whole.document_id) == 0
        assert index.count(KBS[1], partial.document_id) == remaining_v2
        assert index.count(KBS[1]) < before
    assert both[0].count(KBS[1]) == both[1].count(KBS[1])
    _assert_all_congruent(*both)


def test_setting_a_documents_payload_changes_what_scopes_see(both: tuple[EdgeIndex, ServerIndex]) -> None:
    doc = CORPUS.documents[1]
    scope = ScopeFilter(labels_any=["renamed"])
    search = Search(doc.kb_id, doc.centroid, None, scope)
    for index in both:
        assert search.run(index).dense == []
        count = index.count(doc.kb_id, doc.document_id)
        index.set_document_payload(doc.kb_id, doc.document_id, {"labels": ["renamed"], "title": "New title"})
        hits = search.run(index).dense
        assert {hit.payload["document_id"] for hit in hits} == {doc.document_id}
        assert len(hits) == count
        assert all(hit.payload["title"] == "New title" and hit.payload["text"].startswith("chunk") for hit in hits)
    _assert_all_congruent(*both)


def test_counts_agree_per_kb_document_and_version(both: tuple[EdgeIndex, ServerIndex]) -> None:
    edge, server = both
    for doc in CORPUS.documents:
        expected = {version: len(_version_points(doc, version)) for version in doc.versions}
        for index in both:
            assert index.count(doc.kb_id, doc.document_id) == sum(expected.values())
            for version, number in expected.items():
                assert index.count(doc.kb_id, doc.document_id, version) == number
    for kb_id in KBS:
        assert edge.count(kb_id) == server.count(kb_id) == len(_live_points(CORPUS, kb_id))
        assert edge.count(kb_id, version=2) == server.count(kb_id, version=2)


def _all_pages(index: VectorIndex, kb_id: str, *, with_vectors: bool) -> list[IndexPoint]:
    points: list[IndexPoint] = []
    offset: str | None = None
    while True:
        page = index.scroll_page(kb_id, kb_filter(kb_id), 7, offset, with_vectors=with_vectors)
        points.extend(page.points)
        if page.next_offset is None:
            return points
        offset = page.next_offset


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector]


def test_paging_through_a_kb_gives_every_point_once_with_its_vectors(both: tuple[EdgeIndex, ServerIndex]) -> None:
    written = {point.id: point for point in _live_points(CORPUS, KBS[0])}
    for index in both:
        paged = _all_pages(index, KBS[0], with_vectors=True)
        assert sorted(point.id for point in paged) == sorted(written)  # every point, none twice
        for point in paged:
            assert point.payload == written[point.id].payload
            assert point.sparse.indices == written[point.id].sparse.indices
            # Cosine collections keep vectors normalised: the same direction is the same search.
            assert point.dense == pytest.approx(_unit(written[point.id].dense), abs=1e-5)
        assert all(not point.dense for point in _all_pages(index, KBS[0], with_vectors=False))


def test_dense_vectors_by_id_are_the_written_directions_and_skip_unknown_ids(
    both: tuple[EdgeIndex, ServerIndex],
) -> None:
    """What dense feedback reads: the vectors of a first pass's best passages."""
    written = {point.id: point for point in _live_points(CORPUS, KBS[0])}
    wanted = sorted(written)[:5]
    missing = ids.point_id(KBS[0], "no-such-document", 1, 0)
    for index in both:
        found = index.dense_vectors(KBS[0], [*wanted, missing])
        assert sorted(found) == wanted
        for point_id, vector in found.items():
            assert vector == pytest.approx(_unit(written[point_id].dense), abs=1e-5)
        assert index.dense_vectors(KBS[0], []) == {}


def test_creating_a_kb_twice_keeps_its_points(both: tuple[EdgeIndex, ServerIndex]) -> None:
    for index in both:
        before = index.count(KBS[0])
        index.create_kb(KBS[0], DIM)
        assert index.count(KBS[0]) == before > 0


def test_dropping_a_kb_removes_it_and_nothing_else(both: tuple[EdgeIndex, ServerIndex]) -> None:
    for index in both:
        others = {kb_id: index.count(kb_id) for kb_id in KBS[1:]}
        index.drop_kb(KBS[0])
        index.drop_kb(KBS[0])  # dropping what is gone is no error
        assert not index.kb_exists(KBS[0])
        assert {kb_id: index.count(kb_id) for kb_id in KBS[1:]} == others
        with pytest.raises(NotFound):
            SEARCHES[0].run(index)
        with pytest.raises(NotFound):
            index.count(KBS[0])
        with pytest.raises(NotFound):
            index.upsert(KBS[0], CORPUS.writes[0][1])
        index.create_kb(KBS[0], DIM)
        assert index.kb_exists(KBS[0])
        assert index.count(KBS[0]) == 0
    _assert_all_congruent(*both, [search for search in SEARCHES if search.kb_id != KBS[0]])


SPARSE = SparseTerms(indices=[1], values=[1.0])
MISSING_KB_CALLS: dict[str, Callable[[VectorIndex], object]] = {
    "count": lambda index: index.count("ffff"),
    "hybrid search": lambda index: index.search("ffff", [1.0] * DIM, SPARSE, ScopeFilter(), LIMIT, CANDIDATES, RRF_K),
    "empty search": lambda index: index.search("ffff", None, None, ScopeFilter(), LIMIT, CANDIDATES, RRF_K),
    "upsert": lambda index: index.upsert("ffff", CORPUS.writes[0][1]),
    "delete": lambda index: index.delete_document("ffff", "d"),
    "set payload": lambda index: index.set_document_payload("ffff", "d", {"title": "t"}),
    "optimize": lambda index: index.optimize("ffff") if isinstance(index, EdgeIndex) else index.count("ffff"),
}


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("call", MISSING_KB_CALLS)
def test_a_kb_that_never_existed_is_not_found(engine: str, call: str, request: pytest.FixtureRequest) -> None:
    index: VectorIndex = request.getfixturevalue(engine)
    assert not index.kb_exists("ffff")
    index.drop_kb("ffff")
    with pytest.raises(NotFound):
        MISSING_KB_CALLS[call](index)


def test_optimized_edge_shards_still_agree_with_the_server(both: tuple[EdgeIndex, ServerIndex]) -> None:
    edge, server = both
    for kb_id in KBS:
        edge.optimize(kb_id)
    _assert_all_congruent(edge, server)


def test_edge_keeps_data_and_aliases_across_a_restart(tmp_path: Path) -> None:
    settings = QdrantSettings(path=tmp_path / "index")
    first = EdgeIndex(settings)
    _load(first)
    first.optimize(KBS[0])
    first.delete_document(KBS[2], CORPUS.documents[-1].document_id)
    before = [search.run(first) for search in SEARCHES]
    counts = {kb_id: first.count(kb_id) for kb_id in KBS}
    first.close()

    second = EdgeIndex(settings)
    try:
        assert all(second.kb_exists(kb_id) for kb_id in KBS)
        assert {kb_id: second.count(kb_id) for kb_id in KBS} == counts
        # Equal up to the order of ties: replaying the WAL may lay the points out differently.
        for search, earlier in zip(SEARCHES, before, strict=True):
            assert_congruent(search.run(second), earlier)
    finally:
        second.close()


def _version_points(doc: Document, version: int) -> list[IndexPoint]:
    return [
        point
        for _, points in CORPUS.writes
        for point in points
        if point.payload["document_id"] == doc.document_id and point.payload["version"] == version
    ]


def _assert_matches_oracles(both: tuple[EdgeIndex, ServerIndex], kb_id: str, deleted: set[str]) -> None:
    points = _live_points(CORPUS, kb_id, deleted)
    for search in (search for search in SEARCHES if search.kb_id == kb_id and search.sparse is not None):
        for index in both:
            assert_same_ranking(search.run(index).keyword, _as_hits(keyword_oracle(points, search)))


def test_a_documents_chunks_page_alike_in_document_order(both: tuple[EdgeIndex, ServerIndex]) -> None:
    doc = next(doc for doc in CORPUS.documents if doc.versions == (1, 2))
    for version in doc.versions:
        expected = sorted(_version_points(doc, version), key=lambda point: point.payload["ordinal"])
        pages = {}
        for name, index in zip(("edge", "server"), both, strict=True):
            first = read_document_chunks(index, doc.kb_id, doc.document_id, version, offset=0, limit=5)
            rest = read_document_chunks(index, doc.kb_id, doc.document_id, version, offset=5, limit=100)
            beyond = read_document_chunks(index, doc.kb_id, doc.document_id, version, offset=len(expected), limit=5)
            assert first.total == rest.total == beyond.total == len(expected)
            assert beyond.chunks == []
            pages[name] = [*first.chunks, *rest.chunks]
        assert pages["edge"] == pages["server"]
        assert [chunk.chunk_id for chunk in pages["edge"]] == [point.id for point in expected]
        assert [chunk.text for chunk in pages["edge"]] == [point.payload["text"] for point in expected]
        assert pages["edge"][1].heading_path == expected[1].payload["heading_path"]
        assert pages["edge"][1].page == expected[1].payload["page"]


def test_another_documents_or_versions_chunks_never_show(both: tuple[EdgeIndex, ServerIndex]) -> None:
    doc = next(doc for doc in CORPUS.documents if doc.versions == (1,))
    for index in both:
        assert read_document_chunks(index, doc.kb_id, doc.document_id, 2, offset=0, limit=50).total == 0
        other_kb = next(kb_id for kb_id in KBS if kb_id != doc.kb_id)
        assert read_document_chunks(index, other_kb, doc.document_id, 1, offset=0, limit=50).chunks == []


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_term_idfs_are_the_keyword_legs_idf_and_absent_terms_get_the_highest(
    engine: str, request: pytest.FixtureRequest
) -> None:
    """The relevance's keyword coverage weighs a question's terms by the IDF its KB's keyword leg uses: read off
    the engine (port.term_idf), equal to the oracle's; a term no point of the KB holds gets the IDF of df 0."""
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    kb_id = KBS[0]
    points = _live_points(CORPUS, kb_id)
    expected = _idf(points)
    absent = VOCABULARY + 7
    found = index.term_idfs(kb_id, [*expected, absent])
    assert set(found) == {*expected, absent}
    for term, value in expected.items():
        assert found[term] == pytest.approx(value, rel=1e-4), term
    assert found[absent] == pytest.approx(math.log(1 + (len(points) + 0.5) / 0.5), rel=1e-6)
    assert found[absent] > max(expected.values())
    assert index.term_idfs(kb_id, []) == {}


@pytest.mark.parametrize("engine", ["edge", "server"])
def test_sparse_term_ids_are_each_points_keyword_terms(engine: str, request: pytest.FixtureRequest) -> None:
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    points = _live_points(CORPUS, KBS[1])[:5]
    found = index.sparse_term_ids(KBS[1], [point.id for point in points] + [ids.point_id(KBS[1], "gone", 1, 0)])
    assert found == {point.id: set(point.sparse.indices) for point in points}
    assert index.sparse_term_ids(KBS[1], []) == {}


@pytest.mark.parametrize("engine", ["edge", "server"])
@pytest.mark.parametrize("fusion", ["rrf", "dbsf"])
def test_a_keyword_leg_run_ahead_gives_the_same_answer(
    engine: str, fusion: FusionMethod, request: pytest.FixtureRequest
) -> None:
    """The retriever runs a new question's keyword leg while it embeds the question (a keyword-only search),
    then hands that leg to the hybrid search: the answer is the one search of both legs gives."""
    index: VectorIndex = request.getfixturevalue(engine)
    _load(index)
    checked = 0
    for search in [search for search in SEARCHES if search.dense is not None and search.sparse is not None]:
        whole = search.run(index, leg_payloads=False, fusion=fusion)
        ahead = index.search(search.kb_id, None, search.sparse, search.scope, 1, CANDIDATES, RRF_K, leg_payloads=False)
        split = index.search(
            search.kb_id, search.dense, search.sparse, search.scope, LIMIT, CANDIDATES, RRF_K,
            fusion=fusion, leg_payloads=False, keyword_leg=ahead.keyword,
        )  # fmt: skip
        assert_same_ranking(split.keyword, whole.keyword)
        assert_same_ranking(split.fused, whole.fused)
        assert_same_payloads(split.fused, whole.fused)
        checked += bool(whole.fused)
    assert checked > 10
