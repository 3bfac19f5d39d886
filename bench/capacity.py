"""Disk and memory of an index of N chunks, per part, with and without quantisation of the dense vectors.

Builds one Qdrant Edge shard per variant from the same N chunks (bench/scale.py: real SciFact passages
embedded with e5, scaled up by repetition with perturbation, real BM25 terms; the retriever's own payload
and payload indexes), optimises it (HNSW, quantisation), then:

- disk: bytes allocated on disk (not apparent sizes: Edge preallocates sparse files) per part — dense vectors,
  dense HNSW graph, quantised vectors, sparse (BM25) vectors and index, payload, payload indexes, id tracker,
  WAL — and per million chunks;
- memory: in a fresh process per variant, the resident memory the index adds after --queries hybrid searches
  through the retriever's EdgeIndex (anonymous: heap and in-RAM quantised vectors; file: the memory-mapped
  pages the searches touched), and their p50 latency.

Variants: `none` (what ragkb creates today), `scalar` (int8, in RAM, rescored from the originals), `binary`
(1 bit per dimension, in RAM, rescored). A Qdrant server stores a collection the same way (the same segment
code); it adds per-shard overhead and a replica doubles everything.

    python bench/capacity.py [--points 100000] [--base 1000] [--queries 200]

Results: bench/results/capacity-<points>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import scale
from common import DATA, read_jsonl, save_result
from qdrant_edge import (
    BinaryQuantizationConfig,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    Modifier,
    ScalarQuantizationConfig,
    ScalarType,
    UpdateOperation,
)

from ragkb_core import ids
from ragkb_retriever.index.edge import _SCHEMA_TYPES, _edge_point
from ragkb_retriever.index.edge_aliases import AliasFiles
from ragkb_retriever.index.schema import DENSE_VECTOR, PAYLOAD_INDEXES, SPARSE_VECTOR
from ragkb_retriever.indexing import _point

KB = "c0ffee00c0ffee00c0ffee00c0ffee00"
VARIANTS = ("none", "scalar", "binary")
BATCH = 1000
PARTS = (
    ("quantized", "dense quantised"),
    ("vector_index-dense", "dense HNSW"),
    ("vector_storage-dense", "dense vectors"),
    ("bm25", "sparse (BM25)"),
    ("payload_storage", "payload"),
    ("payload_index", "payload indexes"),
    ("id_tracker", "id tracker"),
    ("wal", "WAL"),
)


def config(variant: str, dense_size: int) -> EdgeConfig:
    quantization = {
        "none": None,
        "scalar": ScalarQuantizationConfig(type=ScalarType.Int8, always_ram=True),
        "binary": BinaryQuantizationConfig(always_ram=True),
    }[variant]
    dense = EdgeVectorParams(size=dense_size, distance=Distance.Cosine, quantization_config=quantization)
    return EdgeConfig(
        vectors={DENSE_VECTOR: dense},
        sparse_vectors={SPARSE_VECTOR: EdgeSparseVectorParams(modifier=Modifier.Idf)},
        wal_enabled=True,
    )


def build(roots: dict[str, Path], points: int, base: scale.BaseSet) -> dict[str, float]:
    """Write the same points into one shard per variant, then optimise each; seconds per step."""
    dense_size = base.vectors.shape[1]
    shards = {}
    for variant, root in roots.items():
        name = ids.collection_name(KB, 1)
        shard = EdgeShard.create(str(root / name), config(variant, dense_size))
        for field, kind in PAYLOAD_INDEXES:
            shard.update(UpdateOperation.create_field_index(field, _SCHEMA_TYPES[kind]))
        shards[variant] = shard
        AliasFiles(root).write(KB, name)
    started = time.perf_counter()
    batch = []
    for document in scale.documents(KB, points, base, seed=1):
        batch.extend(_edge_point(_point(document, index)) for index in range(len(document.chunks)))
        if len(batch) >= BATCH:
            for shard in shards.values():
                shard.update(UpdateOperation.upsert_points(batch))
            batch = []
    for shard in shards.values():
        if batch:
            shard.update(UpdateOperation.upsert_points(batch))
    timings = {"write_s": round(time.perf_counter() - started, 1)}
    for variant, shard in shards.items():
        started = time.perf_counter()
        shard.optimize()
        shard.flush()
        shard.close()
        timings[f"optimize_{variant}_s"] = round(time.perf_counter() - started, 1)
    return timings


def disk_parts(root: Path) -> dict[str, int]:
    """Bytes allocated on disk per part of the shard (files that match no part count as `other`)."""
    parts: dict[str, int] = {}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        label = next((label for marker, label in PARTS if marker in str(path.relative_to(root))), "other")
        parts[label] = parts.get(label, 0) + path.stat().st_blocks * 512
    return parts


def memory_probe(root: Path, queries: int) -> dict[str, Any]:
    """Run the searches in a fresh process (so that RSS is the index's, not the build's) and read its answer."""
    probe = subprocess.run(
        [sys.executable, __file__, "--probe", str(root), "--queries", str(queries)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])
    return result


def _rss_kib() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("RssAnon", "RssFile"):
            fields[name] = int(value.split()[0])
    return fields


def probe(root: Path, queries: int) -> None:
    """The probe process: load, search, print what resident memory the index added and the latency."""
    import numpy as np

    from ragkb_analyzer import Analyzer, Bm25Encoder
    from ragkb_core.contracts import ScopeFilter
    from ragkb_core.settings import AnalyzerSettings, QdrantSettings
    from ragkb_retriever.index.edge import EdgeIndex

    texts = [q["text"] for q in read_jsonl(DATA / "scifact" / "queries.jsonl")][:queries]
    bm25 = Bm25Encoder(Analyzer(), AnalyzerSettings())
    sparse = [bm25.encode_query(text) for text in texts]
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(queries, 384)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    before = _rss_kib()
    index = EdgeIndex(QdrantSettings(path=root))
    latencies = []
    for vector, terms in zip(dense.tolist(), sparse, strict=True):
        started = time.perf_counter()
        index.search(KB, vector, terms, ScopeFilter(), limit=12, candidate_limit=84, rrf_k=61)
        latencies.append((time.perf_counter() - started) * 1000)
    after = _rss_kib()
    index.close()
    print(json.dumps({
        "anon_mib": round((after["RssAnon"] - before["RssAnon"]) / 1024, 1),
        "file_mib": round((after["RssFile"] - before["RssFile"]) / 1024, 1),
        "hybrid_p50_ms": round(statistics.median(latencies), 2),
    }))  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    points = result["points"]
    per_million = 1_000_000 / points
    # The WAL is a fixed ring of preallocated segments per shard, not a cost per chunk: shown apart.
    labels = sorted({label for v in result["variants"].values() for label in v["disk_bytes"]} - {"WAL"})
    header = "| part (MiB per 1M chunks) | " + " | ".join(VARIANTS) + " |\n|---|" + "---|" * len(VARIANTS) + "\n"
    rows = []
    for label in [*labels, "total"]:
        cells = []
        for variant in VARIANTS:
            disk = result["variants"][variant]["disk_bytes"]
            value = sum(v for part, v in disk.items() if part != "WAL") if label == "total" else disk.get(label, 0)
            cells.append(f"{value * per_million / 2**20:,.0f}")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    memory = ["| resident after searches (MiB at N) | " + " | ".join(VARIANTS) + " |", "|---|---|---|---|"]
    for key, label in (
        ("anon_mib", "anonymous"),
        ("file_mib", "file-backed (mmap)"),
        ("hybrid_p50_ms", "hybrid p50 ms"),
    ):
        memory.append(f"| {label} | " + " | ".join(str(result["variants"][v]["memory"][key]) for v in VARIANTS) + " |")
    wal = result["variants"]["none"]["disk_bytes"].get("WAL", 0) / 2**20
    return (
        f"Index of {points:,} chunks (Qdrant Edge, optimised), disk allocated per part, scaled to 1M chunks "
        f"(the WAL, {wal:,.0f} MiB per shard whatever its size, apart):\n\n"
        + header + "\n".join(rows) + "\n\n" + "\n".join(memory) + "\n"
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--base", type=int, default=1000, help="real passages embedded (bench/scale.py)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, args.queries)
        return
    base = scale.load_base(args.base)
    workdir = Path(tempfile.mkdtemp(prefix="ragkb-capacity-"))
    try:
        roots = {variant: workdir / variant for variant in VARIANTS}
        timings = build(roots, args.points, base)
        print(f"built {args.points} points in every variant: {timings}", flush=True)
        variants = {
            variant: {"disk_bytes": disk_parts(root), "memory": memory_probe(root, args.queries)}
            for variant, root in roots.items()
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {"points": args.points, "base": args.base, "timings": timings, "variants": variants,
              "load_average": os.getloadavg()}  # fmt: skip
    save_result(f"capacity-{args.points}", result, markdown(result))


if __name__ == "__main__":
    main()
