"""Step 4 of the reranker recipe: export the trained model to ONNX (int8) and check what int8 costs.

    python models/reranker/export.py [--model var/reranker/run-L4/model] [--out <the packaged reranker folder>]

Writes the float32 graph (ragkb's own BERT graph builder, the same one the embedder uses, with the
cross-encoder head), quantises it to int8 per channel, and compares both on held-out dev groups: the rank
correlation of the scores and the dev MRR of each. The output folder holds only what serving needs —
`onnx/model_int8.onnx`, `tokenizer.json`, `config.json` — and is what ragkb loads as its default reranker.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ragkb_models.bert_onnx import write_cross_encoder_onnx
from ragkb_models.cross_encoder import OnnxCrossEncoder, packaged_reranker_folder
from ragkb_models.onnx_encoder import quantize_int8

REPO = Path(__file__).resolve().parents[2]
MAX_LENGTH = 256
DEV_GROUPS = 300


def dev_groups(data: Path) -> list[dict[str, object]]:
    with (data / "dev.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()][:DEV_GROUPS]


def mrr_and_scores(encoder: OnnxCrossEncoder, groups: list[dict[str, object]]) -> tuple[float, list[float]]:
    reciprocal_ranks, all_scores = [], []
    for group in groups:
        texts = [group["positive"], *group["negatives"][:7]]  # type: ignore[list-item]
        logits = encoder.logits([(str(group["query"]), str(t)) for t in texts], batch_size=8)
        reciprocal_ranks.append(1 / (1 + int((logits[1:] > logits[0]).sum())))
        all_scores += logits.tolist()
    return float(np.mean(reciprocal_ranks)), all_scores


def spearman(a: list[float], b: list[float]) -> float:
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=REPO / "var" / "reranker" / "run-L4" / "model")
    parser.add_argument("--data", type=Path, default=REPO / "var" / "reranker" / "data")
    parser.add_argument("--out", type=Path, default=packaged_reranker_folder())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fp32_folder = Path(tmp) / "fp32"
        (fp32_folder / "onnx").mkdir(parents=True)
        for name in ("tokenizer.json", "config.json"):
            shutil.copy(args.model / name, fp32_folder / name)
        write_cross_encoder_onnx(args.model, fp32_folder / "onnx" / "model.onnx")
        int8_file = Path(tmp) / "model_int8.onnx"
        quantize_int8(fp32_folder / "onnx" / "model.onnx", int8_file)
        groups = dev_groups(args.data)
        fp32_mrr, fp32_scores = mrr_and_scores(OnnxCrossEncoder(fp32_folder, MAX_LENGTH), groups)
        # Only the serving files are replaced: the model card (README.md) next to them is written by hand.
        shutil.rmtree(args.out / "onnx", ignore_errors=True)
        (args.out / "onnx").mkdir(parents=True)
        shutil.copy(int8_file, args.out / "onnx" / "model_int8.onnx")
        for name in ("tokenizer.json", "config.json"):
            shutil.copy(args.model / name, args.out / name)
    int8_mrr, int8_scores = mrr_and_scores(OnnxCrossEncoder(args.out, MAX_LENGTH), groups)
    report = {
        "dev_groups": len(groups),
        "dev_mrr_fp32": round(fp32_mrr, 4),
        "dev_mrr_int8": round(int8_mrr, 4),
        "spearman_int8_vs_fp32": round(spearman(fp32_scores, int8_scores), 4),
        "int8_bytes": (args.out / "onnx" / "model_int8.onnx").stat().st_size,
        "tokenizer_bytes": (args.out / "tokenizer.json").stat().st_size,
    }
    (args.model.parent / "export.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2), "->", args.out)


if __name__ == "__main__":
    main()
