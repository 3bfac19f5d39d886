"""ragkb next to its peers in one run: same corpus, same embedding model, same queries, same metrics.

    make bench-peers        (installs bench/requirements-peers.txt into .venv/peers, over .venv, and runs this)
    .venv/peers/bin/python bench/peers.py [--corpora scifact:train jsquad:dev] [--max-queries N] [--max-docs N]
                                          [--ingest-docs 500] [--ragkb-precisions auto float32 int8-block]
                                          [--peers txtai lancedb chroma] [--url URL] [--keep]

Peers, each installed from PyPI and run in this process with its defaults, top 100 per query:

- txtai: `Embeddings(hybrid=True)`: its BM25 (`normalize: True`, UAX #29 word segmentation) and a Faiss index
  (exact up to 5000 rows; IVF, nprobe ≈ cells / 16, above), fused by its convex combination (0.5 × cosine +
  0.5 × normalised BM25); vectors through its `external` method and `instructions` (query/passage prefixes),
  i.e. its own embedding path calling ragkb's embedder.
- LanceDB: a table with the vectors, its native full-text index (default tokeniser: simple, English stemming),
  `query_type="hybrid"` fused by `RRFReranker()` (k = 60).
- Chroma: dense only (HNSW, default settings): its hybrid `Search` API (BM25/sparse + RRF) raises
  "Search is not implemented for Local Chroma" in the local client.

The embedding model is ragkb's own (`load_embedder(EmbeddingSettings())`: multilingual-e5-small, ONNX Runtime,
`query: `/`passage: ` prefixes), one vector per document of `title\\ntext` (truncated at 512 tokens; ragkb
chunks instead). Corpus passage vectors are computed once per corpus and cached under ~/.cache/ragkb/bench/
(bench/peer_vectors.py); every peer's full index is built from those. Query vectors are computed once per
query in this run and timed; a peer's query latency is that embed time plus its own search call (in process),
next to ragkb's HTTP latency, its api handler's time (the `Server-Timing` total) and the retriever's
`took_ms` (which includes its query embedding).

Ingestion: each peer's index build over the whole corpus from the cached vectors (index only), and over the
first --ingest-docs documents embedding them for real through the peer's path (txtai: its transform; LanceDB,
Chroma: vectors computed and added, as their bring-your-own-vectors usage). ragkb ingests the same first
--ingest-docs documents in this run, end to end (upload through the batch endpoint, parse, chunk, embed, index,
until every one is `done`), once per passage precision of --ragkb-precisions, each into a throwaway KB deleted
afterwards (bench/ingest.py's upload and wait). Before any timing, each peer builds a throwaway index once
(importing txtai alone takes seconds).

ragkb is queried over HTTP (`--url`, key from RAGKB_API_KEY or var/admin.key) on the KB bench/ingest.py made
(`bench-<corpus>-<size>`), mode hybrid, `{"top_k": 100, "max_blocks": 100, "rerank": false}`; passages are
reduced to documents, first passage wins (as bench/quality.py). A 429 is waited out and retried, outside the
timed request. Metrics (nDCG@10, Recall@100, MRR@10) by ranx. `--max-docs` (development only) indexes the
first N documents, keeps the queries with a relevant document among them, and drops ragkb hits outside them.
"keyword leg matched" is the share of queries for which a system's keyword search alone finds any document:
a peer's default tokeniser is the peer's own property, and on Japanese it shows.

Results: bench/results/peers.json and peers.md, every figure also as a ratio to ragkb; `--keep` keeps the
previous file's other corpora (one corpus per run, each still measured with all systems in its own run).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import numpy as np
from common import (
    DATA,
    RESULTS,
    client,
    delete_kb,
    find_kb,
    percentile,
    ragkb_ingest_runs,
    read_jsonl,
    read_qrels,
    save_result,
    warm_up,
)
from ingest import upload_all, wait_until_settled
from numpy.typing import NDArray
from peer_vectors import cache_path, corpus_documents, embedder, passage_vectors

DEPTH = 100
WARM_UP = 5
METRICS = ("ndcg@10", "recall@100", "mrr@10")
Vectors = NDArray[np.float32]


@dataclass
class Corpus:
    name: str
    split: str
    ids: list[str]
    texts: list[str]
    vectors: Vectors
    queries: list[tuple[str, str]]
    qrels: dict[str, dict[str, int]]
    full_size: int
    query_vectors: dict[str, list[float]] = field(default_factory=dict)
    embed_ms: dict[str, float] = field(default_factory=dict)


class Peer(Protocol):
    name: str
    package: str
    hybrid: str

    def build(self, ids: list[str], texts: list[str], vectors: Vectors | None) -> None:
        """Index the documents; with `vectors` None, embed them through the peer's own path."""
        ...

    def search(self, text: str, vector: list[float], limit: int) -> list[str]: ...

    def keyword_matches(self, text: str) -> bool | None:
        """Whether the keyword leg alone finds any document for the query (None: the peer has none)."""
        ...


# --- peers ---------------------------------------------------------------------------------------------------


class TxtaiPeer:
    name = "txtai"
    package = "txtai"
    # Its hybrid defaults: BM25 with `normalize: True` and Unicode (UAX #29) word segmentation, so the fusion is
    # its convex combination (0.5 × cosine + 0.5 × normalised BM25); Faiss exact up to 5000 rows, IVF above.
    hybrid = "BM25 (Unicode word segmentation) + Faiss, convex 0.5/0.5"
    PREFIXES = {"query": "query: ", "data": "passage: "}

    def __init__(self, query_vectors: dict[str, list[float]]) -> None:
        self._known: dict[str, Vectors] = {"query: " + t: np.asarray(v, np.float32) for t, v in query_vectors.items()}
        self._index: Any = None

    def build(self, ids: list[str], texts: list[str], vectors: Vectors | None) -> None:
        from txtai import Embeddings

        if vectors is not None:
            self._known.update(("passage: " + t, v) for t, v in zip(texts, vectors, strict=True))
        config = {"method": "external", "transform": self._transform(), "instructions": self.PREFIXES, "hybrid": True}
        self._index = Embeddings(config)
        self._index.index([(uid, text, None) for uid, text in zip(ids, texts, strict=True)])

    def search(self, text: str, vector: list[float], limit: int) -> list[str]:
        return [str(uid) for uid, _ in self._index.search(text, limit)]

    def keyword_matches(self, text: str) -> bool | None:
        return bool(self._index.scoring.search(text, 1))

    def _transform(self) -> Callable[[list[str]], Vectors]:
        """txtai's external vectors: texts arrive with the instruction prefix txtai prepended; known texts come
        from the cache, others are embedded now by the same model. A plain function: txtai calls any other
        callable with no arguments to make the transform."""
        known = self._known
        model = embedder()

        def transform(texts: list[str]) -> Vectors:
            missing = [t for t in texts if t not in known]
            passages = [t.removeprefix("passage: ") for t in missing if not t.startswith("query: ")]
            for t, vector in zip(
                [t for t in missing if not t.startswith("query: ")], model.embed_passages(passages), strict=True
            ):
                known[t] = vector
            for t in missing:
                if t.startswith("query: "):
                    known[t] = np.asarray(model.embed_query(t.removeprefix("query: ")), np.float32)
            return np.stack([known[t] for t in texts])

        return transform


class LanceDbPeer:
    name = "LanceDB"
    package = "lancedb"
    hybrid = "native FTS (simple tokeniser, English stemming) + flat vector scan, RRFReranker (k=60)"

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="peers-lancedb-")
        self._table: Any = None

    def build(self, ids: list[str], texts: list[str], vectors: Vectors | None) -> None:
        # Its Rust logger warns on every hybrid query that a future version will stop adding `_score` and
        # `_distance` columns (thousands of lines per run); read before the import, errors still shown.
        os.environ.setdefault("LANCEDB_LOG", "error")
        import lancedb
        import pyarrow as pa
        from lancedb.index import FTS

        vectors = embedder().embed_passages(texts) if vectors is None else vectors
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
        table = pa.table({"id": ids, "text": texts, "vector": column})
        self._table = lancedb.connect(self._folder.name).create_table("docs", table, mode="overwrite")
        self._table.create_index("text", config=FTS())

    def search(self, text: str, vector: list[float], limit: int) -> list[str]:
        from lancedb.rerankers import RRFReranker

        query = self._table.search(query_type="hybrid").vector(vector).text(text).rerank(RRFReranker())
        return [row["id"] for row in query.limit(limit).select(["id"]).to_list()]

    def keyword_matches(self, text: str) -> bool | None:
        return bool(self._table.search(text, query_type="fts").limit(1).select(["id"]).to_list())

    def close(self) -> None:
        self._folder.cleanup()


class ChromaPeer:
    name = "Chroma"
    package = "chromadb"
    hybrid = "dense only (HNSW): hybrid Search is not implemented for local Chroma"
    BATCH = 1000

    def __init__(self) -> None:
        self._collection: Any = None

    def build(self, ids: list[str], texts: list[str], vectors: Vectors | None) -> None:
        import chromadb

        vectors = embedder().embed_passages(texts) if vectors is None else vectors
        client = chromadb.EphemeralClient()
        name = f"peers-{time.monotonic_ns()}"
        self._collection = client.create_collection(name, embedding_function=None)
        for start in range(0, len(ids), self.BATCH):
            end = start + self.BATCH
            self._collection.add(ids=ids[start:end], embeddings=vectors[start:end], documents=texts[start:end])

    def search(self, text: str, vector: list[float], limit: int) -> list[str]:
        ids: list[str] = self._collection.query(query_embeddings=[vector], n_results=limit)["ids"][0]
        return ids

    def keyword_matches(self, text: str) -> bool | None:
        return None


def make_peer(name: str, corpus: Corpus) -> Peer:
    peers: dict[str, Callable[[], Peer]] = {
        "txtai": lambda: TxtaiPeer(corpus.query_vectors),
        "lancedb": LanceDbPeer,
        "chroma": ChromaPeer,
    }
    return peers[name]()


# --- measuring -----------------------------------------------------------------------------------------------


def load_corpus(spec: str, max_docs: int | None, max_queries: int | None) -> Corpus:
    name, split = spec.split(":")
    ids, texts = corpus_documents(name)
    qrels = read_qrels(DATA / name / "qrels" / f"{split}.tsv")
    full_size = len(ids)
    if max_docs is None or cache_path(name, texts).exists():
        vectors = passage_vectors(name, texts)[:max_docs]
        ids, texts = ids[:max_docs], texts[:max_docs]
    else:
        ids, texts = ids[:max_docs], texts[:max_docs]
        vectors = passage_vectors(name, texts)
    if max_docs is not None:
        kept = set(ids)
        qrels = {q: {d: g for d, g in rel.items() if d in kept} for q, rel in qrels.items()}
        qrels = {q: rel for q, rel in qrels.items() if any(g > 0 for g in rel.values())}
    queries = [(q["_id"], q["text"]) for q in read_jsonl(DATA / name / "queries.jsonl") if q["_id"] in qrels]
    queries = queries[:max_queries]
    qrels = {q: qrels[q] for q, _ in queries}
    return Corpus(name, split, ids, texts, vectors, queries, qrels, full_size)


def embed_queries(corpus: Corpus) -> None:
    """One query vector per query, timed: the embed share of every peer's query latency."""
    model = embedder()
    for _, text in corpus.queries[:WARM_UP]:
        model.embed_query(text)
    for _, text in corpus.queries:
        started = time.perf_counter()
        corpus.query_vectors[text] = model.embed_query(text)
        corpus.embed_ms[text] = (time.perf_counter() - started) * 1000


def scores(corpus: Corpus, rankings: dict[str, list[str]]) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    # Rank order is the run: a score falling with the rank keeps each system's order, ties included.
    run = {
        q: {doc: float(DEPTH - i) for i, doc in enumerate(ranked[:DEPTH])} or {"-": 0.0}
        for q, ranked in rankings.items()
    }
    values = evaluate(Qrels(corpus.qrels), Run(run), list(METRICS), make_comparable=True)
    return {metric: round(float(values[metric]), 4) for metric in METRICS}


def share(matches: list[bool | None]) -> float | None:
    """The share of queries whose keyword leg found anything: Japanese under a Latin tokeniser finds little."""
    return None if None in matches else round(sum(1 for m in matches if m) / len(matches), 3)


def latency(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 1), "p95": round(percentile(values, 95), 1)}


def build_timed(peer: Peer, ids: list[str], texts: list[str], vectors: Vectors | None) -> dict[str, float]:
    started = time.perf_counter()
    peer.build(ids, texts, vectors)
    seconds = time.perf_counter() - started
    return {"documents": len(ids), "seconds": round(seconds, 2), "documents_per_s": round(len(ids) / seconds, 1)}


def run_peer(name: str, corpus: Corpus, ingest_docs: int) -> dict[str, Any]:
    # A throwaway build first, so that no timing includes importing the peer's packages (txtai: ~14 s).
    warm = make_peer(name, corpus)
    warm.build(corpus.ids[:WARM_UP], corpus.texts[:WARM_UP], corpus.vectors[:WARM_UP])
    close(warm)
    small = make_peer(name, corpus)
    n = min(ingest_docs, len(corpus.ids))
    with_embedding = build_timed(small, corpus.ids[:n], corpus.texts[:n], None)
    close(small)
    peer = make_peer(name, corpus)
    index_only = build_timed(peer, corpus.ids, corpus.texts, corpus.vectors)
    for _, text in corpus.queries[:WARM_UP]:
        peer.search(text, corpus.query_vectors[text], DEPTH)
    rankings: dict[str, list[str]] = {}
    search_ms: list[float] = []
    total_ms: list[float] = []
    for query_id, text in corpus.queries:
        started = time.perf_counter()
        rankings[query_id] = peer.search(text, corpus.query_vectors[text], DEPTH)
        search_ms.append((time.perf_counter() - started) * 1000)
        total_ms.append(search_ms[-1] + corpus.embed_ms[text])
    matches = [peer.keyword_matches(text) for _, text in corpus.queries]
    close(peer)
    return {
        "system": peer.name,
        "version": importlib.metadata.version(peer.package),
        "hybrid": peer.hybrid,
        **scores(corpus, rankings),
        "latency_ms": latency(total_ms),
        "search_only_ms": latency(search_ms),
        "keyword_leg_matched": share(matches),
        "index_only": index_only,
        "ingest_with_embedding": with_embedding,
    }


def close(peer: Peer) -> None:
    if isinstance(peer, LanceDbPeer):
        peer.close()
    gc.collect()


def api_total_ms(response: httpx.Response) -> float | None:
    """The api's own time for the request (its `Server-Timing` header's total), if it sends one."""
    for metric in response.headers.get("server-timing", "").split(","):
        name, _, params = metric.strip().partition(";")
        if name == "total" and params.startswith("dur="):
            return float(params.removeprefix("dur="))
    return None


def search_ragkb(http: httpx.Client, kb_id: str, text: str) -> tuple[dict[str, Any], float, float | None]:
    body = {
        "query": text,
        "knowledge_base_ids": [kb_id],
        "mode": "hybrid",
        "settings": {"top_k": DEPTH, "max_blocks": DEPTH, "rerank": False},
    }
    while True:
        started = time.perf_counter()
        response = http.post("/v1/search", json=body)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 429:
            response.raise_for_status()
            return response.json(), elapsed, api_total_ms(response)
        time.sleep(float(response.headers.get("Retry-After", "1")))


def run_ragkb(url: str, corpus: Corpus, ingest_docs: int, precisions: list[str]) -> dict[str, Any]:
    http = client(url)
    kb_name = f"bench-{corpus.name}-{corpus.full_size}"
    kb = find_kb(http, kb_name)
    if kb is None:
        raise SystemExit(f"no KB {kb_name} at {url}: run bench/ingest.py --corpus {corpus.name} first")
    counts = kb["document_counts"]
    if counts["pending"] + counts["processing"]:
        raise SystemExit(f"{kb_name} is still ingesting ({counts}); run again when pending + processing is 0")
    for _, text in corpus.queries[:WARM_UP]:
        search_ragkb(http, kb["id"], text)
    kept = set(corpus.ids)
    rankings: dict[str, list[str]] = {}
    http_ms: list[float] = []
    took_ms: list[float] = []
    api_ms: list[float] = []
    embed_ms: list[float] = []
    matches: list[bool | None] = []
    fusions: set[str] = set()
    for query_id, text in corpus.queries:
        result, elapsed, api_total = search_ragkb(http, kb["id"], text)
        http_ms.append(elapsed)
        took_ms.append(result["took_ms"])
        if api_total is not None:
            api_ms.append(api_total)
        embed_ms.append(result["timings_ms"].get("embed", 0.0))
        matches.append(any(hit["keyword_rank"] is not None for hit in result["results"]))
        fusions.add(fusion_of(result["effective_settings"][kb["id"]]))
        ranked = dict.fromkeys(hit["source_id"] for hit in result["results"])
        rankings[query_id] = [doc for doc in ranked if doc in kept]
    return {
        "system": "ragkb",
        "version": git_commit(),
        "hybrid": f"Sudachi BM25 + dense (Qdrant), {fusion_text(fusions)}, no reranker",
        "kb": kb_name,
        **scores(corpus, rankings),
        "latency_ms": latency(http_ms),
        "server_took_ms": latency(took_ms),
        # The api's handler (auth, KB lookup, the retriever's answer passed on); HTTP minus it is both servers'
        # HTTP handling and the client.
        "api_handler_ms": latency(api_ms) if api_ms else None,
        "server_embed_ms": latency(embed_ms),
        "keyword_leg_matched": share(matches),
        # Measured after the queries, as each peer's: the throwaway KBs' writes never overlap a timed search.
        "ingest": [ragkb_ingest(http, corpus, ingest_docs, precision) for precision in precisions],
    }


def fusion_text(fusions: set[str]) -> str:
    return " and ".join(sorted(fusions)) + (" (changed during the run)" if len(fusions) > 1 else "")


def fusion_of(settings: dict[str, Any]) -> str:
    """The fusion the server applied, from its effective settings (RRF where it names none)."""
    fusion = settings.get("fusion", "rrf")
    return f"RRF (k={settings['rrf_k']})" if fusion == "rrf" else str(fusion).upper()


def ragkb_ingest(http: httpx.Client, corpus: Corpus, documents: int, precision: str) -> dict[str, Any]:
    """ragkb's end-to-end ingest of the first `documents` documents (those the peers embed), now: a throwaway KB
    in the passage precision, uploaded and waited for as bench/ingest.py does, then deleted."""
    name = f"bench-peers-ingest-{corpus.name}-{precision}"
    chunking = {"passage_precision": precision}
    stale = [kb for kb in http.get("/v1/knowledge-bases").json() if kb["name"].startswith(name)]
    for kb in stale:  # an interrupted run's
        delete_kb(http, kb["id"])
    # Every task process loads the precision's model first, as a long-lived worker has: the timed run is warm.
    for kb_id in warm_up(http, chunking=chunking, prefix=f"{name}-warm-up"):
        delete_kb(http, kb_id)
    created = http.post("/v1/knowledge-bases", json={"name": name, "chunking": chunking})
    created.raise_for_status()
    kb_id = created.json()["id"]
    batch = list(read_jsonl(DATA / corpus.name / "corpus.jsonl"))[:documents]
    try:
        started = time.perf_counter()
        upload_all(http, kb_id, batch, workers=2)
        counts = wait_until_settled(http, kb_id, len(batch), timeout_s=3600)
        seconds = time.perf_counter() - started
    finally:
        delete_kb(http, kb_id)
    return {
        "passage_precision": precision,
        "documents": len(batch),
        "failed": counts["failed"],
        "seconds": round(seconds, 2),
        "documents_per_s": round(len(batch) / seconds, 1),
    }


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


# --- report --------------------------------------------------------------------------------------------------


def ratio(value: float | None, reference: float | None) -> str:
    return f"{value / reference:.2f}×" if value is not None and reference else "–"


def ms(figures: dict[str, float]) -> str:
    return f"{figures['p50']} / {figures['p95']}"


def ragkb_row(ragkb: dict[str, Any]) -> str:
    runs = ragkb_ingest_runs(ragkb)
    rates = [f"{run['documents_per_s']} {run['passage_precision']}" for run in runs]
    documents = runs[0]["documents"] if runs else 0
    throughput = f"{', '.join(rates)} end to end ({documents} docs)" if rates else "not measured"
    api_part = f"api handler {ms(ragkb['api_handler_ms'])}; " if ragkb.get("api_handler_ms") else ""
    return (
        f"| ragkb | {ragkb['version']} | {ragkb['hybrid']} | {ragkb['ndcg@10']} | {ragkb['recall@100']} | "
        f"{ragkb['mrr@10']} | {ragkb['keyword_leg_matched']} | HTTP {ms(ragkb['latency_ms'])}; {api_part}retriever "
        f"took {ms(ragkb['server_took_ms'])} | – | {throughput} |"
    )


def peer_row(peer: dict[str, Any]) -> str:
    matched = "no keyword leg" if peer["keyword_leg_matched"] is None else peer["keyword_leg_matched"]
    ingest = peer["ingest_with_embedding"]
    return (
        f"| {peer['system']} | {peer['version']} | {peer['hybrid']} | {peer['ndcg@10']} | {peer['recall@100']} | "
        f"{peer['mrr@10']} | {matched} | {ms(peer['latency_ms'])} (search call {ms(peer['search_only_ms'])}) | "
        f"{peer['index_only']['documents_per_s']} | {ingest['documents_per_s']} ({ingest['documents']} docs) |"
    )


def ratio_row(peer: dict[str, Any], ragkb: dict[str, Any]) -> str:
    cells = [ratio(peer[metric], ragkb[metric]) for metric in METRICS]
    cells.append(ratio(peer["latency_ms"]["p50"], ragkb["latency_ms"]["p50"]))
    cells.append(ratio(peer["latency_ms"]["p50"], ragkb["server_took_ms"]["p50"]))
    for run in ragkb_ingest_runs(ragkb):
        cells.append(ratio(peer["ingest_with_embedding"]["documents_per_s"], run["documents_per_s"]))
    return f"| {peer['system']} | " + " | ".join(cells) + " |"


def table(result: dict[str, Any]) -> str:
    ragkb, peers = result["systems"][0], result["systems"][1:]
    ingest_ratios = [f"ingest with embedding ÷ ragkb {run['passage_precision']}" for run in ragkb_ingest_runs(ragkb)]
    return "\n".join(
        [
            f"### {result['corpus']} ({result['split']}): {result['documents']} documents, "
            f"{result['queries']} queries, top {DEPTH}",
            "",
            "| system | version | retrieval | nDCG@10 | Recall@100 | MRR@10 | keyword leg matched | "
            "latency p50 / p95 ms | index-only docs/s | ingest docs/s with embedding |",
            "|---|---|---|---|---|---|---|---|---|---|",
            ragkb_row(ragkb),
            *(peer_row(peer) for peer in peers),
            "",
            f"Query embedding (same model): p50 / p95 {ms(result['query_embed_ms'])} ms in this process, "
            f"{ms(ragkb['server_embed_ms'])} ms as ragkb's embed stage. A peer's latency is that embed time plus "
            "its search call, in process; ragkb's is an HTTP request.",
            "",
            "Ratios to ragkb (quality: above 1 is better than ragkb; latency: above 1 is slower; ingest: above 1 "
            "is faster):",
            "",
            "| system | nDCG@10 | Recall@100 | MRR@10 | p50 ÷ ragkb HTTP p50 | p50 ÷ ragkb server took p50 | "
            + " | ".join(ingest_ratios)
            + " |",
            "|---|---|---|---|---|---|" + "---|" * len(ingest_ratios),
            *(ratio_row(peer, ragkb) for peer in peers),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--corpora", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--peers", nargs="+", default=["txtai", "lancedb", "chroma"])
    parser.add_argument("--max-queries", type=int, default=None, help="only the first N judged queries")
    parser.add_argument("--max-docs", type=int, default=None, help="development: only the first N documents")
    parser.add_argument("--ingest-docs", type=int, default=500, help="documents embedded for the ingest figure")
    parser.add_argument(
        "--ragkb-precisions",
        nargs="+",
        default=["auto", "float32", "int8-block"],
        help="passage precisions ragkb's ingest is measured in, each with its ratio column (peers.png: the first; "
        "the default precision first)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the other corpora of the previous peers.json")
    args = parser.parse_args()
    args_used = {k: v for k, v in vars(args).items() if k not in ("url", "corpora", "keep")}
    results = kept_results(args.corpora) if args.keep else []
    for spec in args.corpora:
        result = compare(spec, args) | {"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": args_used}
        results.append(result)
        print(table(result), flush=True)
    markdown = "\n\n".join(table(r) for r in results)
    result = {"embedding": "ragkb EmbeddingSettings()", "corpora": results}
    save_result("peers", result, f"## ragkb and its peers\n\n{markdown}")


def compare(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """ragkb and every peer on one corpus, in this run, on the same queries and query vectors."""
    corpus = load_corpus(spec, args.max_docs, args.max_queries)
    embed_queries(corpus)
    systems = [run_ragkb(args.url, corpus, args.ingest_docs, args.ragkb_precisions)]
    print(systems[-1], flush=True)
    for name in args.peers:
        systems.append(run_peer(name, corpus, args.ingest_docs))
        print(systems[-1], flush=True)
    return {
        "corpus": corpus.name,
        "split": corpus.split,
        "documents": len(corpus.ids),
        "queries": len(corpus.queries),
        "query_embed_ms": latency(list(corpus.embed_ms.values())),
        "systems": systems,
    }


def kept_results(specs: list[str]) -> list[dict[str, Any]]:
    """The corpora of the previous peers.json that this run does not measure again (--keep)."""
    path = RESULTS / "peers.json"
    previous: list[dict[str, Any]] = json.loads(path.read_text())["corpora"] if path.exists() else []
    return [r for r in previous if f"{r['corpus']}:{r['split']}" not in specs]


if __name__ == "__main__":
    main()
