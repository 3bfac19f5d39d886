"""Index generations, for re-indexing: a new generation is built while the live one serves, becomes live
in one atomic switch, can be switched back (a rollback) and dropped once it is not live. Both adapters
(Edge, and the server adapter on qdrant-client's local mode) are held to the same behaviour, and the
internal HTTP API is driven through RetrieverClient."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragkb_analyzer import bm25_encoder_for
from ragkb_core import ids
from ragkb_core.contracts import ChunkPoint, DocumentPoints, KbSearch, ScopeFilter, SearchQuery, SparseTerms
from ragkb_core.errors import Conflict, InvalidInput, NotFound
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import AnalyzerSettings, QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.filters import kb_filter
from ragkb_retriever.index.port import GenerationInfo, IndexPoint, VectorIndex
from ragkb_retriever.indexing import IndexService
from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.searching import SearchService
from ragkb_retriever.settings import RerankerSettings
from tests.support.in_process import in_process_retriever

pytestmark = [
    pytest.mark.integration,
    # Local mode says payload indexes do nothing there; ServerIndex creates them for a real server.
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
]

DIM = 16
KB = "7e2a" * 8  # a KB id as ragkb_core.ids makes them: 32 hex characters
OTHER_KB = "9f3b"
ENGINES = ["edge", "server"]


def _points(kb_id: str, document_id: str, count: int, dim: int = DIM) -> list[IndexPoint]:
    rng = random.Random(document_id)
    return [
        IndexPoint(
            id=ids.point_id(kb_id, f"{document_id}.md", 1, ordinal),
            dense=[rng.gauss(0, 1) for _ in range(dim)],
            sparse=SparseTerms(indices=[1, 2, ordinal + 3], values=[1.0, 1.0, 1.0]),
            payload={"kb_id": kb_id, "document_id": document_id, "version": 1, "ordinal": ordinal, "labels": []},
        )
        for ordinal in range(count)
    ]


def _found(index: VectorIndex, generation: int | None = None, dim: int = DIM) -> set[str]:
    """The documents a hybrid search of the KB finds (every point matches the keyword leg)."""
    sparse = SparseTerms(indices=[1, 2], values=[1.0, 1.0])
    results = index.search(KB, [0.5] * dim, sparse, ScopeFilter(), 50, 50, 61, generation=generation)
    return {hit.payload["document_id"] for hit in results.fused}


@pytest.fixture(params=ENGINES)
def index(request: pytest.FixtureRequest) -> VectorIndex:
    """A KB whose live generation 1 holds document "old" (4 points), with another KB beside it."""
    engine: VectorIndex = request.getfixturevalue(request.param)
    for kb_id in (KB, OTHER_KB):
        engine.create_kb(kb_id, DIM)
    engine.upsert(KB, _points(KB, "old", 4))
    engine.upsert(OTHER_KB, _points(OTHER_KB, "other", 2))
    return engine


def test_a_new_generation_is_built_while_the_live_one_serves(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    assert generation == 2
    assert index.generations(KB) == GenerationInfo(live=1, all=[1, 2])

    index.upsert(KB, _points(KB, "new", 3), generation=generation)

    assert _found(index) == {"old"}
    assert index.count(KB) == 4
    assert _found(index, generation) == {"new"}
    assert index.count(KB, generation=generation) == 3
    assert index.count(KB, document_id="new", generation=generation) == 3
    assert len(index.scroll(KB, kb_filter(KB), 10, generation=generation)) == 3
    assert index.generations(OTHER_KB) == GenerationInfo(live=1, all=[1])


def test_generation_writes_delete_and_patch_only_that_generation(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    index.upsert(KB, _points(KB, "old", 4), generation=generation)

    index.set_document_payload(KB, "old", {"title": "rebuilt"}, generation=generation)
    assert all(hit.payload.get("title") == "rebuilt" for hit in index.scroll(KB, kb_filter(KB), 10, generation=2))
    assert all("title" not in hit.payload for hit in index.scroll(KB, kb_filter(KB), 10))

    index.delete_document(KB, "old", generation=generation)
    assert index.count(KB, generation=generation) == 0
    assert index.count(KB) == 4


def test_switching_makes_a_generation_live_and_switching_back_rolls_back(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    index.upsert(KB, _points(KB, "new", 3), generation=generation)

    assert index.switch_generation(KB, generation) == 1
    assert index.generations(KB) == GenerationInfo(live=2, all=[1, 2])
    assert _found(index) == {"new"}
    assert index.count(KB) == 3
    # A write without a generation goes to the live one, which is now generation 2.
    index.upsert(KB, _points(KB, "late", 1))
    assert index.count(KB, generation=2) == 4
    assert index.count(KB, generation=1) == 4

    assert index.switch_generation(KB, 1) == 2
    assert _found(index) == {"old"}
    assert index.switch_generation(KB, 1) == 1  # already live: nothing changes
    assert index.generations(KB) == GenerationInfo(live=1, all=[1, 2])


def test_only_a_generation_that_is_not_live_can_be_dropped(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    with pytest.raises(Conflict):
        index.drop_generation(KB, 1)

    index.drop_generation(KB, generation)
    index.drop_generation(KB, generation)  # gone already: nothing to do
    assert index.generations(KB) == GenerationInfo(live=1, all=[1])
    assert _found(index) == {"old"}
    # Numbers keep counting from the highest generation left.
    assert index.create_generation(KB, DIM) == 2


def test_the_old_generation_is_dropped_after_a_switch(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    index.upsert(KB, _points(KB, "new", 3), generation=generation)
    index.switch_generation(KB, generation)

    index.drop_generation(KB, 1)

    assert index.generations(KB) == GenerationInfo(live=2, all=[2])
    assert _found(index) == {"new"}
    assert index.create_generation(KB, DIM) == 3


def test_a_generation_may_have_another_dense_size(index: VectorIndex) -> None:
    wider = 2 * DIM
    generation = index.create_generation(KB, wider)
    with pytest.raises(InvalidInput):
        index.upsert(KB, _points(KB, "new", 3), generation=generation)
    index.upsert(KB, _points(KB, "new", 3, dim=wider), generation=generation)

    index.switch_generation(KB, generation)

    assert _found(index, dim=wider) == {"new"}
    with pytest.raises(InvalidInput):
        index.upsert(KB, _points(KB, "late", 1))


MISSING_GENERATION_CALLS: dict[str, Callable[[VectorIndex], object]] = {
    "upsert": lambda index: index.upsert(KB, _points(KB, "x", 1), generation=5),
    "delete": lambda index: index.delete_document(KB, "old", generation=5),
    "set payload": lambda index: index.set_document_payload(KB, "old", {"title": "t"}, generation=5),
    "count": lambda index: index.count(KB, generation=5),
    "retrieve": lambda index: index.retrieve(KB, ids.point_id(KB, "old.md", 1, 0), generation=5),
    "scroll": lambda index: index.scroll(KB, kb_filter(KB), 5, generation=5),
    "search": lambda index: _found(index, generation=5),
    "empty search": lambda index: index.search(KB, None, None, ScopeFilter(), 5, 5, 61, generation=5),
    "switch": lambda index: index.switch_generation(KB, 5),
    "no KB: create": lambda index: index.create_generation("ffff", DIM),
    "no KB: list": lambda index: index.generations("ffff"),
    "no KB: switch": lambda index: index.switch_generation("ffff", 1),
    "no KB: drop": lambda index: index.drop_generation("ffff", 2),
    "no KB: count": lambda index: index.count("ffff", generation=1),
}


@pytest.mark.parametrize("call", MISSING_GENERATION_CALLS)
def test_an_unknown_generation_or_kb_is_not_found(index: VectorIndex, call: str) -> None:
    with pytest.raises(NotFound):
        MISSING_GENERATION_CALLS[call](index)
    assert index.generations(KB) == GenerationInfo(live=1, all=[1])


def test_a_dropped_generation_is_not_found(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    index.drop_generation(KB, generation)
    with pytest.raises(NotFound):
        index.count(KB, generation=generation)
    with pytest.raises(NotFound):
        index.switch_generation(KB, generation)


def test_dropping_a_kb_removes_every_generation(index: VectorIndex) -> None:
    generation = index.create_generation(KB, DIM)
    index.upsert(KB, _points(KB, "new", 3), generation=generation)
    index.switch_generation(KB, generation)
    index.create_generation(KB, DIM)

    index.drop_kb(KB)

    assert not index.kb_exists(KB)
    index.create_kb(KB, DIM)
    assert index.generations(KB) == GenerationInfo(live=1, all=[1])
    assert index.count(KB) == 0
    assert index.generations(OTHER_KB) == GenerationInfo(live=1, all=[1])


def test_edge_keeps_the_switched_generation_across_a_restart(tmp_path: Path) -> None:
    settings = QdrantSettings(path=tmp_path / "index")
    first = EdgeIndex(settings)
    first.create_kb(KB, DIM)
    first.upsert(KB, _points(KB, "old", 4))
    generation = first.create_generation(KB, DIM)
    first.upsert(KB, _points(KB, "new", 3), generation=generation)
    first.switch_generation(KB, generation)
    first.create_generation(KB, DIM)
    first.close()

    second = EdgeIndex(settings)
    try:
        assert second.generations(KB) == GenerationInfo(live=2, all=[1, 2, 3])
        assert _found(second) == {"new"}
        assert second.count(KB, generation=1) == 4
        assert second.switch_generation(KB, 1) == 2
        second.drop_generation(KB, 2)
        assert _found(second) == {"old"}
    finally:
        second.close()
    third = EdgeIndex(settings)
    try:
        assert third.generations(KB) == GenerationInfo(live=1, all=[1, 3])
    finally:
        third.close()


# -- the internal HTTP API, through RetrieverClient ------------------------------------------------

TOKEN = "generations-test-token"


@pytest.fixture
def client(edge: EdgeIndex) -> Iterator[RetrieverClient]:
    with in_process_retriever(IndexService(edge, _Models()), TOKEN) as retriever:
        yield retriever


def _document(document_id: str, count: int, dim: int = DIM) -> DocumentPoints:
    chunks = [
        ChunkPoint(
            ordinal=ordinal,
            text=f"chunk {ordinal}",
            dense=point.dense,
            sparse=point.sparse,
        )
        for ordinal, point in enumerate(_points(KB, document_id, count, dim))
    ]
    return DocumentPoints(
        kb_id=KB,
        document_id=document_id,
        source_id=f"{document_id}.md",
        version=1,
        title=document_id,
        analyzer_version="test/1",
        chunks=chunks,
    )


# Over the internal API, documents have ids as ragkb_core.ids makes them (the retriever checks them).
DOCUMENT_IDS = {"old": "01d" * 10 + "00", "new": "0e3" * 10 + "00", "late": "1a7e" * 8}


# The retriever's handlers use Litestar 2's inferred parameter and dependency styles (deprecated for 3);
# building the app inside the test process makes that visible to pytest's warnings-as-errors.
@pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning")
def test_a_reindex_through_the_internal_api(client: RetrieverClient) -> None:
    client.create_kb(KB)
    client.write_document(_document(DOCUMENT_IDS["old"], 4))
    generation = client.create_generation(KB)
    wider = client.create_generation(KB, embedding_model="wide-model")  # that model's vector size
    assert (generation, wider) == (2, 3)
    with pytest.raises(InvalidInput, match="allowed: test-model, wide-model"):
        client.create_generation(KB, embedding_model="unknown-model")

    client.write_document(_document(DOCUMENT_IDS["new"], 3), generation=generation)
    client.write_document(_document(DOCUMENT_IDS["new"], 2, dim=2 * DIM), generation=wider)
    assert client.count_points(KB) == 4
    assert client.count_points(KB, DOCUMENT_IDS["new"], generation=generation) == 3
    assert client.count_points(KB, generation=wider) == 2

    assert client.switch_generation(KB, generation) == (2, 1)
    assert client.generations(KB).model_dump() == {"live": 2, "all": [1, 2, 3]}
    assert client.count_points(KB) == 3
    client.delete_document(KB, DOCUMENT_IDS["new"], generation=1)
    client.delete_document(KB, DOCUMENT_IDS["old"], generation=1)
    assert client.count_points(KB, generation=1) == 0

    with pytest.raises(Conflict):
        client.drop_generation(KB, 2)
    with pytest.raises(NotFound):
        client.count_points(KB, generation=9)
    with pytest.raises(InvalidInput):
        client.write_document(_document(DOCUMENT_IDS["late"], 1, dim=2 * DIM))
    client.drop_generation(KB, 1)
    client.drop_generation(KB, wider)
    assert client.generations(KB).model_dump() == {"live": 2, "all": [2]}


@pytest.mark.filterwarnings("ignore::litestar.exceptions.LitestarDeprecationWarning")
def test_a_batch_of_documents_is_written_in_one_call(client: RetrieverClient) -> None:
    client.create_kb(KB)
    batch = [_document(DOCUMENT_IDS["old"], 4), _document(DOCUMENT_IDS["new"], 3)]
    assert client.write_documents(KB, batch).written == 7
    assert (client.count_points(KB, DOCUMENT_IDS["old"]), client.count_points(KB, DOCUMENT_IDS["new"])) == (4, 3)
    # The same batch again replaces the same points: chunk ids are deterministic.
    client.write_documents(KB, batch)
    assert client.count_points(KB) == 7

    stranger = _document(DOCUMENT_IDS["late"], 1).model_copy(update={"kb_id": "9f3b" * 8})
    with pytest.raises(InvalidInput, match="must belong"):
        client.write_documents(KB, [_document(DOCUMENT_IDS["late"], 1), stranger])
    with pytest.raises(InvalidInput):
        client.write_documents(KB, [_document(DOCUMENT_IDS["late"], 1), _document(DOCUMENT_IDS["late"], 1, dim=3)])
    assert client.count_points(KB, DOCUMENT_IDS["late"]) == 0


# -- searching a given generation (the re-index quality gate) -------------------------------------


class _FixedQueryVector:
    """The query side of an embedding model, for an index of random test vectors: one fixed vector."""

    def __init__(self, dimension: int = DIM) -> None:
        self.dimension = dimension
        self.queries = 0

    def embed_query(self, text: str) -> list[float]:
        self.queries += 1
        return [0.5] * self.dimension


class _Models:
    """Two embedding models by name, as ragkb_models.EmbedderPool offers them (the first is the default)."""

    default_model = "test-model"

    def __init__(self) -> None:
        self.by_name = {"test-model": _FixedQueryVector(DIM), "wide-model": _FixedQueryVector(2 * DIM)}

    def get(self, model: str | None = None) -> _FixedQueryVector:
        name = model or self.default_model
        if name not in self.by_name:
            raise InvalidInput(
                f"embedding model {name!r} is not one this server runs; allowed: {', '.join(self.by_name)}"
            )
        return self.by_name[name]


def test_a_search_reads_the_generation_it_names_and_the_live_one_otherwise(edge: EdgeIndex) -> None:
    indexing = IndexService(edge, _Models())
    indexing.create_kb(KB)
    indexing.write_document(_document(DOCUMENT_IDS["old"], 4))
    generation = indexing.create_generation(KB)
    indexing.write_document(_document(DOCUMENT_IDS["new"], 3), generation=generation)
    bm25_for = functools.partial(bm25_encoder_for, settings=AnalyzerSettings())
    search = SearchService(edge, _Models().get, bm25_for, RerankerPool(RerankerSettings(model=None)))

    def found(generation: int | None) -> set[str]:
        kb = KbSearch(kb_id=KB, generation=generation)
        result = search.search(SearchQuery(query="anything", knowledge_bases=[kb], mode="semantic"))
        return {hit.document_id for hit in result.results}

    try:
        assert found(None) == found(1) == {DOCUMENT_IDS["old"]}
        assert found(generation) == {DOCUMENT_IDS["new"]}
        with pytest.raises(NotFound):
            found(9)
    finally:
        search.close()


def test_a_search_embeds_the_query_once_per_model_of_the_kbs_it_reads(edge: EdgeIndex) -> None:
    models = _Models()
    indexing = IndexService(edge, models)
    for kb_id in (KB, OTHER_KB, "5c1d"):
        indexing.create_kb(kb_id)
    # OTHER_KB was re-indexed with the wider model: its live generation holds vectors of that size.
    wide = indexing.create_generation(OTHER_KB, embedding_model="wide-model")
    indexing.write_document(
        _document(DOCUMENT_IDS["old"], 2, dim=2 * DIM).model_copy(update={"kb_id": OTHER_KB}), generation=wide
    )
    indexing.switch_generation(OTHER_KB, wide)
    indexing.write_document(_document(DOCUMENT_IDS["new"], 3))
    indexing.write_document(_document("third", 1).model_copy(update={"kb_id": "5c1d"}))
    bm25_for = functools.partial(bm25_encoder_for, settings=AnalyzerSettings())
    search = SearchService(edge, models.get, bm25_for, RerankerPool(RerankerSettings(model=None)))
    kbs = [
        KbSearch(kb_id=KB, embedding_model="test-model"),
        KbSearch(kb_id=OTHER_KB, embedding_model="wide-model"),
        KbSearch(kb_id="5c1d", embedding_model="test-model"),
    ]
    try:
        result = search.search(SearchQuery(query="anything", knowledge_bases=kbs, mode="semantic", explain=True))
    finally:
        search.close()
    # Every KB's dense leg ran, each with the vector of its own model (a vector of the wrong size would fail).
    assert {leg.knowledge_base_id for leg in result.legs or []} == {KB, OTHER_KB, "5c1d"}
    assert {name: model.queries for name, model in models.by_name.items()} == {"test-model": 1, "wide-model": 1}
