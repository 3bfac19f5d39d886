"""Long documents in parallel: a PDF, DOCX or PPTX of more pages than a threshold is built in page ranges, each a
task that any free worker process takes.

The document is parsed and chunked whole, by the worker that claimed it (seconds for a thousand text pages:
bench/long_document.py), so its chunks are exactly those it would have unsplit: running headers are found over
all pages, ordinals count through the whole document, and chunk ids stay deterministic. What takes the time —
embedding, BM25 and the index write — is cut at page boundaries into ranges (ragkb_store.ledger.ranges), each
embedded and written by whichever process takes it, under a lease of its own. The range that completes the
split makes the version live, as an unsplit document's worker does; until then the old version keeps serving.
A range that fails transiently is retried alone; one that fails for good fails the document, as any stage does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ragkb_core import formats
from ragkb_core.errors import RagkbError
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.ledger import Claim, DocumentLedger
from ragkb_store.ledger.ranges import PlannedRange, RangeFinish, RangeLedger, RangeWork, SplitPlan
from ragkb_worker.chunking import Chunk
from ragkb_worker.pipeline import (
    Bm25EncoderFor,
    IngestOutcome,
    PassageEncoderFor,
    StageClock,
    VersionPublisher,
    check_same_model,
    document_points,
    embed_in_slices,
    embedding_text,
)
from ragkb_worker.settings import LongDocumentSettings

_log = logging.getLogger("ragkb.worker")
# Formats with pages to split at: PDF pages and PowerPoint slides carry their number; a Word file has no
# pages of its own, so every this many characters of its text count as one (a printed page holds about as many).
PAGED_FORMATS = frozenset({formats.PDF, formats.PPTX})
SPLIT_FORMATS = PAGED_FORMATS | {formats.DOCX}
TEXT_CHARS_PER_PAGE = 3000
# Sends a range's task: (document id, version, range position).
SendRange = Callable[[str, int, int], None]


class SplitModelChanged(RagkbError):
    """A re-index switched the KB's model while a long document was built in ranges: ranges embedded by two
    models cannot go live together. Not retried range by range: the document fails with the reason (a retry
    builds it whole again with the new model)."""

    title = "Embedding model changed"


def page_numbers(media_type: str, chunks: list[Chunk]) -> list[int]:
    """Each chunk's page: its own where the format has pages, else the page its text starts on."""
    if media_type in PAGED_FORMATS:
        pages, last = [], 1
        for chunk in chunks:
            last = chunk.page or last
            pages.append(last)
        return pages
    return [1 + chunk.char_start // TEXT_CHARS_PER_PAGE for chunk in chunks]


def plan_ranges(media_type: str, chunks: list[Chunk], settings: LongDocumentSettings) -> list[PlannedRange] | None:
    """The page ranges to build the document in, each cut where a page begins; None when it is not split."""
    if not settings.enabled or media_type not in SPLIT_FORMATS or not chunks:
        return None
    pages = page_numbers(media_type, chunks)
    if pages[-1] <= settings.split_above_pages:
        return None
    ranges: list[PlannedRange] = []
    start = 0
    for index in range(1, len(chunks) + 1):
        at_end = index == len(chunks)
        if at_end or (pages[index] != pages[index - 1] and pages[index] - pages[start] >= settings.pages_per_range):
            ranges.append(_planned(chunks, pages, start, index))
            start = index
    return ranges


def _planned(chunks: list[Chunk], pages: list[int], start: int, stop: int) -> PlannedRange:
    return PlannedRange(pages[start], pages[stop - 1], start, [_chunk_fields(chunk) for chunk in chunks[start:stop]])


def _chunk_fields(chunk: Chunk) -> dict[str, Any]:
    fields = asdict(chunk)
    fields["heading_path"] = list(chunk.heading_path)
    return fields


def _chunk(fields: dict[str, Any]) -> Chunk:
    return Chunk(**{**fields, "heading_path": tuple(fields["heading_path"])})


class LongDocuments:
    """The ragkb_worker.pipeline.Splitter of the worker, and the builder of one range."""

    def __init__(
        self,
        *,
        ledger: DocumentLedger,
        ranges: RangeLedger,
        blobs: BlobStore,
        encoder_for: PassageEncoderFor,
        bm25_for: Bm25EncoderFor,
        retriever: RetrieverClient,
        settings: LongDocumentSettings,
        send_range: SendRange,
    ) -> None:
        self._ledger = ledger
        self._ranges = ranges
        self._blobs = blobs
        self._encoder_for = encoder_for
        self._bm25_for = bm25_for
        self._retriever = retriever
        self._settings = settings
        self._send_range = send_range
        self._publisher = VersionPublisher(ledger, blobs, retriever)

    # -- the worker that claimed the document -------------------------------------------------------------

    def split(
        self, claim: Claim, chunks: list[Chunk], report: dict[str, object], text: str, clock: StageClock
    ) -> IngestOutcome | None:
        planned = plan_ranges(claim.media_type, chunks, self._settings)
        if planned is None:
            return None
        text_sha = self._blobs.put(text.encode("utf-8"))
        plan = SplitPlan(planned, text_sha, {**report, "ranges": len(planned)}, dict(clock.seconds), len(chunks))
        if not self._ranges.plan(claim, plan):
            self._publisher.delete_unreferenced({text_sha})
            return IngestOutcome(claim.document_id, "superseded")
        self._send_all(claim, range(len(planned)))
        _log.info("document %s v%d: %d chunks split into %d ranges", claim.document_id, claim.version, len(chunks),
                  len(planned))  # fmt: skip
        return IngestOutcome(claim.document_id, "split", len(chunks))

    def resume(self, claim: Claim) -> IngestOutcome | None:
        """Its ranges not built yet are sent again (a duplicate of one still queued or running is skipped by
        the range's claim); with all built, the version goes live here (the last range's worker died first)."""
        state = self._ranges.split_of(claim)
        if state is None:
            return None
        if state.waiting:
            self._send_all(claim, state.waiting)
            return IngestOutcome(claim.document_id, "split")
        completed = self._ranges.completed(claim)
        if completed is None:  # the split went meanwhile: the version went live or failed
            return IngestOutcome(claim.document_id, "superseded")
        return self._publisher.settle(
            claim, completed.chunk_count, completed.timings, completed.report, completed.text_sha256
        )

    def _send_all(self, claim: Claim, positions: range | list[int]) -> None:
        for position in positions:
            self._send_range(claim.document_id, claim.version, position)

    # -- any worker: one range ----------------------------------------------------------------------------

    def claim_range(self, document_id: str, version: int, position: int) -> RangeWork | None:
        return self._ranges.claim_range(document_id, version, position)

    def build_range(self, work: RangeWork) -> IngestOutcome:
        """Embed and write the range's chunks, then mark it built; the last range makes the version live."""
        started = time.perf_counter()
        claim = work.claim
        chunks = [_chunk(fields) for fields in work.chunks]
        if claim.embedding_model != work.embedding_model:
            raise SplitModelChanged(
                f"the knowledge base switched to embedding model {claim.embedding_model!r} while this document was "
                f"built in ranges with {work.embedding_model!r}; retry it to build it with the new model"
            )
        bm25, encoder = self._bm25_for(claim.analyzer), self._encoder_for(work.embedding_model)
        texts = [embedding_text(claim.title, chunk) for chunk in chunks]
        embedded = embed_in_slices(texts, claim.title, encoder, bm25, lambda: self._ranges.renew_range(work))
        if embedded is None or (current := self._ranges.renew_range(work)) is None:
            return IngestOutcome(claim.document_id, "superseded")
        check_same_model(work.claim, current)
        embedded_at = time.perf_counter()
        points = document_points(current, chunks, *embedded, bm25.version, first_ordinal=work.first_ordinal)
        self._retriever.write_document(points)
        timings = {"embed": round(embedded_at - started, 4), "index": round(time.perf_counter() - embedded_at, 4)}
        return self._finish(work, current, timings)

    def _finish(self, work: RangeWork, current: Claim, timings: dict[str, float]) -> IngestOutcome:
        finished = self._ranges.finish_range(work, timings)
        if finished == RangeFinish.GONE:
            # Its version failed, was replaced or deleted while this range was written: its points go too.
            self._publisher.withdraw(current)
            return IngestOutcome(current.document_id, "superseded")
        if finished == RangeFinish.WAITING:
            return IngestOutcome(current.document_id, "range done", len(work.chunks))
        completed = self._ranges.completed(current)
        if completed is None:
            return IngestOutcome(current.document_id, "superseded")
        return self._publisher.settle(
            current, completed.chunk_count, completed.timings, completed.report, completed.text_sha256
        )

    def release_range(self, work: RangeWork, reason: str) -> None:
        self._ranges.release_range(work, reason)

    def fail_range(self, work: RangeWork, reason: str) -> None:
        """A range that failed for good fails its document, with the pages it was on; the points its other
        ranges wrote go with it (the old version, if any, keeps serving)."""
        self._ledger.fail(work.claim, f"pages {work.first_page}–{work.last_page}: {reason}")
        self._publisher.withdraw(work.claim)
