"""External knowledge bases in the retriever: a Qdrant collection another team wrote through qdrant-client,
and a Dify External Knowledge API endpoint served over HTTP by the test, searched by the retriever's search
service with the real e5 model and ragkb's analyzer. No mocks.

Which Qdrant: no Qdrant server binary is on PyPI, Debian or npm here, so the collection is a qdrant-client
local-mode storage folder (`QdrantClient(path=...)`), written and closed by the test before the retriever opens
it (local mode holds a file lock). A collection given by `url` goes through the same code with a server client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ragkb_analyzer import Bm25Encoder, bm25_encoder_for
from ragkb_core.contracts import KbSearch, ScopeFilter, SearchMode, SearchQuery, SearchResult
from ragkb_core.errors import ExternalUnavailable, InvalidInput
from ragkb_core.external import (
    ExternalDifyConfig,
    ExternalQdrantConfig,
    ExternalTarget,
    QdrantFields,
)
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings, EmbeddingSettings, QdrantSettings
from ragkb_models import EmbedderPool
from ragkb_retriever.external import ExternalSearch
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.searching import SearchService
from ragkb_retriever.settings import ExternalSettings, RerankerSettings

QDRANT_KB = "e" * 32
DIFY_KB = "d" * 32
COLLECTION = "team_handbook"
DIFY_KEY = "dify-key-for-tests"
# (text, title, source URL, team, tags) of each point.
PASSAGES = [
    ("Expense reports are due on the fifth business day of each month.", "Expenses", "https://wiki/expenses",
     "finance", ["hr", "public"]),
    ("有給休暇の申請は、取得日の二週間前までに上長へ提出してください。", "休暇", "https://wiki/leave", "hr", ["hr"]),
    ("The VPN client must be updated before connecting from abroad.", "VPN", "https://wiki/vpn", "it", ["it"]),
    ("Laptops are replaced every four years by the IT department.", "Laptops", "https://wiki/laptops", "it",
     ["it", "public"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def embedders() -> EmbedderPool:
    return EmbedderPool(EmbeddingSettings())


def bm25(analyzer: KbAnalyzer) -> Bm25Encoder:
    return bm25_encoder_for(analyzer, AnalyzerSettings())


@pytest.fixture(scope="module")
def qdrant_roots(tmp_path_factory: pytest.TempPathFactory, embedders: EmbedderPool) -> Path:
    """A collection as another team would write it: named dense vector `embedding` (e5 passages, "passage: "),
    sparse `bm25` (ragkb_analyzer's terms, IDF modifier), its own payload keys. Closed before the retriever reads."""
    roots = tmp_path_factory.mktemp("qdrant-roots")
    embedder = embedders.get()
    encoder = bm25(KbAnalyzer())
    vectors = embedder.embed_passages([f"{title}\n{text}" for text, title, *_ in PASSAGES])
    client = QdrantClient(path=str(roots / "team"))
    client.create_collection(
        COLLECTION,
        vectors_config={"embedding": qm.VectorParams(size=embedder.dimension, distance=qm.Distance.COSINE)},
        sparse_vectors_config={"bm25": qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
    )
    points = []
    for number, ((text, title, url, team, tags), vector) in enumerate(zip(PASSAGES, vectors, strict=True), start=1):
        terms = encoder.encode_document(f"{title}\n{text}", title)
        sparse = qm.SparseVector(indices=terms.indices, values=terms.values)
        payload = {"body": text, "heading": title, "url": url, "team": team, "tags": tags, "year": 2024}
        points.append(qm.PointStruct(id=number, vector={"embedding": vector.tolist(), "bm25": sparse}, payload=payload))
    client.upsert(COLLECTION, points=points, wait=True)
    client.close()
    return roots


def qdrant_target(roots: Path, **changes: Any) -> ExternalTarget:
    config = {
        "kind": "qdrant",
        "path": str(roots / "team"),
        "collection": COLLECTION,
        "fields": QdrantFields(text="body", title="heading", source="url", metadata=["team", "year"], labels="tags"),
        "dense_vector": "embedding",
        "sparse_vector": "bm25",
    }
    return ExternalTarget(config=ExternalQdrantConfig(**(config | changes)))


@pytest.fixture(scope="module")
def external(qdrant_roots: Path) -> Iterator[ExternalSearch]:
    searcher = ExternalSearch(ExternalSettings(qdrant_local_roots=[qdrant_roots], timeout_s=5))
    yield searcher
    searcher.close()


@pytest.fixture(scope="module")
def search(
    tmp_path_factory: pytest.TempPathFactory, embedders: EmbedderPool, external: ExternalSearch
) -> Iterator[SearchService]:
    index = EdgeIndex(QdrantSettings(path=tmp_path_factory.mktemp("edge")))
    service = SearchService(
        index,
        embedders.get,
        bm25,
        RerankerPool(RerankerSettings(model=None)),
        calibration_for=EmbeddingSettings().relevance_of,
        external=external,
    )
    yield service
    service.close()
    index.close()


def ask(
    service: SearchService,
    question: str,
    kbs: list[KbSearch],
    *,
    mode: SearchMode | None = None,
    scope: ScopeFilter | None = None,
) -> SearchResult:
    return service.search(SearchQuery(query=question, knowledge_bases=kbs, mode=mode, scope=scope or ScopeFilter()))


def qdrant_kb(roots: Path, **changes: Any) -> KbSearch:
    return KbSearch(kb_id=QDRANT_KB, name="handbook", external=qdrant_target(roots, **changes))


@pytest.mark.parametrize("mode", ["semantic", "keyword", "hybrid"])
def test_the_collection_answers_in_every_mode_with_mapped_citations(
    search: SearchService, qdrant_roots: Path, mode: SearchMode
) -> None:
    result = ask(search, "When are expense reports due?", [qdrant_kb(qdrant_roots)], mode=mode)
    best = result.results[0]
    assert best.text == PASSAGES[0][0]
    assert (best.title, best.source_id, best.original_url) == (
        "Expenses",
        "https://wiki/expenses",
        "https://wiki/expenses",
    )
    assert best.knowledge_base_id == QDRANT_KB and best.knowledge_base_name == "handbook"
    assert best.metadata == {"team": "finance", "year": 2024}
    assert best.labels == ["hr", "public"]
    assert result.mode == mode and not result.degraded
    if mode != "keyword":  # the packaged e5's calibration, as a native KB's hits have it
        assert best.relevance is not None and 0 < best.relevance <= 1


def test_a_japanese_question_finds_the_japanese_passage(search: SearchService, qdrant_roots: Path) -> None:
    result = ask(search, "休暇の申請はいつまでに出しますか", [qdrant_kb(qdrant_roots)])
    assert result.results[0].title == "休暇"


def test_the_scope_is_applied_inside_the_collection_before_ranking(search: SearchService, qdrant_roots: Path) -> None:
    def titles(scope: ScopeFilter) -> set[str]:
        return {
            hit.title for hit in ask(search, "IT laptops VPN expenses", [qdrant_kb(qdrant_roots)], scope=scope).results
        }

    assert titles(ScopeFilter(labels_any=["it"])) == {"VPN", "Laptops"}
    # A key restricted to `public` never sees more, whatever the request asks.
    assert titles(ScopeFilter(labels_any=["it"], required_labels_any=["public"])) == {"Laptops"}
    assert titles(ScopeFilter(metadata={"team": "hr"})) == {"休暇"}
    assert titles(ScopeFilter(metadata={"owner": "x"})) == set()  # a key the collection does not map
    assert titles(ScopeFilter(document_ids=["0" * 32])) == set()


def test_a_restricted_key_sees_nothing_of_a_collection_without_labels(
    search: SearchService, qdrant_roots: Path
) -> None:
    unlabelled = qdrant_kb(qdrant_roots, fields=QdrantFields(text="body", title="heading", source="url"))
    assert ask(search, "laptops", [unlabelled]).results  # unrestricted: found
    assert ask(search, "laptops", [unlabelled], scope=ScopeFilter(required_labels_any=["public"])).results == []


def test_the_probe_checks_the_collection_against_the_model(external: ExternalSearch, qdrant_roots: Path) -> None:
    probe = external.probe(qdrant_target(qdrant_roots), 384)
    assert (probe.points, probe.dense_size) == (len(PASSAGES), 384)
    with pytest.raises(InvalidInput, match="384-dimensional"):
        external.probe(qdrant_target(qdrant_roots), 768)
    with pytest.raises(InvalidInput, match="no dense vector"):
        external.probe(qdrant_target(qdrant_roots, dense_vector=None), 384)
    with pytest.raises(InvalidInput, match="no sparse vector"):
        external.probe(qdrant_target(qdrant_roots, sparse_vector="splade"), 384)
    with pytest.raises(ExternalUnavailable, match=r"not found|does not exist"):
        external.probe(qdrant_target(qdrant_roots, collection="missing"), 384)


def test_a_folder_outside_the_roots_or_without_a_store_is_refused(
    external: ExternalSearch, qdrant_roots: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="QDRANT_LOCAL_ROOTS"):
        external.probe(qdrant_target(qdrant_roots, path=str(tmp_path)), 384)
    with pytest.raises(ExternalUnavailable, match=r"no meta\.json"):
        external.probe(qdrant_target(qdrant_roots, path=str(qdrant_roots / "typo")), 384)
    assert not (qdrant_roots / "typo").exists()  # nothing was created there


def test_an_unreachable_server_is_a_bad_gateway_alone_and_degrades_a_merged_search(
    search: SearchService, qdrant_roots: Path
) -> None:
    down = KbSearch(
        kb_id="f" * 32,
        name="down",
        external=ExternalTarget(config=ExternalQdrantConfig(kind="qdrant", url="http://127.0.0.1:9", collection="c")),
    )
    with pytest.raises(ExternalUnavailable, match="did not answer"):
        ask(search, "laptops", [down])
    result = ask(search, "laptops", [qdrant_kb(qdrant_roots), down])
    assert result.results and result.degraded
    assert result.degraded_reason is not None and "knowledge base down" in result.degraded_reason


# -- a Dify endpoint ------------------------------------------------------------------------------------


class DifyHandler(BaseHTTPRequestHandler):
    """Dify's External Knowledge API as a remote would answer it; remembers the bodies it was sent."""

    received: list[dict[str, Any]] = []  # the server's record, read by the tests

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append(body)
        if self.headers.get("Authorization") != f"Bearer {DIFY_KEY}":
            self._answer(403, {"error_code": 1002, "error_msg": "Authorization failed"})
            return
        records = [
            {"content": "Badges are collected at the front desk.", "score": 0.91, "title": "Badges",
             "metadata": {"source_id": "badges.md", "labels": ["public"], "floor": 3, "page": 2}},
            {"content": "Parking permits are issued by facilities.", "score": 0.42, "title": "Parking",
             "metadata": {"source_id": "parking.md", "labels": ["internal"]}},
        ]  # fmt: skip
        self._answer(200, {"records": records[: body["retrieval_setting"]["top_k"]]})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def dify_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DifyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def dify_kb(url: str, key: str = DIFY_KEY) -> KbSearch:
    config = ExternalDifyConfig(kind="dify", endpoint=url, knowledge_id="remote-kb")
    return KbSearch(kb_id=DIFY_KB, name="remote", external=ExternalTarget(config=config, api_key=key))


def test_dify_records_are_hits_with_their_score_as_relevance(search: SearchService, dify_url: str) -> None:
    result = ask(search, "where are badges", [dify_kb(dify_url)])
    assert [hit.title for hit in result.results] == ["Badges", "Parking"]
    badges = result.results[0]
    assert (badges.relevance, badges.source_id, badges.page) == (0.91, "badges.md", 2)
    assert badges.metadata["floor"] == 3 and badges.labels == ["public"]
    sent = DifyHandler.received[-1]
    assert sent["knowledge_id"] == "remote-kb" and sent["query"] == "where are badges"
    assert "embed" not in result.timings_ms  # the endpoint embeds the question itself


def test_dify_records_outside_the_callers_scope_are_left_out(search: SearchService, dify_url: str) -> None:
    restricted = ask(search, "badges", [dify_kb(dify_url)], scope=ScopeFilter(required_labels_any=["public"]))
    assert [hit.title for hit in restricted.results] == ["Badges"]
    sent = ask(search, "badges", [dify_kb(dify_url)], scope=ScopeFilter(metadata={"floor": 3}))
    assert [hit.title for hit in sent.results] == ["Badges"]
    assert DifyHandler.received[-1]["metadata_condition"]["conditions"] == [
        {"name": ["floor"], "comparison_operator": "is", "value": "3"}
    ]


def test_a_refused_key_is_a_bad_gateway_alone_and_degrades_a_merged_search(
    search: SearchService, dify_url: str, qdrant_roots: Path
) -> None:
    with pytest.raises(ExternalUnavailable, match="403: 1002 Authorization failed"):
        ask(search, "badges", [dify_kb(dify_url, key="wrong")])
    merged = ask(search, "badges laptops", [dify_kb(dify_url, key="wrong"), qdrant_kb(qdrant_roots)])
    assert merged.degraded and {hit.knowledge_base_id for hit in merged.results} == {QDRANT_KB}
