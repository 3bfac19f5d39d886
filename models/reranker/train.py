"""Step 3 of the reranker recipe: train the student on the mined groups, checkpointing so a run can resume.

    python models/reranker/train.py [--student var/reranker/student-L4] [--run var/reranker/run-L4]
                                    [--steps 3000] [--max-minutes 60]

Each step takes `--groups` training groups; a group is one question with its positive chunk and `--negatives`
hard negatives drawn from the mined ones. Loss: listwise softmax cross-entropy over the group's logits (the
positive must outscore its own hard negatives: that is the ranking the reranker is for) plus a smaller binary
cross-entropy term, so that sigmoid(logit) stays a usable 0–1 relevance score for a KB's score_threshold.

The word embeddings are frozen: they are 70% of the parameters, the pruned pieces absent from the training
text would otherwise drift away from those present, and the optimiser runs faster without them.

A checkpoint (weights, optimiser, schedule, step, RNG states) is written every `--checkpoint-every` steps and at
the end of the time budget; rerunning the same command resumes from it, so the run can span sessions. The
finished model is saved as a transformers folder (`<run>/model`) that `export.py` turns into ONNX. `--device`
trains on an accelerator where there is one (CUDA); a checkpoint resumes on either device.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn
from transformers import BertForSequenceClassification

REPO = Path(__file__).resolve().parents[2]
MAX_LENGTH = 256
PAD_ID_KEY = "pad_token_id"
BCE_WEIGHT = 0.3


def read_groups(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class PairEncoder:
    """(query, passage) pairs → padded id and mask tensors, XLM-R pair template, passage truncated first."""

    def __init__(self, folder: Path, pad_id: int, device: torch.device) -> None:
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_LENGTH, strategy="only_second")
        self._tokenizer.enable_padding(pad_id=pad_id)
        self._device = device

    def __call__(self, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        encodings = self._tokenizer.encode_batch(pairs)
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], device=self._device),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], device=self._device),
        }


def group_pairs(groups: list[dict[str, Any]], negatives: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for group in groups:
        drawn = rng.sample(group["negatives"], negatives) if len(group["negatives"]) >= negatives else None
        chosen = drawn or [group["negatives"][i % len(group["negatives"])] for i in range(negatives)]
        pairs += [(group["query"], group["positive"])] + [(group["query"], text) for text in chosen]
    return pairs


def ranking_loss(logits: torch.Tensor, group_size: int) -> torch.Tensor:
    grouped = logits.view(-1, group_size)
    targets = torch.zeros(grouped.shape[0], dtype=torch.long, device=logits.device)
    listwise = nn.functional.cross_entropy(grouped, targets)
    labels = torch.zeros_like(grouped)
    labels[:, 0] = 1.0
    pointwise = nn.functional.binary_cross_entropy_with_logits(grouped, labels)
    return listwise + BCE_WEIGHT * pointwise


@torch.no_grad()
def dev_mrr(model: nn.Module, encode: PairEncoder, dev: list[dict[str, Any]], negatives: int) -> float:
    """MRR of the positive among its group (positive + the first `negatives` mined negatives) on held-out groups."""
    model.eval()
    reciprocal_ranks = []
    for group in dev:
        texts = [group["positive"], *group["negatives"][:negatives]]
        logits = model(**encode([(group["query"], t) for t in texts])).logits.squeeze(-1)
        rank = 1 + int((logits[1:] > logits[0]).sum())
        reciprocal_ranks.append(1 / rank)
    model.train()
    return sum(reciprocal_ranks) / len(reciprocal_ranks)


def schedule(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


class Trainer:
    """The model, optimiser and schedule of one run, and the checkpoint that carries them across processes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.model = BertForSequenceClassification.from_pretrained(args.student).to(self.device)
        self.model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
        for layer in self.model.bert.encoder.layer[: args.freeze_layers]:
            layer.requires_grad_(False)
        self.encode = PairEncoder(args.student, self.model.config.pad_token_id, self.device)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.01)
        warmup = args.steps // 20
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: schedule(s, args.steps, warmup))
        self.step = 0
        self.rng = random.Random(13)
        self.checkpoint_path = args.run / "checkpoint.pt"

    def resume(self) -> bool:
        if not self.checkpoint_path.exists():
            return False
        # Loaded onto this run's device: a run may start on an accelerator and resume on CPU, or the reverse.
        state = torch.load(self.checkpoint_path, weights_only=False, map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = state["step"]
        self.rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"].cpu())
        return True

    def checkpoint(self) -> None:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "rng": self.rng.getstate(),
            "torch_rng": torch.get_rng_state(),
        }
        tmp = self.checkpoint_path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(self.checkpoint_path)  # a crash while saving leaves the previous checkpoint intact

    def train_step(self, train: list[dict[str, Any]]) -> float:
        groups = self.args.groups
        # The data order is a function of the step alone, so a resumed run sees what an uninterrupted one would.
        first = self.step * groups
        order = random.Random(first // len(train)).sample(range(len(train)), len(train))
        batch = [train[order[(first + i) % len(train)]] for i in range(groups)]
        pairs = group_pairs(batch, self.args.negatives, self.rng)
        loss = ranking_loss(self.model(**self.encode(pairs)).logits.squeeze(-1), 1 + self.args.negatives)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.step += 1
        return float(loss.detach())

    def save(self) -> Path:
        final = self.args.run / "model"
        shutil.rmtree(final, ignore_errors=True)
        self.model.save_pretrained(final)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(self.args.student / name, final / name)
        return final


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--student", type=Path, default=REPO / "var" / "reranker" / "student-L4")
    parser.add_argument("--data", type=Path, default=REPO / "var" / "reranker" / "data")
    parser.add_argument("--run", type=Path, default=REPO / "var" / "reranker" / "run-L4")
    parser.add_argument("--steps", type=int, default=3000, help="planned steps (the learning-rate schedule's length)")
    parser.add_argument("--groups", type=int, default=4, help="groups per step")
    parser.add_argument("--negatives", type=int, default=3, help="hard negatives per group")
    parser.add_argument("--lr", type=float, default=6e-5)
    parser.add_argument("--freeze-layers", type=int, default=1, help="lowest transformer layers kept as e5 has them")
    parser.add_argument("--max-minutes", type=float, default=60, help="stop (with a checkpoint) after this long")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--dev-every", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where the model trains (default: cuda when there is one, else cpu); checkpoints move between them",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    args.run.mkdir(parents=True, exist_ok=True)
    log_path = args.run / "log.jsonl"
    trainer = Trainer(args)
    train = read_groups(args.data / "train.jsonl")
    dev = read_groups(args.data / "dev.jsonl")[:300]

    def log_dev() -> None:
        with log_path.open("a") as log:
            log.write(
                json.dumps({"step": trainer.step, "dev_mrr": dev_mrr(trainer.model, trainer.encode, dev, 7)}) + "\n"
            )

    if trainer.resume():
        print(f"resumed at step {trainer.step}", flush=True)
    else:
        (args.run / "config.json").write_text(json.dumps({k: str(v) for k, v in vars(args).items()}, indent=2))
        log_dev()
    trainer.model.train()
    started, recent = time.monotonic(), []
    while trainer.step < args.steps and time.monotonic() - started < args.max_minutes * 60:
        recent.append(trainer.train_step(train))
        if trainer.step % 20 == 0:
            rate = len(recent) / max(1e-9, time.monotonic() - started)
            print(f"step {trainer.step} loss {sum(recent[-20:]) / 20:.4f} ({rate:.2f} steps/s this run)", flush=True)
        if trainer.step % args.checkpoint_every == 0:
            trainer.checkpoint()
        if trainer.step % args.dev_every == 0 or trainer.step == args.steps:
            log_dev()
    trainer.checkpoint()
    print(f"step {trainer.step}/{args.steps}; model saved to {trainer.save()}", flush=True)


if __name__ == "__main__":
    main()
