"""The KB's default chunk size by cross-validation across collections, offline, on the real engine.

    python bench/chunking.py [--collections scifact:train pubmedqa:train jsquad:dev jaquad:train] [--folds 5]
                             [--chunkings 256/400/32 384/448/32 448/480/32 480/510/32]

Each collection is cut by every candidate KbChunking (today's default first) exactly as the worker cuts it and
embedded with the packaged e5 (bench/embedded.py: chunk vectors cached by text, so chunks two candidates share
are embedded once), written into a Qdrant Edge index through the retriever's adapter (bench/fusion.py's
build_index), and every query runs once through the engine with a new KB's defaults: analyzer version 2 with
the title indexed twice, DBSF fusion as Qdrant computes it, top_k × candidate_multiplier candidates a leg. The
answer gives both legs and the fused list: dense, keyword and hybrid nDCG@10 (passages reduced to documents in
rank order, as bench/quality.py scores them).

`max_tokens` bounds the chunk alone; what the model reads is "passage: " + title (and headings) + newline +
chunk, cut at 512 tokens. The chunks whose embedded text would be cut are counted per candidate ("cut").

The choice is by hybrid nDCG@10, never on one collection's own queries (as bench/fusion.py chooses fusion):
- leave one collection out: the candidate with the best mean over the other collections (each weighs the
  same) is scored on the held-out one, with a paired bootstrap 95 % interval of its gain over today's;
- k folds within collections: every collection's queries in k folds; the best candidate on the other folds
  of all collections is scored on each held-out fold; the held-out scores of all folds pooled per collection
  give the gain over today's and its interval.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from common import save_result
from embedded import CACHE, Collection, embedder, load
from feedback import paired_interval
from fusion import Config, build_index, folds_of, keyword_encoder, legs_of, ndcg, search, versions_key
from numpy.typing import NDArray

from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval

T = TypeVar("T")
TODAY = KbChunking()
CANDIDATES = (
    TODAY,
    KbChunking(target_tokens=384, max_tokens=448, overlap_tokens=32),
    KbChunking(target_tokens=448, max_tokens=480, overlap_tokens=32),
    KbChunking(target_tokens=480, max_tokens=510, overlap_tokens=32),
)
LEGS = ("dense", "keyword", "hybrid")
_RETRIEVAL = KbRetrieval()
# A new KB's retrieval: analyzer version 2 with its title weight, DBSF, top_k × candidate_multiplier a leg.
KB_DEFAULT = Config(
    "v2", KbAnalyzer().title_weight, _RETRIEVAL.fusion, 1.0, 0, _RETRIEVAL.top_k * _RETRIEVAL.candidate_multiplier
)


def label(chunking: KbChunking) -> str:
    return f"{chunking.target_tokens}/{chunking.max_tokens}/{chunking.overlap_tokens}"


@dataclass
class Measured:
    """One collection cut by one chunking: its cost and nDCG@10 per query for each leg and the fused list."""

    chunks: int
    cut: int
    scores: dict[str, NDArray[np.float64]]


def measure(collection: Collection) -> Measured:
    return Measured(len(collection.passages), cut_by_model(collection), scores_of(collection))


def scores_of(collection: Collection) -> dict[str, NDArray[np.float64]]:
    """nDCG@10 per query of each leg and of the fused list, the collection indexed and searched as a new KB."""
    encoder = keyword_encoder(KB_DEFAULT)
    scores: dict[str, list[float]] = {leg: [] for leg in LEGS}
    with tempfile.TemporaryDirectory(prefix="ragkb-chunking-") as root:
        index = build_index(Path(root), collection, encoder, KB_DEFAULT.title_weight)
        for vector, query in zip(collection.query_vectors, collection.queries, strict=True):
            found = search(index, vector.tolist(), encoder.encode_query(query["text"]), KB_DEFAULT.depth, KB_DEFAULT)
            scores["dense"].append(ndcg(collection, legs_of(found.dense)[0].tolist(), query))
            scores["keyword"].append(ndcg(collection, legs_of(found.keyword)[0].tolist(), query))
            scores["hybrid"].append(ndcg(collection, [hit.payload["passage"] for hit in found.fused], query))
        index.close()
    return {leg: np.array(values) for leg, values in scores.items()}


def cut_by_model(collection: Collection) -> int:
    """Chunks whose embedded text (title, headings, chunk) is longer than the model reads after its prefix."""
    model = embedder()
    return sum(model.count_tokens(passage.indexed) > model.max_passage_tokens for passage in collection.passages)


def cached(kind: str, name: str, compute: Callable[[], T]) -> T:
    """A measurement of a new KB's retrieval (KB_DEFAULT) from the cache under `kind`, or computed now and kept
    (the vectors themselves are cached by bench/embedded.py)."""
    analyzer = versions_key(keyword_encoder(KB_DEFAULT).version)
    retrieval = f"title{KB_DEFAULT.title_weight}-{KB_DEFAULT.fusion}-{KB_DEFAULT.depth}-{analyzer}"
    path = CACHE / kind / f"{name.replace(':', '-').replace('/', '-')}-{retrieval}.pickle"
    if path.exists():
        stored: T = pickle.loads(path.read_bytes())
        return stored
    started = time.perf_counter()
    result = compute()
    print(f"{kind} {name}: {time.perf_counter() - started:.0f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(result))
    return result


def measured(spec: str, chunking: KbChunking) -> Measured:
    """From the cache, or measured now."""
    return cached("chunking", f"{spec}-{label(chunking)}", lambda: measure(load(spec, chunking)))


# -- cross-validation ---------------------------------------------------------------------------------

PerQuery = dict[str, dict[str, NDArray[np.float64]]]  # collection → chunking label → hybrid nDCG@10 per query


def choose(per: PerQuery, masks: dict[str, NDArray[np.bool_]]) -> str:
    """The chunking with the best mean hybrid nDCG@10 over the masked queries, each collection weighing the same."""
    return max(per[next(iter(per))], key=lambda c: statistics.fmean(float(per[n][c][masks[n]].mean()) for n in per))


def gain_row(today: NDArray[np.float64], chosen: NDArray[np.float64]) -> dict[str, Any]:
    gains = chosen - today
    low, high = paired_interval(gains)
    return {"today": _m(today), "held_out_ndcg": _m(chosen), "gain": _m(gains), "ci": [_m(low), _m(high)]}


def leave_one_out(per: PerQuery, today: str = label(TODAY)) -> list[dict[str, Any]]:
    """Per held-out collection: the candidate best on the others, and its gain there over `today`."""
    rows = []
    for held in per if len(per) > 1 else ():
        others = {n: per[n] for n in per if n != held}
        chosen = choose(others, {n: np.ones(len(per[n][today]), dtype=bool) for n in others})
        rows.append({"held_out": held, "chosen": chosen} | gain_row(per[held][today], per[held][chosen]))
    return rows


def k_folds(
    per: PerQuery, folds: int, today: str = label(TODAY)
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each fold's choice and its held-out figures, and per collection the pooled held-out gain over `today`."""
    assignment = {n: folds_of(len(per[n][today]), folds) for n in per}
    held_scores = {n: np.zeros(len(per[n][today])) for n in per}
    rows = []
    for fold in range(folds):
        chosen = choose(per, {n: assignment[n] != fold for n in per})
        row: dict[str, Any] = {"fold": fold, "chosen": chosen}
        for n in per:
            held = assignment[n] == fold
            held_scores[n][held] = per[n][chosen][held]
            row[n] = [_m(per[n][today][held]), _m(per[n][chosen][held])]
        rows.append(row)
    return rows, {n: gain_row(per[n][today], held_scores[n]) for n in per}


def _m(values: NDArray[np.float64] | float) -> float:
    return round(float(np.mean(values)), 4)


# -- report ---------------------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    names = list(result["collections"])
    lines = ["Per collection and chunking (target/max/overlap tokens): chunks, chunks the model would cut, nDCG@10", ""]
    lines += ["| collection | chunking | chunks | cut | dense | keyword | hybrid |", "|---|---|---|---|---|---|---|"]
    for name, info in result["collections"].items():
        for chunking, row in info["chunkings"].items():
            lines.append(
                f"| {name} | {chunking} | {row['chunks']} | {row['cut']} | {row['dense']} | {row['keyword']} | "
                f"{row['hybrid']} |"
            )
    return "\n".join(lines + cv_markdown(result["cv"], names, label(TODAY))) + "\n"


def cv_markdown(cv: dict[str, Any], names: list[str], today: str) -> list[str]:
    """The cross-validation tables: leave one collection out, each fold, the folds pooled per collection."""
    lines = ["", f"Leave one collection out (hybrid; gain over {today}, paired bootstrap 95 % CI)", ""]
    lines += ["| held out | chosen | today | held-out | gain | CI |", "|---|---|---|---|---|---|"]
    for row in cv["loco"]:
        lines.append(
            f"| {row['held_out']} | {row['chosen']} | {row['today']} | {row['held_out_ndcg']} | {row['gain']} | "
            f"{row['ci']} |"
        )
    lines += ["", "k folds within collections (each cell: today → chosen, hybrid nDCG@10 on the held-out fold)", ""]
    lines += ["| fold | chosen | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for row in cv["kfold"]:
        cells = " | ".join(f"{row[n][0]} → {row[n][1]}" for n in names)
        lines.append(f"| {row['fold']} | {row['chosen']} | {cells} |")
    lines += ["", "k folds pooled per collection (held-out gain over today, paired bootstrap 95 % CI)", ""]
    lines += ["| collection | today | held-out | gain | CI |", "|---|---|---|---|---|"]
    for name, row in cv["pooled"].items():
        lines.append(f"| {name} | {row['today']} | {row['held_out_ndcg']} | {row['gain']} | {row['ci']} |")
    return [*lines, "", f"Chosen on all collections: {cv['chosen_on_all']}"]


def collection_info(spec: str, runs: dict[str, Measured]) -> dict[str, Any]:
    return {
        "queries": len(next(iter(runs.values())).scores["hybrid"]),
        "chunkings": {
            name: {"chunks": run.chunks, "cut": run.cut} | {leg: _m(run.scores[leg]) for leg in LEGS}
            for name, run in runs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--collections", nargs="+", default=["scifact:train", "pubmedqa:train", "jsquad:dev", "jaquad:train"]
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--chunkings", nargs="+", default=[label(c) for c in CANDIDATES], help="target/max/overlap, today's first"
    )
    parser.add_argument("--name", default=f"chunking-{time.strftime('%Y-%m-%d')}")
    args = parser.parse_args()
    candidates = [c for c in CANDIDATES if label(c) in args.chunkings]
    runs = {spec: {label(c): measured(spec, c) for c in candidates} for spec in args.collections}
    per = {spec: {name: run.scores["hybrid"] for name, run in by.items()} for spec, by in runs.items()}
    kfold, pooled = k_folds(per, args.folds)
    chosen = choose(per, {n: np.ones(len(per[n][label(TODAY)]), dtype=bool) for n in per})
    result = {
        "retrieval": KB_DEFAULT.label(),
        "collections": {spec: collection_info(spec, by) for spec, by in runs.items()},
        "cv": {"loco": leave_one_out(per), "kfold": kfold, "pooled": pooled, "chosen_on_all": chosen},
    }
    save_result(args.name, result, markdown(result))


if __name__ == "__main__":
    main()
