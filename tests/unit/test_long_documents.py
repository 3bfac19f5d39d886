"""How a long document is cut into page ranges (ragkb_worker.long_documents.plan_ranges): only the formats with
pages, only above the threshold, always where a page begins, and with the whole document's ordinals."""

from __future__ import annotations

from ragkb_core import formats
from ragkb_worker.chunking import Chunk
from ragkb_worker.long_documents import TEXT_CHARS_PER_PAGE, plan_ranges
from ragkb_worker.settings import LongDocumentSettings

SETTINGS = LongDocumentSettings(split_above_pages=10, pages_per_range=4)


def paged_chunks(chunks_per_page: list[int]) -> list[Chunk]:
    chunks = []
    for page, count in enumerate(chunks_per_page, start=1):
        for n in range(count):
            start = len(chunks) * 100
            chunks.append(Chunk(f"page {page} part {n}", ("Manual",), page, start, start + 90, 5))
    return chunks


def test_a_document_at_the_threshold_is_not_split_and_one_above_it_is() -> None:
    assert plan_ranges(formats.PDF, paged_chunks([1] * 10), SETTINGS) is None
    assert plan_ranges(formats.PDF, paged_chunks([1] * 11), SETTINGS) is not None


def test_ranges_cover_every_chunk_once_in_order_and_are_cut_where_a_page_begins() -> None:
    chunks = paged_chunks([2, 1, 3, 2, 1, 1, 2, 1, 1, 2, 3, 1])
    ranges = plan_ranges(formats.PDF, chunks, SETTINGS)
    assert ranges is not None
    assert [(r.first_page, r.last_page) for r in ranges] == [(1, 4), (5, 8), (9, 12)]
    ordinals = [r.first_ordinal + i for r in ranges for i in range(len(r.chunks))]
    assert ordinals == list(range(len(chunks)))
    assert [c["text"] for r in ranges for c in r.chunks] == [chunk.text for chunk in chunks]
    assert all(len({c["page"] for c in r.chunks}) == 4 for r in ranges)


def test_a_page_of_many_chunks_stays_in_one_range() -> None:
    ranges = plan_ranges(formats.PPTX, paged_chunks([1, 1, 1, 9, 1, 1, 1, 1, 1, 1, 1]), SETTINGS)
    assert ranges is not None
    assert ranges[0].first_page == 1 and ranges[0].last_page == 4 and len(ranges[0].chunks) == 12


def test_a_word_file_counts_pages_by_characters() -> None:
    chunk = TEXT_CHARS_PER_PAGE // 2
    chunks = [Chunk(f"part {n}", (), None, n * chunk, (n + 1) * chunk, 5) for n in range(30)]  # 15 pages
    ranges = plan_ranges(formats.DOCX, chunks, SETTINGS)
    assert ranges is not None
    assert [(r.first_page, r.last_page) for r in ranges] == [(1, 4), (5, 8), (9, 12), (13, 15)]


def test_formats_without_pages_and_a_switched_off_split_are_not_split() -> None:
    chunks = paged_chunks([1] * 50)
    assert plan_ranges(formats.MARKDOWN, chunks, SETTINGS) is None
    assert plan_ranges(formats.PDF, chunks, SETTINGS.model_copy(update={"enabled": False})) is None
