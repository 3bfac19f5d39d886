"""How long searches wait on the embedded index's upkeep while another KB is written, per flush policy.

    python bench/flush_stall.py [--seconds 130] [--points 10000] [--label L]

Qdrant Edge holds the Python interpreter (the GIL) through `flush()` (tens of milliseconds, more with more
written since the last one), so every search of the retriever waits while a flush runs. This runs the
retriever's own `EdgeIndex` in one process, as the retriever does: KB A holds `--points` points, a writer thread
upserts 16 points into KB B every 100 ms (about what the worker writes during a bulk ingest of short documents),
and a search loop runs hybrid searches on KB A (dense + keyword legs, fused) for `--seconds`. Each policy is a
fresh index:

- `flush 5 s`: what ragkb did until 2026-12-08 (a whole flush every 5 s, nothing else);
- `WAL 1 s, flush 60 s`: the default since (`RAGKB_QDRANT__WAL_SYNC_INTERVAL_S`, `__FLUSH_INTERVAL_S`).

It reports the search latency's percentiles and the time searches spent in stalls (gaps over 10 ms): the
stop-the-world share that no scheduling of other processes can reach. No model runs, so the figures are the
index's alone; a search over HTTP adds the embedding and the two services around these.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import save_result

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter, SparseTerms
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.port import IndexPoint

DIM = 384
KB_SEARCHED = "a" * 32
KB_WRITTEN = "b" * 32
POLICIES: dict[str, dict[str, float]] = {
    "flush 5 s": {"flush_interval_s": 5.0, "wal_sync_interval_s": 3600.0},
    "WAL 1 s, flush 60 s": {"flush_interval_s": 60.0, "wal_sync_interval_s": 1.0},
}
STALL_MS = 10.0


def points(kb_id: str, document: int, count: int, rng: random.Random) -> list[IndexPoint]:
    made = []
    for ordinal in range(count):
        vector = np.array([rng.gauss(0, 1) for _ in range(DIM)])
        terms = sorted(rng.sample(range(50_000), 40))
        made.append(
            IndexPoint(
                id=ids.point_id(kb_id, f"d{document}", 1, ordinal),
                dense=(vector / np.linalg.norm(vector)).tolist(),
                sparse=SparseTerms(indices=terms, values=[rng.random() for _ in terms]),
                payload={
                    "kb_id": kb_id,
                    "document_id": f"d{document}",
                    "version": 1,
                    "ordinal": ordinal,
                    "labels": [],
                    "text": "word " * 150,
                },
            )
        )
    return made


def run_policy(name: str, seconds: float, corpus_points: int) -> dict[str, Any]:
    rng = random.Random(21)
    with tempfile.TemporaryDirectory(prefix="flush-stall-") as folder:
        settings = QdrantSettings(path=Path(folder), optimize_after_points=10**9, **POLICIES[name])
        index = EdgeIndex(settings)
        index.create_kb(KB_SEARCHED, DIM)
        index.create_kb(KB_WRITTEN, DIM)
        for document in range(0, corpus_points // 10):
            index.upsert(KB_SEARCHED, points(KB_SEARCHED, document, 10, rng))
        index.close()  # flushed, so that the measured run flushes only what it writes
        index = EdgeIndex(settings)
        queries = [points(KB_SEARCHED, -1 - n, 1, rng)[0] for n in range(200)]
        stop = threading.Event()

        def writer() -> None:
            document = 0
            while not stop.wait(0.1):
                index.upsert(KB_WRITTEN, points(KB_WRITTEN, document, 16, random.Random(document)))
                document += 1

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        latencies: list[float] = []
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            query = queries[n % len(queries)]
            started = time.perf_counter()
            index.search(KB_SEARCHED, query.dense, query.sparse, ScopeFilter(), 10, 70, 60, fusion="dbsf")
            latencies.append((time.perf_counter() - started) * 1000)
            n += 1
        stop.set()
        thread.join()
        index.close()
    values = np.array(latencies)
    stalled = values[values > STALL_MS]
    return {
        "searches": len(values),
        "p50_ms": round(float(np.percentile(values, 50)), 2),
        "p99_ms": round(float(np.percentile(values, 99)), 2),
        "p999_ms": round(float(np.percentile(values, 99.9)), 2),
        "max_ms": round(float(values.max()), 1),
        "stalled_searches": len(stalled),
        "stalled_ms_per_minute": round(float(stalled.sum()) / seconds * 60, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=130.0, help="per policy (over two 60 s flushes)")
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="each policy this many times, alternating")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for round_ in range(1, args.rounds + 1):
        for name in POLICIES:
            result = {"policy": name, "round": round_, **run_policy(name, args.seconds, args.points)}
            print(result, flush=True)
            runs.append(result)
    lines = [
        f"Searches on a {args.points:,}-point KB while another KB takes 16 points every 100 ms, {args.seconds:.0f} s "
        "per run, one process (bench/flush_stall.py)",
        "",
        "| policy | round | searches | p50 ms | p99 ms | p99.9 ms | max ms | searches over 10 ms "
        "| their ms per minute |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['policy']} | {r['round']} | {r['searches']:,} | {r['p50_ms']} | {r['p99_ms']} | {r['p999_ms']} | "
            f"{r['max_ms']} | {r['stalled_searches']} | {r['stalled_ms_per_minute']} |"
        )
    save_result(f"flush-stall-{args.label}" if args.label else "flush-stall", {"runs": runs}, "\n".join(lines))


if __name__ == "__main__":
    main()
