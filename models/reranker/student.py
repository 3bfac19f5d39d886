"""Step 2 of the reranker recipe: the untrained student, cut from multilingual-e5-small.

    python models/reranker/student.py [--layers 6] [--out var/reranker/student-L6]

The student is a transformers `BertForSequenceClassification` (one relevance logit) whose encoder is e5's
embeddings and its first `--layers` transformer layers (the pooler and classifier start from random weights).
Two cuts make it small and fast on a CPU:

- layers: cost per pair is linear in them; the lower layers carry the lexical and most of the semantic
  matching a reranker needs on top of a retrieval that already found the candidates;
- vocabulary: e5 has 250,037 pieces (96 M of its 118 M parameters) for ~100 languages. Kept: every piece the
  training and evaluation text use, every single-character piece (so any character of any script still has
  its own id, as before) and the most frequent pieces by the unigram model's own scores (so other Japanese
  and English text still tokenises into familiar pieces). Text that needed a dropped piece is cut into the
  smaller pieces that remain, by the same unigram algorithm.

The tokenizer is e5's (NFKC-like normaliser, Metaspace) with its pieces renumbered; pairs are encoded XLM-R
style, `<s> query </s></s> passage </s>`, all with token type 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from common import DATA, read_jsonl  # noqa: E402

SPECIAL_PIECES = 4  # <s> <pad> </s> <unk> come first in e5's vocabulary and keep their ids
FREQUENT_PIECES = 8000
MAX_LENGTH = 512


def e5_folder() -> Path:
    from ragkb_core.settings import EmbeddingSettings
    from ragkb_models.e5_convert import convert_e5

    return convert_e5(EmbeddingSettings().cache_dir)


def vocabulary_texts() -> Iterator[str]:
    for path in sorted((DATA / "training" / "jaquad_train").glob("*.json")):
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            yield article["title"]
            for paragraph in article["paragraphs"]:
                yield paragraph["context"]
                yield from (qa["question"] for qa in paragraph["qas"])
    for record in json.loads((DATA / "training" / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8")).values():
        yield record["QUESTION"]
        yield from record["CONTEXTS"]
    for corpus in ("jsquad", "scifact"):
        for row in read_jsonl(DATA / corpus / "corpus.jsonl"):
            yield row["title"]
            yield row["text"]
        yield from (row["text"] for row in read_jsonl(DATA / corpus / "queries.jsonl"))


def kept_piece_ids(tokenizer: Tokenizer, vocab: list[list[object]], texts: Iterable[str]) -> list[int]:
    used: set[int] = set(range(SPECIAL_PIECES))
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == 2048:
            used.update(i for e in tokenizer.encode_batch(batch, add_special_tokens=False) for i in e.ids)
            batch.clear()
    used.update(i for e in tokenizer.encode_batch(batch, add_special_tokens=False) for i in e.ids)
    single_characters = {i for i, (piece, _) in enumerate(vocab) if len(str(piece).replace("\u2581", "")) <= 1}
    by_score = sorted(range(SPECIAL_PIECES, len(vocab)), key=lambda i: -float(vocab[i][1]))  # type: ignore[arg-type]
    return sorted(used | single_characters | set(by_score[:FREQUENT_PIECES]))


def pruned_tokenizer(spec: dict[str, object], vocab: list[list[object]], kept: list[int]) -> dict[str, object]:
    new_id = {old: new for new, old in enumerate(kept)}
    model = dict(spec["model"])  # type: ignore[call-overload]
    model["vocab"] = [vocab[i] for i in kept]
    model["unk_id"] = new_id[model["unk_id"]]
    added = [dict(token, id=new_id[token["id"]]) for token in spec["added_tokens"] if token["id"] in new_id]  # type: ignore[attr-defined]
    post = json.loads(json.dumps(spec["post_processor"]))
    for special in post["special_tokens"].values():
        special["ids"] = [new_id[i] for i in special["ids"]]
    return {**spec, "model": model, "added_tokens": added, "post_processor": post}


def student_weights(source: dict[str, np.ndarray], kept: list[int], layers: int, hidden: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weights: dict[str, np.ndarray] = {}
    for name, value in source.items():
        if name.startswith("encoder.layer.") and int(name.split(".")[2]) >= layers:
            continue
        rows = value[kept] if name == "embeddings.word_embeddings.weight" else value
        weights[f"bert.{name}"] = np.ascontiguousarray(rows, dtype=np.float32)
    # BERT's initialisation for the new head: normal(0, 0.02), zero biases.
    weights["bert.pooler.dense.weight"] = rng.normal(0, 0.02, (hidden, hidden)).astype(np.float32)
    weights["bert.pooler.dense.bias"] = np.zeros(hidden, np.float32)
    weights["classifier.weight"] = rng.normal(0, 0.02, (1, hidden)).astype(np.float32)
    weights["classifier.bias"] = np.zeros(1, np.float32)
    return weights


def build_student(source_dir: Path, out: Path, layers: int) -> dict[str, int]:
    spec = json.loads((source_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    kept = kept_piece_ids(Tokenizer.from_file(str(source_dir / "tokenizer.json")), vocab, vocabulary_texts())
    config = json.loads((source_dir / "config.json").read_text(encoding="utf-8"))
    source = {k: v for k, v in load_file(str(source_dir / "model.safetensors")).items() if "position_ids" not in k}
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(pruned_tokenizer(spec, vocab, kept), ensure_ascii=False))
    config.update(
        architectures=["BertForSequenceClassification"],
        num_hidden_layers=layers,
        vocab_size=len(kept),
        num_labels=1,
        id2label={"0": "LABEL_0"},
        label2id={"LABEL_0": 0},
        pad_token_id=kept.index(1),
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer_config = {"model_max_length": MAX_LENGTH, "tokenizer_class": "PreTrainedTokenizerFast"}
    tokenizer_config.update(
        bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", sep_token="</s>", cls_token="<s>"
    )  # type: ignore[arg-type]
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    save_file(student_weights(source, kept, layers, config["hidden_size"]), str(out / "model.safetensors"))
    return {"vocabulary": len(kept), "source_vocabulary": len(vocab), "layers": layers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or REPO / "var" / "reranker" / f"student-L{args.layers}"
    print(build_student(e5_folder(), out, args.layers), "->", out)


if __name__ == "__main__":
    main()
