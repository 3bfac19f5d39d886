"""Collections chunked as the worker chunks them and embedded once with the packaged e5, cached on disk.

    python bench/embedded.py scifact:train jsquad:dev jaquad:train     (fills the cache ahead of a run)

A collection is a BEIR folder: `scifact` and `jsquad` under ../shared/data, `jaquad` the passage set that
bench/jaquad_set.py derives from JaQuAD train into the cache. Each document is parsed as text/plain and cut by
the worker's Chunker with the default KbChunking and the e5 tokenizer; each chunk's indexed text is the
worker's `embedding_text` (title, then the chunk). Passage and query vectors are cached as .npy under
$RAGKB_BENCH_CACHE (default ~/.cache/ragkb/bench), keyed by the texts and the embedder settings, so a rerun
embeds nothing (SciFact's 9,936 chunks take about 7 minutes on 2 cores).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from common import DATA, read_jsonl, read_qrels
from numpy.typing import NDArray

from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import EmbeddingSettings
from ragkb_models import Backend, load_embedder
from ragkb_models.embedder import Embedder
from ragkb_worker.chunking import Chunker
from ragkb_worker.parsing import parse
from ragkb_worker.pipeline import embedding_text

CACHE = Path(os.environ.get("RAGKB_BENCH_CACHE", Path.home() / ".cache" / "ragkb" / "bench"))


@dataclass(frozen=True)
class Passage:
    document_id: str
    ordinal: int
    title: str
    # The chunk alone, and what the worker embeds and keyword-indexes (title > headings, newline, chunk).
    body: str
    indexed: str


@dataclass(frozen=True)
class Collection:
    name: str
    split: str
    passages: list[Passage]
    queries: list[dict[str, str]]
    qrels: dict[str, dict[str, int]]
    passage_vectors: NDArray[np.float32]
    query_vectors: NDArray[np.float32]

    @property
    def label(self) -> str:
        return f"{self.name}:{self.split}"


@cache
def embedder(backend: Backend = "onnx") -> Embedder:
    """The packaged e5 on `backend` (the service's default runtime unless a bench compares runtimes)."""
    return load_embedder(EmbeddingSettings(backend=backend))


def folder_of(name: str) -> Path:
    if name == "jaquad":
        from jaquad_set import ensure

        return ensure()
    return DATA / name


def chunk_corpus(folder: Path) -> list[Passage]:
    chunker = Chunker(embedder(), KbChunking())
    passages: list[Passage] = []
    for document in read_jsonl(folder / "corpus.jsonl"):
        title = document.get("title") or document["_id"]
        chunks, _ = chunker.chunk(parse("text/plain", document["text"].encode()))
        for ordinal, chunk in enumerate(chunks):
            passages.append(Passage(document["_id"], ordinal, title, chunk.text, embedding_text(title, chunk)))
    return passages


def vectors(kind: str, name: str, texts: Sequence[str], backend: Backend = "onnx") -> NDArray[np.float32]:
    """Passage ("passages") or query ("queries") vectors of `texts` embedded on `backend`, from the cache or
    embedded now."""
    digest = hashlib.sha256(f"{kind}\0{EmbeddingSettings(backend=backend).model_dump_json()}".encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    path = CACHE / "vectors" / f"{name}-{kind}-{len(texts)}-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    model = embedder(backend)
    if kind == "passages":
        made = model.embed_passages(texts)
    else:
        made = np.array([model.embed_query(text) for text in texts], dtype=np.float32)
    print(
        f"embedded {len(texts)} {name} {kind} ({backend}) in {time.perf_counter() - started:.0f} s -> {path}",
        flush=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, made)
    return made


def load(spec: str) -> Collection:
    name, split = spec.split(":")
    folder = folder_of(name)
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    queries = [q for q in read_jsonl(folder / "queries.jsonl") if q["_id"] in qrels]
    passages = chunk_corpus(folder)
    return Collection(
        name=name,
        split=split,
        passages=passages,
        queries=queries,
        qrels=qrels,
        passage_vectors=vectors("passages", name, [p.indexed for p in passages]),
        query_vectors=vectors("queries", name, [q["text"] for q in queries]),
    )


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        loaded = load(argument)
        print(f"{loaded.label}: {len(loaded.passages)} passages, {len(loaded.queries)} queries", flush=True)
