"""An external KB in a Qdrant collection another team writes: searched with qdrant-client, read only.

The collection is reached by URL (a Qdrant server: the supported deployment) or by a qdrant-client local-mode
storage folder under RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS (what the tests can run here: no Qdrant server binary is
on PyPI, Debian or npm). Local mode holds a file lock on its folder for as long as a client is open, so the
writer must have closed its own client first, and the retriever keeps one client per folder.

Its legs are planned and fused as a native KB's (ragkb_retriever.index.port): dense on the mapped dense vector,
keyword on the mapped sparse vector (BM25 terms of ragkb's analyzer), fused by the KB's method in the engine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from ragkb_core.contracts import KbSearch, ScopeFilter, SparseTerms
from ragkb_core.errors import ExternalUnavailable, InvalidInput
from ragkb_core.external import ExternalProbe, ExternalQdrantConfig, ExternalTarget, QdrantFields
from ragkb_retriever.external.passages import passage_payload, scalar_metadata, string_list
from ragkb_retriever.index.filters import FilterSpec
from ragkb_retriever.index.port import (
    DenseLeg,
    IndexHit,
    Leg,
    LegResults,
    SecondLeg,
    assemble,
    engine_legs,
    no_results,
    plan_legs,
)
from ragkb_retriever.index.server import qdrant_filter
from ragkb_retriever.settings import ExternalSettings

ClientKey = tuple[str, str]
# plan_legs checks a native scope for an empty allow-list; an external KB's scope was translated and checked
# before (ragkb_retriever.external.scope), so its legs are planned as for an unrestricted one.
_ANY_SCOPE = ScopeFilter()


class ExternalQdrant:
    """Searches and probes external Qdrant collections; one client per server (and key) or local folder."""

    def __init__(self, settings: ExternalSettings) -> None:
        self._settings = settings
        self._clients: dict[ClientKey, QdrantClient] = {}
        # Local mode is not safe for concurrent use: its calls take turns; a server client needs no lock.
        self._local_locks: dict[ClientKey, threading.Lock] = {}
        self._lock = threading.Lock()

    def search(
        self,
        kb: KbSearch,
        target: ExternalTarget,
        *,
        dense: list[float] | None,
        sparse: SparseTerms | None,
        spec: FilterSpec,
        limit: int,
    ) -> LegResults:
        config = _qdrant(target)
        retrieval = kb.retrieval
        legs = plan_legs(
            dense,
            sparse if config.sparse_vector else None,
            _ANY_SCOPE,
            limit=limit,
            candidate_limit=_candidates(kb),
            rrf_k=retrieval.rrf_k + 1,  # Qdrant's k, as for a native KB (searching.qdrant_rrf_k)
            weights=(retrieval.dense_weight or 1.0, retrieval.keyword_weight or 1.0),
            fusion=retrieval.fusion,
        )
        if not legs:
            return no_results()
        requests = _Requests(config, qdrant_filter(spec) if spec.must else None, _candidates(kb))
        with self._client(target) as client:
            batch = client.query_batch_points(
                config.collection, requests=[requests.build(leg) for leg in engine_legs(legs)]
            )
        results = [[_hit(kb.kb_id, config.fields, point) for point in response.points] for response in batch]
        return assemble(legs, [[hit for hit in hits if hit is not None] for hits in results], limit)

    def probe(self, target: ExternalTarget, dimension: int) -> ExternalProbe:
        """The collection exists, has the mapped vectors, and its dense vector is of the model's `dimension`."""
        config = _qdrant(target)
        # A server's client is kept only once a search uses it: a probe of a mistyped address leaves nothing.
        with self._client(target, keep=config.path is not None) as client:
            info = client.get_collection(config.collection)
        params = info.config.params
        size = _dense_size(params.vectors, config.dense_vector, config.collection)
        if size != dimension:
            raise InvalidInput(
                f"collection {config.collection!r} holds {size}-dimensional vectors; the embedding model makes "
                f"{dimension}: declare the model the collection was written with",
                dense_size=size,
                model_dimension=dimension,
            )
        if config.sparse_vector and config.sparse_vector not in (params.sparse_vectors or {}):
            raise InvalidInput(f"collection {config.collection!r} has no sparse vector {config.sparse_vector!r}")
        return ExternalProbe(kind="qdrant", points=info.points_count, dense_size=size)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    @contextmanager
    def _client(self, target: ExternalTarget, *, keep: bool = True) -> Iterator[QdrantClient]:
        """The collection's client (kept for later calls, or closed after this one), its errors as
        ExternalUnavailable (a bad gateway), never a 500."""
        config = _qdrant(target)
        key = self._key(config, target)
        try:
            client = self._open(key, config, target) if keep else self._new_client(key, config, target)
            local = self._local_locks.get(key)
            try:
                if local is None:
                    yield client
                else:
                    with local:
                        yield client
            finally:
                if not keep:
                    client.close()
        except ResponseHandlingException as exc:
            raise ExternalUnavailable(f"Qdrant at {_where(config)} did not answer: {exc.source}") from exc
        except UnexpectedResponse as exc:
            raise ExternalUnavailable(
                f"Qdrant at {_where(config)} answered {exc.status_code} {exc.reason_phrase} for collection "
                f"{config.collection!r}"
            ) from exc
        except (ValueError, RuntimeError) as exc:
            # Local mode: a missing collection (ValueError), a folder another client holds (RuntimeError).
            raise ExternalUnavailable(f"Qdrant at {_where(config)}: {exc}") from exc

    def _key(self, config: ExternalQdrantConfig, target: ExternalTarget) -> ClientKey:
        if config.path is not None:
            return ("path", str(self._allowed_folder(config.path)))
        secret = target.api_key.get_secret_value() if target.api_key else ""
        return (f"url:{config.url}", secret)

    def _open(self, key: ClientKey, config: ExternalQdrantConfig, target: ExternalTarget) -> QdrantClient:
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._new_client(key, config, target)
                self._clients[key] = client
            return client

    def _new_client(self, key: ClientKey, config: ExternalQdrantConfig, target: ExternalTarget) -> QdrantClient:
        if config.path is not None:
            folder = Path(key[1])
            if not (folder / "meta.json").is_file():
                # qdrant-client would create an empty store there: a mistyped path must not look like an empty KB.
                raise ValueError(f"{folder} is not a qdrant-client local-mode storage folder (no meta.json)")
            self._local_locks[key] = threading.Lock()
            return QdrantClient(path=str(folder))
        api_key = target.api_key.get_secret_value() if target.api_key else None
        # No version check in a background thread: the collection is probed when the KB is registered, and a
        # server that is down must fail the call that uses it, not a thread nobody waits for.
        return QdrantClient(
            url=config.url, api_key=api_key, timeout=int(self._settings.timeout_s), check_compatibility=False
        )

    def _allowed_folder(self, path: str) -> Path:
        folder = Path(path).resolve()
        roots = [root.resolve() for root in self._settings.qdrant_local_roots]
        if not any(folder.is_relative_to(root) for root in roots):
            raise InvalidInput(
                f"{path} is not under a folder of RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS on the retriever; a Qdrant "
                "collection on a server is given by `url`"
            )
        return folder


def _candidates(kb: KbSearch) -> int:
    return kb.retrieval.top_k * kb.retrieval.candidate_multiplier


def _qdrant(target: ExternalTarget) -> ExternalQdrantConfig:
    if not isinstance(target.config, ExternalQdrantConfig):
        raise InvalidInput("not an external Qdrant collection")
    return target.config


def _where(config: ExternalQdrantConfig) -> str:
    return config.url or f"local folder {config.path}"


def _dense_size(vectors: Any, name: str | None, collection: str) -> int:
    """The size of the collection's dense vector `name` (None: its unnamed default one)."""
    if isinstance(vectors, qm.VectorParams) and name is None:
        return vectors.size
    if isinstance(vectors, dict) and name is not None and isinstance(vectors.get(name), qm.VectorParams):
        return int(vectors[name].size)
    named = sorted(vectors) if isinstance(vectors, dict) else ["(unnamed default)"]
    wanted = repr(name) if name else "an unnamed default vector"
    raise InvalidInput(f"collection {collection!r} has no dense vector {wanted}; it has: {', '.join(named)}")


class _Requests:
    """qdrant-client query requests for the legs of one search: the mapped vector names, the scope's filter in
    every leg (before ranking), payloads always (the passages are made from them)."""

    def __init__(self, config: ExternalQdrantConfig, scope: qm.Filter | None, candidates: int) -> None:
        self._config = config
        self._filter = scope
        self._candidates = candidates

    def build(self, leg: Leg) -> qm.QueryRequest:
        if isinstance(leg, DenseLeg | SecondLeg):  # an external KB is searched without a second leg
            query, using = qm.NearestQuery(nearest=leg.vector), self._config.dense_vector
        else:
            sparse = qm.SparseVector(indices=leg.terms.indices, values=leg.terms.values)
            query, using = qm.NearestQuery(nearest=sparse), self._config.sparse_vector
        return qm.QueryRequest(query=query, using=using, filter=self._filter, limit=self._candidates, with_payload=True)


def _hit(kb_id: str, fields: QdrantFields, point: qm.ScoredPoint) -> IndexHit | None:
    """A point as a native passage's hit; None for a point without text under the mapped key."""
    payload = point.payload or {}
    text = payload.get(fields.text)
    if not isinstance(text, str) or not text:
        return None
    title = payload.get(fields.title) if fields.title else None
    source = payload.get(fields.source) if fields.source else None
    point_id = str(point.id)
    passage = passage_payload(
        kb_id,
        text=text,
        title=title if isinstance(title, str) else "",
        # A point without a source is a document of its own.
        source=str(source) if isinstance(source, str | int) and source != "" else f"point:{point_id}",
        labels=string_list(payload.get(fields.labels)) if fields.labels else [],
        metadata=scalar_metadata({key: payload[key] for key in fields.metadata if key in payload}),
    )
    return IndexHit(id=point_id, score=point.score, payload=passage)
