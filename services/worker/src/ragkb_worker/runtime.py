"""What a worker task process works with, built once per process as it starts (ragkb_worker.app.preload_runtime;
after the fork: models and connections are not shared across processes): one database engine, one retriever
client, one blob store, and the ledger, pipeline, re-indexer and KB deleter over them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from ragkb_analyzer import bm25_encoder_for
from ragkb_core.kb_settings import KbChunking
from ragkb_core.retriever_client import RetrieverClient
from ragkb_models import EmbedderPool
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import build_engine, build_session_factory
from ragkb_store.ledger import DocumentLedger
from ragkb_store.ledger.ranges import RangeLedger
from ragkb_telemetry.metrics import timed_model_load
from ragkb_worker.kb_deletion import KbDeleter
from ragkb_worker.long_documents import LongDocuments, SendRange
from ragkb_worker.pipeline import IngestPipeline
from ragkb_worker.quality_gate import QualityGate
from ragkb_worker.reindexing import Reindexer
from ragkb_worker.settings import WorkerSettings
from ragkb_worker.tasks import Ingest
from ragkb_worker.tuning import Tuner


@dataclass(frozen=True)
class WorkerRuntime:
    sessions: sessionmaker[Session]
    ledger: DocumentLedger
    pipeline: IngestPipeline
    reindexer: Reindexer
    kb_deleter: KbDeleter
    tuner: Tuner
    long_documents: LongDocuments
    ingest: Ingest


def build_runtime(
    settings: WorkerSettings,
    enqueue_finish_reindex: Callable[[str], None],
    send_range: SendRange,
    send_again: Callable[[list[str]], object],
) -> WorkerRuntime:
    sessions = build_session_factory(build_engine(settings.database))
    retriever = RetrieverClient(settings.retriever, settings.service_token)
    blobs = BlobStore(settings.blobs.root)
    embedders = EmbedderPool(settings.task_embedding())
    with timed_model_load("embedder", settings.embedding.model):
        # The default model in new KBs' precision now; another model or precision on the first document that needs it.
        embedders.get(None, KbChunking().passage_precision)
    ledger = DocumentLedger(sessions, settings.tasks.lease_s)
    bm25_for = functools.partial(bm25_encoder_for, settings=settings.analyzer)
    long_documents = LongDocuments(
        ledger=ledger,
        ranges=RangeLedger(sessions, settings.tasks.lease_s),
        blobs=blobs,
        encoder_for=embedders.get,
        bm25_for=bm25_for,
        retriever=retriever,
        settings=settings.long_documents,
        send_range=send_range,
    )
    pipeline = IngestPipeline(
        ledger=ledger,
        blobs=blobs,
        encoder_for=embedders.get,
        bm25_for=bm25_for,
        retriever=retriever,
        limits=settings.limits,
        splitter=long_documents,
        renew_after_s=settings.tasks.renew_after_s,
    )
    return WorkerRuntime(
        sessions=sessions,
        ledger=ledger,
        pipeline=pipeline,
        reindexer=Reindexer(sessions, pipeline, retriever, QualityGate(sessions, retriever), enqueue_finish_reindex),
        kb_deleter=KbDeleter(sessions, retriever, blobs),
        tuner=Tuner(sessions, retriever),
        long_documents=long_documents,
        ingest=Ingest(ledger, pipeline, settings.batching, send_again),
    )
