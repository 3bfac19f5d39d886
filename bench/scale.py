"""Load a KB of N chunks for latency benchmarks: real SciFact text, scaled up by repetition with perturbation.

Ingesting 100k chunks through the worker takes hours on a small machine (the e5 embedder does ~17 chunks/s
on two cores), so the corpus is synthesised instead:

1. Base: B real passages (default 2,000) — SciFact abstracts cut into passages of up to 3 sentences, each
   prefixed by its title as the worker does — embedded once with the real embedder (the retriever's
   settings). The base texts and vectors are cached under ~/.cache/ragkb/bench, so reruns skip this.
2. Chunk i is a perturbed copy of base passage i mod B (seeded RNG): its text with 1–3 words dropped and
   1–2 adjacent pairs swapped; dense = normalize(base + N(0, σ²), σ = 0.02 per dimension); sparse = the
   real BM25 encoding of the perturbed text. Every base passage therefore appears N/B times, near-duplicated.
3. Chunks are grouped into documents of 10 and written through the retriever's internal API
   (`PUT /internal/v1/kbs/{kb}/documents/{doc}`); the KB itself is created with the public API, so that
   `/v1/search` accepts it. No document rows exist in the metadata database: search does not need them.

Latencies measured on this corpus are those of an index of N points of realistic text and vectors, but
the near-duplicates make score distributions flatter than a corpus of N distinct passages.

    python bench/scale.py --points 10000 --url http://127.0.0.1:8000 --retriever-url http://127.0.0.1:8001
    (admin key from RAGKB_API_KEY, service token from RAGKB_SERVICE_TOKEN)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from common import DATA, delete_kb, read_jsonl
from numpy.typing import NDArray
from pydantic import SecretStr

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.contracts import ChunkPoint, DocumentPoints, DocumentWriteResult
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import AnalyzerSettings, EmbeddingSettings, RetrieverClientSettings

CACHE = Path.home() / ".cache" / "ragkb" / "bench"
CHUNKS_PER_DOCUMENT = 10
NOISE_SIGMA = 0.02
SENTENCES_PER_PASSAGE = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


@dataclass(frozen=True)
class BaseSet:
    titles: list[str]
    passages: list[str]
    vectors: NDArray[np.float32]  # (B, dim), unit length


def base_passages(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """The first `count` passages of the SciFact abstracts, in a seeded order of the documents."""
    documents = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))
    random.Random(seed).shuffle(documents)
    titles: list[str] = []
    passages: list[str] = []
    for document in documents:
        sentences = _SENTENCE_END.split(document["text"].strip())
        for start in range(0, len(sentences), SENTENCES_PER_PASSAGE):
            titles.append(document.get("title") or document["_id"])
            passages.append(" ".join(sentences[start : start + SENTENCES_PER_PASSAGE]))
            if len(passages) == count:
                return titles, passages
    raise SystemExit(f"SciFact has fewer than {count} passages")


def load_base(count: int, seed: int = 0) -> BaseSet:
    """The base passages and their real embeddings, from the cache when the same texts were embedded before."""
    settings = EmbeddingSettings()
    titles, passages = base_passages(count, seed)
    texts = [embedding_text(title, passage) for title, passage in zip(titles, passages, strict=True)]
    digest = hashlib.sha256(json.dumps([settings.model, settings.backend, texts]).encode()).hexdigest()[:16]
    path = CACHE / f"scale-base-{count}-{digest}.npy"
    if path.exists():
        return BaseSet(titles, passages, np.load(path))
    from ragkb_models import load_embedder  # heavy: only when the cache misses

    started = time.perf_counter()
    vectors = load_embedder(settings).embed_passages(texts)
    print(f"embedded {count} base passages in {time.perf_counter() - started:.0f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return BaseSet(titles, passages, vectors)


def embedding_text(title: str, passage: str) -> str:
    """What the worker embeds and keyword-indexes (ragkb_worker.pipeline.embedding_text, no headings)."""
    return f"{title}\n{passage}"


class Perturber:
    """Near-copies of the base passages: a few words dropped and swapped, the vector jittered."""

    def __init__(self, base: BaseSet, seed: int, sigma: float = NOISE_SIGMA) -> None:
        self._base = base
        self._rng = np.random.default_rng(seed)
        self._words = random.Random(seed)
        self._sigma = sigma

    def text(self, index: int) -> str:
        words = self._base.passages[index % len(self._base.passages)].split()
        for _ in range(min(self._words.randint(1, 3), len(words) - 1)):
            del words[self._words.randrange(len(words))]
        for _ in range(self._words.randint(1, 2)):
            if len(words) > 1:
                at = self._words.randrange(len(words) - 1)
                words[at], words[at + 1] = words[at + 1], words[at]
        return " ".join(words)

    def vectors(self, start: int, stop: int) -> NDArray[np.float32]:
        base = self._base.vectors[np.arange(start, stop) % len(self._base.vectors)]
        noisy = base + self._rng.normal(0.0, self._sigma, base.shape).astype(np.float32)
        normalized: NDArray[np.float32] = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
        return normalized


def documents(kb_id: str, points: int, base: BaseSet, seed: int) -> Iterator[DocumentPoints]:
    """`points` chunks as documents of CHUNKS_PER_DOCUMENT chunks, in a reproducible order."""
    perturber = Perturber(base, seed)
    bm25 = Bm25Encoder(Analyzer(), AnalyzerSettings())
    for first in range(0, points, CHUNKS_PER_DOCUMENT):
        indices = range(first, min(points, first + CHUNKS_PER_DOCUMENT))
        vectors = perturber.vectors(indices.start, indices.stop)
        title = base.titles[first % len(base.titles)]
        chunks = []
        for ordinal, (index, vector) in enumerate(zip(indices, vectors, strict=True)):
            text = perturber.text(index)
            sparse = bm25.encode_document(embedding_text(title, text))
            chunks.append(ChunkPoint(ordinal=ordinal, text=text, dense=vector.tolist(), sparse=sparse))
        number = first // CHUNKS_PER_DOCUMENT
        yield DocumentPoints(
            kb_id=kb_id,
            document_id=f"{number:032x}",  # ids are 32 hex characters (the retriever checks)
            source_id=f"scale/{number:07d}",
            version=1,
            title=title,
            analyzer_version=bm25.version,
            chunks=chunks,
        )


def create_kb(api: httpx.Client, name: str) -> str:
    """A KB known to the api (so that /v1/search accepts it); an older one of the same name is deleted."""
    for kb in api.get("/v1/knowledge-bases").raise_for_status().json():
        if kb["name"] == name:
            delete_kb(api, kb["id"])
    response = api.post("/v1/knowledge-bases", json={"name": name})
    response.raise_for_status()
    return str(response.json()["id"])


def write_points(retriever: RetrieverClient, kb_id: str, points: int, base: BaseSet, seed: int = 1) -> float:
    """Write the scaled corpus into the KB's index; returns the seconds it took."""
    retriever.create_kb(kb_id)  # idempotent: the api created it already
    started = time.perf_counter()
    # Writes in a thread, a few in flight, so the next document is built while the retriever stores the
    # last; bounded, because Executor.map would build the whole corpus in memory first.
    in_flight: deque[Future[DocumentWriteResult]] = deque()
    with ThreadPoolExecutor(2) as pool:
        for number, document in enumerate(documents(kb_id, points, base, seed), 1):
            in_flight.append(pool.submit(retriever.write_document, document))
            if len(in_flight) > 4:
                in_flight.popleft().result()
            if number % 1000 == 0:
                print(f"  wrote {number * CHUNKS_PER_DOCUMENT} / {points} points", flush=True)
        for future in in_flight:
            future.result()
    return time.perf_counter() - started


def wait_until_optimized(probe: Callable[[], float | None], quiet_s: float, window: int = 10) -> dict[str, Any]:
    """Wait out the index's background optimisation after a bulk write.

    Edge builds HNSW in `optimize()`, which starts once the shard has had no write for `quiet_s` (the
    retriever's RAGKB_QDRANT__OPTIMIZE_IDLE_S, 10 s by default) and holds the GIL of the whole retriever
    while it runs, so a search that arrives meanwhile waits for it. Sleep past the quiet period plus a
    margin, then probe (a search) until `window` consecutive probes are all under twice their median:
    the first probe blocks until the optimisation ends, those after it show settled latency. A probe that
    fails (None: the caller timed out waiting) counts as not settled.
    """
    started = time.perf_counter()
    time.sleep(quiet_s + 3)
    probes: list[float | None] = []
    while True:
        probes.append(probe())
        recent = [ms for ms in probes[-window:] if ms is not None]
        if len(recent) == window and max(recent) < 2 * statistics.median(recent):
            break
        time.sleep(0.2)
    return {
        "waited_s": round(time.perf_counter() - started, 1),
        "probes": len(probes),
        "failed_probes": sum(ms is None for ms in probes),
        "first_probe_ms": None if probes[0] is None else round(probes[0], 1),
        "settled_probe_ms": round(statistics.median(recent), 1),
    }


def retriever_client(url: str, token: str) -> RetrieverClient:
    return RetrieverClient(RetrieverClientSettings(url=url, timeout_s=120), SecretStr(token))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, required=True)
    parser.add_argument("--base", type=int, default=2000, help="real passages embedded (B)")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--retriever-url", default="http://127.0.0.1:8001")
    args = parser.parse_args()
    key, token = os.environ.get("RAGKB_API_KEY"), os.environ.get("RAGKB_SERVICE_TOKEN")
    if not key or not token:
        raise SystemExit("set RAGKB_API_KEY (an admin key) and RAGKB_SERVICE_TOKEN (the retriever's token)")
    api = httpx.Client(base_url=args.url, timeout=120, headers={"Authorization": f"Bearer {key}"})
    kb_id = create_kb(api, f"bench-scale-{args.points}")
    seconds = write_points(retriever_client(args.retriever_url, token), kb_id, args.points, load_base(args.base))
    print(f"KB {kb_id}: {args.points} points written in {seconds:.0f} s")


if __name__ == "__main__":
    main()
