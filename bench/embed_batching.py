"""Cross-document embedding batches, measured before they are built: what would the model gain?

The worker embeds one document's chunks per task (Embedder.embed_passages sorts them by length and cuts
token-bounded runs, but only within the document), so a short document is a batch of one or two. This embeds
the same chunks both ways, in the same process, rounds interleaved so that load from other processes spreads
over both: per document (as today) and pooled across documents, --pool chunks a call (what a batching consumer
gathering several tasks' chunks would hand the model). Documents are parsed as text/plain and cut by the
worker's Chunker with the default KbChunking; each chunk's text is the worker's `embedding_text`.

    python bench/embed_batching.py [--documents 300] [--pool 256] [--rounds 2] [--corpora scifact jsquad]

Results: bench/results/embed-batching.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from common import DATA, read_jsonl, save_result

from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import EmbeddingSettings
from ragkb_models import Embedder, load_embedder
from ragkb_worker.chunking import Chunker
from ragkb_worker.parsing import parse
from ragkb_worker.pipeline import embedding_text


def chunked_documents(embedder: Embedder, corpus: str, documents: int) -> list[list[str]]:
    """The embedding texts of the first `documents` documents of the corpus, one list per document."""
    chunker = Chunker(embedder, KbChunking())
    texts = []
    for document in list(read_jsonl(DATA / corpus / "corpus.jsonl"))[:documents]:
        title = document.get("title") or document["_id"]
        chunks, _ = chunker.chunk(parse("text/plain", document["text"].encode()))
        texts.append([embedding_text(title, chunk) for chunk in chunks])
    return texts


def per_document(embedder: Embedder, documents: list[list[str]]) -> None:
    for texts in documents:
        embedder.embed_passages(texts)


def pooled(embedder: Embedder, documents: list[list[str]], pool: int) -> None:
    flat = [text for texts in documents for text in texts]
    for start in range(0, len(flat), pool):
        embedder.embed_passages(flat[start : start + pool])


def chunks_per_s(run: Callable[[], None], chunks: int) -> float:
    started = time.perf_counter()
    run()
    return chunks / (time.perf_counter() - started)


def measure(embedder: Embedder, corpus: str, args: argparse.Namespace) -> dict[str, Any]:
    documents = chunked_documents(embedder, corpus, args.documents)
    chunks = sum(len(texts) for texts in documents)
    rates: dict[str, list[float]] = {"per_document": [], "pooled": []}
    for _ in range(args.rounds):
        rates["per_document"].append(chunks_per_s(lambda: per_document(embedder, documents), chunks))
        rates["pooled"].append(chunks_per_s(lambda: pooled(embedder, documents, args.pool), chunks))
    per_doc, pool = (round(statistics.median(rates[key]), 2) for key in ("per_document", "pooled"))
    row = {
        "corpus": corpus,
        "documents": len(documents),
        "chunks": chunks,
        "per_document_chunks_per_s": per_doc,
        "pooled_chunks_per_s": pool,
        "gain": round(pool / per_doc, 2),
        "rounds": {key: [round(value, 2) for value in values] for key, values in rates.items()},
    }
    print(f"  {corpus}: {row}", flush=True)
    return row


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Embedding the same chunks per document and pooled ({result['pool']} chunks a call), median of "
        f"{result['rounds']} interleaved rounds",
        "",
        "| corpus | documents | chunks | per document (chunks/s) | pooled (chunks/s) | gain |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["corpora"]:
        lines.append(
            f"| {row['corpus']} | {row['documents']} | {row['chunks']} | {row['per_document_chunks_per_s']} | "
            f"{row['pooled_chunks_per_s']} | {row['gain']}× |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=300, help="documents of each corpus")
    parser.add_argument("--pool", type=int, default=256, help="chunks per pooled call")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--corpora", nargs="+", default=["scifact", "jsquad"])
    args = parser.parse_args()
    embedder = load_embedder(EmbeddingSettings())
    embedder.embed_passages(["warm-up"])
    rows = [measure(embedder, corpus, args) for corpus in args.corpora]
    result = {"pool": args.pool, "rounds": args.rounds, "corpora": rows}
    save_result("embed-batching", result, markdown(result))


if __name__ == "__main__":
    main()
