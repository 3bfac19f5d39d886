"""Composition root of the retriever: the only place that names concrete classes."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from litestar import Litestar
from litestar.di import Provide

from ragkb_analyzer import Bm25Encoder, bm25_encoder_for
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_http import PROBLEM_HANDLERS, JsonBodyRequest, health_router, service_token_guard
from ragkb_http.observability import metrics_router, observation_middleware, tracing_plugins
from ragkb_models import EmbedderPool
from ragkb_retriever.external import ExternalSearch
from ragkb_retriever.index import build_index
from ragkb_retriever.index.port import VectorIndex
from ragkb_retriever.indexing import IndexService
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.routes import IndexController, SearchController, analyze, internal_ready, legs, probe_external
from ragkb_retriever.search_runner import SearchRunner
from ragkb_retriever.searching import SearchService
from ragkb_retriever.settings import RetrieverSettings, query_embedding_settings
from ragkb_telemetry.exposition import scrape_registry
from ragkb_telemetry.metrics import timed_model_load
from ragkb_telemetry.tracing import tracing_configured

logger = logging.getLogger(__name__)

# Analysed once at start: the first Japanese text loads Sudachi's dictionary (~45 ms), which would otherwise be
# the first search's `analyze` stage.
ANALYZER_WARM_UP_TEXT = "就業規則の有給休暇 paid leave"
# The start of the line logged once every KB's index is loaded (the launcher's tests look for it).
INDEX_WARMED = "warmed the index of"


@dataclass(frozen=True)
class RetrieverServices:
    index: VectorIndex
    indexing: IndexService
    search: SearchService
    search_runner: SearchRunner
    external: ExternalSearch
    embedders: EmbedderPool


def build_services(settings: RetrieverSettings) -> RetrieverServices:
    # Heavy models load here, once per process at start-up, never per request: the default embedding model
    # now, another allowed one when a re-index first asks for it (then kept for the process).
    embedders = EmbedderPool(query_embedding_settings(settings))
    with timed_model_load("embedder", settings.embedding.model):
        embedders.get()
    rerankers = RerankerPool(settings.reranker)
    with timed_model_load("reranker", settings.reranker.model or "allowed models"):
        rerankers.warm_up()
    index = build_index(settings.qdrant)

    def bm25_for(analyzer: KbAnalyzer) -> Bm25Encoder:
        return bm25_encoder_for(analyzer, settings.analyzer)

    with timed_model_load("analyzer", "default"):
        bm25_for(KbAnalyzer()).encode_query(ANALYZER_WARM_UP_TEXT)
    # In the background: the service answers meanwhile, a KB not warmed yet loads on its first search as before.
    threading.Thread(target=_warm_up_index, args=(index,), name="index-warm-up", daemon=True).start()

    external = ExternalSearch(settings.external)
    search = SearchService(
        index,
        embedders.get,
        bm25_for,
        rerankers,
        QueryVectorCache(settings.retriever.query_cache_size),
        calibration_for=settings.embedding.relevance_of,
        external=external,
    )
    return RetrieverServices(
        index=index,
        indexing=IndexService(index, embedders),
        search=search,
        search_runner=SearchRunner(search),
        external=external,
        embedders=embedders,
    )


def create_app(settings: RetrieverSettings) -> Litestar:
    if not settings.service_token:
        raise RuntimeError("set RAGKB_SERVICE_TOKEN: the internal API refuses every call without it")
    token = settings.service_token.get_secret_value()
    services = build_services(settings)
    return Litestar(
        route_handlers=[
            health_router({"index": lambda: _index_answers(services.indexing)}),
            metrics_router(scrape_registry(), settings.metrics),
            internal_ready,
            analyze,
            probe_external,
            legs,
            IndexController,
            SearchController,
        ],
        dependencies={
            "index_service": Provide(lambda: services.indexing, sync_to_thread=False),
            "search_service": Provide(lambda: services.search, sync_to_thread=False),
            "search_runner": Provide(lambda: services.search_runner, sync_to_thread=False),
            "external_search": Provide(lambda: services.external, sync_to_thread=False),
            "embedders": Provide(lambda: services.embedders, sync_to_thread=False),
        },
        # Only the api and the worker, holding the shared token, may call anything but /health and /ready.
        guards=[service_token_guard(token)],
        exception_handlers=PROBLEM_HANDLERS,
        # JSON bodies: 415 when declared as another type, 422 when malformed or nested past the decoder.
        request_class=JsonBodyRequest,
        middleware=observation_middleware("retriever"),
        plugins=tracing_plugins(tracing_configured()),
        # Chunk batches of a large document carry 384 floats per chunk: allow generous bodies internally.
        request_max_body_size=512 * 1024 * 1024,
        on_shutdown=[services.search.close, services.index.close],
        logging_config=None,
    )


def _warm_up_index(index: VectorIndex) -> None:
    started = time.perf_counter()
    warmed = index.warm_up()
    if warmed:
        logger.info(f"{INDEX_WARMED} %d knowledge base(s) in %.1f s", warmed, time.perf_counter() - started)


def _index_answers(indexing: IndexService) -> bool:
    indexing.probe()
    return True
