"""Point ids in the embedded index: numbers for new shards (the engine returns a number as an int, but builds
a uuid.UUID for every UUID id it returns), UUIDs kept in a shard written before, which must stay as they are:
a document version written again has to land on the same points."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from ragkb_core import ids
from ragkb_core.contracts import ChunkPoint, DocumentBatch, DocumentPoints, ScopeFilter, SparseTerms
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.filters import kb_filter
from ragkb_retriever.index.port import IdKindChanged, IndexPoint
from ragkb_retriever.indexing import IndexService

pytestmark = pytest.mark.integration

DIM = 8
KB = "b0c1"
DOCUMENT = "d" * 32
SOURCE = "guide.md"


class _Dimension:
    dimension = DIM


class _OneModel:
    """The retriever's model registry as IndexService reads it: only the vector size is asked for here."""

    default_model = "test-model"

    def get(self, model: str | None = None) -> _Dimension:
        return _Dimension()


def _document(chunks: int = 3) -> DocumentPoints:
    rng = random.Random(7)
    return DocumentPoints(
        kb_id=KB,
        document_id=DOCUMENT,
        source_id=SOURCE,
        version=1,
        title="Guide",
        analyzer_version="test/1",
        chunks=[
            ChunkPoint(
                ordinal=ordinal,
                text=f"chunk {ordinal}",
                dense=[rng.gauss(0, 1) for _ in range(DIM)],
                sparse=SparseTerms(indices=[1, 2 + ordinal], values=[1.0, 1.0]),
            )
            for ordinal in range(chunks)
        ],
    )


def _legacy_points(document: DocumentPoints) -> list[IndexPoint]:
    """The document's points as a retriever before numbered ids wrote them (UUID ids, the same payload)."""
    return [
        IndexPoint(
            id=ids.point_id(KB, SOURCE, 1, chunk.ordinal, numbered=False),
            dense=chunk.dense,
            sparse=chunk.sparse,
            payload={
                "kb_id": KB,
                "document_id": DOCUMENT,
                "source_id": SOURCE,
                "version": 1,
                "ordinal": chunk.ordinal,
                "text": chunk.text,
                "title": document.title,
                "labels": [],
                "doc_type": "knowledge",
                "metadata": {},
                "analyzer_version": document.analyzer_version,
            },
        )
        for chunk in document.chunks
    ]


def _expected_ids(numbered: bool, chunks: int = 3) -> list[str]:
    return [ids.point_id(KB, SOURCE, 1, ordinal, numbered=numbered) for ordinal in range(chunks)]


def _searched_ids(index: EdgeIndex) -> set[str]:
    query = _document().chunks[0]
    found = index.search(KB, query.dense, query.sparse, ScopeFilter(), 10, 40, 60, fusion="dbsf")
    return {hit.id for hit in found.fused}


@pytest.fixture
def settings(tmp_path: Path) -> QdrantSettings:
    return QdrantSettings(path=tmp_path / "index")


def _walk_pages(index: EdgeIndex, page_size: int) -> list[str]:
    """Every point id of the KB, page by page, each page's offset the text the last one returned."""
    seen: list[str] = []
    offset: str | None = None
    spec = kb_filter(KB)
    while True:
        page = index.scroll_page(KB, spec, page_size, offset)
        seen += [point.id for point in page.points]
        if page.next_offset is None:
            return seen
        offset = page.next_offset


def test_a_new_kb_numbers_its_points_and_every_read_answers_with_the_same_ids(settings: QdrantSettings) -> None:
    index = EdgeIndex(settings)
    index.create_kb(KB, DIM)
    service = IndexService(index, _OneModel())
    service.write_document(_document())
    expected = _expected_ids(numbered=True)

    assert index.numbered_point_ids(KB)
    assert all(ids.is_numbered(point_id) for point_id in expected)
    assert _searched_ids(index) == set(expected)
    for ordinal, point_id in enumerate(expected):
        found = index.retrieve(KB, point_id)
        assert found is not None and found.id == point_id and found.payload["ordinal"] == ordinal
    assert set(index.dense_vectors(KB, expected)) == set(expected)
    assert set(index.sparse_term_ids(KB, expected)) == set(expected)
    assert sorted(_walk_pages(index, page_size=2)) == sorted(expected)
    exported = service.export_document(KB, DOCUMENT, 1)
    assert [chunk.text for chunk in exported.chunks] == ["chunk 0", "chunk 1", "chunk 2"]

    # Written again after a restart (a retried task): the same points, not three more.
    index.close()
    index = EdgeIndex(settings)
    try:
        assert index.numbered_point_ids(KB)
        IndexService(index, _OneModel()).write_document(_document())
        assert index.count(KB, document_id=DOCUMENT) == 3
        assert _searched_ids(index) == set(expected)
    finally:
        index.close()


def test_a_shard_written_with_uuid_ids_keeps_them_until_a_new_generation(settings: QdrantSettings) -> None:
    before = EdgeIndex(settings)
    before.create_kb(KB, DIM)
    before.upsert(KB, _legacy_points(_document()))
    before.close()

    index = EdgeIndex(settings)
    try:
        service = IndexService(index, _OneModel())
        legacy = _expected_ids(numbered=False)
        assert not index.numbered_point_ids(KB)
        assert _searched_ids(index) == set(legacy)
        found = index.retrieve(KB, legacy[1])
        assert found is not None and found.id == legacy[1]
        assert sorted(_walk_pages(index, page_size=2)) == sorted(legacy)

        # The version written again after the upgrade (its task was in flight) lands on the same points.
        service.write_document(_document())
        assert index.count(KB, document_id=DOCUMENT) == 3
        assert _searched_ids(index) == set(legacy)

        # A re-index builds a new generation, which numbers its points.
        generation = service.create_generation(KB)
        assert index.numbered_point_ids(KB, generation=generation)
        service.write_document(_document(), generation=generation)
        service.switch_generation(KB, generation)
        assert _searched_ids(index) == set(_expected_ids(numbered=True))
    finally:
        index.close()


def test_a_shard_refuses_points_of_the_other_kind_of_id_and_keeps_what_it_holds(settings: QdrantSettings) -> None:
    index = EdgeIndex(settings)
    try:
        index.create_kb(KB, DIM)
        index.upsert(KB, _legacy_points(_document(chunks=2)))
        # The same chunks with numbered ids, as a writer that read another generation's kind would send them.
        numbered = [
            replace(point, id=ids.point_id(KB, SOURCE, 1, ordinal))
            for ordinal, point in enumerate(_legacy_points(_document()))
        ]

        with pytest.raises(IdKindChanged):
            index.upsert(KB, numbered)
        assert index.count(KB) == 2
        assert not index.numbered_point_ids(KB)
    finally:
        index.close()


class _SwitchedWhileMinting(EdgeIndex):
    """The embedded index with a re-index's switch of the live generation landing right after a writer has
    read which kind of id the live generation holds, and before its write: the moment a real switch can hit."""

    def __init__(self, settings: QdrantSettings, switch_to: int) -> None:
        super().__init__(settings)
        self.switch_to: int | None = switch_to

    def numbered_point_ids(self, kb_id: str, *, generation: int | None = None) -> bool:
        numbered = super().numbered_point_ids(kb_id, generation=generation)
        if self.switch_to is not None and generation is None:
            self.switch_generation(kb_id, self.switch_to)
            self.switch_to = None
        return numbered


def test_a_batch_written_across_a_switch_to_a_numbered_generation_lands_there_with_numbered_ids(
    settings: QdrantSettings,
) -> None:
    before = EdgeIndex(settings)
    before.create_kb(KB, DIM)
    before.upsert(KB, _legacy_points(_document()))
    old_generation = before.generations(KB).live
    service = IndexService(before, _OneModel())
    new_generation = service.create_generation(KB)
    service.write_document(_document(), generation=new_generation)  # the re-index's rebuild, numbered
    before.close()

    index = _SwitchedWhileMinting(settings, switch_to=new_generation)
    try:
        # The version written again by a task in flight: it asks the old generation's kind (UUID), the switch
        # lands, and its write reaches the new generation, which holds numbered ids.
        IndexService(index, _OneModel()).write_documents(KB, DocumentBatch(documents=[_document()]))

        assert index.generations(KB).live == new_generation
        assert index.count(KB, document_id=DOCUMENT) == 3
        assert _searched_ids(index) == set(_expected_ids(numbered=True))
        assert index.count(KB, document_id=DOCUMENT, generation=old_generation) == 3
    finally:
        index.close()
