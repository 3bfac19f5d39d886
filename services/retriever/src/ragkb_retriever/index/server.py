"""`ServerIndex`: the index on a Qdrant server or cluster through qdrant-client.

Also runs against qdrant-client's local mode (`QdrantClient(location=":memory:")`), which is what the
congruence tests compare `EdgeIndex` with; local mode evaluates filters in Python per point, so it is
for tests only (and it ignores shard and replication settings).

With a server the retriever keeps no state and scales out: the KB's alias is read from the cluster on every
call (never cached), BM25 IDF is computed by Qdrant at query time over the KB's live points, and a KB's
layout (shards, replicas, write consistency) lives in its collections' own configuration, which a new
generation copies from the live one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any, cast

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import InvalidInput, Unavailable
from ragkb_core.kb_settings import FusionMethod, KbIndexLayout
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index import filters
from ragkb_retriever.index.port import (
    DenseLeg,
    GenerationInfo,
    IndexHit,
    IndexPoint,
    KeywordLeg,
    Leg,
    LegResults,
    PointPage,
    SecondLeg,
    SecondQuery,
    assemble,
    document_delete_filter,
    live_generation_conflict,
    no_generation,
    no_index,
    no_results,
    plan_legs,
    refused_vectors,
    run_legs,
    term_idf,
    with_payloads,
)
from ragkb_retriever.index.schema import (
    DENSE_VECTOR,
    FIRST_GENERATION,
    PAYLOAD_INDEXES,
    SECOND_VECTOR,
    SPARSE_VECTOR,
    PayloadIndexKind,
    generation_of,
    generations_of,
)

_SCHEMA_TYPES: dict[PayloadIndexKind, qm.PayloadSchemaType] = {
    "keyword": qm.PayloadSchemaType.KEYWORD,
    "integer": qm.PayloadSchemaType.INTEGER,
}


class ServerIndex:
    """Every call addresses the KB's alias (or a given generation's collection), so a generation switch
    is one alias update on the server."""

    def __init__(self, client: QdrantClient, default_layout: KbIndexLayout | None = None) -> None:
        self._client = client
        # Where a KB's create request leaves a field of its layout out (RAGKB_QDRANT__SHARD_NUMBER, ...).
        self._default_layout = default_layout or QdrantSettings().default_layout()

    # -- KBs ---------------------------------------------------------------------------------------

    def create_kb(
        self, kb_id: str, dense_size: int, layout: KbIndexLayout | None = None, *, second_size: int | None = None
    ) -> KbIndexLayout:
        try:
            applied = (layout or KbIndexLayout()).filled(self._default_layout)
        except ValueError as exc:
            raise InvalidInput(str(exc), layout=(layout or KbIndexLayout()).model_dump(exclude_none=True)) from exc
        with self._answering():
            if (live := self._live(kb_id)) is not None:
                return self._layout_of(ids.collection_name(kb_id, live)) or applied
            # Without an alias, any generation left is from a crashed create or drop: start clean.
            self._delete_generations(kb_id)
            name = ids.collection_name(kb_id, FIRST_GENERATION)
            self._create_collection(name, dense_size, applied, second_size)
            # The alias comes last, so that it never points at a collection that is not ready.
            self._set_alias(kb_id, name)
        return applied

    def drop_kb(self, kb_id: str) -> None:
        with self._answering():
            if self.kb_exists(kb_id):
                # The alias goes first: new calls see "no such KB" while the collections are deleted.
                delete = qm.DeleteAlias(alias_name=ids.alias_name(kb_id))
                self._client.update_collection_aliases([qm.DeleteAliasOperation(delete_alias=delete)])
            self._delete_generations(kb_id)

    def kb_exists(self, kb_id: str) -> bool:
        return self._alias_target(kb_id) is not None

    # -- generations -------------------------------------------------------------------------------

    def create_generation(self, kb_id: str, dense_size: int, *, second_size: int | None = None) -> int:
        with self._answering():
            live = self._require_live(kb_id)
            generation = max(self._generation_numbers(kb_id)) + 1
            name = ids.collection_name(kb_id, generation)
            # The KB keeps its layout through re-indexes: the new generation is laid out as the live one.
            layout = self._layout_of(ids.collection_name(kb_id, live)) or self._default_layout
            try:
                self._create_collection(name, dense_size, layout, second_size)
            except BaseException:
                # A half-made collection must not count as a generation; the first error is the one to tell.
                with suppress(Exception):
                    self._client.delete_collection(name)
                raise
            return generation

    def generations(self, kb_id: str) -> GenerationInfo:
        with self._answering():
            live = self._require_live(kb_id)
            return GenerationInfo(live=live, all=self._generation_numbers(kb_id))

    def switch_generation(self, kb_id: str, generation: int) -> int:
        with self._answering():
            previous = self._require_live(kb_id)
            if generation == previous:
                return previous
            if generation not in self._generation_numbers(kb_id):
                raise no_generation(kb_id, generation)
            alias = ids.alias_name(kb_id)
            create = qm.CreateAlias(collection_name=ids.collection_name(kb_id, generation), alias_name=alias)
            # One call, applied atomically by the server: readers see the old or the new generation.
            self._client.update_collection_aliases(
                [
                    qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias)),
                    qm.CreateAliasOperation(create_alias=create),
                ]
            )
            return previous

    def drop_generation(self, kb_id: str, generation: int) -> None:
        with self._answering():
            if self._require_live(kb_id) == generation:
                raise live_generation_conflict(kb_id, generation)
            if generation in self._generation_numbers(kb_id):
                self._client.delete_collection(ids.collection_name(kb_id, generation))

    # -- writes ------------------------------------------------------------------------------------

    def upsert(self, kb_id: str, points: Sequence[IndexPoint], *, generation: int | None = None) -> None:
        if not points:
            return
        structs = [_point_struct(point) for point in points]
        with self._on_kb(kb_id, generation):
            # wait=True: the call returns once the write is applied, as Edge's writes do.
            self._client.upsert(_collection(kb_id, generation), points=structs, wait=True)

    def delete_document(
        self,
        kb_id: str,
        document_id: str,
        keep_version: int | None = None,
        only_version: int | None = None,
        *,
        generation: int | None = None,
    ) -> None:
        spec = document_delete_filter(kb_id, document_id, keep_version, only_version)
        selector = qm.FilterSelector(filter=qdrant_filter(spec))
        with self._on_kb(kb_id, generation):
            self._client.delete(_collection(kb_id, generation), points_selector=selector, wait=True)

    def set_document_payload(
        self, kb_id: str, document_id: str, payload: dict[str, Any], *, generation: int | None = None
    ) -> None:
        selector = qdrant_filter(filters.document_filter(kb_id, document_id))
        with self._on_kb(kb_id, generation):
            self._client.set_payload(_collection(kb_id, generation), payload=payload, points=selector, wait=True)

    # -- reads -------------------------------------------------------------------------------------

    def count(
        self,
        kb_id: str,
        document_id: str | None = None,
        version: int | None = None,
        *,
        generation: int | None = None,
    ) -> int:
        selector = qdrant_filter(filters.count_filter(kb_id, document_id, version))
        with self._on_kb(kb_id, generation):
            return self._client.count(_collection(kb_id, generation), count_filter=selector, exact=True).count

    def retrieve(self, kb_id: str, point_id: str, *, generation: int | None = None) -> IndexHit | None:
        with self._on_kb(kb_id, generation):
            records = self._client.retrieve(_collection(kb_id, generation), ids=[point_id], with_payload=True)
        return next((IndexHit(id=str(r.id), score=0.0, payload=r.payload or {}) for r in records), None)

    def numbered_point_ids(self, kb_id: str, *, generation: int | None = None) -> bool:
        # A server answers over HTTP, where an id is text whichever kind it is: its collections keep UUIDs.
        return False

    def dense_vectors(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, list[float]]:
        records = self._records_with(kb_id, point_ids, DENSE_VECTOR, generation)
        found = {str(r.id): r.vector.get(DENSE_VECTOR) for r in records if isinstance(r.vector, dict)}
        # A dense vector is a list of floats (a multivector would be a list of lists; this collection has none).
        return {point: cast("list[float]", vector) for point, vector in found.items() if isinstance(vector, list)}

    def sparse_term_ids(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, set[int]]:
        records = self._records_with(kb_id, point_ids, SPARSE_VECTOR, generation)
        return {str(r.id): set(_sparse_weights(r.vector)) for r in records}

    def _records_with(
        self, kb_id: str, point_ids: Sequence[str], vector: str, generation: int | None
    ) -> list[qm.Record]:
        """These points with only the named vector; points that no longer exist left out."""
        if not point_ids:
            return []
        with self._on_kb(kb_id, generation):
            return self._client.retrieve(
                _collection(kb_id, generation), ids=list(point_ids), with_payload=False, with_vectors=[vector]
            )

    def term_idfs(self, kb_id: str, term_ids: Sequence[int], *, generation: int | None = None) -> dict[int, float]:
        terms = sorted(set(term_ids))
        if not terms:
            return {}
        corpus = qdrant_filter(filters.kb_filter(kb_id))
        params = qm.SearchParams(idf=qm.IdfCorpusParams(corpus=corpus))
        requests = [
            qm.QueryRequest(
                query=qm.NearestQuery(nearest=qm.SparseVector(indices=[term], values=[1.0])),
                using=SPARSE_VECTOR,
                filter=corpus,
                params=params,
                limit=1,
                with_payload=False,
                with_vector=[SPARSE_VECTOR],
            )
            for term in terms
        ]
        collection = _collection(kb_id, generation)
        with self._on_kb(kb_id, generation):
            batch = self._client.query_batch_points(collection, requests=requests)
            size = self._client.count(collection, count_filter=corpus, exact=True).count
        tops = [
            (response.points[0].score, _sparse_weights(response.points[0].vector)) if response.points else None
            for response in batch
        ]
        return {term: term_idf(term, top, size) for term, top in zip(terms, tops, strict=True)}

    def scroll(
        self, kb_id: str, spec: filters.FilterSpec, limit: int, *, generation: int | None = None
    ) -> list[IndexHit]:
        with self._on_kb(kb_id, generation):
            records, _ = self._client.scroll(
                _collection(kb_id, generation), scroll_filter=qdrant_filter(spec), limit=limit, with_payload=True
            )
        return [IndexHit(id=str(r.id), score=0.0, payload=r.payload or {}) for r in records]

    def scroll_page(
        self,
        kb_id: str,
        spec: filters.FilterSpec,
        limit: int,
        offset: str | None = None,
        *,
        with_vectors: bool = False,
        generation: int | None = None,
    ) -> PointPage:
        with self._on_kb(kb_id, generation):
            records, next_offset = self._client.scroll(
                _collection(kb_id, generation),
                scroll_filter=qdrant_filter(spec),
                limit=limit,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
        points = [_index_point(str(r.id), r.vector, r.payload) for r in records]
        return PointPage(points, None if next_offset is None else str(next_offset))

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
        *,
        fusion: FusionMethod = "rrf",
        generation: int | None = None,
        leg_payloads: bool = True,
        keyword_leg: Sequence[IndexHit] | None = None,
        second: SecondQuery | None = None,
    ) -> LegResults:
        legs = plan_legs(
            dense,
            sparse,
            scope,
            limit=limit,
            candidate_limit=candidate_limit,
            rrf_k=rrf_k,
            weights=weights,
            fusion=fusion,
            second=second,
        )
        if not legs:
            with self._answering():
                self._check_exists(kb_id, generation)
            return no_results()
        requests = _LegRequests(kb_id, scope, candidate_limit, leg_payloads)
        collection = _collection(kb_id, generation)
        with self._on_kb(kb_id, generation):

            def run(engine: list[Leg]) -> list[list[IndexHit]]:
                batch = self._client.query_batch_points(collection, requests=[requests.build(leg) for leg in engine])
                return [[_hit(point) for point in response.points] for response in batch]

            results = assemble(legs, run_legs(legs, keyword_leg, run), limit)
            # The answer is made of leg hits (one leg, or the two fused here): without leg payloads, read its own.
            if not leg_payloads and results.fused:
                records = self._client.retrieve(collection, ids=[hit.id for hit in results.fused], with_payload=True)
                payloads = {str(record.id): record.payload or {} for record in records}
                results = replace(results, fused=with_payloads(results.fused, payloads))
        return results

    # -- upkeep ------------------------------------------------------------------------------------

    def optimize(self, kb_id: str) -> None:
        """Nothing to do: a Qdrant server builds its indexes in the background by itself."""

    def warm_up(self) -> int:
        """Nothing to do: a Qdrant server loads its collections as it starts."""
        return 0

    def close(self) -> None:
        self._client.close()

    # -- internals ---------------------------------------------------------------------------------

    def _create_collection(self, name: str, dense_size: int, layout: KbIndexLayout, second_size: int | None) -> None:
        vectors = {DENSE_VECTOR: qm.VectorParams(size=dense_size, distance=qm.Distance.COSINE)}
        if second_size is not None:
            vectors[SECOND_VECTOR] = qm.VectorParams(size=second_size, distance=qm.Distance.COSINE)
        self._client.create_collection(
            name,
            vectors_config=vectors,
            sparse_vectors_config={SPARSE_VECTOR: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
            shard_number=layout.shard_number,
            replication_factor=layout.replication_factor,
            write_consistency_factor=layout.write_consistency_factor,
        )
        for field, kind in PAYLOAD_INDEXES:
            self._client.create_payload_index(name, field, field_schema=_SCHEMA_TYPES[kind], wait=True)

    def _layout_of(self, collection: str) -> KbIndexLayout | None:
        """The layout a collection was created with; None where the engine does not report it
        (qdrant-client's local mode)."""
        params = self._client.get_collection(collection).config.params
        if params.shard_number is None or params.replication_factor is None:
            return None
        return KbIndexLayout(
            shard_number=params.shard_number,
            replication_factor=params.replication_factor,
            write_consistency_factor=params.write_consistency_factor or 1,
        )

    def _set_alias(self, kb_id: str, name: str) -> None:
        create = qm.CreateAlias(collection_name=name, alias_name=ids.alias_name(kb_id))
        self._client.update_collection_aliases([qm.CreateAliasOperation(create_alias=create)])

    def _delete_generations(self, kb_id: str) -> None:
        for name in generations_of(kb_id, self._collection_names()):
            self._client.delete_collection(name)

    def _collection_names(self) -> list[str]:
        return [collection.name for collection in self._client.get_collections().collections]

    def _generation_numbers(self, kb_id: str) -> list[int]:
        found = (generation_of(kb_id, name) for name in self._collection_names())
        return sorted(number for number in found if number is not None)

    def _alias_target(self, kb_id: str) -> str | None:
        alias = ids.alias_name(kb_id)
        with self._answering():
            aliases = self._client.get_aliases().aliases
        return next((item.collection_name for item in aliases if item.alias_name == alias), None)

    def _live(self, kb_id: str) -> int | None:
        """The generation behind the KB's alias; None when the KB does not exist."""
        target = self._alias_target(kb_id)
        if target is None:
            return None
        number = generation_of(kb_id, target)
        if number is None:  # an alias not made by this adapter
            raise Unavailable(f"the alias of knowledge base {kb_id} points at {target!r}, not a generation")
        return number

    def _require_live(self, kb_id: str) -> int:
        live = self._live(kb_id)
        if live is None:
            raise no_index(kb_id)
        return live

    def _check_exists(self, kb_id: str, generation: int | None) -> None:
        """NotFound when the KB, or the given generation of it, does not exist."""
        self._require_live(kb_id)
        if generation is not None and not self._client.collection_exists(ids.collection_name(kb_id, generation)):
            raise no_generation(kb_id, generation)

    @contextmanager
    def _on_kb(self, kb_id: str, generation: int | None = None) -> Iterator[None]:
        """Translate a failed call on the KB's alias or generation: a missing one is NotFound, a vector of
        the wrong size InvalidInput, neither a server error."""
        with self._answering():
            try:
                yield
            except (UnexpectedResponse, ValueError) as exc:
                # Server mode answers 404, local mode raises ValueError; either way, ask what is missing.
                self._check_exists(kb_id, generation)
                if (invalid := refused_vectors(exc)) is not None:
                    raise invalid from exc
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

    def __init__(self, kb_id: str, scope: ScopeFilter, candidate_limit: int, leg_payloads: bool) -> None:
        self._filter = qdrant_filter(filters.scope_filter(kb_id, scope))
        # IDF over the KB's live points, the same statistics Edge computes (see edge.py).
        self._idf = qm.SearchParams(idf=qm.IdfCorpusParams(corpus=qdrant_filter(filters.kb_filter(kb_id))))
        self._candidates = candidate_limit
        self._leg_payloads = leg_payloads

    def build(self, leg: Leg) -> qm.QueryRequest:
        match leg:
            case DenseLeg():
                query, using, params = qm.NearestQuery(nearest=leg.vector), DENSE_VECTOR, None
            case KeywordLeg():
                sparse = qm.SparseVector(indices=leg.terms.indices, values=leg.terms.values)
                query, using, params = qm.NearestQuery(nearest=sparse), SPARSE_VECTOR, self._idf
            case SecondLeg():
                query, using, params = qm.NearestQuery(nearest=leg.vector), SECOND_VECTOR, None
        return qm.QueryRequest(
            query=query,
            using=using,
            filter=self._filter,
            params=params,
            limit=self._candidates,
            with_payload=self._leg_payloads,
        )


def _collection(kb_id: str, generation: int | None) -> str:
    """What a call addresses: the KB's alias (the live generation), or the given generation's collection."""
    return ids.alias_name(kb_id) if generation is None else ids.collection_name(kb_id, generation)


def _point_struct(point: IndexPoint) -> qm.PointStruct:
    sparse = qm.SparseVector(indices=point.sparse.indices, values=point.sparse.values)
    vectors: dict[str, Any] = {DENSE_VECTOR: point.dense, SPARSE_VECTOR: sparse}
    if point.second is not None:
        vectors[SECOND_VECTOR] = point.second
    return qm.PointStruct(id=point.id, vector=vectors, payload=point.payload)


def qdrant_filter(spec: filters.FilterSpec) -> qm.Filter:
    """A FilterSpec as qdrant-client's filter (external Qdrant KBs' scopes are translated by it too)."""
    return qm.Filter(
        must=[_condition(match) for match in spec.must],
        must_not=[_condition(match) for match in spec.must_not] or None,
    )


def _condition(match: filters.FieldMatch) -> qm.FieldCondition:
    if len(match.values) == 1:
        return qm.FieldCondition(key=match.field, match=qm.MatchValue(value=match.values[0]))
    return qm.FieldCondition(key=match.field, match=qm.MatchAny(any=match.value_list()))


def _sparse_weights(vectors: Any) -> dict[int, float]:
    """A record's keyword vector as {term id: weight} (empty when it has none or it was not asked for)."""
    sparse = vectors.get(SPARSE_VECTOR) if isinstance(vectors, dict) else None
    if not isinstance(sparse, qm.SparseVector):
        return {}
    return dict(zip(sparse.indices, sparse.values, strict=True))


def _hit(point: qm.ScoredPoint) -> IndexHit:
    return IndexHit(str(point.id), point.score, point.payload or {})


def _index_point(point_id: str, vectors: Any, payload: dict[str, Any] | None) -> IndexPoint:
    """A scrolled record as the IndexPoint it was written as (empty vectors when they were not asked for)."""
    named = vectors if isinstance(vectors, dict) else {}
    sparse = named.get(SPARSE_VECTOR)
    terms = (
        SparseTerms(indices=list(sparse.indices), values=list(sparse.values))
        if isinstance(sparse, qm.SparseVector)
        else SparseTerms(indices=[], values=[])
    )
    dense = named.get(DENSE_VECTOR)
    second = named.get(SECOND_VECTOR)
    return IndexPoint(
        id=point_id,
        dense=list(dense) if isinstance(dense, list) else [],
        sparse=terms,
        payload=payload or {},
        second=list(second) if isinstance(second, list) else None,
    )
