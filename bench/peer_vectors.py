"""The one embedding model every system in bench/peers.py uses: ragkb's own embedder (multilingual-e5-small on
ONNX Runtime, `EmbeddingSettings()` defaults), with the corpus passage vectors computed once per corpus and
cached as .npy under ~/.cache/ragkb/bench/ (keyed by the texts and the embedder settings).

    python bench/peer_vectors.py scifact jsquad     (fills the cache ahead of a run)
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from common import DATA, read_jsonl
from numpy.typing import NDArray

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import load_embedder
from ragkb_models.embedder import Embedder

CACHE = Path.home() / ".cache" / "ragkb" / "bench"


def embedder() -> Embedder:
    return load_embedder(EmbeddingSettings())


def document_text(document: dict[str, str]) -> str:
    """Title and text as the worker embeds and keyword-indexes a one-chunk document (`title\\ntext`)."""
    return f"{document.get('title') or document['_id']}\n{document['text']}"


def corpus_documents(corpus: str) -> tuple[list[str], list[str]]:
    documents = list(read_jsonl(DATA / corpus / "corpus.jsonl"))
    return [d["_id"] for d in documents], [document_text(d) for d in documents]


def cache_path(corpus: str, texts: Sequence[str]) -> Path:
    digest = hashlib.sha256(EmbeddingSettings().model_dump_json().encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return CACHE / f"{corpus}-{len(texts)}-{digest.hexdigest()[:16]}.npy"


def passage_vectors(corpus: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """The passage vectors of `texts`, from the cache or embedded now (and cached)."""
    path = cache_path(corpus, texts)
    if path.exists():
        return np.load(path)
    started = time.perf_counter()
    vectors = embedder().embed_passages(texts)
    print(f"embedded {len(texts)} {corpus} passages in {time.perf_counter() - started:.0f} s -> {path}", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


if __name__ == "__main__":
    for name in sys.argv[1:]:
        passage_vectors(name, corpus_documents(name)[1])
