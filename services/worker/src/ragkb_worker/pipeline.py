"""Ingest a document, or a batch of short ones: read blob → parse → chunk → embed → analyse → write to the
retriever → mark done."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ragkb_analyzer import Bm25Encoder
from ragkb_core.contracts import ChunkPoint, DocumentPoints, SparseTerms
from ragkb_core.errors import ParseFailed, PayloadTooLarge, RagkbError
from ragkb_core.kb_settings import KbAnalyzer, PassagePrecision
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import LimitSettings
from ragkb_store.blobs import BlobStore
from ragkb_store.ledger import BuiltVersion, Claim, DocumentLedger
from ragkb_worker.chunking import Chunk, Chunker, Tokenizer
from ragkb_worker.parsing import parse

_log = logging.getLogger("ragkb.worker")
# Chunks embedded between two lease renewals: ~10 s of work on 2 cores, far inside the default lease.
EMBED_SLICE = 128
# A document's first version (DocumentLedger records a new document at 1; each new upload adds 1).
FIRST_VERSION = 1
# The BM25 encoder for a KB's analyzer (ragkb_analyzer.bm25_encoder_for: made once per configuration).
Bm25EncoderFor = Callable[[KbAnalyzer], Bm25Encoder]


class EmbeddingModelChanged(RagkbError):
    """A re-index switched the KB to another model while a document was embedded with the old one: its vectors
    do not fit the generation that now serves. Transient: the retry builds it with the KB's new model."""

    title = "Embedding model changed"
    transient = True


class PassageEncoder(Tokenizer, Protocol):
    """An embedding model's passage side, and its tokenizer, which the chunker counts tokens with."""

    def embed_passages(self, texts: list[str]) -> NDArray[np.float32]: ...


# The encoder of an embedding model by the name a KB records, in the KB's passage precision
# (ragkb_models.EmbedderPool.get): loaded once per process, model and precision, on first use.
PassageEncoderFor = Callable[[str, PassagePrecision], PassageEncoder]


@dataclass(frozen=True)
class IngestOutcome:
    document_id: str
    status: str
    chunks: int = 0
    # Seconds per stage (parse, chunk, embed, index) of a version that went live.
    stage_seconds: dict[str, float] = field(default_factory=dict)


class StageClock:
    """Seconds spent per stage, recorded on the document for operators and the ingest benchmark."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 4)


@dataclass(frozen=True)
class PreparedDocument:
    """A claimed document parsed and chunked, waiting for the model."""

    claim: Claim
    chunks: list[Chunk]
    report: dict[str, object]
    text: str
    clock: StageClock


@dataclass
class BatchOutcome:
    """What became of each document of a batch: an outcome, or the error that stopped it alone (its failure
    policy is the caller's: ragkb_worker.tasks)."""

    outcomes: list[IngestOutcome] = field(default_factory=list)
    failed: list[tuple[Claim, Exception]] = field(default_factory=list)
    # Not started: the batch's parsing had run past its budget (to be queued again, for another batch).
    not_started: list[Claim] = field(default_factory=list)


class IngestPipeline:
    def __init__(
        self,
        *,
        ledger: DocumentLedger,
        blobs: BlobStore,
        encoder_for: PassageEncoderFor,
        bm25_for: Bm25EncoderFor,
        retriever: RetrieverClient,
        limits: LimitSettings,
        splitter: Splitter | None = None,
        renew_after_s: float = 0.0,
    ) -> None:
        self._ledger = ledger
        self._renew_after_s = renew_after_s
        self._blobs = blobs
        self._encoder_for = encoder_for
        self._bm25_for = bm25_for
        self._retriever = retriever
        self._limits = limits
        self._splitter = splitter
        self.publisher = VersionPublisher(ledger, blobs, retriever)

    def run(self, claim: Claim) -> IngestOutcome:
        # A long document whose earlier worker split it and then lost its lease goes on from its ranges.
        if self._splitter is not None and (resumed := self._splitter.resume(claim)) is not None:
            return resumed
        claimed_at = time.monotonic()
        clock = StageClock()
        superseded = IngestOutcome(claim.document_id, "superseded")
        # OCR can outlast the lease: each OCRed page renews the claim (a newer version is noticed after parsing).
        chunks, report, text = self._prepare(claim, clock, heartbeat=partial(self._ledger.renew, claim))
        if self._splitter is not None and (split := self._splitter.split(claim, chunks, report, text, clock)):
            return split
        # The analyzer and model of the claim, not of a renewal: one document's chunks all carry one analyzer
        # version, and are embedded by the model whose tokenizer cut them.
        bm25 = self._bm25_for(claim.analyzer)
        encoder = self._encoder_for(claim.embedding_model, claim.chunking.passage_precision)
        second = second_encoder(self._encoder_for, claim)
        # Renewing between stages keeps the lease alive and notices a newer upload early; a claim taken moments
        # ago (a short document parses and chunks in milliseconds) has both, and its renewal would be one more
        # database commit per document for nothing (bench/ingest_profile.py).
        current: Claim | None = claim
        if time.monotonic() - claimed_at >= self._renew_after_s:
            current = self._ledger.renew(claim)
        if current is None:
            return superseded
        with clock.stage("embed"):
            embed_texts = [embedding_text(current.title, chunk) for chunk in chunks]
            titles = [current.title] * len(embed_texts)
            embedded = embed_in_slices(
                embed_texts, titles, encoder, bm25, partial(self._ledger.renew, current), second=second
            )
        if embedded is None or (current := self._ledger.renew(current)) is None:
            return superseded
        check_same_model(claim, current)
        with clock.stage("index"):
            points = document_points(current, chunks, embedded, bm25.version)
            self._retriever.write_document(points)
        text_bytes = text.encode("utf-8")
        text_sha = self._blobs.put(text_bytes)
        outcome = self.publisher.settle(current, len(chunks), clock.seconds, report, text_sha)
        self._keep_live_texts([text_sha], [text_bytes], [outcome])
        return outcome

    def run_batch(self, claims: list[Claim], parse_budget_s: float = float("inf")) -> BatchOutcome:
        """Build several short documents of one KB together: each parsed and chunked alone (its bad input fails it
        alone), then all their chunks through the model in token-sized runs (ragkb_models: sorted by length, so a
        run pads little), one index write, and one commit that makes them live. An error of a shared step (the
        model, the index write, the database) is raised: the batch as a whole did not happen. Once parsing has
        taken `parse_budget_s` (small scanned PDFs, OCRed page by page), the documents not parsed yet are left
        for another batch, so that a batch stays far inside the task's time limit."""
        batch = BatchOutcome()
        heartbeat = partial(self._ledger.renew_many, claims)
        prepared: list[PreparedDocument] = []
        started = time.monotonic()
        for position, claim in enumerate(claims):
            if position and time.monotonic() - started > parse_budget_s:
                batch.not_started = claims[position:]
                break
            try:
                document = self._prepared(claim, heartbeat)
                # A small file of many pages is still a long document: its ranges go to every free process.
                split = self._split(document)
            except Exception as exc:  # this document's own input or state: it alone fails (or is retried)
                batch.failed.append((claim, exc))
                continue
            if split is not None:
                batch.outcomes.append(split)
            else:
                prepared.append(document)
        prepared = self._same_settings_as_first(prepared, batch)
        if not prepared:
            return batch
        for document in prepared:  # for operators: how many documents shared this one's model call and write
            document.report["batch_documents"] = len(prepared)
        first = prepared[0].claim
        bm25 = self._bm25_for(first.analyzer)
        encoder = self._encoder_for(first.embedding_model, first.chunking.passage_precision)
        second = second_encoder(self._encoder_for, first)
        started = time.perf_counter()
        texts = [embedding_text(document.claim.title, chunk) for document in prepared for chunk in document.chunks]
        titles = [document.claim.title for document in prepared for _ in document.chunks]
        # Each document's own state is checked by the renewal after embedding: the batch goes on meanwhile.
        embedded = embed_in_slices(texts, titles, encoder, bm25, heartbeat, second=second)
        assert embedded is not None  # renew_many answers a dict, never None
        _share_seconds(prepared, "embed", time.perf_counter() - started)
        current = self._ledger.renew_many(document.claim for document in prepared)
        builds: list[tuple[PreparedDocument, DocumentPoints]] = []
        first_chunk = 0
        for document in prepared:
            count = len(document.chunks)
            span = slice(first_chunk, first_chunk + count)
            first_chunk += count
            renewed = current.get(document.claim.document_id)
            if renewed is None:
                batch.outcomes.append(IngestOutcome(document.claim.document_id, "superseded"))
                continue
            try:
                check_same_model(document.claim, renewed)
            except EmbeddingModelChanged as exc:
                batch.failed.append((document.claim, exc))
                continue
            points = document_points(renewed, document.chunks, embedded.sliced(span), bm25.version)
            builds.append((replace(document, claim=renewed), points))
        if builds:
            batch.outcomes.extend(self._write_and_settle(builds))
        return batch

    def _split(self, document: PreparedDocument) -> IngestOutcome | None:
        if self._splitter is None:
            return None
        return self._splitter.split(document.claim, document.chunks, document.report, document.text, document.clock)

    def _prepared(self, claim: Claim, heartbeat: Callable[[], object]) -> PreparedDocument:
        clock = StageClock()
        chunks, report, text = self._prepare(claim, clock, heartbeat=heartbeat)
        return PreparedDocument(claim, chunks, report, text, clock)

    @staticmethod
    def _same_settings_as_first(prepared: list[PreparedDocument], batch: BatchOutcome) -> list[PreparedDocument]:
        """The documents that share the first one's model and analyzer: one KB's, unless a re-index switched them
        between two claims (those are built again, with the new ones)."""
        if not prepared:
            return prepared

        def settings(document: PreparedDocument) -> tuple[str, KbAnalyzer, str | None]:
            return document.claim.embedding_model, document.claim.analyzer, document.claim.chunking.second_model

        same = [document for document in prepared if settings(document) == settings(prepared[0])]
        changed = EmbeddingModelChanged("the knowledge base's model or analyzer changed while it was built")
        batch.failed.extend((document.claim, changed) for document in prepared if document not in same)
        return same

    def _write_and_settle(self, builds: list[tuple[PreparedDocument, DocumentPoints]]) -> list[IngestOutcome]:
        started = time.perf_counter()
        self._retriever.write_documents(builds[0][1].kb_id, [points for _, points in builds])
        documents = [document for document, _ in builds]
        _share_seconds(documents, "index", time.perf_counter() - started)
        texts = [document.text.encode("utf-8") for document in documents]
        shas = [self._blobs.put(text) for text in texts]
        versions = [
            BuiltVersion(document.claim, len(document.chunks), document.clock.seconds, document.report, sha)
            for document, sha in zip(documents, shas, strict=True)
        ]
        outcomes = self.publisher.settle_many(versions)
        self._keep_live_texts(shas, texts, outcomes)
        return outcomes

    def _keep_live_texts(self, shas: list[str], texts: list[bytes], outcomes: list[IngestOutcome]) -> None:
        """The extracted texts of the versions made live, stored again where a deletion of a blob with the same
        bytes (another document's text) took one between its write and the commit (BlobStore.delete_unused)."""
        for sha, text, outcome in zip(shas, texts, outcomes, strict=True):
            if outcome.status == "done":
                self._blobs.ensure_stored(sha, text)

    def build_into(self, claim: Claim, generation: int) -> int:
        """Build the claim's version, with the claim's settings, into an index generation that does not serve
        yet (a re-index): no lease and no ledger, the live document is left as it is. Returns its chunk count."""
        chunks, _, _ = self._prepare(claim, StageClock())
        bm25 = self._bm25_for(claim.analyzer)
        texts = [embedding_text(claim.title, chunk) for chunk in chunks]
        encoder = self._encoder_for(claim.embedding_model, claim.chunking.passage_precision)
        embedded = embed_in_slices(
            texts,
            [claim.title] * len(texts),
            encoder,
            bm25,
            lambda: True,
            second=second_encoder(self._encoder_for, claim),
        )
        assert embedded is not None  # the renewal above never answers None
        points = document_points(claim, chunks, embedded, bm25.version)
        self._retriever.write_document(points, generation=generation)
        # Another version built earlier into this generation (the document changed meanwhile) goes.
        self._retriever.delete_document(
            claim.kb_id, claim.document_id, keep_version=claim.version, generation=generation
        )
        return len(chunks)

    def _prepare(
        self, claim: Claim, clock: StageClock, heartbeat: Callable[[], object] | None = None
    ) -> tuple[list[Chunk], dict[str, object], str]:
        with clock.stage("parse"):
            data = self._blobs.read(claim.blob_sha256)
            if len(data) > self._limits.max_upload_bytes:
                raise PayloadTooLarge(f"the stored original is larger than {self._limits.max_upload_bytes} bytes")
            parsed = parse(claim.media_type, data, self._limits, ocr=claim.chunking.ocr, heartbeat=heartbeat)
            if len(parsed.text) > self._limits.max_text_chars:
                raise PayloadTooLarge(f"the extracted text is longer than {self._limits.max_text_chars} characters")
        with clock.stage("chunk"):
            # Each KB chunks its own way (sizes, noise patterns), counting its model's tokens; a chunker is
            # cheap to make per document.
            chunker = Chunker(
                self._encoder_for(claim.embedding_model, claim.chunking.passage_precision), claim.chunking, self._limits
            )
            chunks, chunk_report = chunker.chunk(parsed, claim.chunking.compiled_noise_patterns())
        if not chunks:
            raise ParseFailed("the document has no text to index after chunking")
        report: dict[str, object] = {
            "chunks": chunk_report.chunks,
            "dropped": dict(chunk_report.dropped),
            **parsed.report,
        }
        return chunks, report, parsed.text


class VersionPublisher:
    """Makes a built version live, or withdraws its points when it may not be."""

    def __init__(self, ledger: DocumentLedger, blobs: BlobStore, retriever: RetrieverClient) -> None:
        self._ledger = ledger
        self._blobs = blobs
        self._retriever = retriever

    def settle(
        self, claim: Claim, chunk_count: int, timings: dict[str, float], report: dict[str, object], text_sha: str
    ) -> IngestOutcome:
        """Make this version live, or withdraw its points if a newer version arrived while it was built.
        The extracted text (stored as `text_sha`) is kept for the agent tools (read_file, grep_files) with the
        live version."""
        return self.settle_many([BuiltVersion(claim, chunk_count, timings, report, text_sha)])[0]

    def settle_many(self, versions: list[BuiltVersion]) -> list[IngestOutcome]:
        """`settle` for several versions, made live in one commit."""
        result = self._ledger.finish_many(versions)
        outcomes = []
        for built in versions:
            claim = built.claim
            if claim.document_id in result.finished:
                # A first version has no earlier version's points to drop (a document's id is new with the
                # document and its versions only go up), and the call was one more retriever round trip.
                if claim.version > FIRST_VERSION:
                    self._retriever.delete_document(claim.kb_id, claim.document_id, keep_version=claim.version)
                self.delete_unreferenced({result.replaced_texts.get(claim.document_id)} - {None, built.text_sha256})
                outcomes.append(IngestOutcome(claim.document_id, "done", built.chunk_count, built.timings))
                continue
            self.delete_unreferenced({built.text_sha256})
            self._retriever.delete_document(claim.kb_id, claim.document_id, only_version=claim.version)
            if not self._ledger.exists(claim.document_id):
                self._retriever.delete_document(claim.kb_id, claim.document_id)
            outcomes.append(IngestOutcome(claim.document_id, "superseded"))
        return outcomes

    def withdraw(self, claim: Claim) -> None:
        """Remove the points of a version that will not go live (it failed, or another replaced it) — unless
        it is the live one (a rebuild of the live version that lost the race to a copy of itself)."""
        if not self._ledger.exists(claim.document_id):
            self._retriever.delete_document(claim.kb_id, claim.document_id)
        elif self._ledger.indexed_version_of(claim.document_id) != claim.version:
            self._retriever.delete_document(claim.kb_id, claim.document_id, only_version=claim.version)

    def delete_unreferenced(self, shas: set[str | None]) -> None:
        self._blobs.delete_unused({sha for sha in shas if sha}, self._ledger.unreferenced_blobs)


class Splitter(Protocol):
    """Builds a long document in ranges on every free worker process (ragkb_worker.long_documents)."""

    def split(
        self, claim: Claim, chunks: list[Chunk], report: dict[str, object], text: str, clock: StageClock
    ) -> IngestOutcome | None:
        """Hand the chunked document to its ranges, or None when it is not long enough to split."""
        ...

    def resume(self, claim: Claim) -> IngestOutcome | None:
        """Go on with the claimed version's split, if it has one."""
        ...


def second_encoder(encoder_for: PassageEncoderFor, claim: Claim) -> PassageEncoder | None:
    """The encoder of the claim's second model (KbChunking.second_model), None when its KB has none. Models
    other than the packaged e5 have no int8 graphs: float32 (KbChunking.passage_precision does not apply)."""
    second_model = claim.chunking.second_model
    return None if second_model is None else encoder_for(second_model, "float32")


def check_same_model(claim: Claim, current: Claim) -> None:
    if current.embedding_model != claim.embedding_model:
        raise EmbeddingModelChanged(
            f"the knowledge base switched to embedding model {current.embedding_model!r} while this document "
            f"was embedded with {claim.embedding_model!r}; it is built again with the new model"
        )


@dataclass(frozen=True)
class Embedded:
    """The vectors of a run of chunks, row by row: dense, BM25 and, for a KB with a second model
    (KbChunking.second_model), that model's."""

    dense: NDArray[np.float32]
    sparse: list[SparseTerms]
    second: NDArray[np.float32] | None = None

    def sliced(self, span: slice) -> Embedded:
        second = None if self.second is None else self.second[span]
        return Embedded(self.dense[span], self.sparse[span], second)


def embed_in_slices(
    texts: list[str],
    titles: list[str],
    encoder: PassageEncoder,
    bm25: Bm25Encoder,
    renew: Callable[[], object | None],
    *,
    second: PassageEncoder | None = None,
) -> Embedded | None:
    """Dense and BM25 vectors of `texts` (each with its document's title in `titles`), and the `second` model's
    where the KB has one, a slice at a time with the lease renewed in between (`renew`), so that a large document
    (or batch) keeps its claim, and a superseded one stops early. None when superseded (`renew` answered None)."""
    dense_parts: list[NDArray[np.float32]] = []
    second_parts: list[NDArray[np.float32]] = []
    sparse: list[SparseTerms] = []
    for start in range(0, len(texts), EMBED_SLICE):
        if start and renew() is None:
            return None
        piece = slice(start, start + EMBED_SLICE)
        dense_parts.append(encoder.embed_passages(texts[piece]))
        if second is not None:
            second_parts.append(second.embed_passages(texts[piece]))
        sparse.extend(
            bm25.encode_document(text, title) for text, title in zip(texts[piece], titles[piece], strict=True)
        )
    return Embedded(np.concatenate(dense_parts), sparse, np.concatenate(second_parts) if second_parts else None)


def _share_seconds(documents: list[PreparedDocument], stage: str, seconds: float) -> None:
    """A shared stage's time, recorded on each document of the batch in proportion to its chunks."""
    chunks = sum(len(document.chunks) for document in documents) or 1
    for document in documents:
        share = seconds * len(document.chunks) / chunks
        document.clock.seconds[stage] = round(document.clock.seconds.get(stage, 0.0) + share, 4)


def embedding_text(title: str, chunk: Chunk) -> str:
    """What is embedded and keyword-indexed: a short typed prefix for context, then the verbatim chunk."""
    context = " > ".join((title, *chunk.heading_path))
    return f"{context}\n{chunk.text}"


def document_points(
    claim: Claim,
    chunks: list[Chunk],
    embedded: Embedded,
    analyzer_version: str,
    *,
    first_ordinal: int = 0,
) -> DocumentPoints:
    """The points of `chunks`, the first at ordinal `first_ordinal` (a range of a long document: its ordinals are
    the whole document's, so that each chunk's id is the one it would have unsplit)."""
    return DocumentPoints(
        kb_id=claim.kb_id,
        document_id=claim.document_id,
        source_id=claim.source_id,
        version=claim.version,
        title=claim.title,
        labels=claim.labels,
        doc_type=claim.doc_type,
        metadata=claim.metadata,
        analyzer_version=analyzer_version,
        chunks=[
            ChunkPoint(
                ordinal=ordinal,
                text=chunk.text,
                dense=embedded.dense[row].tolist(),
                sparse=embedded.sparse[row],
                second=None if embedded.second is None else embedded.second[row].tolist(),
                heading_path=list(chunk.heading_path),
                page=chunk.page,
                char_start=chunk.char_start,
                char_end=chunk.char_end,
            )
            for row, (ordinal, chunk) in enumerate(enumerate(chunks, first_ordinal))
        ],
    )
