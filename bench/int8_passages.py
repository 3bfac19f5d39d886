"""What int8 passage encoding costs retrieval, on whole collections, offline (issue 19).

    python bench/int8_passages.py [--collections scifact:train jsquad:dev] [--sample 512] [--rounds 3] [--reuse]

Each collection is chunked as the worker chunks it (bench/embedded.py) and every chunk is embedded twice with the
packaged e5: by the float32 ONNX graph (the default backend, `onnx`) and by the int8 one (`onnx-int8`); every
question likewise. All four sets of vectors are cached under ~/.cache/ragkb/bench/vectors, so a rerun embeds
nothing. Three variants are compared:

- fp32 passages + fp32 queries (today's default),
- int8 passages + fp32 queries (a KB whose passages the worker embeds in int8),
- int8 passages + int8 queries (the same KB, with the retriever's int8 query graph on as well).

Per passage precision the chunks are written into a Qdrant Edge index as bench/tune.py writes them (the
retriever's adapter, the analyzer of a new KB, the payload the worker writes; exact dense search, so only the
vectors differ between variants) and every question's legs are fetched as the retriever's legs endpoint fetches
them. Each question is then answered as bench/quality.py asks the service (top_k 100, max_blocks 100, every other
setting the KB default: DBSF, equal weights, 7 candidates per passage asked for) by ragkb_core.fusion.answer, in
two modes: dense only, and hybrid (the default). Scoring is quality.py's: the answer's passages reduced to
documents in rank order, nDCG@10. Each variant's difference from the baseline comes with the paired bootstrap
95 % interval the tune job uses (ragkb_core.tuning.paired_bootstrap_interval, 2,000 resamples of the questions).

Also measured: the cosine of each chunk's int8 vector with its float32 one (all chunks), and passage encoding
throughput (chunks/s) of both graphs on the same `--sample` chunks per collection, in `--rounds` interleaved
rounds (the graph that goes first alternates), so other load on the machine falls on both.

Results: bench/results/int8-passages-<date>.json and .md. Each collection's figures are also cached (under
~/.cache/ragkb/bench/int8-passages); `--reuse` takes them from there instead of measuring again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from common import save_result
from embedded import CACHE, Collection, embedder, load, vectors
from fusion import build_index, keyword_encoder
from numpy.typing import NDArray
from tune import KB, NEW_KB_ANALYZER, fetch_legs

from ragkb_analyzer import Bm25Encoder
from ragkb_core.fusion import AnswerShape, FusionSettings, QueryLegs
from ragkb_core.kb_settings import KbRetrieval
from ragkb_core.settings import EmbeddingSettings
from ragkb_core.tuning import answer_shape, leg_depth, paired_bootstrap_interval, score_candidates
from ragkb_models import Backend
from ragkb_retriever.index.edge import EdgeIndex

PRECISIONS: dict[str, Backend] = {"fp32": "onnx", "int8": "onnx-int8"}
# Passages asked for per question, as bench/quality.py asks the service.
ANSWER_PASSAGES = 100
# Questions whose legs are held at once: a JSQuAD question's legs are 1,400 candidates.
QUESTIONS_PER_BATCH = 256


@dataclass(frozen=True)
class Variant:
    passages: str
    queries: str

    def label(self) -> str:
        return f"{self.passages} passages + {self.queries} queries"


BASELINE = Variant("fp32", "fp32")
VARIANTS = (BASELINE, Variant("int8", "fp32"), Variant("int8", "int8"))


# -- pure figures ----------------------------------------------------------------------------------------


def cosine_agreement(a: NDArray[np.float32], b: NDArray[np.float32]) -> dict[str, float]:
    """Row by row cosine of two sets of vectors of the same texts: its minimum, 1st percentile and mean."""
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {
        "min": round(float(cosines.min()), 4),
        "p1": round(float(np.percentile(cosines, 1)), 4),
        "mean": round(float(cosines.mean()), 4),
    }


def paired_difference(baseline: Sequence[float], other: Sequence[float], seed: int) -> dict[str, Any]:
    """other − baseline, question by question: its mean and paired bootstrap 95 % interval, and how many
    questions went up and down."""
    differences = [o - b for b, o in zip(baseline, other, strict=True)]
    low, high = paired_bootstrap_interval(differences, seed)
    return {
        "delta": round(statistics.fmean(differences), 4),
        "ci": [round(low, 4), round(high, 4)],
        "better": sum(1 for d in differences if d > 0),
        "worse": sum(1 for d in differences if d < 0),
    }


def evenly_spaced(count: int, size: int) -> list[int]:
    """`size` positions spread over range(count) (all of them when there are fewer)."""
    if size >= count:
        return list(range(count))
    return [int(i * count / size) for i in range(size)]


# -- retrieval quality -----------------------------------------------------------------------------------


def shapes() -> dict[str, AnswerShape]:
    """The answers quality.py asks for: dense only and hybrid, top_k and max_blocks 100, the KB's defaults."""
    asked = KbRetrieval(top_k=ANSWER_PASSAGES, max_blocks=ANSWER_PASSAGES)
    hybrid = answer_shape(asked)
    return {"dense": hybrid.model_copy(update={"hybrid": False}), "hybrid": hybrid}


def measure_quality(
    collection: Collection, passages: dict[str, NDArray[np.float32]], queries: dict[str, NDArray[np.float32]]
) -> dict[Variant, dict[str, list[float]]]:
    """nDCG@10 per variant, mode and question."""
    encoder = keyword_encoder(NEW_KB_ANALYZER)
    scores: dict[Variant, dict[str, list[float]]] = {}
    for precision in dict.fromkeys(v.passages for v in VARIANTS):
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="ragkb-int8-") as root:
            kb = replace(collection, passage_vectors=passages[precision])
            index = build_index(Path(root), kb, encoder, NEW_KB_ANALYZER.title_weight, with_text=True, kb=KB)
            for variant in (v for v in VARIANTS if v.passages == precision):
                asked = replace(kb, query_vectors=queries[variant.queries])
                scores[variant] = scores_of(index, asked, encoder)
                means = {mode: round(statistics.fmean(values), 4) for mode, values in scores[variant].items()}
                print(f"{collection.label} {variant.label()}: {means}", flush=True)
            index.close()
        print(f"{collection.label} {precision} passages: {time.perf_counter() - started:.0f} s", flush=True)
    return scores


def scores_of(index: EdgeIndex, collection: Collection, encoder: Bm25Encoder) -> dict[str, list[float]]:
    """Each question's nDCG@10 per mode, its legs fetched a batch of questions at a time."""
    answers = shapes()
    settings = [FusionSettings.of(KbRetrieval())]
    depth = leg_depth(answers["hybrid"], settings)
    calibration = EmbeddingSettings().relevance_of(None)
    scores: dict[str, list[float]] = {mode: [] for mode in answers}
    for start in range(0, len(collection.queries), QUESTIONS_PER_BATCH):
        batch = _questions(collection, start, start + QUESTIONS_PER_BATCH)
        legs: list[QueryLegs] = fetch_legs(index, batch, encoder, depth)
        judgements = [collection.qrels[query["_id"]] for query in batch.queries]
        for mode, shape in answers.items():
            scores[mode] += score_candidates(settings, legs, judgements, shape, calibration).scores[0]
    return scores


def _questions(collection: Collection, start: int, end: int) -> Collection:
    return replace(collection, queries=collection.queries[start:end], query_vectors=collection.query_vectors[start:end])


# -- encoding --------------------------------------------------------------------------------------------


def measure_throughput(texts: list[str], rounds: int) -> dict[str, list[float]]:
    """Chunks/s of each graph on the same texts, per round; the graph that goes first alternates."""
    for backend in PRECISIONS.values():
        embedder(backend).embed_passages(texts[:8])  # warm-up, outside the timings
    rates: dict[str, list[float]] = {precision: [] for precision in PRECISIONS}
    for round_ in range(rounds):
        order = list(PRECISIONS) if round_ % 2 == 0 else list(reversed(PRECISIONS))
        for precision in order:
            started = time.perf_counter()
            embedder(PRECISIONS[precision]).embed_passages(texts)
            rates[precision].append(round(len(texts) / (time.perf_counter() - started), 2))
    return rates


def embedded_both(collection: Collection) -> tuple[dict[str, NDArray[np.float32]], dict[str, NDArray[np.float32]]]:
    """Passage and query vectors per precision (fp32 are the collection's own, from the same cache)."""
    texts = [passage.indexed for passage in collection.passages]
    questions = [query["text"] for query in collection.queries]
    passages = {p: vectors("passages", collection.name, texts, backend) for p, backend in PRECISIONS.items()}
    queries = {p: vectors("queries", collection.name, questions, backend) for p, backend in PRECISIONS.items()}
    return passages, queries


# -- running ---------------------------------------------------------------------------------------------


def run(spec: str, sample: int, rounds: int, seed: int) -> dict[str, Any]:
    collection = load(spec)
    passages, queries = embedded_both(collection)
    texts = [collection.passages[i].indexed for i in evenly_spaced(len(collection.passages), sample)]
    rates = measure_throughput(texts, rounds)
    scores = measure_quality(collection, passages, queries)
    return {
        "collection": collection.label,
        "chunks": len(collection.passages),
        "queries": len(collection.queries),
        "cosine_int8_to_fp32": {
            "passages": cosine_agreement(passages["int8"], passages["fp32"]),
            "queries": cosine_agreement(queries["int8"], queries["fp32"]),
        },
        "throughput": {"chunks": len(texts), "chunks_per_s": rates},
        "ndcg_at_10": {
            variant.label(): {mode: round(statistics.fmean(values), 4) for mode, values in by_mode.items()}
            for variant, by_mode in scores.items()
        },
        "differences": {
            variant.label(): {
                mode: paired_difference(scores[BASELINE][mode], values, seed) for mode, values in by_mode.items()
            }
            for variant, by_mode in scores.items()
            if variant != BASELINE
        },
    }


def measured(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    """A collection's figures, cached so that a run of both collections can reuse a run of one (`--reuse`)."""
    saved = CACHE / "int8-passages" / f"{spec.replace(':', '-')}-{args.sample}-{args.rounds}-{args.seed}.json"
    if args.reuse and saved.exists():
        row: dict[str, Any] = json.loads(saved.read_text())
        return row
    row = run(spec, args.sample, args.rounds, args.seed)
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(row, indent=2))
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| collection | variant | dense nDCG@10 | Δ [95 % CI] | hybrid nDCG@10 | Δ [95 % CI] |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        for variant, by_mode in row["ndcg_at_10"].items():
            cells = [f"{row['collection']} ({row['queries']} q)", variant]
            for mode in ("dense", "hybrid"):
                cells.append(f"{by_mode[mode]:.4f}")
                difference = row["differences"].get(variant, {}).get(mode)
                cells.append(_difference_cell(difference))
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| collection | chunks | cosine int8 → fp32 passages (min / p1 / mean) | queries (min / p1 / mean) "
        "| chunks/s fp32 (median, rounds) | chunks/s int8 (median, rounds) | int8 ÷ fp32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cosine = row["cosine_int8_to_fp32"]
        rates = row["throughput"]["chunks_per_s"]
        fp32, int8 = statistics.median(rates["fp32"]), statistics.median(rates["int8"])
        lines.append(
            f"| {row['collection']} | {row['chunks']} (timed on {row['throughput']['chunks']}) | "
            f"{_cosines(cosine['passages'])} | {_cosines(cosine['queries'])} | {fp32:.1f} ({rates['fp32']}) | "
            f"{int8:.1f} ({rates['int8']}) | {int8 / fp32:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def _difference_cell(difference: dict[str, Any] | None) -> str:
    if difference is None:
        return ""
    low, high = difference["ci"]
    return f"{difference['delta']:+.4f} [{low:+.4f}, {high:+.4f}]"


def _cosines(stats: dict[str, float]) -> str:
    return f"{stats['min']:.4f} / {stats['p1']:.4f} / {stats['mean']:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--sample", type=int, default=512, help="chunks per collection timed for throughput")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds per graph")
    parser.add_argument("--seed", type=int, default=21, help="seeds the bootstrap")
    parser.add_argument("--reuse", action="store_true", help="reuse a collection's figures a previous run cached")
    args = parser.parse_args()
    rows = [measured(spec, args) for spec in args.collections]
    result = {"args": vars(args), "answer": f"top_k {ANSWER_PASSAGES}, KB defaults", "collections": rows}
    save_result(f"int8-passages-{time.strftime('%Y-%m-%d')}", result, markdown(rows))


if __name__ == "__main__":
    main()
