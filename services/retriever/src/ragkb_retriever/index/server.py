"""`ServerIndex`: the index on a Qdrant server or cluster through qdrant-client.

Also runs against qdrant-client's local mode (`QdrantClient(location=":memory:")`), which is what the
congruence tests compare `EdgeIndex` with; local mode evaluates filters in Python per point, so it is
for tests only. With a server the retriever keeps no state and scales out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import Unavailable
from ragkb_retriever.index import filters
from ragkb_retriever.index.port import (
    DenseLeg,
    FusedLeg,
    IndexHit,
    IndexPoint,
    KeywordLeg,
    Leg,
    LegResults,
    assemble,
    document_delete_filter,
    no_index,
    no_results,
    plan_legs,
    rrf_weights,
)
from ragkb_retriever.index.schema import (
    DENSE_VECTOR,
    FIRST_GENERATION,
    PAYLOAD_INDEXES,
    SPARSE_VECTOR,
    PayloadIndexKind,
    generations_of,
)

_SCHEMA_TYPES: dict[PayloadIndexKind, qm.PayloadSchemaType] = {
    "keyword": qm.PayloadSchemaType.KEYWORD,
    "integer": qm.PayloadSchemaType.INTEGER,
}


class ServerIndex:
    """Every call addresses the KB's alias, so a generation switch is one alias update on the server."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client

    # -- KBs ---------------------------------------------------------------------------------------

    def create_kb(self, kb_id: str, dense_size: int) -> None:
        with self._answering():
            if self.kb_exists(kb_id):
                return
            # Without an alias, any generation left is from a crashed create or drop: start clean.
            self._delete_generations(kb_id)
            name = ids.collection_name(kb_id, FIRST_GENERATION)
            self._create_collection(name, dense_size)
            # The alias comes last, so that it never points at a collection that is not ready.
            self._set_alias(kb_id, name)

    def drop_kb(self, kb_id: str) -> None:
        with self._answering():
            if self.kb_exists(kb_id):
                # The alias goes first: new calls see "no such KB" while the collections are deleted.
                delete = qm.DeleteAlias(alias_name=ids.alias_name(kb_id))
                self._client.update_collection_aliases([qm.DeleteAliasOperation(delete_alias=delete)])
            self._delete_generations(kb_id)

    def kb_exists(self, kb_id: str) -> bool:
        alias = ids.alias_name(kb_id)
        with self._answering():
            return any(item.alias_name == alias for item in self._client.get_aliases().aliases)

    # -- writes ------------------------------------------------------------------------------------

    def upsert(self, kb_id: str, points: Sequence[IndexPoint]) -> None:
        if not points:
            return
        structs = [_point_struct(point) for point in points]
        with self._on_kb(kb_id):
            # wait=True: the call returns once the write is applied, as Edge's writes do.
            self._client.upsert(ids.alias_name(kb_id), points=structs, wait=True)

    def delete_document(
        self,
        kb_id: str,
        document_id: str,
        keep_version: int | None = None,
        only_version: int | None = None,
    ) -> None:
        spec = document_delete_filter(kb_id, document_id, keep_version, only_version)
        selector = qm.FilterSelector(filter=_filter(spec))
        with self._on_kb(kb_id):
            self._client.delete(ids.alias_name(kb_id), points_selector=selector, wait=True)

    def set_document_payload(self, kb_id: str, document_id: str, payload: dict[str, Any]) -> None:
        selector = _filter(filters.document_filter(kb_id, document_id))
        with self._on_kb(kb_id):
            self._client.set_payload(ids.alias_name(kb_id), payload=payload, points=selector, wait=True)

    # -- reads -------------------------------------------------------------------------------------

    def count(self, kb_id: str, document_id: str | None = None, version: int | None = None) -> int:
        selector = _filter(filters.count_filter(kb_id, document_id, version))
        with self._on_kb(kb_id):
            return self._client.count(ids.alias_name(kb_id), count_filter=selector, exact=True).count

    def retrieve(self, kb_id: str, point_id: str) -> IndexHit | None:
        with self._on_kb(kb_id):
            records = self._client.retrieve(ids.alias_name(kb_id), ids=[point_id], with_payload=True)
        return next((IndexHit(id=str(r.id), score=0.0, payload=r.payload or {}) for r in records), None)

    def scroll(self, kb_id: str, spec: filters.FilterSpec, limit: int) -> list[IndexHit]:
        with self._on_kb(kb_id):
            records, _ = self._client.scroll(
                ids.alias_name(kb_id), scroll_filter=_filter(spec), limit=limit, with_payload=True
            )
        return [IndexHit(id=str(r.id), score=0.0, payload=r.payload or {}) for r in records]

    def search(  # noqa: PLR0917 -- the port's signature, positional as specified
        self,
        kb_id: str,
        dense: list[float] | None,
        sparse: SparseTerms | None,
        scope: ScopeFilter,
        limit: int,
        candidate_limit: int,
        rrf_k: int,
        weights: tuple[float, float] = (1.0, 1.0),
    ) -> LegResults:
        legs = plan_legs(
            dense, sparse, scope, limit=limit, candidate_limit=candidate_limit, rrf_k=rrf_k, weights=weights
        )
        if not legs:
            if not self.kb_exists(kb_id):
                raise no_index(kb_id)
            return no_results()
        requests = _LegRequests(kb_id, scope, candidate_limit)
        with self._on_kb(kb_id):
            batch = self._client.query_batch_points(
                ids.alias_name(kb_id), requests=[requests.build(leg) for leg in legs]
            )
        return assemble(legs, [[_hit(point) for point in response.points] for response in batch], limit)

    # -- upkeep ------------------------------------------------------------------------------------

    def optimize(self, kb_id: str) -> None:
        """Nothing to do: a Qdrant server builds its indexes in the background by itself."""

    def close(self) -> None:
        self._client.close()

    # -- internals ---------------------------------------------------------------------------------

    def _create_collection(self, name: str, dense_size: int) -> None:
        self._client.create_collection(
            name,
            vectors_config={DENSE_VECTOR: qm.VectorParams(size=dense_size, distance=qm.Distance.COSINE)},
            sparse_vectors_config={SPARSE_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
        )
        for field, kind in PAYLOAD_INDEXES:
            self._client.create_payload_index(name, field, field_schema=_SCHEMA_TYPES[kind], wait=True)

    def _set_alias(self, kb_id: str, name: str) -> None:
        create = qm.CreateAlias(collection_name=name, alias_name=ids.alias_name(kb_id))
        self._client.update_collection_aliases([qm.CreateAliasOperation(create_alias=create)])

    def _delete_generations(self, kb_id: str) -> None:
        names = [collection.name for collection in self._client.get_collections().collections]
        for name in generations_of(kb_id, names):
            self._client.delete_collection(name)

    @contextmanager
    def _on_kb(self, kb_id: str) -> Iterator[None]:
        """Translate a failed call on the KB's alias: a missing KB is NotFound, not a server error."""
        with self._answering():
            try:
                yield
            except (UnexpectedResponse, ValueError) as exc:
                # Server mode answers 404, local mode raises ValueError; either way, ask what is missing.
                if not self.kb_exists(kb_id):
                    raise no_index(kb_id) from exc
                raise

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """A server that cannot be reached or is failing is a transient error: callers retry."""
        try:
            yield
        except ResponseHandlingException as exc:
            raise Unavailable(f"Qdrant did not answer: {exc.source}") from exc
        except UnexpectedResponse as exc:
            if exc.status_code is not None and exc.status_code >= 500:
                raise Unavailable(f"Qdrant failed: {exc.status_code} {exc.reason_phrase}") from exc
            raise


class _LegRequests:
    """qdrant-client query requests for the legs of one search. Every leg carries the scope filter, so
    that ranking only ever sees points the caller may see."""

    def __init__(self, kb_id: str, scope: ScopeFilter, candidate_limit: int) -> None:
        self._filter = _filter(filters.scope_filter(kb_id, scope))
        # IDF over the KB's live points, the same statistics Edge computes (see edge.py).
        self._idf = qm.SearchParams(idf=qm.IdfCorpusParams(corpus=_filter(filters.kb_filter(kb_id))))
        self._candidates = candidate_limit

    def build(self, leg: Leg) -> qm.QueryRequest:
        match leg:
            case DenseLeg():
                return self._leg(self._dense(leg))
            case KeywordLeg():
                return self._leg(self._keyword(leg))
            case FusedLeg():
                return self._fused(leg)

    @staticmethod
    def _leg(prefetch: qm.Prefetch) -> qm.QueryRequest:
        return qm.QueryRequest(
            query=prefetch.query,
            using=prefetch.using,
            filter=prefetch.filter,
            params=prefetch.params,
            limit=prefetch.limit,
            with_payload=True,
        )

    def _dense(self, leg: DenseLeg) -> qm.Prefetch:
        query = qm.NearestQuery(nearest=leg.vector)
        return qm.Prefetch(query=query, using=DENSE_VECTOR, filter=self._filter, limit=self._candidates)

    def _keyword(self, leg: KeywordLeg) -> qm.Prefetch:
        query = qm.NearestQuery(nearest=qm.SparseVector(indices=leg.terms.indices, values=leg.terms.values))
        return qm.Prefetch(
            query=query, using=SPARSE_VECTOR, filter=self._filter, params=self._idf, limit=self._candidates
        )

    def _fused(self, leg: FusedLeg) -> qm.QueryRequest:
        # The prefetches are the very legs run beside this request, so the fused list is RRF over them.
        return qm.QueryRequest(
            prefetch=[self._dense(leg.dense), self._keyword(leg.keyword)],
            query=qm.RrfQuery(rrf=qm.Rrf(k=leg.rrf_k, weights=rrf_weights(leg))),
            limit=leg.limit,
            with_payload=True,
        )


def _point_struct(point: IndexPoint) -> qm.PointStruct:
    sparse = qm.SparseVector(indices=point.sparse.indices, values=point.sparse.values)
    return qm.PointStruct(id=point.id, vector={DENSE_VECTOR: point.dense, SPARSE_VECTOR: sparse}, payload=point.payload)


def _filter(spec: filters.FilterSpec) -> qm.Filter:
    return qm.Filter(
        must=[_condition(match) for match in spec.must],
        must_not=[_condition(match) for match in spec.must_not] or None,
    )


def _condition(match: filters.FieldMatch) -> qm.FieldCondition:
    if len(match.values) == 1:
        return qm.FieldCondition(key=match.field, match=qm.MatchValue(value=match.values[0]))
    return qm.FieldCondition(key=match.field, match=qm.MatchAny(any=match.value_list()))


def _hit(point: qm.ScoredPoint) -> IndexHit:
    return IndexHit(id=str(point.id), score=point.score, payload=point.payload or {})
