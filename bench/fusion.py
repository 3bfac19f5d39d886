"""Hybrid defaults by cross-validation across collections, offline, on the real engine.

    python bench/fusion.py [--collections scifact:train jsquad:dev jaquad:train] [--folds 5] [--check 200]

Each collection is chunked as the worker chunks it and embedded once with the packaged e5 (bench/embedded.py,
cached). For every keyword variant (analyzer version × title weight) its chunks are written into a Qdrant
Edge index through the retriever's own adapter (EdgeIndex), and every query runs both legs there with the
keyword leg's IDF over the KB, exactly as the retriever's search runs them, once, `MAX_DEPTH` candidates
deep. Fusion is then computed from those legs for every configuration of the grid — RRF with the paper's k
and Qdrant's rank-scaling leg weights, DBSF as Qdrant computes it (each leg's scores normalised by its mean
± 3 sample standard deviations over the leg's candidates, then summed, here with optional leg weights), each
leg cut to the candidate depth first, as the engine's prefetch limit cuts it. `--check N` runs N queries per
collection through the engine's own fusion for the configurations the engine can run (plain DBSF, RRF) and
reports how far the computed figures are from the engine's (they should be equal).

Scoring is quality.py's: the fused passages (up to 100) reduced to documents in rank order, nDCG@10.

Choice by cross-validation, never on one collection's own queries:
- leave one collection out: the configuration with the best mean nDCG@10 over the other collections (each
  collection weighs the same) is scored on the held-out one;
- k folds within collections: the queries of every collection are split in k folds; the best configuration
  on the other folds of all collections is scored on each held-out fold.
The default is then the configuration best over all collections; its held-out figures are the ones above.
The keyword variants differ at indexing time: the title is part of every chunk's indexed text (weight 1,
as the worker indexes it), absent (0), or repeated (2); the dense leg always embeds it (as the worker does).

Differences from the service, stated: documents are written straight into the index (no HTTP, no Celery);
chunks are the worker's chunker's on the document text parsed as text/plain, as bench/ingest.py uploads it;
the index is not optimised (exact dense search; the service builds HNSW after 20,000 points).
The plain Lucene BM25 (bm25s) keyword baseline runs on the same documents in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import pickle
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lucene_bm25
import numpy as np
from common import ndcg_at_k, read_jsonl, save_result
from embedded import CACHE, Collection, Passage, folder_of, load
from numpy.typing import NDArray

from ragkb_analyzer import Bm25Encoder
from ragkb_analyzer.analyzer import Analyzer
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.ids import point_id
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings, QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.port import IndexPoint
from ragkb_retriever.searching import qdrant_rrf_k

KB = "bench"
MAX_DEPTH = 300
RESULT_DEPTH = 100
ANALYZERS = {"v1": KbAnalyzer(words="ascii-lower"), "v2": KbAnalyzer()}
TITLE_WEIGHTS = (0, 1, 2)
DEPTHS = (24, 48, 84, 168, 300)
RRF_KS = (5, 10, 20, 40, 60)
# keyword weight / dense weight (the other leg 1).
RATIOS = (0.5, 0.75, 1.0, 1.5, 2.0)
# Today's default: DBSF, the title indexed once, 12 × 7 candidates a leg, analyzer v1 for the KBs built so far.
BEFORE = ("v1", 1, "dbsf", 1.0, 0, 84)


@dataclass(frozen=True)
class Config:
    analyzer: str
    title_weight: int
    fusion: str
    keyword_ratio: float
    rrf_k: int
    depth: int

    @property
    def engine_runs_it(self) -> bool:
        """Whether Qdrant's own fusion computes it (DBSF has no leg weights there)."""
        return self.fusion == "rrf" or self.keyword_ratio == 1.0

    def label(self) -> str:
        fusion = f"rrf k={self.rrf_k}" if self.fusion == "rrf" else "dbsf"
        return (
            f"{self.analyzer} title×{self.title_weight} {fusion} keyword/dense={self.keyword_ratio} depth={self.depth}"
        )


@dataclass
class Legs:
    """One query's dense and keyword candidates: passage indexes and scores, best first."""

    dense: tuple[NDArray[np.int64], NDArray[np.float64]]
    keyword: tuple[NDArray[np.int64], NDArray[np.float64]]


def grid() -> Iterator[Config]:
    """Every fusion configuration on the version 2 analyzer; version 1 (the KBs built so far) as it serves."""
    yield Config(*BEFORE)  # type: ignore[arg-type]
    yield Config("v1", 1, "rrf", 1.0, 60, 84)
    for title, depth in itertools.product(TITLE_WEIGHTS, DEPTHS):
        for ratio in RATIOS:
            yield Config("v2", title, "dbsf", ratio, 0, depth)
            for k in RRF_KS:
                yield Config("v2", title, "rrf", ratio, k, depth)


# -- the engine ----------------------------------------------------------------------------------------


def versions_key(*versions: str) -> str:
    """A short key for analyzer versions, which a cached measurement is keyed by: a version names the terms and
    their weights (k1, b) that were measured."""
    return hashlib.sha256("".join(versions).encode()).hexdigest()[:8]


def keyword_encoder(config: Config) -> Bm25Encoder:
    """The encoder a KB of this variant indexes with: its analyzer, the title counted `title_weight` times."""
    analyzer = ANALYZERS[config.analyzer]
    if config.analyzer != "v1":
        analyzer = analyzer.model_copy(update={"title_weight": max(1, config.title_weight)})
    return Bm25Encoder(Analyzer(analyzer), AnalyzerSettings())


def keyword_vector(encoder: Bm25Encoder, passage: Passage, title_weight: int) -> SparseTerms:
    """As the worker encodes a chunk (title weight 1 or more), or the chunk alone without title (0)."""
    if title_weight == 0:
        return encoder.encode_document(passage.body)
    return encoder.encode_document(passage.indexed, passage.title)


def build_index(
    root: Path,
    collection: Collection,
    encoder: Bm25Encoder,
    title_weight: int,
    *,
    with_text: bool = False,
    kb: str = KB,
) -> EdgeIndex:
    """The collection as the index of KB `kb`; `with_text`: with the payload fields a search's answer reads."""
    index = EdgeIndex(QdrantSettings(path=root))
    index.create_kb(kb, dense_size=collection.passage_vectors.shape[1])
    points = [
        IndexPoint(
            id=point_id(kb, passage.document_id, 1, passage.ordinal),
            dense=vector.tolist(),
            sparse=keyword_vector(encoder, passage, title_weight),
            payload={
                "kb_id": kb,
                "document_id": passage.document_id,
                "source_id": passage.document_id,
                "version": 1,
                "ordinal": passage.ordinal,
                "labels": [],
                "doc_type": "knowledge",
                "passage": position,
            }
            | ({"text": passage.body, "title": passage.title} if with_text else {}),
        )
        for position, (passage, vector) in enumerate(zip(collection.passages, collection.passage_vectors, strict=True))
    ]
    for start in range(0, len(points), 512):
        index.upsert(kb, points[start : start + 512])
    return index


def search(index: EdgeIndex, dense: list[float], sparse: SparseTerms, depth: int, config: Config | None) -> Any:
    fusion = config.fusion if config else "dbsf"
    weights = (1.0, config.keyword_ratio) if config and config.fusion == "rrf" else (1.0, 1.0)
    rrf_k = qdrant_rrf_k(config.rrf_k if config and config.fusion == "rrf" else 60)
    return index.search(
        KB,
        dense,
        sparse,
        ScopeFilter(),
        RESULT_DEPTH,
        depth,
        rrf_k,
        weights,
        fusion=fusion,  # type: ignore[arg-type]
    )


def legs_of(hits: Sequence[Any]) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    return (
        np.array([hit.payload["passage"] for hit in hits], dtype=np.int64),
        np.array([hit.score for hit in hits], dtype=np.float64),
    )


# -- fusion, as the engine computes it -------------------------------------------------------------------


def fuse(legs: Legs, config: Config) -> list[int]:
    dense_ids, dense_scores = legs.dense[0][: config.depth], legs.dense[1][: config.depth]
    keyword_ids, keyword_scores = legs.keyword[0][: config.depth], legs.keyword[1][: config.depth]
    if config.fusion == "rrf":
        dense_part = 1.0 / (np.arange(1, len(dense_ids) + 1) + config.rrf_k)
        keyword_part = 1.0 / (np.arange(1, len(keyword_ids) + 1) / config.keyword_ratio + config.rrf_k)
    else:
        dense_part = _distribution_normalised(dense_scores)
        keyword_part = config.keyword_ratio * _distribution_normalised(keyword_scores)
    passages, slots = np.unique(np.concatenate([dense_ids, keyword_ids]), return_inverse=True)
    totals = np.bincount(slots, weights=np.concatenate([dense_part, keyword_part]), minlength=len(passages))
    order = np.argsort(-totals, kind="stable")[:RESULT_DEPTH]
    return [int(p) for p in passages[order]]


def _distribution_normalised(scores: NDArray[np.float64]) -> NDArray[np.float64]:
    if len(scores) < 2:
        return np.full(len(scores), 0.5)
    mean, deviation = scores.mean(), scores.std(ddof=1)
    if deviation == 0:
        return np.full(len(scores), 0.5)
    return (scores - (mean - 3 * deviation)) / (6 * deviation)


def ndcg(collection: Collection, passages: Sequence[int], query: dict[str, str]) -> float:
    documents = list(dict.fromkeys(collection.passages[p].document_id for p in passages))
    return ndcg_at_k(documents, collection.qrels[query["_id"]], 10)


# -- running a collection ---------------------------------------------------------------------------------


@dataclass
class Measured:
    """nDCG@10 per configuration and query of one collection, and the engine check."""

    scores: dict[Config, NDArray[np.float64]]
    keyword_leg: dict[str, float]
    semantic: float
    bm25s: float
    check: list[dict[str, Any]]


def measure(collection: Collection, configs: list[Config], check: int) -> Measured:
    scores: dict[Config, NDArray[np.float64]] = {}
    keyword_leg: dict[str, float] = {}
    semantic = 0.0
    checks: list[dict[str, Any]] = []
    for analyzer_name, title_weight in itertools.product(ANALYZERS, TITLE_WEIGHTS):
        chosen = [c for c in configs if (c.analyzer, c.title_weight) == (analyzer_name, title_weight)]
        if not chosen:
            continue
        started = time.perf_counter()
        encoder = keyword_encoder(chosen[0])
        with tempfile.TemporaryDirectory(prefix="ragkb-fusion-") as root:
            index = build_index(Path(root), collection, encoder, title_weight)
            sparse = [encoder.encode_query(query["text"]) for query in collection.queries]
            all_legs = []
            for vector, terms in zip(collection.query_vectors, sparse, strict=True):
                found = search(index, vector.tolist(), terms, MAX_DEPTH, None)
                all_legs.append(Legs(legs_of(found.dense), legs_of(found.keyword)))
            checks += engine_check(index, collection, chosen, all_legs, sparse, sample=check)
            index.close()
        for config in chosen:
            scores[config] = np.array(
                [ndcg(collection, fuse(legs, config), q) for legs, q in zip(all_legs, collection.queries, strict=True)]
            )
        variant = f"{analyzer_name} title×{title_weight}"
        keyword_leg[variant] = _leg_ndcg(collection, all_legs, "keyword")
        semantic = _leg_ndcg(collection, all_legs, "dense")
        seconds = time.perf_counter() - started
        print(f"{collection.label} {variant}: {len(chosen)} configurations in {seconds:.0f} s", flush=True)
    return Measured(scores, keyword_leg, semantic, bm25s_ndcg(collection), checks)


def _leg_ndcg(collection: Collection, all_legs: list[Legs], leg: str) -> float:
    values = [
        ndcg(collection, getattr(legs, leg)[0][:RESULT_DEPTH].tolist(), query)
        for legs, query in zip(all_legs, collection.queries, strict=True)
    ]
    return round(statistics.fmean(values), 4)


def engine_check(
    index: EdgeIndex,
    collection: Collection,
    configs: list[Config],
    all_legs: list[Legs],
    sparse: list[SparseTerms],
    *,
    sample: int,
) -> list[dict[str, Any]]:
    """The engine's own fusion against the computed one, for a few configurations it runs."""
    runnable = [c for c in configs if c.engine_runs_it and c.depth in (84, MAX_DEPTH)]
    picked = [c for c in runnable if c.fusion == "dbsf"] + [c for c in runnable if c.rrf_k == 60][:2]
    rows = []
    for config in picked:
        differences = []
        for position in range(min(sample, len(collection.queries))):
            query = collection.queries[position]
            found = search(index, collection.query_vectors[position].tolist(), sparse[position], config.depth, config)
            engine = ndcg(collection, [hit.payload["passage"] for hit in found.fused], query)
            differences.append(abs(engine - ndcg(collection, fuse(all_legs[position], config), query)))
        rows.append(
            {
                "collection": collection.label,
                "config": config.label(),
                "queries": len(differences),
                "mean_abs_difference": round(statistics.fmean(differences), 5),
                "max_abs_difference": round(max(differences), 5),
            }
        )
    return rows


def bm25s_ndcg(collection: Collection) -> float:
    corpus = list(read_jsonl(folder_of(collection.name) / "corpus.jsonl"))
    ranked = lucene_bm25.rankings(corpus, [q["text"] for q in collection.queries], RESULT_DEPTH)
    values = [ndcg_at_k(r, collection.qrels[q["_id"]], 10) for r, q in zip(ranked, collection.queries, strict=True)]
    return round(statistics.fmean(values), 4)


# -- cross-validation ---------------------------------------------------------------------------------


def best(measured: dict[str, Measured], configs: list[Config], masks: dict[str, NDArray[np.bool_]]) -> Config:
    """The configuration with the best mean nDCG@10 over the given queries, each collection weighing the same."""

    def value(config: Config) -> float:
        return statistics.fmean(float(m.scores[config][masks[name]].mean()) for name, m in measured.items())

    return max(configs, key=value)


def folds_of(size: int, folds: int, seed: int = 21) -> NDArray[np.int64]:
    return np.random.default_rng(seed).permutation(size) % folds


def cross_validate(measured: dict[str, Measured], configs: list[Config], folds: int) -> dict[str, Any]:
    before = Config(*BEFORE)  # type: ignore[arg-type]
    everything = {name: np.ones(len(m.scores[before]), dtype=bool) for name, m in measured.items()}
    loco = []
    for held_out in measured if len(measured) > 1 else ():
        others = {name: m for name, m in measured.items() if name != held_out}
        chosen = best(others, configs, {name: everything[name] for name in others})
        loco.append(
            {
                "held_out": held_out,
                "chosen": chosen.label(),
                "held_out_ndcg": _mean(measured[held_out].scores[chosen]),
                "before_ndcg": _mean(measured[held_out].scores[before]),
                "best_possible_ndcg": max(_mean(measured[held_out].scores[c]) for c in configs),
            }
        )
    assignment = {name: folds_of(len(m.scores[before]), folds) for name, m in measured.items()}
    kfold = []
    for fold in range(folds):
        training = {name: assignment[name] != fold for name in measured}
        chosen = best(measured, configs, training)
        for name, m in measured.items():
            held = assignment[name] == fold
            kfold.append(
                {
                    "fold": fold,
                    "collection": name,
                    "chosen": chosen.label(),
                    "held_out_ndcg": _mean(m.scores[chosen][held]),
                    "before_ndcg": _mean(m.scores[before][held]),
                }
            )
    final = best(measured, configs, everything)
    return {"loco": loco, "kfold": kfold, "final": asdict(final) | {"label": final.label()}}


def _mean(values: NDArray[np.float64]) -> float:
    return round(float(values.mean()), 4)


def top_configs(measured: dict[str, Measured], configs: list[Config], count: int = 15) -> list[dict[str, Any]]:
    def macro(config: Config) -> float:
        return statistics.fmean(float(m.scores[config].mean()) for m in measured.values())

    ranked = sorted(configs, key=macro, reverse=True)[:count]
    return [
        {"config": c.label(), "macro": round(macro(c), 4), **{n: _mean(m.scores[c]) for n, m in measured.items()}}
        for c in ranked
    ]


# -- report ---------------------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    names = list(result["collections"])
    lines = ["Per collection: queries, legs and baselines (nDCG@10)", ""]
    lines += [
        "| collection | queries | passages | semantic | keyword leg (variant: nDCG@10) | bm25s |",
        "|---|---|---|---|---|---|",
    ]
    for name, info in result["collections"].items():
        legs = ", ".join(f"{variant}: {value}" for variant, value in info["keyword_leg"].items())
        lines.append(
            f"| {name} | {info['queries']} | {info['passages']} | {info['semantic']} | {legs} | {info['bm25s']} |"
        )
    lines += ["", "Leave one collection out (chosen on the others, scored on the held-out one)", ""]
    lines += ["| held out | chosen | held-out nDCG@10 | before | best possible |", "|---|---|---|---|---|"]
    for row in result["cv"]["loco"]:
        lines.append(
            f"| {row['held_out']} | {row['chosen']} | {row['held_out_ndcg']} | {row['before_ndcg']} | "
            f"{row['best_possible_ndcg']} |"
        )
    lines += ["", "k folds within collections (chosen on the other folds of all collections)", ""]
    lines += ["| fold | collection | chosen | held-out nDCG@10 | before |", "|---|---|---|---|---|"]
    for row in result["cv"]["kfold"]:
        lines.append(
            f"| {row['fold']} | {row['collection']} | {row['chosen']} | {row['held_out_ndcg']} | {row['before_ndcg']} |"
        )
    lines += ["", f"Chosen on all collections: {result['cv']['final']['label']}", ""]
    lines += ["| configuration | macro | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in result["top"]:
        lines.append(f"| {row['config']} | {row['macro']} | " + " | ".join(str(row[n]) for n in names) + " |")
    lines += ["", "Engine fusion against the computed one (nDCG@10 per query)", ""]
    lines += ["| collection | configuration | queries | mean abs diff | max abs diff |", "|---|---|---|---|---|"]
    for row in result["engine_check"]:
        lines.append(
            f"| {row['collection']} | {row['config']} | {row['queries']} | {row['mean_abs_difference']} | "
            f"{row['max_abs_difference']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev", "jaquad:train"])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--check", type=int, default=200, help="queries per collection checked against the engine")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--reuse", action="store_true", help="reuse the legs' scores a previous run cached")
    parser.add_argument("--depths", type=int, nargs="+", default=None, help="choose only among these depths")
    parser.add_argument("--label", default="", help="a name for this run in the results file")
    args = parser.parse_args()
    configs = list(grid())
    measured: dict[str, Measured] = {}
    info: dict[str, Any] = {}
    for spec in args.collections:
        collection = load(spec)
        if args.max_queries:
            collection = _first_queries(collection, args.max_queries)
        versions = versions_key(*(a.version for a in ANALYZERS.values()))
        saved = CACHE / "fusion" / f"{collection.label.replace(':', '-')}-{len(collection.queries)}-{versions}.pickle"
        if args.reuse and saved.exists():
            measured[collection.label] = pickle.loads(saved.read_bytes())
        else:
            measured[collection.label] = measure(collection, configs, args.check)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(pickle.dumps(measured[collection.label]))
        info[collection.label] = {
            "queries": len(collection.queries),
            "passages": len(collection.passages),
            "semantic": measured[collection.label].semantic,
            "keyword_leg": measured[collection.label].keyword_leg,
            "bm25s": measured[collection.label].bm25s,
        }
    if args.depths:
        configs = [config for config in configs if config.depth in args.depths or config == Config(*BEFORE)]  # type: ignore[arg-type]
    result = {
        "collections": info,
        "grid": {"depths": DEPTHS, "rrf_k": RRF_KS, "keyword_ratios": RATIOS, "title_weights": TITLE_WEIGHTS},
        "cv": cross_validate(measured, configs, args.folds),
        "top": top_configs(measured, configs),
        "engine_check": [row for m in measured.values() for row in m.check],
        "scores": {name: {c.label(): _mean(values) for c, values in m.scores.items()} for name, m in measured.items()},
    }
    save_result(f"fusion-cv-{args.label}" if args.label else "fusion-cv", result, markdown(result))


def _first_queries(collection: Collection, count: int) -> Collection:
    return Collection(
        collection.name,
        collection.split,
        collection.passages,
        collection.queries[:count],
        collection.qrels,
        collection.passage_vectors,
        collection.query_vectors[:count],
    )


if __name__ == "__main__":
    main()
