"""What the student's cuts buy in speed and size: layers kept, and the pruned vocabulary.

    python models/reranker/speed.py [--layers 2 4 6 12] [--candidates 84] [--repetitions 10]

For each layer count it cuts a student from multilingual-e5-small exactly as step 2 does (untrained: speed and
size do not depend on the weights' values), exports it to int8 ONNX as step 4 does, and reranks 1 query ×
`--candidates` real passages (JSQuAD, Japanese; SciFact, English; read in place) through the retriever's own
`RerankerPool`, as bench/rerank_latency.py does. The vocabulary's share of the file is reported from the
embedding matrix: what the int8 file would weigh with e5's full 250,002 pieces instead of the kept ones.
Run it on an idle machine; results go to var/reranker/speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile  # noqa: E402
from rerank_latency import COLLECTIONS, UNLIMITED_MS, load_texts  # noqa: E402
from student import build_student, e5_folder  # noqa: E402

from ragkb_models.bert_onnx import write_cross_encoder_onnx  # noqa: E402
from ragkb_models.onnx_encoder import quantize_int8  # noqa: E402
from ragkb_retriever.reranking import RerankerPool  # noqa: E402
from ragkb_retriever.settings import RerankerSettings  # noqa: E402

E5_VOCABULARY = 250_002


def export_int8(student: Path, out: Path) -> None:
    (out / "onnx").mkdir(parents=True)
    for name in ("tokenizer.json", "config.json"):
        (out / name).write_bytes((student / name).read_bytes())
    fp32 = student / "model.onnx"
    write_cross_encoder_onnx(student, fp32)
    quantize_int8(fp32, out / "onnx" / "model_int8.onnx")


def time_reranking(folder: Path, candidates: int, repetitions: int) -> dict[str, Any]:
    pool = RerankerPool(RerankerSettings(model=str(folder)))
    pool.warm_up()
    rows: dict[str, Any] = {}
    for collection in COLLECTIONS:
        queries, passages = load_texts(collection, repetitions, candidates * repetitions)
        took = [
            pool.rerank(None, query, passages[i * candidates : (i + 1) * candidates], UNLIMITED_MS).took_ms
            for i, query in enumerate(queries)
        ]
        rows[collection] = {"p50_ms": round(percentile(took, 50), 1), "p95_ms": round(percentile(took, 95), 1)}
        rows[collection]["mean_ms"] = round(statistics.fmean(took), 1)
    pool.close()
    return rows


def measure(layers: int, work: Path, candidates: int, repetitions: int) -> dict[str, Any]:
    student, exported = work / f"student-L{layers}", work / f"L{layers}"
    shape = build_student(e5_folder(), student, layers)
    export_int8(student, exported)
    int8_bytes = (exported / "onnx" / "model_int8.onnx").stat().st_size
    hidden = json.loads((student / "config.json").read_text())["hidden_size"]
    # One int8 byte per embedding weight: the pieces the pruning dropped, had they been kept.
    full_vocabulary_bytes = int8_bytes + (E5_VOCABULARY - shape["vocabulary"]) * hidden
    return {
        "layers": layers,
        "vocabulary": shape["vocabulary"],
        "int8_mb": round(int8_bytes / 1e6, 1),
        "int8_mb_with_full_vocabulary": round(full_vocabulary_bytes / 1e6, 1),
        "latency": time_reranking(exported, candidates, repetitions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 4, 6, 12])
    parser.add_argument("--candidates", type=int, default=84)
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "var" / "reranker" / "speed.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(layers, Path(tmp), args.candidates, args.repetitions) for layers in args.layers]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"candidates": args.candidates, "rows": rows}, indent=2))
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
