"""Cross-encoders for reranking: one interface over two runtimes.

- `OnnxCrossEncoder`: a folder with `onnx/model_int8.onnx` (or `onnx/model.onnx`), `tokenizer.json` and
  `config.json` and no torch weights, run with ONNX Runtime and `tokenizers` alone. ragkb's own reranker
  (trained by models/reranker/, shipped inside this package as `PACKAGED_RERANKER`) is one; the recipe's
  `export.py` writes any one-label BERT cross-encoder the same way.
- `SentenceTransformersCrossEncoder`: any sentence-transformers `CrossEncoder` id or folder, on torch.

Both return raw logits, one row per (query, passage) pair; mapping them to 0–1 is the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray
from tokenizers import Tokenizer

from ragkb_models.graph_io import INPUT_NAMES, RELEVANCE_OUTPUT_NAME
from ragkb_models.onnx_encoder import onnx_session_options

# The name that selects the reranker shipped in this package (RAGKB_RERANKER__MODEL, a KB's reranker_model).
PACKAGED_RERANKER = "ragkb-reranker-ja-en-small"
ONNX_CROSS_ENCODER_FILES = ("onnx/model_int8.onnx", "onnx/model.onnx")

Pair = tuple[str, str]


class CrossEncoderModel(Protocol):
    def logits(self, pairs: Sequence[Pair], batch_size: int) -> NDArray[np.float32]: ...


def passage_for_reranking(title: str | None, heading_path: Sequence[str], text: str) -> str:
    """What a cross-encoder reads for one passage: its title and headings, then its text, as the embedder sees
    it. The retriever and the reranker recipe (models/reranker/) both use this, so training matches serving."""
    context = " > ".join(part for part in (title, *heading_path) if part)
    return f"{context}\n{text}" if context else text


def blend_scores(rerank: Sequence[float], fused: Sequence[float], rerank_weight: float) -> list[float]:
    """The order a reranked list is served in: `rerank_weight` × the reranker's 0–1 score plus the rest × the
    fused score, min–max scaled to 0–1 over the same candidates (fused scores have no fixed range: RRF's are
    tiny, DBSF's sum several legs). Weight 1 is the reranker's order alone; a small reranker is best trusted
    with part of the decision, the hybrid list keeping the rest (models/reranker/evaluate.py measures it)."""
    low, high = min(fused, default=0.0), max(fused, default=0.0)
    spread = high - low
    return [
        rerank_weight * r + (1 - rerank_weight) * ((f - low) / spread if spread > 0 else 1.0)
        for r, f in zip(rerank, fused, strict=True)
    ]


def packaged_reranker_folder() -> Path:
    return Path(str(files("ragkb_models") / "rerankers" / PACKAGED_RERANKER))


def onnx_cross_encoder_file(folder: Path) -> Path | None:
    return next((folder / name for name in ONNX_CROSS_ENCODER_FILES if (folder / name).is_file()), None)


class OnnxCrossEncoder:
    """Scores pairs with one ONNX Runtime session. Pairs are encoded once, sorted by length and batched, so a
    batch pads to its own longest pair instead of the longest of all (passages vary from a line to a page)."""

    def __init__(self, folder: Path, max_length: int, threads: int = 0) -> None:
        model_file = onnx_cross_encoder_file(folder)
        if model_file is None:
            raise FileNotFoundError(
                f"no ONNX cross-encoder in {folder} (looked for {', '.join(ONNX_CROSS_ENCODER_FILES)})"
            )
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self._pad_id = int(config.get("pad_token_id", 0))
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_length, strategy="only_second")
        self._tokenizer.no_padding()
        self._session = ort.InferenceSession(
            str(model_file), onnx_session_options(threads), providers=["CPUExecutionProvider"]
        )

    def logits(self, pairs: Sequence[Pair], batch_size: int) -> NDArray[np.float32]:
        encodings = [e.ids for e in self._tokenizer.encode_batch(list(pairs))]
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i]))
        out = np.empty(len(encodings), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            ids, mask = self._padded([encodings[i] for i in batch])
            (logits,) = self._session.run([RELEVANCE_OUTPUT_NAME], dict(zip(INPUT_NAMES, (ids, mask), strict=True)))
            out[batch] = np.asarray(logits, dtype=np.float32)[:, 0]
        return out

    def _padded(self, rows: list[list[int]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        width = max(len(row) for row in rows)
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask


class SentenceTransformersCrossEncoder:
    """A sentence-transformers CrossEncoder (hub id or folder) on torch, raw logits out."""

    def __init__(self, name: str, max_length: int, device: str) -> None:
        import torch
        from sentence_transformers import CrossEncoder

        # Raw logits out, whatever the model's config says: the mapping to 0–1 is the caller's.
        self._model = CrossEncoder(name, max_length=max_length, device=device, activation_fn=torch.nn.Identity())

    def logits(self, pairs: Sequence[Pair], batch_size: int) -> NDArray[np.float32]:
        scores = self._model.predict(list(pairs), batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32)


def load_cross_encoder(name: str, max_length: int, device: str) -> CrossEncoderModel:
    """The packaged reranker by its name, an ONNX cross-encoder folder, or a sentence-transformers id/folder."""
    if name == PACKAGED_RERANKER:
        return OnnxCrossEncoder(packaged_reranker_folder(), max_length)
    if _looks_like_path(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            # Otherwise a missing folder is taken for a hub id: a confusing error, or a network wait.
            raise FileNotFoundError(f"no model folder at {folder}")
        if _is_onnx_only(folder) and device == "cpu":
            return OnnxCrossEncoder(folder, max_length)
        name = str(folder)
    return SentenceTransformersCrossEncoder(name, max_length, device)


def _is_onnx_only(folder: Path) -> bool:
    # A folder with torch weights is a sentence-transformers model even when it also carries an ONNX export
    # (whose inputs may differ from ours); one with only our ONNX graph is run by ONNX Runtime.
    torch_weights = any((folder / name).is_file() for name in ("model.safetensors", "pytorch_model.bin"))
    return not torch_weights and onnx_cross_encoder_file(folder) is not None


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).exists()
