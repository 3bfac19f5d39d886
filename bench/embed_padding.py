"""What padding costs the passage encoder: forward runs that pad texts to the longest one against runs of
(nearly) equal lengths only, same chunks, same process, rounds interleaved.

A batch of the worker (RAGKB_BATCHING__DOCUMENTS short documents) hands the model a few dozen chunks at most;
sorting so few by length still leaves texts of very different lengths in one run, and every padded position
costs what a real token does. Each arm embeds the chunks of `--group` documents per call, the way a task
process does, once with any padding the token budget allows (`max_padding_share` 1.0, the planner before
2026-12-06) and once with the server's bound (`RAGKB_EMBEDDING__MAX_PADDING_SHARE`, default 0.05). Reported: CPU ms and
wall ms per chunk at the worker's one thread per task process and with every core (the raw encode rate's
setting), and how far the two arms' vectors are apart (padding is masked out, so they should agree to float
rounding). Documents are parsed as text/plain and cut by the worker's Chunker with the default KbChunking.

    python bench/embed_padding.py [--corpora jsquad scifact] [--documents 400] [--groups 8 1000] [--rounds 2]

Results: bench/results/embed-padding.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
from common import save_result
from embed_batching import chunked_documents

from ragkb_core.settings import EmbeddingSettings
from ragkb_models import Embedder, load_embedder

# The planner before the bound: any padding the run's token budget allows; and the bound a server runs with.
UNBOUNDED = 1.0
MAX_PADDING_SHARE = EmbeddingSettings().max_padding_share


def timed(embedder: Embedder, documents: list[list[str]], group: int, share: float) -> tuple[float, float, np.ndarray]:
    """CPU and wall seconds to embed the documents `group` at a time with this padding bound, and the vectors."""
    embedder.max_padding_share = share
    vectors = []
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, len(documents), group):
        vectors.append(embedder.embed_passages([text for texts in documents[start : start + group] for text in texts]))
    return time.process_time() - cpu, time.perf_counter() - wall, np.concatenate(vectors)


def measure(corpus: str, threads: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    embedder = load_embedder(EmbeddingSettings(threads=threads))
    documents = chunked_documents(embedder, corpus, args.documents)
    chunks = sum(len(texts) for texts in documents)
    embedder.embed_passages(documents[0] * 4)  # warm-up
    rows = []
    for group in args.groups:
        seconds: dict[float, list[tuple[float, float]]] = {UNBOUNDED: [], MAX_PADDING_SHARE: []}
        vectors: dict[float, np.ndarray] = {}
        for round_ in range(args.rounds):
            order = (UNBOUNDED, MAX_PADDING_SHARE) if round_ % 2 == 0 else (MAX_PADDING_SHARE, UNBOUNDED)
            for share in order:
                cpu, wall, vectors[share] = timed(embedder, documents, group, share)
                seconds[share].append((cpu, wall))
        cosine = np.sum(vectors[UNBOUNDED] * vectors[MAX_PADDING_SHARE], axis=1)
        per_chunk = {
            share: (
                1000 * statistics.median(c for c, _ in runs) / chunks,
                1000 * statistics.median(w for _, w in runs) / chunks,
            )
            for share, runs in seconds.items()
        }
        rows.append(
            {
                "corpus": corpus,
                "threads": threads,
                "group": group,
                "chunks": chunks,
                "cpu_ms_per_chunk": {
                    "padded": round(per_chunk[UNBOUNDED][0], 2),
                    "bounded": round(per_chunk[MAX_PADDING_SHARE][0], 2),
                },
                "wall_ms_per_chunk": {
                    "padded": round(per_chunk[UNBOUNDED][1], 2),
                    "bounded": round(per_chunk[MAX_PADDING_SHARE][1], 2),
                },
                "min_cosine_between_arms": round(float(cosine.min()), 7),
            }
        )
        print(rows[-1], flush=True)
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"First {args.documents} documents per collection, embedded `group` documents a call, {args.rounds} rounds "
        f"interleaved; padded = any padding the 512-token run allows (before), bounded = ≤ {MAX_PADDING_SHARE:.0%} "
        "of a run's tokens (now). Median per chunk; CPU is the process's.",
        "",
        "| corpus | threads | documents a call | chunks | CPU ms/chunk padded → bounded | ratio "
        "| wall ms/chunk padded → bounded | ratio | min cosine between arms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cpu, wall = row["cpu_ms_per_chunk"], row["wall_ms_per_chunk"]
        lines.append(
            f"| {row['corpus']} | {row['threads']} | {row['group']} | {row['chunks']} | "
            f"{cpu['padded']} → {cpu['bounded']} | "
            f"{cpu['bounded'] / cpu['padded']:.3f} | {wall['padded']} → {wall['bounded']} | "
            f"{wall['bounded'] / wall['padded']:.3f} | {row['min_cosine_between_arms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["jsquad", "scifact"])
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 1000], help="documents per embed call")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, len(os.sched_getaffinity(0))])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    rows = [row for corpus in args.corpora for threads in args.threads for row in measure(corpus, threads, args)]
    name = "embed-padding" + (f"-{args.label}" if args.label else "")
    save_result(name, {"documents": args.documents, "rounds": args.rounds, "rows": rows}, markdown(rows, args))


if __name__ == "__main__":
    main()
