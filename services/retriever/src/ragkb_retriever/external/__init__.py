"""External knowledge bases (ragkb_core.external): searched where they live, read only.

`ExternalSearch` is what the search service asks: one KB-part's passages as legs (LegResults whose payloads
have a native passage's fields), its scope translated first (external.scope: what cannot be enforced returns
nothing)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ragkb_core.contracts import KbSearch, ScopeFilter, SearchMode, SparseTerms
from ragkb_core.external import ExternalDifyConfig, ExternalProbe, ExternalTarget
from ragkb_retriever.external.dify import ExternalDify
from ragkb_retriever.external.scope import dify_scope, qdrant_scope
from ragkb_retriever.index.port import LegResults, no_results
from ragkb_retriever.settings import ExternalSettings

if TYPE_CHECKING:
    from ragkb_retriever.external.qdrant import ExternalQdrant

__all__ = ["ExternalSearch", "needs_query_vector"]


def needs_query_vector(kb: KbSearch) -> bool:
    """A Dify endpoint embeds the question itself; a Qdrant collection (and a native KB) needs ragkb's vector."""
    return kb.external is None or not isinstance(kb.external.config, ExternalDifyConfig)


class ExternalSearch:
    def __init__(self, settings: ExternalSettings) -> None:
        self._settings = settings
        # Made at the first Qdrant collection's call: qdrant-client's import is ~1.2 s of every retriever's start
        # (`python -X importtime`, 2026-12-07), and most deployments register no external Qdrant KB.
        self._qdrant_client: ExternalQdrant | None = None
        self._qdrant_lock = threading.Lock()
        self._dify = ExternalDify(settings)

    @property
    def _qdrant(self) -> ExternalQdrant:
        with self._qdrant_lock:
            if self._qdrant_client is None:
                from ragkb_retriever.external.qdrant import ExternalQdrant

                self._qdrant_client = ExternalQdrant(self._settings)
            return self._qdrant_client

    def search(
        self,
        kb: KbSearch,
        query: str,
        *,
        mode: SearchMode,
        dense: list[float] | None,
        sparse: SparseTerms | None,
        scope: ScopeFilter,
        depth: int,
    ) -> LegResults:
        """Passages of the external KB `kb` (its `external` set), best first, at most `depth`."""
        target = _target(kb)
        if isinstance(target.config, ExternalDifyConfig):
            allowed = dify_scope(scope)
            if allowed is None:
                return no_results()
            hits = self._dify.search(
                kb.kb_id, target, query, top_k=depth, floor=kb.retrieval.min_relevance, scope=allowed
            )
            # The endpoint ranked them: its order is their fused order; it reports no legs of its own.
            return LegResults(fused=hits, dense=[], keyword=[])
        spec = qdrant_scope(scope, target.config.fields)
        if spec is None:
            return no_results()
        return self._qdrant.search(
            kb,
            target,
            dense=dense if mode != "keyword" else None,
            sparse=sparse if mode != "semantic" else None,
            spec=spec,
            limit=depth,
        )

    def probe(self, target: ExternalTarget, dimension: int | None) -> ExternalProbe:
        if isinstance(target.config, ExternalDifyConfig):
            return self._dify.probe(target)
        if dimension is None:
            raise ValueError("a Qdrant collection is probed against its embedding model's dimension")
        return self._qdrant.probe(target, dimension)

    def close(self) -> None:
        with self._qdrant_lock:
            qdrant = self._qdrant_client
        if qdrant is not None:
            qdrant.close()
        self._dify.close()


def _target(kb: KbSearch) -> ExternalTarget:
    if kb.external is None:
        raise ValueError(f"knowledge base {kb.kb_id} is not external")
    return kb.external
