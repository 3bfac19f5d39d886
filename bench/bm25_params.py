"""BM25's k1 and b for a new KB, by cross-validation across collections, offline.

    python bench/bm25_params.py [--collections scifact:train pubmedqa:train jsquad:dev jaquad:train] [--folds 5]

The keyword leg weighs a term of a chunk tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len)) (ragkb_analyzer.Bm25Encoder);
k1 1.2 and b 0.75 are Lucene's defaults, never chosen on ragkb's chunks. Here every (k1, b) of a small grid is
scored on a new KB's retrieval (analyzer version 2, title ×2, DBSF, 84 candidates a leg) computed as bench/feedback.py
computes it: both legs as matrices (exact cosine; the BM25 weights × Qdrant's IDF, which k1 and b do not change),
fused by DBSF as the engine fuses. Only the chunks' BM25 weights change; the dense leg and the queries' terms do
not. `--check N` first compares the matrices' legs with the engine's own (Qdrant Edge) on N questions.

The choice is by hybrid nDCG@10, by the keyword leg's, and by both (the mean of a query's two: `mode` "hybrid" and
"keyword" are both a caller's to ask for), never on one collection's own queries:
leave one collection out, and k folds within collections (bench/feedback.py's cross_validate; paired bootstrap
95 % intervals of the held-out gain over today's k1 1.2, b 0.75). Plain Lucene BM25 (`bm25s` with its stemmer and
stop words, over whole documents as title + text, bench/fusion.py's bm25s_ndcg) is scored beside the keyword leg
on the English collections.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from common import save_result
from embedded import CACHE
from feedback import (
    DEPTH,
    OFF,
    SHIPPED,
    FirstPass,
    Matrices,
    Setting,
    _m,
    _row,
    cross_validate,
    engine_check,
    markdown,
    prepared,
    top,
)
from fusion import Legs, fuse, keyword_encoder, ndcg
from numpy.typing import NDArray
from scipy import sparse as sp

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.kb_settings import LEGACY_BM25
from ragkb_core.settings import AnalyzerSettings

# "off": Lucene's k1 and b, what every KB was indexed with before they were set per KB (this script chose the
# new default, KbAnalyzer.bm25_k1 and bm25_b, against them).
LUCENE = (LEGACY_BM25["bm25_k1"], LEGACY_BM25["bm25_b"])
AVG_LEN = AnalyzerSettings().avg_len
K1S = (0.6, 0.9, 1.2, 1.5, 2.0)
BS = (0.3, 0.45, 0.6, 0.75, 0.9)
ENGLISH = ("scifact", "pubmedqa")
Scores = dict[Setting, NDArray[np.float64]]


@dataclass
class TermCounts:
    """Each chunk's term counts (chunks × terms, the columns of the collection's Matrices) and its length in word
    terms (Analysis.length, what BM25 normalises by)."""

    counts: sp.csr_matrix
    lengths: NDArray[np.float64]


def setting(k1: float, b: float) -> Setting:
    return OFF if (k1, b) == LUCENE else Setting("BM25", (("k1", k1), ("b", b)))


def term_counts(m: Matrices, spec: str) -> TermCounts:
    """Analysed as the worker analyses a chunk (the title counted title_weight times); cached per collection."""
    path = CACHE / "bm25_params" / f"{spec.replace(':', '-')}-{SHIPPED.title_weight}.pickle"
    if path.exists():
        stored: TermCounts = pickle.loads(path.read_bytes())
        return stored
    analyzer = keyword_encoder(SHIPPED).analyzer
    rows, lengths = [], []
    for passage in m.collection.passages:
        extra = [passage.title] * (analyzer.config.title_weight - 1)
        analysis = analyzer.analyze("\n".join([*extra, passage.indexed]))
        rows.append(_row(dict(Counter(analysis.terms)), m.columns))
        lengths.append(analysis.length)
    width = len(m.columns)
    data = [np.array(list(row.values()), dtype=np.float64) for row in rows]
    indices = [np.array(list(row), dtype=np.int64) for row in rows]
    pointers = np.concatenate([[0], np.cumsum([len(row) for row in rows])])
    counts = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), pointers), shape=(len(rows), width))
    made = TermCounts(counts, np.array(lengths, dtype=np.float64))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(made))
    return made


def bm25_weights(terms: TermCounts, k1: float, b: float, avg_len: float) -> sp.csr_matrix:
    """Bm25Encoder.term_weights of every chunk at once."""
    counts = terms.counts
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    length_norm = k1 * (1 - b + b * terms.lengths[rows] / avg_len)
    data = counts.data * (k1 + 1) / (counts.data + length_norm)
    return sp.csr_matrix((data, counts.indices.copy(), counts.indptr.copy()), shape=counts.shape)


def weights_difference(m: Matrices, terms: TermCounts, k1: float, b: float, sample: int = 300) -> float:
    """The largest difference between bm25_weights and what the worker's encoder gives the first chunks."""
    config = keyword_encoder(SHIPPED).analyzer.config.model_copy(update={"bm25_k1": k1, "bm25_b": b})
    encoder = Bm25Encoder(Analyzer(config), AnalyzerSettings())
    mine = bm25_weights(terms, k1, b, AVG_LEN)
    largest = 0.0
    for row, passage in enumerate(m.collection.passages[:sample]):
        made = encoder.encode_document(passage.indexed, passage.title)
        columns = [m.columns[index] for index in made.indices]
        largest = max(largest, float(np.abs(mine[row, columns].toarray().ravel() - made.values).max(initial=0)))
    return largest


def scored(m: Matrices, first: FirstPass, weights: sp.csr_matrix) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Hybrid and keyword-leg nDCG@10 per query with these chunk weights."""
    weighted = m.queries.multiply(m.idf.reshape(1, -1)).tocsr()
    keyword = np.asarray((weighted @ weights.T).todense())
    hybrid, alone = [], []
    for i, query in enumerate(m.collection.queries):
        leg = top(keyword[i], DEPTH, positive_only=True)
        hybrid.append(ndcg(m.collection, fuse(Legs(first.legs[i].dense, leg), SHIPPED), query))
        alone.append(ndcg(m.collection, leg[0].tolist(), query))
    return np.array(hybrid), np.array(alone)


def measure(spec: str, check: int) -> tuple[str, Scores, Scores, dict[str, Any]]:
    m, first = prepared(spec, None)
    terms = term_counts(m, spec)
    info: dict[str, Any] = {
        "chunks": len(m.collection.passages),
        "queries": len(m.collection.queries),
        "mean_length": round(float(terms.lengths.mean()), 1),
        # The recomputed weights against the worker's encoder's, at Lucene's and at another k1 and b.
        "weights_max_difference": max(weights_difference(m, terms, *LUCENE), weights_difference(m, terms, 0.6, 0.3)),
    }
    if check:
        info["engine_check"] = engine_check(m, first, check)
    if m.collection.name in ENGLISH:
        from fusion import bm25s_ndcg

        info["bm25s"] = round(bm25s_ndcg(m.collection), 4)
    hybrid: Scores = {}
    keyword: Scores = {}
    for k1, b in itertools.product(K1S, BS):
        started = time.perf_counter()
        chosen = setting(k1, b)
        hybrid[chosen], keyword[chosen] = scored(m, first, bm25_weights(terms, k1, b, AVG_LEN))
        print(
            f"{m.collection.label}: k1 {k1} b {b}: hybrid {_m(hybrid[chosen])} keyword {_m(keyword[chosen])}"
            f" ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return m.collection.label, hybrid, keyword, info


def grid_markdown(scores: dict[str, tuple[Scores, Scores]], info: dict[str, Any]) -> list[str]:
    names = list(scores)
    lines = ["", "Every setting on every query (not a held-out figure): hybrid / keyword nDCG@10", ""]
    lines += ["| k1, b | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for k1, b in itertools.product(K1S, BS):
        chosen = setting(k1, b)
        cells = [f"{_m(scores[n][0][chosen])} / {_m(scores[n][1][chosen])}" for n in names]
        lines.append(f"| {k1}, {b}{' (today)' if chosen == OFF else ''} | " + " | ".join(cells) + " |")
    lines += ["", "| collection | chunks | queries | mean length (word terms) | bm25s (whole documents) |"]
    lines += ["|---|---|---|---|---|"]
    for n in names:
        row = info[n]
        lines.append(f"| {n} | {row['chunks']} | {row['queries']} | {row['mean_length']} | {row.get('bm25s', '')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--collections", nargs="+", default=["scifact:train", "pubmedqa:train", "jsquad:dev", "jaquad:train"]
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--check", type=int, default=0, help="questions per collection checked against the engine")
    parser.add_argument("--name", default=f"bm25-params-{time.strftime('%Y-%m-%d')}")
    args = parser.parse_args()
    scores: dict[str, tuple[Scores, Scores]] = {}
    info: dict[str, Any] = {}
    for spec in args.collections:
        label, hybrid, keyword, info[label] = measure(spec, args.check)
        scores[label] = (hybrid, keyword)
    result: dict[str, Any] = {
        "retrieval": "analyzer v2, title ×2, DBSF, 84 candidates a leg; off = k1 1.2, b 0.75, avg_len 200",
        "collections": info,
        "ideas": {
            "BM25 k1, b (hybrid)": cross_validate({n: s[0] for n, s in scores.items()}, args.folds),
            "BM25 k1, b (keyword leg)": cross_validate({n: s[1] for n, s in scores.items()}, args.folds),
            # Both modes a caller can ask for weigh the same: each query's mean of its hybrid and keyword nDCG@10.
            "BM25 k1, b (hybrid and keyword)": cross_validate(
                {n: {c: (s[0][c] + s[1][c]) / 2 for c in s[0]} for n, s in scores.items()}, args.folds
            ),
        },
    }
    text = markdown(result, list(scores)) + "\n".join(grid_markdown(scores, info)) + "\n"
    save_result(args.name, result, text)


if __name__ == "__main__":
    main()
