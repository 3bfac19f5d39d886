"""The retriever's index port: what the search and index services need from a vector engine.

Two adapters implement it: `EdgeIndex` (Qdrant Edge in-process, the embedded default) and `ServerIndex`
(a Qdrant server or cluster through qdrant-client). They must give the same results for the same
operations; tests/integration/test_index_congruence.py holds them to it.

Fusion. `search` runs the dense and the keyword leg once each (and, for a KB with a second model, that model's
leg: SecondQuery) as one batch and fuses them here, by the
fusion the KB chose: DBSF (the default of a KB's `retrieval.fusion`, below) or Reciprocal Rank Fusion, with
the KB's leg weights. (The engines can fuse themselves, from prefetches; but a search also returns each leg on
its own, for the relevance of its passages and for explain, and the engine runs its prefetches again: every
hybrid search ran four legs. Fusing here runs two: the retrieve stage 5.59 → 4.61 ms p50 at 100,000 chunks,
bench/latency_ab.py, README *Each leg runs once*.)
The formulas are the engines' own, which tests/integration/test_index_congruence.py holds both adapters to:
the adapters' `fusion` parameter defaults to "rrf" only for their own tests; the retriever always passes the
KB's. RRF scores a point as

    fused(d) = sum over legs L containing d of 1 / (k + rank_L(d)),   rank_L counted from 0

(Qdrant's definition, verified against Qdrant Edge and qdrant-client's local mode). The RRF paper counts ranks
from 1, 1 / (k_paper + rank_1), so Qdrant's k = k_paper + 1: the paper's k = 60 is `rrf_k=61`. Qdrant's own
default k is 2, which is why `rrf_k` is always passed explicitly.

Leg weights (Qdrant's definition) scale a leg's rank, not its score: a leg of weight w contributes
1 / ((rank0 + 1) / w + k − 1), i.e. 1 / (k_paper + rank_1 / w) in the paper's terms; w = 1 is plain RRF.

DBSF (distribution-based score fusion) normalises each leg's scores by its mean ± 3 sample standard deviations
onto [0, 1], multiplies them by the leg's weight (ragkb's extension: the engines' DBSF has none) and sums them.
Ties are broken by point id, so that a search is repeatable.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.errors import Conflict, InvalidInput, NotFound, Unavailable
from ragkb_core.fusion import leg_parts
from ragkb_core.kb_settings import FusionMethod, KbIndexLayout
from ragkb_retriever.index.filters import FilterSpec, document_filter, scope_is_empty


@dataclass(frozen=True)
class IndexPoint:
    """One chunk as written: `id` is `ids.point_id(...)`; payload fields are set by the caller."""

    id: str
    dense: list[float]
    sparse: SparseTerms
    payload: dict[str, Any]
    # The KB's second model's vector (KbChunking.second_model); None where the KB has none.
    second: list[float] | None = None


# Slots, and built positionally where hits are many: a search makes one per candidate of each leg (1,400 for a
# top_k of 100), and a frozen dataclass without slots took 1.7 µs to build from keywords against 0.7 µs.
@dataclass(frozen=True, slots=True)
class IndexHit:
    id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class LegResults:
    """`fused` is the answer; `dense`, `keyword` and `second` (the second model's leg, where the KB has one) are
    the legs it was fused from (for score breakdowns)."""

    fused: list[IndexHit]
    dense: list[IndexHit]
    keyword: list[IndexHit]
    second: list[IndexHit] = field(default_factory=list)


@dataclass(frozen=True)
class PointPage:
    """One page of a scroll through a KB's points: `points` carry their vectors only when asked for (else
    empty ones); `next_offset` is where the next page starts, None after the last."""

    points: list[IndexPoint]
    next_offset: str | None


@dataclass(frozen=True)
class GenerationInfo:
    """A KB's collection generations: `live` is the one its alias points at; `all` sorted, `live` among them."""

    live: int
    all: list[int]


def term_idf(term_id: int, top: tuple[float, dict[int, float]] | None, corpus_size: int) -> float:
    """A term's IDF, read off the engine: no engine tells a term's document frequency, so each term is searched
    alone (query weight 1), and its best point's score is IDF × the point's own weight of the term (`top`: that
    score and the point's sparse vector). A term no point holds gets Qdrant's IDF for a document frequency of 0,
    ln(1 + (N + 0.5) / 0.5)."""
    if top is not None:
        score, weights = top
        if weights.get(term_id, 0.0) > 0:
            return score / weights[term_id]
    return math.log(1 + (corpus_size + 0.5) / 0.5)


def no_results() -> LegResults:
    # A new one each time: callers may extend the lists they get.
    return LegResults(fused=[], dense=[], keyword=[])


class VectorIndex(Protocol):
    """Every data call addresses the live generation (the one behind the KB's alias) unless it is given
    `generation=`, which addresses that generation's collection directly (NotFound when it does not
    exist). Payloads carry the real kb_id in every generation, so filters are the same in all of them."""

    def create_kb(
        self, kb_id: str, dense_size: int, layout: KbIndexLayout | None = None, *, second_size: int | None = None
    ) -> KbIndexLayout | None:
        """Create generation 1 and the alias `kb_<id>`; does nothing when the KB exists. `layout` (fields left
        out: the configured defaults) places its collections on a Qdrant cluster; returns the layout applied,
        None for an embedded index, which has one shard and one copy and refuses any other layout.
        `second_size`: the size of the KB's second model's vectors (KbChunking.second_model); None: it has none."""
        ...

    def drop_kb(self, kb_id: str) -> None:
        """Remove the alias and every generation; does nothing when the KB does not exist."""
        ...

    def kb_exists(self, kb_id: str) -> bool: ...

    # -- generations (re-indexing: build one while the live one serves, switch, roll back) -----------

    def create_generation(self, kb_id: str, dense_size: int, *, second_size: int | None = None) -> int:
        """A new empty generation, numbered after the highest one, not live; its dense size may differ
        from the live one's (a new embedding model), and it may have a second model's vectors or not
        (`second_size`). It has the live generation's layout."""
        ...

    def generations(self, kb_id: str) -> GenerationInfo: ...

    def switch_generation(self, kb_id: str, generation: int) -> int:
        """Point the alias at `generation` atomically; returns the generation that was live before
        (`generation` itself when it already was: a no-op)."""
        ...

    def drop_generation(self, kb_id: str, generation: int) -> None:
        """Delete a generation that is not live (Conflict when it is); does nothing when it does not exist."""
        ...

    # -- data --------------------------------------------------------------------------------------

    def upsert(self, kb_id: str, points: Sequence[IndexPoint], *, generation: int | None = None) -> None:
        """Write points; a dense vector of the wrong size for the collection is InvalidInput. Where a generation
        may hold either kind of id (the embedded index), points of the other kind than the one it holds
        (`numbered_point_ids`) are refused with IdKindChanged, none of them written there."""
        ...

    def delete_document(
        self,
        kb_id: str,
        document_id: str,
        keep_version: int | None = None,
        only_version: int | None = None,
        *,
        generation: int | None = None,
    ) -> None:
        """Delete the document's points: all of them, all but `keep_version`'s, or only `only_version`'s."""
        ...

    def set_document_payload(
        self, kb_id: str, document_id: str, payload: dict[str, Any], *, generation: int | None = None
    ) -> None:
        """Set (merge) top-level payload fields on every point of the document."""
        ...

    def count(
        self,
        kb_id: str,
        document_id: str | None = None,
        version: int | None = None,
        *,
        generation: int | None = None,
    ) -> int: ...

    def retrieve(self, kb_id: str, point_id: str, *, generation: int | None = None) -> IndexHit | None:
        """One point by id, with its payload (score 0); None when the KB has no such point."""
        ...

    def numbered_point_ids(self, kb_id: str, *, generation: int | None = None) -> bool:
        """Whether new points of the KB's live (or given) generation get numbered ids (`ids.point_id`). False
        for an index that gains nothing by them, and for a shard written before them: a point written again
        must keep its id, or its document version would hold it twice."""
        ...

    def dense_vectors(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, list[float]]:
        """The dense vectors of these points by id (a point that no longer exists is left out)."""
        ...

    def sparse_term_ids(
        self, kb_id: str, point_ids: Sequence[str], *, generation: int | None = None
    ) -> dict[str, set[int]]:
        """The keyword term ids each of these points holds, by id (a point that no longer exists is left out)."""
        ...

    def term_idfs(self, kb_id: str, term_ids: Sequence[int], *, generation: int | None = None) -> dict[int, float]:
        """Each term's IDF in the KB's keyword index, as its keyword leg weighs it (`term_idf`)."""
        ...

    def scroll(self, kb_id: str, spec: FilterSpec, limit: int, *, generation: int | None = None) -> list[IndexHit]:
        """Up to `limit` points matching `spec`, with their payloads (score 0), in no particular order."""
        ...

    def scroll_page(
        self,
        kb_id: str,
        spec: FilterSpec,
        limit: int,
        offset: str | None = None,
        *,
        with_vectors: bool = False,
        generation: int | None = None,
    ) -> PointPage:
        """A page of the points matching `spec` in id order, from `offset` (a point id) on: the way through
        every point of a KB (a consistency census, a backup)."""
        ...

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
        """Both legs filtered by `scope` inside the engine, fused by `fusion`: DBSF, or RRF (Qdrant's k =
        `rrf_k`, leg `weights` (dense, keyword)), see the module docstring. `second`: the question's vector of
        the KB's second model and its leg's weight: a third leg, fused with the others.

        Without `dense` only the keyword leg runs, without (non-empty) `sparse` only the dense leg;
        `fused` is then that leg cut to `limit`. The `fused` hits always carry their payloads; the legs'
        hits only with `leg_payloads` (else `{}`): a search reads the payloads of the passages it answers
        with, not of every candidate (`candidate_limit` per leg), unless it explains the legs.
        `keyword_leg`: the keyword leg of these very `sparse` terms and `scope`, already run (a keyword-only
        search's `keyword`, made while the question was being embedded); the engine then runs the dense leg only.
        """
        ...

    def optimize(self, kb_id: str) -> None:
        """Build the KB's search indexes now (Edge); a no-op where the engine does it itself."""
        ...

    def warm_up(self) -> int:
        """Load every KB's live index and search it once, so that no KB's first search after a start pays for
        the load; returns how many KBs were warmed (0 where the engine loads its collections by itself)."""
        ...

    def close(self) -> None: ...


# -- shared by the adapters: which legs a search runs, and how their results become LegResults ------


@dataclass(frozen=True)
class DenseLeg:
    vector: list[float]


@dataclass(frozen=True)
class KeywordLeg:
    terms: SparseTerms


@dataclass(frozen=True)
class SecondLeg:
    """The KB's second model's leg (KbChunking.second_model): its vector of the question."""

    vector: list[float]


@dataclass(frozen=True)
class SecondQuery:
    """What a search's third leg needs: the question's vector of the KB's second model, and the leg's weight."""

    vector: list[float]
    weight: float


@dataclass(frozen=True)
class FuseHere:
    """Not an engine request: fuse the legs here, by `method` with these leg weights (one per engine leg, in
    their order), and, for RRF, Qdrant's `rrf_k`."""

    method: FusionMethod
    weights: tuple[float, ...]
    rrf_k: int


Leg = DenseLeg | KeywordLeg | SecondLeg
Step = Leg | FuseHere


def engine_legs(steps: Sequence[Step]) -> list[Leg]:
    """The steps the engine runs (as one batch, in this order)."""
    return [step for step in steps if not isinstance(step, FuseHere)]


def document_delete_filter(
    kb_id: str, document_id: str, keep_version: int | None, only_version: int | None
) -> FilterSpec:
    """The points `delete_document` removes; keeping one version and deleting only one exclude each other."""
    if keep_version is not None and only_version is not None:
        raise InvalidInput("give keep_version or only_version, not both", document_id=document_id)
    return document_filter(kb_id, document_id, version=only_version, except_version=keep_version)


def refuse_layout_on_edge(layout: KbIndexLayout | None) -> None:
    """The embedded index has one shard and one copy: a request for more is an error, not silently ignored."""
    if layout is not None and not layout.is_single_copy:
        raise InvalidInput(
            "this server keeps its index in Qdrant Edge (embedded: one shard, one copy); shard_number, "
            "replication_factor and write_consistency_factor apply to a Qdrant cluster (RAGKB_QDRANT__URL)",
            layout=layout.model_dump(exclude_none=True),
        )


def no_index(kb_id: str) -> NotFound:
    """What every operation on a KB without an index raises, in both adapters."""
    return NotFound(f"knowledge base {kb_id} has no index", kb_id=kb_id)


def no_generation(kb_id: str, generation: int) -> NotFound:
    """What an operation on a generation the KB does not have raises, in both adapters."""
    return NotFound(f"knowledge base {kb_id} has no index generation {generation}", kb_id=kb_id, generation=generation)


def live_generation_conflict(kb_id: str, generation: int) -> Conflict:
    return Conflict(
        f"generation {generation} of knowledge base {kb_id} is live: switch to another one before dropping it",
        kb_id=kb_id,
        generation=generation,
    )


class IdKindChanged(Unavailable):
    """An upsert's ids are of the other kind than the generation it reached holds: the KB's live generation was
    switched (a re-index) between `numbered_point_ids` and the write. The writer mints the ids again and retries
    (IndexService); a generation never holds both kinds, or a version written twice would be counted twice.
    Should it escape (another switch in the same instant), it is a 503: the worker's retry mints them again."""

    retry_after_s = 1

    def __init__(self, kb_id: str, numbered: bool) -> None:
        held = "numbered" if numbered else "UUID"
        super().__init__(
            f"knowledge base {kb_id}'s live index generation changed during the write: it holds {held} point ids",
            kb_id=kb_id,
        )


def refused_vectors(exc: Exception) -> InvalidInput | None:
    """The engine's refusal of a write's vectors, as InvalidInput; None for other errors: a dense vector of the
    wrong size, or a second model's vector for a collection made without one (KbChunking.second_model).

    A write into a given generation is not checked against the embedder's size (that generation may be
    for another model), so the engine's own check is what the caller hears. Both engines say it alike.
    """
    message = str(exc)
    if "Vector dimension error" in message:
        return InvalidInput(f"dense vectors do not fit the collection: {message[:300]}")
    if "Not existing vector name" in message:
        return InvalidInput(f"the collection has no such vector (a second model's vectors?): {message[:300]}")
    return None


def plan_legs(
    dense: list[float] | None,
    sparse: SparseTerms | None,
    scope: ScopeFilter,
    *,
    limit: int,
    rrf_k: int,
    candidate_limit: int,
    weights: tuple[float, float] = (1.0, 1.0),
    fusion: FusionMethod = "rrf",
    second: SecondQuery | None = None,
) -> tuple[Step, ...]:
    """The legs to run as one batch (`engine_legs`), and how to fuse them; none when the scope grants nothing
    or there is no query."""
    all_weights = [*weights, *([] if second is None else [second.weight])]
    if min(all_weights) <= 0:
        raise InvalidInput("leg weights must be positive (leave a leg out instead)", weights=all_weights)
    if min(limit, candidate_limit, rrf_k) < 1:
        raise InvalidInput(
            "limit, candidate_limit and rrf_k must be at least 1",
            limit=limit,
            candidate_limit=candidate_limit,
            rrf_k=rrf_k,
        )
    if scope_is_empty(scope):
        return ()
    # A sparse query without terms matches nothing; it is treated as no keyword query at all.
    legs: list[tuple[Leg, float]] = []
    if dense is not None:
        legs.append((DenseLeg(dense), weights[0]))
    if sparse is not None and sparse.indices:
        legs.append((KeywordLeg(sparse), weights[1]))
    if second is not None:
        legs.append((SecondLeg(second.vector), second.weight))
    if len(legs) > 1:
        return *(leg for leg, _ in legs), FuseHere(fusion, tuple(weight for _, weight in legs), rrf_k)
    return tuple(leg for leg, _ in legs)


def run_legs(
    steps: Sequence[Step],
    keyword_leg: Sequence[IndexHit] | None,
    run: Callable[[list[Leg]], list[list[IndexHit]]],
) -> list[list[IndexHit]]:
    """The hits of every engine leg of `steps`, in their order: `run` (one engine batch) runs them, but for a
    keyword leg already run (`VectorIndex.search`'s `keyword_leg`), which is taken as given."""
    legs = engine_legs(steps)
    known = None if keyword_leg is None else list(keyword_leg)
    to_run = [leg for leg in legs if known is None or not isinstance(leg, KeywordLeg)]
    ran = iter(run(to_run) if to_run else [])
    return [known if known is not None and isinstance(leg, KeywordLeg) else next(ran) for leg in legs]


def with_payloads(hits: Sequence[IndexHit], payloads: dict[str, dict[str, Any]]) -> list[IndexHit]:
    """`hits` with the payloads fetched for them by id (a point deleted meanwhile keeps an empty one)."""
    return [IndexHit(hit.id, hit.score, payloads.get(hit.id, {})) for hit in hits]


def assemble(steps: Sequence[Step], results: Sequence[list[IndexHit]], limit: int) -> LegResults:
    """LegResults from the batch's results (one per engine leg); a search that ran one leg returns it cut to
    `limit` as fused."""
    by_kind: dict[type, list[IndexHit]] = {DenseLeg: [], KeywordLeg: [], SecondLeg: []}
    for leg, hits in zip(engine_legs(steps), results, strict=True):
        by_kind[type(leg)] = hits
    dense, keyword, second = by_kind[DenseLeg], by_kind[KeywordLeg], by_kind[SecondLeg]
    here = next((step for step in steps if isinstance(step, FuseHere)), None)
    if here is None:
        return LegResults(fused=(dense or keyword or second)[:limit], dense=dense, keyword=keyword, second=second)
    fused = fuse(list(results), here, limit)
    return LegResults(fused=fused, dense=dense, keyword=keyword, second=second)


def fuse(legs: Sequence[Sequence[IndexHit]], how: FuseHere, limit: int) -> list[IndexHit]:
    """The best `limit` of the legs fused as the engines fuse them (ragkb_core.fusion.leg_parts; RRF's k in the
    paper's convention is Qdrant's k − 1), each leg's part times its weight, summed per point; best first, ties by
    id (so that a search is repeatable). Only those `limit` become hits: each leg holds top_k × candidate_multiplier."""
    totals: dict[str, float] = {}
    first_seen: dict[str, IndexHit] = {}
    for leg, weight in zip(legs, how.weights, strict=True):
        parts = leg_parts([hit.score for hit in leg], how.method, weight, how.rrf_k - 1)
        for hit, part in zip(leg, parts, strict=True):
            totals[hit.id] = totals.get(hit.id, 0.0) + part
            first_seen.setdefault(hit.id, hit)
    best = heapq.nsmallest(limit, totals, key=lambda point: (-totals[point], point))
    return [IndexHit(point, totals[point], first_seen[point].payload) for point in best]
