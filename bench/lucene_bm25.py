"""The afternoon baseline for the keyword leg: plain Lucene BM25 as `bm25s` ships it, with its English Snowball
stemmer and English stop words (Lucene's 33), its defaults (k1 1.5, b 0.75, method "lucene") and its token
pattern (words of two or more characters), over whole documents as title + " " + text (BEIR's convention).
bm25s is a benchmark tool here (installed by `make install` with the dev tools), not a service dependency."""

from __future__ import annotations

from typing import Any

import bm25s
import Stemmer

NAME = "bm25s (Lucene BM25, English stemmer + stop words)"


def rankings(corpus: list[dict[str, Any]], queries: list[str], depth: int = 100) -> list[list[str]]:
    """Document ids in rank order for each query (documents with a score above 0 only, as a search returns)."""
    stemmer = Stemmer.Stemmer("english")
    texts = [f"{doc.get('title') or ''} {doc['text']}".strip() for doc in corpus]
    index = bm25s.BM25()
    index.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
    found, scores = index.retrieve(tokens, k=min(depth, len(texts)), show_progress=False, n_threads=1)
    ids = [doc["_id"] for doc in corpus]
    return [
        [ids[int(doc)] for doc, score in zip(row, row_scores, strict=True) if score > 0]
        for row, row_scores in zip(found, scores, strict=True)
    ]
