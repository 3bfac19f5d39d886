"""The torch encoder: any sentence-transformers model id or folder, run by sentence-transformers on CPU.
torch and sentence-transformers are imported here only, so the ONNX path never loads them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer

from ragkb_models.errors import ModelError


class TorchEncoder:
    """Encodes already-prefixed texts into L2-normalised vectors with a SentenceTransformer."""

    def __init__(self, model_name_or_path: str, threads: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            # Process-wide in torch: the last embedder loaded in a process decides.
            torch.set_num_threads(threads)
        try:
            self._model = SentenceTransformer(model_name_or_path, device="cpu")
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load sentence-transformers model {model_name_or_path!r}: {exc}") from exc
        dimension, max_seq_length = self._model.get_embedding_dimension(), self._model.max_seq_length
        if not dimension or not max_seq_length:
            raise ModelError(f"{model_name_or_path!r} does not state its embedding dimension and maximum length")
        self.dimension = dimension
        self.max_seq_length = max_seq_length

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = self._model.encode(
            list(texts),
            batch_size=max(len(texts), 1),  # the Embedder already cut the batch
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def tokenizer(self) -> Tokenizer:
        """A private copy of the model's fast tokenizer, without padding or truncation, for counting."""
        backend = getattr(self._model.tokenizer, "backend_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            raise ModelError("the model has no fast (tokenizers) tokenizer; token counting needs one")
        counting = Tokenizer.from_str(backend.to_str())
        counting.no_truncation()
        counting.no_padding()
        return counting
