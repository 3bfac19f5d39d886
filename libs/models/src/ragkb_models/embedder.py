"""The embedder every process uses: prefixes, batching and token counting around one encoder runtime.

`load_embedder(settings)` is the only place that picks a runtime. The packaged multilingual-e5-small runs on
ONNX Runtime (float32, or int8 weights) or torch, the packaged all-MiniLM-L6-v2 on float32 ONNX Runtime or torch;
any other sentence-transformers model runs on torch.
`EmbedderPool` holds the models a server may run (the default and EmbeddingSettings.allowed_models) by name."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray
from tokenizers import Tokenizer

from ragkb_core.kb_settings import PassagePrecision
from ragkb_core.settings import PACKAGED_MINILM_MODEL, EmbeddingSettings
from ragkb_models.e5_convert import E5_MODEL_NAME, convert_e5
from ragkb_models.onnx_encoder import OnnxEncoder, Precision, ensure_onnx_model
from ragkb_models.packaged_minilm import packaged_minilm_folder
from ragkb_models.precision_choice import CHOICES, Choice, Shape, choose, graph_precision

logger = logging.getLogger(__name__)

# The runtimes EmbeddingSettings.backend names; keep the two lists equal.
# onnx-int8-mixed: the int8 graph that keeps three products float32 (onnx_encoder.MIXED_INT8), and
# onnx-int8-block: the blockwise int8 graph (onnx_encoder.BLOCK_INT8): a KB's `int8-mixed` / `int8-block` passages
# and the retriever's queries in that precision (RAGKB_RETRIEVER__QUERY_PRECISION), never a configured backend.
Backend = Literal["onnx", "onnx-int8", "onnx-int8-mixed", "onnx-int8-block", "torch"]
_ONNX_PRECISION: dict[str, Precision] = {
    "onnx": "fp32",
    "onnx-int8": "int8",
    "onnx-int8-mixed": "int8-mixed",
    "onnx-int8-block": "int8-block",
}
# Padded tokens per forward run. On 2 cores both runtimes were fastest with runs of 256–1024 tokens
# (one long passage, or a few dozen short ones); 16 long passages per run were ~30% slower.
TOKENS_PER_RUN = 512


class TextEncoder(Protocol):
    dimension: int

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """L2-normalised vectors of already-prefixed texts, one row each, in order."""
        ...


class Embedder:
    """Embeds passages and queries with the model's prefixes, and counts tokens for the chunker.
    Vectors are L2-normalised float32, so a dot product is the cosine similarity."""

    def __init__(
        self,
        encoder: TextEncoder,
        tokenizer: Tokenizer,
        *,
        max_seq_length: int,
        query_prefix: str,
        passage_prefix: str,
        batch_size: int,
        max_padding_share: float,
    ) -> None:
        self._encoder = encoder
        self._tokenizer = tokenizer
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self._batch_size = batch_size
        self.dimension = encoder.dimension
        self.max_seq_length = max_seq_length
        # How much padding texts of different lengths may share a forward run with (EmbeddingSettings).
        self.max_padding_share = max_padding_share
        # The largest count_tokens(text) of a passage that is embedded whole: the prefix and the special
        # tokens take the rest. Longer passages are truncated at max_seq_length tokens.
        self.max_passage_tokens = max_seq_length - len(tokenizer.encode(passage_prefix.rstrip()).ids)

    def embed_passages(self, texts: Sequence[str]) -> NDArray[np.float32]:
        prefixed = [self._passage_prefix + text for text in texts]
        vectors = np.empty((len(prefixed), self.dimension), dtype=np.float32)
        if prefixed and isinstance(self._encoder, OnnxEncoder):
            # Tokenised once: the runs are planned on the lengths the model is given, and each run's rows are
            # the arrays tokenising its texts alone would give (identical vectors). Tokenising again per run
            # cost ~1 % of a task process's time on short documents (py-spy of a whole JSQuAD import).
            tokens = self._encoder.tokenize(prefixed)
            for run in plan_runs(tokens.lengths(), self._batch_size, TOKENS_PER_RUN, self.max_padding_share):
                vectors[run] = self._encoder.encode_tokens(tokens.rows(run))
            return vectors
        for run in plan_runs(self._lengths(prefixed), self._batch_size, TOKENS_PER_RUN, self.max_padding_share):
            vectors[run] = self._encoder.encode([prefixed[i] for i in run])
        return vectors

    def embed_query(self, text: str) -> list[float]:
        vector: list[float] = self._encoder.encode([self._query_prefix + text])[0].tolist()
        return vector

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` alone: no prefix, no special tokens."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets in `text` of each token counted by count_tokens, in order and never
        overlapping, so that text[start_i:start_j] holds tokens i..j-1. A token that shares its character
        with the next one (a lone word separator `▁` before a CJK character, or one of several tokens
        made from one character such as ㍻) gets an empty span."""
        offsets = self._tokenizer.encode(text, add_special_tokens=False).offsets
        next_starts = [start for start, _ in offsets[1:]] + [len(text)]
        return [(start, max(start, min(end, nxt))) for (start, end), nxt in zip(offsets, next_starts, strict=True)]

    def _lengths(self, texts: list[str]) -> list[int]:
        encodings = self._tokenizer.encode_batch(texts)
        return [min(len(e.ids), self.max_seq_length) for e in encodings]


def plan_runs(lengths: Sequence[int], max_texts: int, max_tokens: int, max_padding_share: float) -> list[list[int]]:
    """Group text indices into forward runs: sorted by length so padding is small, at most `max_texts`
    texts, `max_tokens` padded tokens and `max_padding_share` of padding per run (a single longer text still
    gets a run of its own)."""
    runs: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        # Sorted ascending, so the newest text is the longest and sets the padded width.
        length = lengths[index]
        padded = (len(current) + 1) * length
        if current and (
            len(current) >= max_texts or padded > max_tokens or padded - (tokens + length) > max_padding_share * padded
        ):
            runs.append(current)
            current, tokens = [], 0
        current.append(index)
        tokens += length
    if current:
        runs.append(current)
    return runs


_loaded: dict[str, Embedder] = {}
_loading: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def load_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder for these settings, loaded (and for the packaged model, converted) once per process."""
    key = settings.model_dump_json()
    if (embedder := _loaded.get(key)) is not None:
        return embedder
    # One lock per model: a model loading (seconds) does not hold up callers of one already loaded.
    with _locks_lock:
        lock = _loading.setdefault(key, threading.Lock())
    with lock:
        if key not in _loaded:
            _loaded[key] = _load(settings)
        return _loaded[key]


class EmbedderPool:
    """The embedders of every model this server may run (EmbeddingSettings: the default and `allowed_models`),
    by the model name a KB records; each loads on first use and is then shared by the process."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self._settings = settings
        self.default_model = settings.model
        # By the name asked for: the retriever asks once per search, and resolving the settings of a name
        # (a settings copy, its JSON as the key of load_embedder) cost ~40 µs each time.
        self._by_name: dict[tuple[str | None, PassagePrecision], Embedder] = {}

    def get(self, model: str | None = None, precision: PassagePrecision = "float32") -> Embedder:
        """The embedder of `model` (None: the default) in `precision` (a KB's passages, ragkb_core.kb_settings.
        KbChunking.passage_precision); InvalidInput when this server does not run the model."""
        key = (model, precision)
        embedder = self._by_name.get(key)
        if embedder is None:
            embedder = self._by_name[key] = load_embedder(in_precision(self._settings.for_model(model), precision))
        return embedder


_PASSAGE_BACKENDS: dict[PassagePrecision, Backend] = {
    "int8": "onnx-int8",
    "int8-mixed": "onnx-int8-mixed",
    "int8-block": "onnx-int8-block",
}


def in_precision(
    settings: EmbeddingSettings, precision: PassagePrecision, shape: Shape = "passages"
) -> EmbeddingSettings:
    """A KB's passages (or, `shape` "queries", the retriever's questions) in `precision`: int8, int8-mixed and
    int8-block swap the packaged e5's float32 ONNX graph for that int8 graph, and auto for the faster of float32
    and int8-block on this CPU (fastest_precision); any other model, and e5 on torch or already int8, stays as it
    is (only e5 has ONNX graphs: the others run on torch)."""
    if precision == "float32" or settings.model != E5_MODEL_NAME or settings.backend != "onnx":
        return settings
    resolved = fastest_precision(settings, shape) if precision == "auto" else precision
    if resolved == "float32":
        return settings
    return settings.model_copy(update={"backend": _PASSAGE_BACKENDS[resolved]})


def fastest_precision(settings: EmbeddingSettings, shape: Shape) -> Choice:
    """float32 or int8-block, whichever the packaged e5 runs faster on this CPU for `shape`: measured once per
    CPU and kept in the model cache (ragkb_models.precision_choice), so the first call may take seconds."""
    folder = convert_e5(settings.cache_dir)
    graphs = {name: ensure_onnx_model(folder, graph_precision(name)) for name in CHOICES}
    one_thread = settings.model_copy(update={"threads": 1})
    return choose(folder, shape, lambda path: onnx_embedder(one_thread, folder, path), graphs)


def build_embedder_files(settings: EmbeddingSettings) -> bool:
    """Convert the packaged model and build its ONNX graphs into the cache, as their first loads would: seconds
    once, a check of the build markers after that (a full load costs an ONNX session and seconds more at every
    start). The int8 graphs too on float32 ONNX: KBs may embed their passages in int8 (KbChunking.
    passage_precision), and the retriever embeds queries in one (RAGKB_RETRIEVER__QUERY_PRECISION); neither a first
    document nor a retriever's start must wait for a quantisation. The packaged MiniLM (any KB's second model)
    is copied and its graph built too. False for any other default model: only loading it fetches what it needs."""
    if settings.model != E5_MODEL_NAME:
        return False
    folder = convert_e5(settings.cache_dir)
    if settings.backend != "torch":
        ensure_onnx_model(folder, _ONNX_PRECISION[settings.backend])
    if settings.backend == "onnx":
        ensure_onnx_model(folder, "int8")
        ensure_onnx_model(folder, "int8-mixed")
        ensure_onnx_model(folder, "int8-block")
        fastest_precision(settings, "passages")  # measured now, so that no first document waits for it
    # The packaged MiniLM, which any KB may take as its second model: copied and built now too, so that a cache
    # made read-only after this (a container image) has it.
    minilm = packaged_minilm_folder(settings.cache_dir)
    if settings.backend != "torch":
        ensure_onnx_model(minilm, "fp32")
    return True


def _load(settings: EmbeddingSettings) -> Embedder:
    backend: Backend = settings.backend
    if settings.model == E5_MODEL_NAME:
        return _load_e5(settings, backend)
    if settings.model == PACKAGED_MINILM_MODEL:
        return _load_packaged_minilm(settings, backend)
    if backend != "torch":
        logger.warning(
            "ONNX graphs are built only for %s and %s; running %s on torch",
            E5_MODEL_NAME,
            PACKAGED_MINILM_MODEL,
            settings.model,
        )
    return _load_torch(settings, settings.model)


def _load_packaged_minilm(settings: EmbeddingSettings, backend: Backend) -> Embedder:
    """The packaged MiniLM: float32 ONNX on any ONNX backend (ragkb_models.packaged_minilm), else torch."""
    folder = packaged_minilm_folder(settings.cache_dir)
    if backend == "torch":
        return _load_torch(settings, str(folder))
    return onnx_embedder(settings, folder, ensure_onnx_model(folder, "fp32"))


def _load_e5(settings: EmbeddingSettings, backend: Backend) -> Embedder:
    folder = convert_e5(settings.cache_dir)
    if backend == "torch":
        return _load_torch(settings, str(folder))
    return onnx_embedder(settings, folder, ensure_onnx_model(folder, _ONNX_PRECISION[backend]))


def onnx_embedder(settings: EmbeddingSettings, folder: Path, model_path: Path) -> Embedder:
    """A packaged model (e5 converted into `folder`, or MiniLM copied there) running the ONNX graph at
    `model_path` (bench/query_encoder.py runs candidate graphs through it too)."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    max_seq_length = _read_json(folder / "sentence_bert_config.json")["max_seq_length"]
    pad_id = _read_json(folder / "config.json")["pad_token_id"]
    encoder = OnnxEncoder(model_path, tokenizer, max_seq_length, pad_id, settings.threads)
    return _embedder(settings, encoder, tokenizer, max_seq_length)


def _load_torch(settings: EmbeddingSettings, model: str) -> Embedder:
    from ragkb_models.torch_encoder import TorchEncoder

    encoder = TorchEncoder(model, settings.threads)
    return _embedder(settings, encoder, encoder.tokenizer(), encoder.max_seq_length)


def _embedder(settings: EmbeddingSettings, encoder: TextEncoder, tokenizer: Tokenizer, max_seq_length: int) -> Embedder:
    return Embedder(
        encoder,
        tokenizer,
        max_seq_length=max_seq_length,
        query_prefix=settings.query_prefix,
        passage_prefix=settings.passage_prefix,
        batch_size=settings.batch_size,
        max_padding_share=settings.max_padding_share,
    )


def _read_json(path: Path) -> dict[str, int]:
    value: dict[str, int] = json.loads(path.read_text(encoding="utf-8"))
    return value
