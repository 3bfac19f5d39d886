"""A query embedding after an idle moment: why the retriever's embed stage is slower than the same model in a loop.

    python bench/embed_idle.py [--queries 200] [--gaps-ms 0 5 20] [--rounds 2] [--label L]

No service. The packaged e5 embeds JSQuAD dev questions one at a time on two ONNX Runtime threads (the retriever's
setting on 2 cores), back to back and with an idle gap before each (a service waits between requests; a bench
loop does not), under three thread-pool policies:

- no spinning: ragkb's session options (`session.intra_op.allow_spinning` 0);
- spinning: ONNX Runtime's default (its threads spin between runs);
- spinning, stopped after each run (`session.force_spinning_stop` 1).

Reports the wall p50 per query and the process CPU per query over the whole loop (idle gaps included, so what a
spinning pool burns while it waits is counted). Results: bench/results/embed-idle[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import onnxruntime as ort
from common import DATA, read_jsonl, save_result

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import onnx_encoder
from ragkb_models.embedder import Embedder, load_embedder

THREADS = 2
WARM_UP = 20
# Thread-pool policy → (allow_spinning, force_spinning_stop).
POLICIES = {
    "no spinning (ragkb)": ("0", False),
    "spinning (ONNX Runtime's default)": ("1", False),
    "spinning, stopped after each run": ("1", True),
}


def session_options(allow_spinning: str, stop_after_run: bool) -> Callable[[int], ort.SessionOptions]:
    def options(threads: int) -> ort.SessionOptions:
        made = ort.SessionOptions()
        made.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        made.intra_op_num_threads = threads
        made.inter_op_num_threads = 1
        made.add_session_config_entry("session.intra_op.allow_spinning", allow_spinning)
        if stop_after_run:
            made.add_session_config_entry("session.force_spinning_stop", "1")
        return made

    return options


def load_with(policy: int, allow_spinning: str, stop_after_run: bool) -> Embedder:
    """The default embedder with this pool policy; `policy` keeps each its own entry in load_embedder's cache."""
    # The loader builds every session with onnx_session_options: swapped here for the policy's, while it loads.
    onnx_encoder.onnx_session_options = session_options(allow_spinning, stop_after_run)  # type: ignore[assignment]
    return load_embedder(EmbeddingSettings().model_copy(update={"threads": THREADS, "batch_size": 1000 + policy}))


def measure(embedder: Embedder, queries: list[str], gap_s: float) -> tuple[float, float]:
    """Wall ms p50 per query, and process CPU ms per query over the loop (gaps included)."""
    walls = []
    cpu_started = time.process_time()
    for query in queries:
        if gap_s:
            time.sleep(gap_s)
        started = time.perf_counter()
        embedder.embed_query(query)
        walls.append((time.perf_counter() - started) * 1000)
    return statistics.median(walls), (time.process_time() - cpu_started) * 1000 / len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--gaps-ms", type=float, nargs="+", default=[0, 5, 20])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    queries = [row["text"] for row in read_jsonl(DATA / "jsquad" / "queries.jsonl")][: args.queries]
    original = onnx_encoder.onnx_session_options
    try:
        embedders = {name: load_with(i, *policy) for i, (name, policy) in enumerate(POLICIES.items())}
    finally:
        onnx_encoder.onnx_session_options = original
    for embedder in embedders.values():
        for query in queries[:WARM_UP]:
            embedder.embed_query(query)
    rows = []
    for round_ in range(args.rounds):
        for name, embedder in embedders.items():
            for gap_ms in args.gaps_ms:
                wall, cpu = measure(embedder, queries, gap_ms / 1000)
                rows.append({"round": round_, "policy": name, "gap_ms": gap_ms, "wall_p50_ms": wall, "cpu_ms": cpu})
    lines = [
        f"`python bench/embed_idle.py --queries {len(queries)} --rounds {args.rounds}`: JSQuAD dev questions embedded "
        f"one at a time on {THREADS} ONNX Runtime threads, an idle gap before each.",
        "",
        "| round | thread pool | gap before each query | wall p50 ms | process CPU ms per query |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {row['round']} | {row['policy']} | {row['gap_ms']:g} ms | {row['wall_p50_ms']:.2f} | {row['cpu_ms']:.2f} |"
        for row in rows
    ]
    save_result(
        f"embed-idle{'-' + args.label if args.label else ''}",
        {"queries": len(queries), "threads": THREADS, "rows": rows},
        "\n".join(lines),
    )


if __name__ == "__main__":
    main()
