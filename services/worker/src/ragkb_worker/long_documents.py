"""Long documents in parallel: a PDF, DOCX or PPTX of more pages than a threshold is built in page ranges, each a
task that any free worker process takes.

The document is parsed and chunked whole, by the worker that claimed it (seconds for a thousand text pages:
bench/long_document.py), so its chunks are exactly those it would have unsplit: running headers are found over
all pages, ordinals count through the whole document, and chunk ids stay deterministic. What takes the time —
embedding and BM25 — is cut at page boundaries into ranges (ragkb_store.ledger.ranges), each embedded by
whichever process takes it, under a lease of its own, its vectors kept in its row. The range that completes the
split writes the whole version to the index at once and makes it live, as an unsplit document's worker does:
a version's points are searchable from the moment they are written, so no range writes its own (a new document
would answer searches half-built, an updated one twice). Until then the old version keeps serving. A range
that fails transiently is retried alone; one that fails for good fails the document, as any stage does.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ragkb_core import formats
from ragkb_core.contracts import DocumentPoints, SparseTerms
from ragkb_core.errors import RagkbError
from ragkb_core.retriever_client import RetrieverClient
from ragkb_store.blobs import BlobStore
from ragkb_store.ledger import Claim, DocumentLedger
from ragkb_store.ledger.ranges import CompletedSplit, PlannedRange, RangeFinish, RangeLedger, RangeWork, SplitPlan
from ragkb_worker.chunking import Chunk
from ragkb_worker.pipeline import (
    Bm25EncoderFor,
    Embedded,
    IngestOutcome,
    PassageEncoderFor,
    StageClock,
    VersionPublisher,
    check_same_model,
    document_points,
    embed_in_slices,
    embedding_text,
    second_encoder,
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
        text_bytes = text.encode("utf-8")
        text_sha = self._blobs.put(text_bytes)
        plan = SplitPlan(planned, text_sha, {**report, "ranges": len(planned)}, dict(clock.seconds), len(chunks))
        if not self._ranges.plan(claim, plan):
            self._publisher.delete_unreferenced({text_sha})
            return IngestOutcome(claim.document_id, "superseded")
        # The split's row now holds the text: stored again if a deletion took it before that (delete_unused).
        self._blobs.ensure_stored(text_sha, text_bytes)
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
        return self._publish(claim)

    def _send_all(self, claim: Claim, positions: range | list[int]) -> None:
        for position in positions:
            self._send_range(claim.document_id, claim.version, position)

    # -- any worker: one range ----------------------------------------------------------------------------

    def claim_range(self, document_id: str, version: int, position: int) -> RangeWork | None:
        return self._ranges.claim_range(document_id, version, position)

    def build_range(self, work: RangeWork) -> IngestOutcome:
        """Embed the range's chunks and keep their vectors; the last range writes the version and makes it live."""
        started = time.perf_counter()
        claim = work.claim
        chunks = [_chunk(fields) for fields in work.chunks]
        if claim.embedding_model != work.embedding_model:
            raise SplitModelChanged(
                f"the knowledge base switched to embedding model {claim.embedding_model!r} while this document was "
                f"built in ranges with {work.embedding_model!r}; retry it to build it with the new model"
            )
        bm25, encoder = (
            self._bm25_for(claim.analyzer),
            self._encoder_for(work.embedding_model, claim.chunking.passage_precision),
        )
        texts = [embedding_text(claim.title, chunk) for chunk in chunks]
        embedded = embed_in_slices(
            texts,
            [claim.title] * len(texts),
            encoder,
            bm25,
            lambda: self._ranges.renew_range(work),
            second=second_encoder(self._encoder_for, claim),
        )
        if embedded is None or (current := self._ranges.renew_range(work)) is None:
            return IngestOutcome(claim.document_id, "superseded")
        check_same_model(work.claim, current)
        timings = {"embed": round(time.perf_counter() - started, 4)}
        finished = self._ranges.finish_range(work, timings, encode_vectors(embedded, bm25.version))
        if finished == RangeFinish.GONE:  # its version failed, was replaced or deleted meanwhile
            return IngestOutcome(claim.document_id, "superseded")
        if finished == RangeFinish.WAITING:
            return IngestOutcome(claim.document_id, "range done", len(work.chunks))
        return self._publish(current)

    def claim_completed(self, document_id: str, version: int) -> Claim | None:
        return self._ranges.claim_completed(document_id, version)

    def publish(self, claim: Claim) -> IngestOutcome:
        return self._publish(claim)

    def _publish(self, claim: Claim) -> IngestOutcome:
        """Write every range's points as one version, then make it live. A transient failure of the write leaves
        every range built: the task's retry writes it again (ragkb_worker.tasks.run_range), and should that be
        lost too, the document's next claim does (resume)."""
        completed = self._ranges.completed(claim)
        if completed is None:  # the split went meanwhile: the version went live, failed or was replaced
            return IngestOutcome(claim.document_id, "superseded")
        started = time.perf_counter()
        self._retriever.write_document(assembled_points(claim, completed))
        timings = {**completed.timings, "index": round(time.perf_counter() - started, 4)}
        return self._publisher.settle(claim, completed.chunk_count, timings, completed.report, completed.text_sha256)

    def release_range(self, work: RangeWork, reason: str) -> None:
        self._ranges.release_range(work, reason)

    def fail(self, claim: Claim, reason: str) -> None:
        """A range (or the version's write) that failed for good fails the document; points of the version, if
        its write went through before the failure, go with it (the old version, if any, keeps serving)."""
        self._ledger.fail(claim, reason)
        self._publisher.withdraw(claim)


def encode_vectors(embedded: Embedded, analyzer_version: str) -> dict[str, Any]:
    """A range's vectors as its row keeps them: dense (and the second model's, where the KB has one) as float32
    bytes (exact), BM25 terms as they are."""
    encoded: dict[str, Any] = {
        "dense": _float32_text(embedded.dense),
        "dimension": int(embedded.dense.shape[1]),
        "sparse": [terms.model_dump() for terms in embedded.sparse],
        "analyzer_version": analyzer_version,
    }
    if embedded.second is not None:
        encoded |= {"second": _float32_text(embedded.second), "second_dimension": int(embedded.second.shape[1])}
    return encoded


def _float32_text(vectors: NDArray[np.float32]) -> str:
    return base64.b64encode(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).decode("ascii")


def _float32_rows(text: str, dimension: int) -> NDArray[np.float32]:
    return np.frombuffer(base64.b64decode(text), dtype=np.float32).reshape(-1, dimension)


def assembled_points(claim: Claim, completed: CompletedSplit) -> DocumentPoints:
    """The version's points from every range, in page order, with the whole document's ordinals."""
    chunks: list[Chunk] = []
    dense: list[NDArray[np.float32]] = []
    second: list[NDArray[np.float32]] = []
    sparse: list[SparseTerms] = []
    for built in completed.ranges:
        vectors = built.vectors
        chunks.extend(_chunk(fields) for fields in built.chunks)
        dense.append(_float32_rows(vectors["dense"], int(vectors["dimension"])))
        if "second" in vectors:
            second.append(_float32_rows(vectors["second"], int(vectors["second_dimension"])))
        sparse.extend(SparseTerms.model_validate(terms) for terms in vectors["sparse"])
    analyzer_version = str(completed.ranges[0].vectors["analyzer_version"])
    # Every range of a version is built with its claim's settings: all have second vectors, or none.
    embedded = Embedded(np.concatenate(dense), sparse, np.concatenate(second) if second else None)
    return document_points(claim, chunks, embedded, analyzer_version)
