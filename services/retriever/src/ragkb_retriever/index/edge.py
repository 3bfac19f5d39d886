"""`EdgeIndex`: the index on Qdrant Edge, in-process (the embedded default).

Layout under `settings.path`: one shard directory per collection (`kb_<id>_g<n>`), one pointer file per
alias (`kb_<id>.alias`), and a lock file that keeps a second process off the index.

Facts of Edge (qdrant-edge-py 0.9) this adapter is built around, measured here:
- One `EdgeShard` per directory (a second `load` fails on the WAL lock), so shards are opened once and
  shared by all threads.
- Every Edge call holds the GIL, `optimize()` included: while a shard optimises (seconds at tens of
  thousands of points) no other Python thread of the process runs. Running it in one background thread
  keeps it off the request that triggered it; it does not make it concurrent.
- The WAL lives in memory-mapped files: an acknowledged update survives the process being killed
  (tested), and reaches the disk, surviving a power loss, once the WAL's pages are synced. `flush()` syncs
  them and persists the segments too, but takes tens of milliseconds (hundreds on a busy disk) holding the
  GIL, during which no search of the process runs. So the background thread syncs the WAL files of written
  shards itself every `wal_sync_interval_s` (os.fsync lets the GIL go), and flushes them whole only every
  `flush_interval_s`, which then bounds only the WAL replayed at a start; `close()` flushes all.
- Global sparse IDF counts deleted points until segments are vacuumed; the keyword leg therefore asks
  for IDF over the KB's live points (`IdfParams(corpus=...)`), which a Qdrant server computes alike.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    IdfParams,
    MatchAny,
    MatchValue,
    Modifier,
    PayloadSchemaType,
    Point,
    Query,
    QueryBatchRequest,
    QueryRequest,
    ScoredPoint,
    ScrollRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
)

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import Conflict, NotFound, Unavailable
from ragkb_core.ids import engine_point_id, point_id_text
from ragkb_core.kb_settings import FusionMethod, KbIndexLayout
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index import filters
from ragkb_retriever.index.edge_aliases import AliasFiles
from ragkb_retriever.index.edge_shards import ShardClosedError, ShardHandle, ShardMaintainer
from ragkb_retriever.index.port import (
    DenseLeg,
    GenerationInfo,
    IdKindChanged,
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
    refuse_layout_on_edge,
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

logger = logging.getLogger(__name__)

LOCK_FILE = ".ragkb-index.lock"
# An Edge shard's write-ahead log: its folder in the shard's directory.
WAL_FOLDER = "wal"
# Points per Edge update call when a write carries many (see upsert): a search waits at most one slice.
UPSERT_SLICE = 32
_SCHEMA_TYPES: dict[PayloadIndexKind, PayloadSchemaType] = {
    "keyword": PayloadSchemaType.Keyword,
    "integer": PayloadSchemaType.Integer,
}


class EdgeIndex:
    """Thread-safe: request threads share the open shards; KB creation and removal are serialised."""

    def __init__(self, settings: QdrantSettings) -> None:
        self._root = settings.path
        self._root.mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_root(self._root)
        self._aliases = AliasFiles(self._root)
        self._optimize_after = settings.optimize_after_points
        # Guards the maps below, the alias files and the opening of shards (one EdgeShard per directory).
        self._registry = threading.Lock()
        self._handles: dict[str, ShardHandle] = {}
        self._targets: dict[str, str] = {}  # alias cache: this process is the only writer of the files
        # Generations being closed and deleted by drop_generation: their directories must not be reopened.
        self._dropping: set[str] = set()
        # Serialises create_kb, drop_kb, the generation calls and close, which change which shards and
        # aliases exist.
        self._lifecycle = threading.Lock()
        self._closed = False
        self._maintainer = ShardMaintainer(
            self._open_handles,
            flush_interval_s=settings.flush_interval_s,
            wal_sync_interval_s=settings.wal_sync_interval_s,
            optimize_idle_s=settings.optimize_idle_s,
        )

    # -- KBs ---------------------------------------------------------------------------------------

    def create_kb(
        self, kb_id: str, dense_size: int, layout: KbIndexLayout | None = None, *, second_size: int | None = None
    ) -> None:
        refuse_layout_on_edge(layout)
        with self._lifecycle:
            self._check_open()
            if self._target(kb_id) is not None:
                return
            # Without an alias, any generation on disk is left over from a crashed create or drop.
            self._discard_generations(kb_id)
            name = ids.collection_name(kb_id, FIRST_GENERATION)
            shard = _create_shard(self._root / name, dense_size, second_size)
            # The alias comes last, so that it never points at a collection that is not ready.
            with self._registry:
                self._handles[name] = self._new_handle(name, shard)
                self._aliases.write(kb_id, name)
                self._targets[kb_id] = name

    def drop_kb(self, kb_id: str) -> None:
        with self._lifecycle:
            self._check_open()
            # The alias goes first: new calls see "no such KB" while the shards are being removed. File
            # and cache change together, or a call in between could cache the alias again and reopen a
            # shard that is about to be deleted.
            with self._registry:
                self._aliases.remove(kb_id)
                self._targets.pop(kb_id, None)
            self._discard_generations(kb_id)

    def kb_exists(self, kb_id: str) -> bool:
        self._check_open()
        return self._target(kb_id) is not None

    # -- generations -------------------------------------------------------------------------------

    def create_generation(self, kb_id: str, dense_size: int, *, second_size: int | None = None) -> int:
        with self._lifecycle:
            with self._registry:
                self._check_open()
                self._live_locked(kb_id)
                generation = max(self._generations_locked(kb_id)) + 1
            name = ids.collection_name(kb_id, generation)
            shard = _create_new_shard(self._root / name, dense_size, second_size)
            with self._registry:
                self._handles[name] = self._new_handle(name, shard)
            return generation

    def generations(self, kb_id: str) -> GenerationInfo:
        with self._registry:
            self._check_open()
            live = self._live_locked(kb_id)
            return GenerationInfo(live=_generation(kb_id, live), all=self._generations_locked(kb_id))

    def switch_generation(self, kb_id: str, generation: int) -> int:
        with self._lifecycle, self._registry:
            self._check_open()
            previous = self._live_locked(kb_id)
            name = self._collection_locked(kb_id, generation)
            if name != previous:
                # Opened before the alias moves: a generation that cannot be loaded never goes live.
                self._open_locked(name)
                # The file is replaced atomically (edge_aliases.py); file and cache change together.
                self._aliases.write(kb_id, name)
                self._targets[kb_id] = name
            return _generation(kb_id, previous)

    def drop_generation(self, kb_id: str, generation: int) -> None:
        name = ids.collection_name(kb_id, generation)
        with self._lifecycle:
            with self._registry:
                self._check_open()
                if self._live_locked(kb_id) == name:
                    raise live_generation_conflict(kb_id, generation)
                handle = self._handles.pop(name, None)
                self._dropping.add(name)
            try:
                if handle is not None:
                    handle.close()  # waits for the calls in flight on it
                shutil.rmtree(self._root / name, ignore_errors=True)
            finally:
                with self._registry:
                    self._dropping.discard(name)

    # -- writes ------------------------------------------------------------------------------------

    def upsert(self, kb_id: str, points: Sequence[IndexPoint], *, generation: int | None = None) -> None:
        if not points:
            return
        handle: ShardHandle | None = None
        # Edge holds the GIL for a whole update (~0.5 ms a point on 2 cores): a batch of hundreds of points in
        # one call would stop every search of the process for as long. Slices of UPSERT_SLICE points, with the
        # GIL let go between them, bound how long a search waits behind a write.
        for start in range(0, len(points), UPSERT_SLICE):
            if start:
                time.sleep(0)  # lets a waiting search thread take the GIL
            sliced = points[start : start + UPSERT_SLICE]
            try:
                handle = self._write_points(kb_id, sliced, generation)
            except Exception as exc:
                if (invalid := refused_vectors(exc)) is not None:
                    raise invalid from exc
                raise
        if handle is not None and handle.record_write(len(points)) >= self._optimize_after:
            self._maintainer.request_optimize(handle)

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
        operation = UpdateOperation.delete_points_by_filter(_edge_filter(spec))
        self._write(kb_id, operation, generation).record_write()

    def set_document_payload(
        self, kb_id: str, document_id: str, payload: dict[str, Any], *, generation: int | None = None
    ) -> None:
        spec = filters.document_filter(kb_id, document_id)
        operation = UpdateOperation.set_payload_by_filter(_edge_filter(spec), payload)
        self._write(kb_id, operation, generation).record_write()

    # -- reads -------------------------------------------------------------------------------------

    def count(
        self,
        kb_id: str,
        document_id: str | None = None,
        version: int | None = None,
        *,
        generation: int | None = None,
    ) -> int:
        request = CountRequest(exact=True, filter=_edge_filter(filters.count_filter(kb_id, document_id, version)))
        with self._shard(kb_id, generation) as (_, shard):
            return shard.count(request)

    def retrieve(self, kb_id: str, point_id: str, *, generation: int | None = None) -> IndexHit | None:
        with self._shard(kb_id, generation) as (_, shard):
            records = shard.retrieve([engine_point_id(point_id)], with_payload=True, with_vector=False)
        return next((IndexHit(id=point_id_text(r.id), score=0.0, payload=r.payload or {}) for r in records), None)

    def numbered_point_ids(self, kb_id: str, *, generation: int | None = None) -> bool:
        with self._shard(kb_id, generation) as (handle, shard):
            held = _id_kind_held(handle, shard)
        # An empty shard takes numbered ids; the first write fixes its kind.
        return held is None or held

    def dense_vectors(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, list[float]]:
        points = self._points_with(kb_id, point_ids, DENSE_VECTOR, generation)
        return {point.id: point.dense for point in points if point.dense}

    def sparse_term_ids(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, set[int]]:
        points = self._points_with(kb_id, point_ids, SPARSE_VECTOR, generation)
        return {point.id: set(point.sparse.indices) for point in points}

    def _points_with(
        self, kb_id: str, point_ids: Sequence[str], vector: str, generation: int | None
    ) -> list[IndexPoint]:
        """These points with only the named vector (the other one empty); points that no longer exist left out."""
        if not point_ids:
            return []
        with self._shard(kb_id, generation) as (_, shard):
            records = shard.retrieve(_engine_ids(point_ids), with_payload=False, with_vector=[vector])
        return [_index_point(point_id_text(r.id), r.vector, None) for r in records]

    def term_idfs(self, kb_id: str, term_ids: Sequence[int], *, generation: int | None = None) -> dict[int, float]:
        terms = sorted(set(term_ids))
        if not terms:
            return {}
        corpus = _edge_filter(filters.kb_filter(kb_id))
        params = SearchParams(idf=IdfParams(corpus=corpus))
        requests = [
            QueryRequest(
                limit=1,
                query=Query.Nearest(SparseVector([term], [1.0]), using=SPARSE_VECTOR),
                filter=corpus,
                params=params,
                with_payload=False,
                with_vector=[SPARSE_VECTOR],
            )
            for term in terms
        ]
        with self._shard(kb_id, generation) as (_, shard):
            batch = shard.query_batch(QueryBatchRequest(requests))
            size = shard.count(CountRequest(exact=True, filter=corpus))
        tops = [_top_term_weights(points) for points in batch]
        return {term: term_idf(term, top, size) for term, top in zip(terms, tops, strict=True)}

    def scroll(
        self, kb_id: str, spec: filters.FilterSpec, limit: int, *, generation: int | None = None
    ) -> list[IndexHit]:
        request = ScrollRequest(limit=limit, filter=_edge_filter(spec), with_payload=True, with_vector=False)
        with self._shard(kb_id, generation) as (_, shard):
            records, _ = shard.scroll(request)
        return [IndexHit(id=point_id_text(r.id), score=0.0, payload=r.payload or {}) for r in records]

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
        request = ScrollRequest(
            offset=None if offset is None else engine_point_id(offset),
            limit=limit,
            filter=_edge_filter(spec),
            with_payload=True,
            with_vector=with_vectors,
        )
        with self._shard(kb_id, generation) as (_, shard):
            records, next_offset = shard.scroll(request)
        points = [_index_point(point_id_text(r.id), r.vector, r.payload) for r in records]
        return PointPage(points, None if next_offset is None else point_id_text(next_offset))

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
            self._check_exists(kb_id, generation)
            return no_results()
        requests = _LegRequests(kb_id, scope, candidate_limit, leg_payloads)
        with self._shard(kb_id, generation) as (_, shard):

            def run(engine: list[Leg]) -> list[list[IndexHit]]:
                batch = shard.query_batch(QueryBatchRequest([requests.build(leg) for leg in engine]))
                return [[_hit(point) for point in points] for points in batch]

            results = assemble(legs, run_legs(legs, keyword_leg, run), limit)
            # The answer is made of leg hits (one leg, or the two fused here): without leg payloads, read its own.
            if not leg_payloads and results.fused:
                records = shard.retrieve(
                    _engine_ids([hit.id for hit in results.fused]), with_payload=True, with_vector=False
                )
                payloads = {point_id_text(record.id): record.payload or {} for record in records}
                results = replace(results, fused=with_payloads(results.fused, payloads))
        return results

    # -- upkeep ------------------------------------------------------------------------------------

    def warm_up(self) -> int:
        """Edge opens a KB's shard on the KB's first call, and that call pays for it: measured at 20,000 points,
        ~150 ms to load the shard and ~25 ms more for its first search's cold reads, against ~4 ms for the next
        search (a retriever restarted by a deploy or a crash would answer each KB's first question that late).
        So each live shard is opened here and searched once with one of its own points, as a Qdrant server
        loads its collections as it starts. A KB dropped meanwhile is skipped; one that fails to load is
        logged and left to its first call, which reports why."""
        warmed = 0
        for kb_id in self._aliases.kb_ids():
            if self._closed:
                break
            try:
                self._warm_kb(kb_id)
            except (NotFound, Unavailable):
                continue  # dropped meanwhile, or the index is closing
            except Exception:  # one unloadable KB must not keep the others cold
                logger.warning("could not warm up the index of knowledge base %s", kb_id, exc_info=True)
                continue
            warmed += 1
        return warmed

    def _warm_kb(self, kb_id: str) -> None:
        page = self.scroll_page(kb_id, filters.FilterSpec(must=()), limit=1, with_vectors=True)
        for point in page.points:
            self.search(
                kb_id, point.dense, point.sparse, ScopeFilter(), 1, 1, rrf_k=60, fusion="dbsf", leg_payloads=False
            )

    def optimize(self, kb_id: str) -> None:
        handle = self._handle(kb_id)
        try:
            handle.optimize()
        except ShardClosedError as exc:
            raise self._gone(kb_id) from exc

    def close(self) -> None:
        """Stop background optimising, flush and close every shard, release the directory."""
        with self._lifecycle:
            if self._closed:
                return
            self._closed = True
            self._maintainer.stop()
            with self._registry:
                handles = list(self._handles.values())
                self._handles.clear()
                self._targets.clear()
            for handle in handles:
                handle.close()
            self._lock_file.close()

    # -- internals ---------------------------------------------------------------------------------

    def _write_points(self, kb_id: str, points: Sequence[IndexPoint], generation: int | None) -> ShardHandle:
        """Upsert one slice into the shard it reaches, whose kind of id its points must have: checked on the
        same lease as the write, so a switch of the live generation in between cannot mix two kinds in one."""
        with self._shard(kb_id, generation) as (handle, shard):
            held = _id_kind_held(handle, shard)
            numbered = ids.is_numbered(points[0].id) if held is None else held
            if any(ids.is_numbered(point.id) != numbered for point in points):
                raise IdKindChanged(kb_id, numbered)
            shard.update(UpdateOperation.upsert_points([_edge_point(point) for point in points]))
            handle.numbered_ids = numbered
        return handle

    def _write(self, kb_id: str, operation: UpdateOperation, generation: int | None) -> ShardHandle:
        """Apply a write; the caller records it on the returned handle (flushing and optimising follow)."""
        with self._shard(kb_id, generation) as (handle, shard):
            shard.update(operation)
        return handle

    def _open_handles(self) -> list[ShardHandle]:
        with self._registry:
            return list(self._handles.values())

    @contextmanager
    def _shard(self, kb_id: str, generation: int | None = None) -> Iterator[tuple[ShardHandle, EdgeShard]]:
        handle = self._handle(kb_id, generation)
        try:
            with handle.use() as shard:
                yield handle, shard
        except ShardClosedError as exc:
            raise self._gone(kb_id, generation) from exc

    def _handle(self, kb_id: str, generation: int | None = None) -> ShardHandle:
        """The open shard of the live generation, or of `generation` when given."""
        with self._registry:
            self._check_open()
            return self._open_locked(self._collection_locked(kb_id, generation))

    def _open_locked(self, name: str) -> ShardHandle:
        handle = self._handles.get(name)
        if handle is None:
            handle = self._new_handle(name, EdgeShard.load(str(self._root / name)))
            self._handles[name] = handle
        return handle

    def _new_handle(self, name: str, shard: EdgeShard) -> ShardHandle:
        return ShardHandle(name, shard, wal=self._root / name / WAL_FOLDER)

    def _collection_locked(self, kb_id: str, generation: int | None) -> str:
        """The collection a call addresses; NotFound when the KB, or the given generation, does not exist."""
        live = self._live_locked(kb_id)
        if generation is None:
            return live
        name = ids.collection_name(kb_id, generation)
        if name in self._dropping or (name not in self._handles and not (self._root / name).is_dir()):
            raise no_generation(kb_id, generation)
        return name

    def _live_locked(self, kb_id: str) -> str:
        name = self._target_locked(kb_id)
        if name is None:
            raise no_index(kb_id)
        return name

    def _generations_locked(self, kb_id: str) -> list[int]:
        on_disk = [path.name for path in self._root.iterdir() if path.is_dir()]
        names = {*on_disk, *self._handles} - self._dropping
        return sorted(number for name in names if (number := generation_of(kb_id, name)) is not None)

    def _check_exists(self, kb_id: str, generation: int | None) -> None:
        with self._registry:
            self._check_open()
            self._collection_locked(kb_id, generation)

    def _target(self, kb_id: str) -> str | None:
        with self._registry:
            return self._target_locked(kb_id)

    def _target_locked(self, kb_id: str) -> str | None:
        name = self._targets.get(kb_id)
        if name is None:
            name = self._aliases.read(kb_id)
            if name is not None:
                self._targets[kb_id] = name
        return name

    def _discard_generations(self, kb_id: str) -> None:
        """Close and delete every generation of the KB, open or only on disk."""
        with self._registry:
            on_disk = [path.name for path in self._root.iterdir() if path.is_dir()]
            names = generations_of(kb_id, {*on_disk, *self._handles})
            handles = [handle for name in names if (handle := self._handles.pop(name, None))]
        for handle in handles:
            handle.close()
        for name in names:
            shutil.rmtree(self._root / name, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise _index_closed()

    def _gone(self, kb_id: str, generation: int | None = None) -> Exception:
        """Why a shard closed under a call: the whole index closed, the KB or the generation was dropped."""
        if self._closed:
            return _index_closed()
        return no_index(kb_id) if generation is None else no_generation(kb_id, generation)


class _LegRequests:
    """Edge query requests for the legs of one search. Every leg carries the caller's scope, so that
    ranking only ever sees points the caller may see."""

    def __init__(self, kb_id: str, scope: ScopeFilter, candidate_limit: int, leg_payloads: bool) -> None:
        # A shard holds the points of one KB only (each is written to its KB's shard), so the KB's own condition is
        # true of every point and is left out: a filter that every point passes still cost both legs 0.47 of 2.71 ms
        # at 84 candidates and 2.1 of 9.1 at 700 (100,000 points; bench/leg_filters.py). What the caller's scope
        # narrows stays in every leg. The IDF corpus stays: without it, deleted points count.
        narrowing = filters.narrowing_filter(scope)
        self._filter = None if narrowing is None else _edge_filter(narrowing)
        self._idf = SearchParams(idf=IdfParams(corpus=_edge_filter(filters.kb_filter(kb_id))))
        self._candidates = candidate_limit
        self._leg_payloads = leg_payloads

    def build(self, leg: Leg) -> QueryRequest:
        match leg:
            case DenseLeg():
                query, params = Query.Nearest(leg.vector, using=DENSE_VECTOR), None
            case KeywordLeg():
                sparse = SparseVector(leg.terms.indices, leg.terms.values)
                query, params = Query.Nearest(sparse, using=SPARSE_VECTOR), self._idf
            case SecondLeg():
                query, params = Query.Nearest(leg.vector, using=SECOND_VECTOR), None
        return QueryRequest(
            limit=self._candidates, query=query, filter=self._filter, params=params, with_payload=self._leg_payloads
        )


def _edge_config(dense_size: int, second_size: int | None) -> EdgeConfig:
    vectors = {DENSE_VECTOR: EdgeVectorParams(size=dense_size, distance=Distance.Cosine)}
    if second_size is not None:
        vectors[SECOND_VECTOR] = EdgeVectorParams(size=second_size, distance=Distance.Cosine)
    return EdgeConfig(
        vectors=vectors,
        sparse_vectors={SPARSE_VECTOR: EdgeSparseVectorParams(modifier=Modifier.Idf)},
        wal_enabled=True,  # the default today; stated because durability depends on it
    )


def _create_shard(path: Path, dense_size: int, second_size: int | None = None) -> EdgeShard:
    shard = EdgeShard.create(str(path), _edge_config(dense_size, second_size))
    for field, kind in PAYLOAD_INDEXES:
        shard.update(UpdateOperation.create_field_index(field, _SCHEMA_TYPES[kind]))
    shard.flush()
    return shard


def _create_new_shard(path: Path, dense_size: int, second_size: int | None) -> EdgeShard:
    """A shard for a new generation; a half-made one is removed, so that it never counts as a generation."""
    try:
        return _create_shard(path, dense_size, second_size)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def _generation(kb_id: str, name: str) -> int:
    number = generation_of(kb_id, name)
    if number is None:  # an alias file not written by this adapter
        raise Unavailable(f"the alias of knowledge base {kb_id} points at {name!r}, not a generation")
    return number


def _id_kind_held(handle: ShardHandle, shard: EdgeShard) -> bool | None:
    """Whether the shard's points have numbered ids; None while it has none. Read once per open shard that has
    points: a shard holds one kind of id (the first point in id order is a number whenever any is; `upsert`
    keeps it so), and only this process writes it."""
    if handle.numbered_ids is None:
        records, _ = shard.scroll(ScrollRequest(limit=1, with_payload=False, with_vector=False))
        if records:
            handle.numbered_ids = isinstance(records[0].id, int)
    return handle.numbered_ids


def _edge_point(point: IndexPoint) -> Point:
    sparse = SparseVector(point.sparse.indices, point.sparse.values)
    vectors: dict[str, Any] = {DENSE_VECTOR: point.dense, SPARSE_VECTOR: sparse}
    if point.second is not None:
        vectors[SECOND_VECTOR] = point.second
    return Point(engine_point_id(point.id), vectors, point.payload)


def _index_point(point_id: str, vectors: Any, payload: dict[str, Any] | None) -> IndexPoint:
    """A scrolled record as the IndexPoint it was written as (empty vectors when they were not asked for)."""
    vectors = vectors or {}
    sparse = vectors.get(SPARSE_VECTOR)
    terms = SparseTerms(indices=list(sparse.indices), values=list(sparse.values)) if sparse is not None else None
    return IndexPoint(
        id=point_id,
        dense=list(vectors.get(DENSE_VECTOR) or []),
        sparse=terms or SparseTerms(indices=[], values=[]),
        payload=payload or {},
        second=list(second) if (second := vectors.get(SECOND_VECTOR)) else None,
    )


def _edge_filter(spec: filters.FilterSpec) -> Filter:
    return Filter(
        must=[_edge_condition(match) for match in spec.must],
        must_not=[_edge_condition(match) for match in spec.must_not] or None,
    )


def _edge_condition(match: filters.FieldMatch) -> FieldCondition:
    if len(match.values) == 1:
        return FieldCondition(match.field, match=MatchValue(match.values[0]))
    return FieldCondition(match.field, match=MatchAny(match.value_list()))


def _top_term_weights(points: Sequence[ScoredPoint]) -> tuple[float, dict[int, float]] | None:
    """The best point of a one-term search: its score and its sparse vector as {term id: weight}."""
    if not points:
        return None
    sparse = _index_point(point_id_text(points[0].id), points[0].vector, None).sparse
    return points[0].score, dict(zip(sparse.indices, sparse.values, strict=True))


def _hit(point: ScoredPoint) -> IndexHit:
    return IndexHit(point_id_text(point.id), point.score, point.payload or {})


def _engine_ids(point_ids: Sequence[str]) -> list[int | UUID | str]:
    return [engine_point_id(point_id) for point_id in point_ids]


def _index_closed() -> Unavailable:
    # Transient on purpose: the process is shutting down, a retry reaches its successor.
    return Unavailable("the index is closed")


def _lock_root(root: Path) -> IO[bytes]:
    """Hold an exclusive lock on the index root for the life of this EdgeIndex.

    Edge locks each shard's WAL, but not the alias files or the set of shards, and one process owns
    the embedded index by design; a second one fails here, at start-up, instead of mid-request.
    """
    file = (root / LOCK_FILE).open("a+b")
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        file.close()
        raise Conflict(f"the index at {root} is in use by another process") from exc
    return file
