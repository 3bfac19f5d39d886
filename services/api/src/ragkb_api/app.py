"""Composition root of the api: the only place that names concrete classes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError as BrokerUnavailable
from litestar import Litestar, Request, Router
from litestar._openapi.plugin import OpenAPIPlugin  # the document's one owner; no public accessor
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from prometheus_client import CollectorRegistry
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError as DatabaseInterfaceError
from sqlalchemy.exc import OperationalError as DatabaseUnavailable
from sqlalchemy.exc import TimeoutError as DatabasePoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.console.routes import ConsoleController
from ragkb_api.console.sessions import ConsoleSessions
from ragkb_api.contract import complete_contract
from ragkb_api.dify.routes import DifyController
from ragkb_api.dify.service import DifyService
from ragkb_api.documents.routes import DocumentController
from ragkb_api.documents.service import DocumentService
from ragkb_api.documents.source_routes import DocumentSourceController
from ragkb_api.documents.sources import DocumentSourceService
from ragkb_api.evaluations.question_sets import QuestionSetService
from ragkb_api.evaluations.routes import EvaluationController, QuestionSetController
from ragkb_api.evaluations.service import EvaluationService
from ragkb_api.guards import AccessGuard, provide_caller
from ragkb_api.jobs.events import JobEvents
from ragkb_api.jobs.reindex import ReindexService
from ragkb_api.jobs.routes import JobController, KnowledgeBaseJobController
from ragkb_api.jobs.service import JobService
from ragkb_api.keys.routes import ApiKeyController
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.knowledge_bases.backup import BackupService
from ragkb_api.knowledge_bases.backup_routes import backup_router
from ragkb_api.knowledge_bases.consistency import ConsistencyService
from ragkb_api.knowledge_bases.deletion import KbDeletionService
from ragkb_api.knowledge_bases.routes import KnowledgeBaseController
from ragkb_api.knowledge_bases.service import KnowledgeBaseService
from ragkb_api.loop_reads import LoopReads
from ragkb_api.pages.routes import PageController
from ragkb_api.rate_limit import RateLimiter, build_rate_limiter
from ragkb_api.retriever_async import AsyncRetrieverSearch
from ragkb_api.search.routes import SearchController
from ragkb_api.search.service import SearchService
from ragkb_api.settings import ApiSettings
from ragkb_api.sources.credentials import CredentialVault
from ragkb_api.sources.routes import SourceController
from ragkb_api.sources.runner import SourceRunner
from ragkb_api.sources.scheduler import SourceScheduler
from ragkb_api.sources.service import SourceService
from ragkb_api.tools.mcp import McpServer
from ragkb_api.tools.routes import ContextController, McpController, ToolController
from ragkb_api.tools.service import ToolService
from ragkb_api.tuning.routes import TuneController
from ragkb_api.tuning.service import TuneService
from ragkb_api.tuning.versions import SettingsVersionService
from ragkb_core.health import ReadinessChecks, run_checks
from ragkb_core.retriever_client import RetrieverClient
from ragkb_http import (
    PROBLEM_HANDLERS,
    PUBLIC,
    DeclaredQueryParameters,
    JsonBodyRequest,
    access,
    dependency_error_handlers,
    health_router,
    refuse_nul_in_url,
)
from ragkb_http.observability import metrics_router, observation_middleware, tracing_plugins
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import build_engine, build_session_factory, database_answers, migrate_to_head
from ragkb_store.ledger import DocumentLedger
from ragkb_store.ledger.sources import SourceLedger
from ragkb_store.queue import QUEUE_OF_LANE, IngestQueue, broker_lists, make_celery
from ragkb_store.state_counts import documents_by_status, jobs_by_kind_and_status, live_points_by_kb
from ragkb_store.states import Lane
from ragkb_telemetry.exposition import QueueCollector, ScrapeGauge, scrape_registry
from ragkb_telemetry.tasks import carry_request_id_in_tasks
from ragkb_telemetry.tracing import tracing_configured

# Multipart framing and the form fields around the file may add this much to the declared body size.
MULTIPART_OVERHEAD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ApiServices:
    engine: Engine
    loop_reads: LoopReads
    sessions: sessionmaker[Session]
    queue: Celery
    retriever: RetrieverClient
    retriever_async: AsyncRetrieverSearch
    knowledge_bases: KnowledgeBaseService
    documents: DocumentService
    jobs: JobService
    job_events: JobEvents
    search: SearchService
    api_keys: ApiKeyService
    tools: ToolService
    mcp: McpServer
    dify: DifyService
    question_sets: QuestionSetService
    evaluations: EvaluationService
    reindex: ReindexService
    kb_deletion: KbDeletionService
    consistency: ConsistencyService
    backups: BackupService
    document_sources: DocumentSourceService
    sources: SourceService
    source_runner: SourceRunner
    source_scheduler: SourceScheduler
    tuning: TuneService
    settings_versions: SettingsVersionService


def build_services(settings: ApiSettings, limiter: RateLimiter) -> ApiServices:
    engine = build_engine(settings.database)
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    blobs = BlobStore(settings.blobs.root)
    queue = make_celery(settings.redis)
    retriever = RetrieverClient(settings.retriever, settings.service_token)
    bootstrap = settings.auth.bootstrap_admin_key
    # Seals sources' credentials and external KBs' API keys (RAGKB_SOURCES__CREDENTIALS_KEY).
    vault = CredentialVault(settings.sources.credentials_key)
    retriever_async = AsyncRetrieverSearch(settings.retriever, settings.service_token)
    # The key's and the KBs' reads of every search, made by the async guard and handler (ragkb_api.loop_reads).
    loop_reads = LoopReads(engine)
    search = SearchService(sessions, retriever, settings.limits, vault, retriever_async, reads=loop_reads)
    api_keys = ApiKeyService(sessions, bootstrap.get_secret_value() if bootstrap else None, loop_reads)
    tools = ToolService(sessions, blobs, retriever, search)
    ingest_queue = IngestQueue(queue, DocumentLedger(sessions), settings.jobs.fair_queueing)
    documents = DocumentService(sessions, blobs, ingest_queue, retriever, limits=settings.limits, jobs=settings.jobs)
    question_sets = QuestionSetService(sessions, settings.limits)
    knowledge_bases = KnowledgeBaseService(sessions, retriever, vault=vault, embedding=settings.embedding)
    jobs = JobService(sessions, documents, ingest_queue, settings.jobs)
    source_ledger = SourceLedger(sessions, settings.sources.lease_s)
    runner = SourceRunner(
        sessions,
        source_ledger,
        jobs,
        documents,
        vault=vault,
        settings=settings.sources,
        max_bytes=settings.limits.max_upload_bytes,
    )
    return ApiServices(
        engine=engine,
        loop_reads=loop_reads,
        sessions=sessions,
        queue=queue,
        retriever=retriever,
        retriever_async=retriever_async,
        knowledge_bases=knowledge_bases,
        documents=documents,
        jobs=jobs,
        # One database poller per followed job, shared by its streams; streams capped per key.
        job_events=JobEvents(jobs, settings.limits.max_streams_per_key),
        search=search,
        api_keys=api_keys,
        tools=tools,
        mcp=McpServer(tools),
        # The same limiter as the guard's: a key's rate limit counts its Dify calls too.
        dify=DifyService(sessions, api_keys, limiter, search),
        question_sets=question_sets,
        # Evaluations spend one token of the caller's rate limit per search they run.
        evaluations=EvaluationService(question_sets, search, limiter),
        reindex=ReindexService(sessions, retriever, queue, settings.embedding),
        kb_deletion=KbDeletionService(sessions, queue),
        consistency=ConsistencyService(sessions, retriever, ingest_queue),
        backups=BackupService(
            sessions,
            blobs,
            retriever,
            ingest_queue,
            knowledge_bases,
            max_restore_bytes=settings.limits.max_restore_bytes,
        ),
        document_sources=DocumentSourceService(sessions, blobs, retriever),
        sources=SourceService(sessions, vault, runner, settings.sources),
        source_runner=runner,
        source_scheduler=SourceScheduler(source_ledger, runner, settings.sources.scheduler_tick_s),
        tuning=TuneService(sessions, queue),
        settings_versions=SettingsVersionService(sessions),
    )


def create_app(settings: ApiSettings) -> Litestar:
    limiter = build_rate_limiter(settings.rate_limit, settings.redis.url)
    services = build_services(settings, limiter)
    declared_queries = DeclaredQueryParameters()
    # Readiness must answer quickly even when Redis hangs.
    redis = Redis.from_url(settings.redis.url, socket_timeout=2, socket_connect_timeout=2)
    checks = {
        "database": lambda: database_answers(services.engine),
        "redis": lambda: bool(redis.ping()),
        "retriever": services.retriever.ready,
    }
    console_sessions = ConsoleSessions(redis, settings.console)
    # Tasks this api queues carry the request id that queued them, and their publication time (queue age).
    carry_request_id_in_tasks()
    app = Litestar(
        route_handlers=[
            health_router(checks),
            metrics_router(scrape_metrics(services, redis, checks), settings.metrics),
            KnowledgeBaseController,
            backup_router(settings.limits.max_restore_bytes),
            DocumentController,
            KnowledgeBaseJobController,
            JobController,
            SearchController,
            ApiKeyController,
            ToolController,
            ContextController,
            McpController,
            DifyController,
            PageController,
            QuestionSetController,
            EvaluationController,
            TuneController,
            DocumentSourceController,
            SourceController,
            ConsoleController,
        ],
        # Every route is authenticated and authorised here, by what its handler declares (admin if nothing).
        guards=[AccessGuard(services.api_keys, limiter, console_sessions, services.dify)],
        dependencies={
            "kb_service": Provide(lambda: services.knowledge_bases, sync_to_thread=False),
            "document_service": Provide(lambda: services.documents, sync_to_thread=False),
            "job_service": Provide(lambda: services.jobs, sync_to_thread=False),
            "job_events": Provide(lambda: services.job_events, sync_to_thread=False),
            "reindex_service": Provide(lambda: services.reindex, sync_to_thread=False),
            "kb_deletion_service": Provide(lambda: services.kb_deletion, sync_to_thread=False),
            "consistency_service": Provide(lambda: services.consistency, sync_to_thread=False),
            "backup_service": Provide(lambda: services.backups, sync_to_thread=False),
            "search_service": Provide(lambda: services.search, sync_to_thread=False),
            "key_service": Provide(lambda: services.api_keys, sync_to_thread=False),
            "tool_service": Provide(lambda: services.tools, sync_to_thread=False),
            "mcp_server": Provide(lambda: services.mcp, sync_to_thread=False),
            "dify_service": Provide(lambda: services.dify, sync_to_thread=False),
            "question_set_service": Provide(lambda: services.question_sets, sync_to_thread=False),
            "evaluation_service": Provide(lambda: services.evaluations, sync_to_thread=False),
            "tune_service": Provide(lambda: services.tuning, sync_to_thread=False),
            "settings_version_service": Provide(lambda: services.settings_versions, sync_to_thread=False),
            "document_source_service": Provide(lambda: services.document_sources, sync_to_thread=False),
            "source_service": Provide(lambda: services.sources, sync_to_thread=False),
            "console_sessions": Provide(lambda: console_sessions, sync_to_thread=False),
            "caller": Provide(provide_caller, sync_to_thread=False),
        },
        # The database, Redis or the broker going away mid-request answers 503 with Retry-After, never 500.
        exception_handlers={
            **PROBLEM_HANDLERS,
            **dependency_error_handlers(
                DatabaseUnavailable,
                DatabaseInterfaceError,
                DatabasePoolTimeout,
                RedisConnectionError,
                RedisTimeoutError,
                BrokerUnavailable,
            ),
        },
        # JSON bodies: 415 when declared as another type, 422 when malformed or nested past the decoder.
        request_class=JsonBodyRequest,
        # A NUL in a path or query parameter, or a query parameter the operation does not take: 422 before
        # any handler (request text never holds a NUL; a misspelt parameter must not pass for an absent one).
        before_request=url_check(declared_queries),
        middleware=observation_middleware("api"),
        plugins=tracing_plugins(tracing_configured()),
        openapi_config=OpenAPIConfig(
            title="ragkb",
            version="1.0.0",
            # The API's description is public, like /health and /ready; everything else needs a key.
            openapi_router=Router(path="/schema", route_handlers=[], opt=access(PUBLIC), include_in_schema=False),
            security=[{"bearer": []}],
            components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
        ),
        request_max_body_size=settings.limits.max_upload_bytes + MULTIPART_OVERHEAD_BYTES,
        on_startup=[
            services.retriever_async.bind_to_running_loop,
            *([services.source_scheduler.start] if settings.sources.scheduler else []),
        ],
        on_shutdown=[
            services.source_scheduler.stop,
            services.source_runner.stop,
            services.retriever.close,
            services.retriever_async.aclose,
            services.engine.dispose,
            services.loop_reads.dispose,
            redis.close,
            limiter.aclose,
            limiter.close,
        ],
        logging_config=None,
    )
    # Completed once, before /schema serves it: problem details, event streams, bodies read by hand.
    declared_queries.learn(complete_contract(app.plugins.get(OpenAPIPlugin).provide_openapi_schema()))
    return app


def url_check(declared_queries: DeclaredQueryParameters) -> Callable[[Request[Any, Any, Any]], Awaitable[None]]:
    """The api's `before_request`: what is wrong with the URL alone is refused before any handler runs."""

    # Async although it never awaits: Litestar runs a sync `before_request` in a worker thread, and that hand-off
    # cost every request (a /health too) more than the check itself (README: Latency, async hooks).
    async def check_url(request: Request[Any, Any, Any]) -> None:
        refuse_nul_in_url(request)
        declared_queries.refuse_unknown(request)

    return check_url


def scrape_metrics(services: ApiServices, redis: Redis, checks: ReadinessChecks) -> CollectorRegistry:
    """The api's metrics, and what is read at each scrape: its readiness checks, the queue (any api sees it,
    so its depth and age are known while every worker is down) and the ledger's counts."""
    return scrape_registry(
        ScrapeGauge(
            "ragkb_dependency_ready",
            "1 when the api's readiness check of a dependency (database, redis, retriever) passes, else 0.",
            ["dependency"],
            lambda: {(name,): float(ok) for name, ok in run_checks(checks).items()},
        ),
        QueueCollector(redis, {QUEUE_OF_LANE[lane]: broker_lists(lane) for lane in Lane}),
        ScrapeGauge(
            "ragkb_documents", "Documents by status.", ["status"], lambda: documents_by_status(services.sessions)
        ),
        ScrapeGauge(
            "ragkb_jobs",
            "Jobs by kind and status.",
            ["kind", "status"],
            lambda: jobs_by_kind_and_status(services.sessions),
        ),
        ScrapeGauge(
            "ragkb_index_points",
            "Points (chunks) each KB's live index serves, as the ledger records them.",
            ["kb_id"],
            lambda: live_points_by_kb(services.sessions),
        ),
    )
