"""Composition root of the worker: the only place that names concrete classes."""

from __future__ import annotations

import functools

from celery import Celery
from redis import Redis

from ragkb_analyzer import bm25_encoder_for
from ragkb_core.retriever_client import RetrieverClient
from ragkb_models import EmbedderPool
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import build_engine, build_session_factory, database_answers
from ragkb_store.queue import enqueue_finish_reindex, make_celery
from ragkb_worker.documents import DocumentLedger
from ragkb_worker.health import start_health_server
from ragkb_worker.kb_deletion import KbDeleter
from ragkb_worker.pipeline import IngestPipeline
from ragkb_worker.quality_gate import QualityGate
from ragkb_worker.reindexing import Reindexer
from ragkb_worker.settings import WorkerSettings
from ragkb_worker.sweeper import Sweeper
from ragkb_worker.tasks import register_tasks


def build_ledger(settings: WorkerSettings) -> DocumentLedger:
    return DocumentLedger(build_session_factory(build_engine(settings.database)), settings.tasks.lease_s)


def build_pipeline(settings: WorkerSettings) -> tuple[DocumentLedger, IngestPipeline]:
    embedders = EmbedderPool(settings.embedding)
    embedders.get()  # the default model now; another allowed one on the first document that needs it
    ledger = build_ledger(settings)
    pipeline = IngestPipeline(
        ledger=ledger,
        blobs=BlobStore(settings.blobs.root),
        encoder_for=embedders.get,
        bm25_for=functools.partial(bm25_encoder_for, settings=settings.analyzer),
        retriever=RetrieverClient(settings.retriever, settings.service_token),
        limits=settings.limits,
    )
    return ledger, pipeline


def create_worker_app(settings: WorkerSettings) -> Celery:
    app = make_celery(settings.redis)
    # Built on the first task in each worker process (after fork), then reused: models load once per process.
    runtime = functools.cache(lambda: build_pipeline(settings))

    def build_reindexer() -> Reindexer:
        sessions = build_session_factory(build_engine(settings.database))
        retriever = RetrieverClient(settings.retriever, settings.service_token)
        return Reindexer(
            sessions,
            runtime()[1],
            retriever,
            QualityGate(sessions, retriever),
            functools.partial(enqueue_finish_reindex, app),
        )

    def build_kb_deleter() -> KbDeleter:
        sessions = build_session_factory(build_engine(settings.database))
        retriever = RetrieverClient(settings.retriever, settings.service_token)
        return KbDeleter(sessions, retriever, BlobStore(settings.blobs.root))

    register_tasks(app, settings.tasks, runtime, functools.cache(build_reindexer), functools.cache(build_kb_deleter))
    return app


def build_sweeper(settings: WorkerSettings, app: Celery) -> Sweeper:
    # The sweeper only asks the queue's length: a hung Redis must fail that tick, not block it forever.
    redis = Redis.from_url(settings.redis.url, socket_timeout=5, socket_connect_timeout=5)
    return Sweeper(build_ledger(settings), app, redis, settings.tasks, settings.jobs.upload_wait_s)


def start_health(settings: WorkerSettings) -> None:
    engine = build_engine(settings.database)
    redis = Redis.from_url(settings.redis.url, socket_timeout=2)
    retriever = RetrieverClient(settings.retriever, settings.service_token)
    checks = {
        "database": lambda: database_answers(engine),
        "redis": lambda: bool(redis.ping()),
        "retriever": retriever.ready,
    }
    start_health_server(settings.worker.host, settings.worker.port, checks)
