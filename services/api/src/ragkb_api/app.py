"""Composition root of the api: the only place that names concrete classes."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from litestar import Litestar, Router
from litestar._openapi.plugin import OpenAPIPlugin  # the document's one owner; no public accessor
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from redis import Redis
from sqlalchemy import Engine

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
from ragkb_api.knowledge_bases.deletion import KbDeletionService
from ragkb_api.knowledge_bases.routes import KnowledgeBaseController
from ragkb_api.knowledge_bases.service import KnowledgeBaseService
from ragkb_api.pages.routes import PageController
from ragkb_api.rate_limit import RateLimiter, build_rate_limiter
from ragkb_api.search.routes import SearchController
from ragkb_api.search.service import SearchService
from ragkb_api.settings import ApiSettings
from ragkb_api.tools.mcp import McpServer
from ragkb_api.tools.routes import ContextController, McpController, ToolController
from ragkb_api.tools.service import ToolService
from ragkb_core.retriever_client import RetrieverClient
from ragkb_http import PROBLEM_HANDLERS, PUBLIC, JsonBodyRequest, access, health_router, refuse_nul_in_url
from ragkb_store.blobs import BlobStore
from ragkb_store.db.engine import build_engine, build_session_factory, database_answers, migrate_to_head
from ragkb_store.queue import make_celery

# Multipart framing and the form fields around the file may add this much to the declared body size.
MULTIPART_OVERHEAD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ApiServices:
    engine: Engine
    queue: Celery
    retriever: RetrieverClient
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
    document_sources: DocumentSourceService


def build_services(settings: ApiSettings, limiter: RateLimiter) -> ApiServices:
    engine = build_engine(settings.database)
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    blobs = BlobStore(settings.blobs.root)
    queue = make_celery(settings.redis)
    retriever = RetrieverClient(settings.retriever, settings.service_token)
    bootstrap = settings.auth.bootstrap_admin_key
    search = SearchService(sessions, retriever, settings.limits)
    api_keys = ApiKeyService(sessions, bootstrap.get_secret_value() if bootstrap else None)
    tools = ToolService(sessions, blobs, retriever, search)
    documents = DocumentService(sessions, blobs, queue, retriever, settings.limits)
    question_sets = QuestionSetService(sessions, settings.limits)
    jobs = JobService(sessions, documents, queue, settings.jobs)
    return ApiServices(
        engine=engine,
        queue=queue,
        retriever=retriever,
        knowledge_bases=KnowledgeBaseService(sessions, retriever),
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
        document_sources=DocumentSourceService(sessions, blobs, retriever),
    )


def create_app(settings: ApiSettings) -> Litestar:
    limiter = build_rate_limiter(settings.rate_limit, settings.redis.url)
    services = build_services(settings, limiter)
    # Readiness must answer quickly even when Redis hangs.
    redis = Redis.from_url(settings.redis.url, socket_timeout=2, socket_connect_timeout=2)
    checks = {
        "database": lambda: database_answers(services.engine),
        "redis": lambda: bool(redis.ping()),
        "retriever": services.retriever.ready,
    }
    console_sessions = ConsoleSessions(redis, settings.console)
    app = Litestar(
        route_handlers=[
            health_router(checks),
            KnowledgeBaseController,
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
            DocumentSourceController,
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
            "search_service": Provide(lambda: services.search, sync_to_thread=False),
            "key_service": Provide(lambda: services.api_keys, sync_to_thread=False),
            "tool_service": Provide(lambda: services.tools, sync_to_thread=False),
            "mcp_server": Provide(lambda: services.mcp, sync_to_thread=False),
            "dify_service": Provide(lambda: services.dify, sync_to_thread=False),
            "question_set_service": Provide(lambda: services.question_sets, sync_to_thread=False),
            "evaluation_service": Provide(lambda: services.evaluations, sync_to_thread=False),
            "document_source_service": Provide(lambda: services.document_sources, sync_to_thread=False),
            "console_sessions": Provide(lambda: console_sessions, sync_to_thread=False),
            "caller": Provide(provide_caller, sync_to_thread=False),
        },
        exception_handlers=PROBLEM_HANDLERS,
        # JSON bodies: 415 when declared as another type, 422 when malformed or nested past the decoder.
        request_class=JsonBodyRequest,
        # A NUL in a path or query parameter: 422 before any handler (request text never holds one).
        before_request=refuse_nul_in_url,
        openapi_config=OpenAPIConfig(
            title="ragkb",
            version="1.0.0",
            # The API's description is public, like /health and /ready; everything else needs a key.
            openapi_router=Router(path="/schema", route_handlers=[], opt=access(PUBLIC), include_in_schema=False),
            security=[{"bearer": []}],
            components=Components(security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")}),
        ),
        request_max_body_size=settings.limits.max_upload_bytes + MULTIPART_OVERHEAD_BYTES,
        on_shutdown=[services.retriever.close, services.engine.dispose, redis.close, limiter.close],
        logging_config=None,
    )
    # Completed once, before /schema serves it: problem details, event streams, bodies read by hand.
    complete_contract(app.plugins.get(OpenAPIPlugin).provide_openapi_schema())
    return app
