"""The ONNX Runtime encoder: a BERT folder's graph built once into the cache (float32, optionally int8: one
int8 graph for passages, one for queries), run with `tokenizers` and `onnxruntime` alone, without torch."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray
from tokenizers import Tokenizer

from ragkb_models.cache import MARKER_NAME, build_file, build_lock, file_is_complete
from ragkb_models.graph_io import INPUT_NAMES, OUTPUT_NAME

logger = logging.getLogger(__name__)

# int8: every product in int8, the graph of `chunking.passage_precision: int8` and of the `onnx-int8` backend;
# int8-mixed: int8 but for the three products that int8 moves most, the graph of `passage_precision: int8-mixed`;
# int8-block: int8 weights and activations per block (BLOCK_INT8), the graph of `passage_precision: int8-block`
# (the default). Each has its recipe (INT8_RECIPES). The retriever embeds queries with any of them
# (RAGKB_RETRIEVER__QUERY_PRECISION, int8-block by default).
Precision = Literal["fp32", "int8", "int8-mixed", "int8-block"]
ONNX_FILES: dict[Precision, str] = {
    "fp32": "onnx/model.onnx",
    "int8": "onnx/model_int8.onnx",
    "int8-mixed": "onnx/model_int8_mixed.onnx",
    "int8-block": "onnx/model_int8_block.onnx",
}
# Bump when the way the float32 graph is written changes, so cached graphs are rebuilt (a change of an int8
# recipe rebuilds that graph by itself: the recipe is part of its provenance).
ONNX_BUILDER_VERSION = 1


@dataclass(frozen=True)
class Int8Recipe:
    """What dynamic int8 quantisation (weights per output channel, activations per run) touches in a BERT graph."""

    # The op types quantised; None: every one ONNX Runtime's dynamic quantisation knows (in this graph the
    # MatMuls, the fused Attention's Q/K/V projection and the embedding Gathers).
    op_types: tuple[str, ...] | None = None
    # MatMuls whose weight initializer's name matches one of these patterns (re.fullmatch) stay float32.
    float_weights: tuple[str, ...] = ()

    def provenance(self) -> dict[str, list[str] | None]:
        """As the build marker stores it (JSON: lists, not tuples), so that a graph's marker compares equal."""
        return {
            "op_types": None if self.op_types is None else list(self.op_types),
            "float_weights": list(self.float_weights),
        }

    def quantize(self, source: Path, output: Path) -> None:
        quantize_int8(source, output, self)


# Passages: every op quantised. Existing KBs' int8 vectors were made with it: never change it.
PASSAGE_INT8 = Int8Recipe()
# Mixed: the same, but for the FFN down-projections of layers 0, 4 and 5, which stay float32. Quantised one at a
# time, they moved e5's query vectors most (layer 4's alone ~40 % of the whole int8 graph's cosine loss) on
# PubMedQA and JaQuAD training questions; bench/query_encoder.py measures what that keeps for queries. Passages
# move 2.5–3.1× less from their float32 vectors than with PASSAGE_INT8 (1 − cosine 0.0009 / 0.0012 against
# 0.0027 / 0.0030 on SciFact / JSQuAD chunks) at about its speed (bench/passage_precision.py; README, Benchmarks).
# Existing KBs' int8-mixed vectors are made with it: never change it.
MIXED_INT8 = Int8Recipe(float_weights=(r"encoder\.layer\.[045]\.output\.dense\.weight",))


@dataclass(frozen=True)
class BlockInt8Recipe:
    """Blockwise int8 (ONNX Runtime's MatMulNBits): each MatMul's weights in int8 with one scale per block of
    `block_size` values along the input dimension, and at `accuracy_level` 4 its activations quantised to int8
    per block too, where dynamic int8 (Int8Recipe) has one scale per run for a whole activation tensor. A block
    scale follows BERT's outlier dimensions instead of being stretched by them: the vectors move ~10× less from
    float32 than int8-mixed's, at ~1.3× float32's speed (bench/passage_precision.py; README, Benchmarks).
    The fused attention's Q/K/V product stays float32 (MatMulNBits replaces MatMuls only)."""

    bits: int = 8
    block_size: int = 128
    accuracy_level: int = 4

    def provenance(self) -> dict[str, int]:
        return {"bits": self.bits, "block_size": self.block_size, "accuracy_level": self.accuracy_level}

    def quantize(self, source: Path, output: Path) -> None:
        quantize_block_int8(source, output, self)


# Existing KBs' int8-block vectors are made with it: never change it.
BLOCK_INT8 = BlockInt8Recipe()
# How each int8 graph is made from the float32 one.
INT8_RECIPES: dict[Precision, Int8Recipe | BlockInt8Recipe] = {
    "int8": PASSAGE_INT8,
    "int8-mixed": MIXED_INT8,
    "int8-block": BLOCK_INT8,
}


def ensure_onnx_model(model_dir: Path, precision: Precision) -> Path:
    """The cached ONNX graph of a converted BERT folder, built on first use (fp32 first, int8 from it)."""
    target = model_dir / ONNX_FILES[precision]
    provenance = graph_provenance(model_dir, precision)
    if file_is_complete(target, provenance):
        return target
    source = None if precision == "fp32" else ensure_onnx_model(model_dir, "fp32")
    with build_lock(model_dir, target.name):
        if not file_is_complete(target, provenance):
            started = time.perf_counter()
            build_file(target, provenance, lambda tmp: _write(model_dir, source, precision, tmp))
            logger.info("built %s in %.1f s", target, time.perf_counter() - started)
    return target


def graph_provenance(model_dir: Path, precision: Precision) -> dict[str, Any]:
    """What a cached graph was built from: the converted folder, the builder and, for int8, the recipe — so a
    changed recipe rebuilds its graph (the passages' recipe never changes, so its graph comes out the same)."""
    provenance: dict[str, Any] = {
        "folder": _folder_provenance(model_dir),
        "builder": ONNX_BUILDER_VERSION,
        "precision": precision,
    }
    if precision in INT8_RECIPES:
        provenance["recipe"] = INT8_RECIPES[precision].provenance()
    return provenance


def _folder_provenance(model_dir: Path) -> str:
    # The folder's own build marker names the weights it was converted from; a rebuilt folder changes it.
    return (model_dir / MARKER_NAME).read_text(encoding="utf-8")


def _write(model_dir: Path, fp32_source: Path | None, precision: Precision, output: Path) -> None:
    # Imported here: writing a graph needs `onnx`, whose import costs a service's start ~1.3 s (graph_io).
    from ragkb_models.bert_onnx import write_bert_onnx

    if fp32_source is None:
        write_bert_onnx(model_dir, output)
    else:
        INT8_RECIPES[precision].quantize(fp32_source, output)


def quantize_int8(source: Path, output: Path, recipe: Int8Recipe = PASSAGE_INT8) -> None:
    """Dynamic int8 quantisation of the weights, per output channel: per-tensor scales lost too much
    (cosine to fp32 down to 0.976 on real passages); per-channel stays above 0.99 at the same speed."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        source,
        output,
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=list(recipe.op_types) if recipe.op_types is not None else None,
        nodes_to_exclude=_nodes_reading(source, recipe.float_weights),
        # Shape inference does not know the contrib Attention op's output type; it is float.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def quantize_block_int8(source: Path, output: Path, recipe: BlockInt8Recipe = BLOCK_INT8) -> None:
    """Every MatMul of the graph as MatMulNBits in `recipe`'s bits, blocks and accuracy level."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # It logs a line at INFO for every node it leaves alone (hundreds), into whatever logging the service set up.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(source)),
        bits=recipe.bits,
        block_size=recipe.block_size,
        is_symmetric=True,
        accuracy_level=recipe.accuracy_level,
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(output), use_external_data_format=False)


def _nodes_reading(graph_path: Path, weight_patterns: Sequence[str]) -> list[str]:
    """The names of the nodes that read an initializer whose name matches one of the patterns."""
    import onnx

    if not weight_patterns:
        return []
    graph = onnx.load(str(graph_path)).graph
    patterns = [re.compile(p) for p in weight_patterns]
    weights = {i.name for i in graph.initializer if any(p.fullmatch(i.name) for p in patterns)}
    return [node.name for node in graph.node if weights.intersection(node.input)]


@dataclass(frozen=True)
class Tokens:
    """Token ids and attention masks of texts, one row each, padded on the right to the longest of them."""

    ids: NDArray[np.int64]
    mask: NDArray[np.int64]

    def lengths(self) -> list[int]:
        """Each text's tokens, special tokens included, truncated at the model's limit."""
        lengths: list[int] = self.mask.sum(axis=1).tolist()
        return lengths

    def rows(self, run: Sequence[int]) -> Tokens:
        """The rows of `run`, trimmed to the longest of them: what tokenising those texts alone gives."""
        rows = list(run)
        mask = self.mask[rows]
        width = int(mask.sum(axis=1).max())
        return Tokens(self.ids[rows, :width], mask[:, :width])


class OnnxEncoder:
    """Encodes already-prefixed texts into L2-normalised vectors with one ONNX Runtime session."""

    def __init__(self, model_path: Path, tokenizer: Tokenizer, max_seq_length: int, pad_id: int, threads: int) -> None:
        self._tokenizer = _padded_copy(tokenizer, max_seq_length, pad_id)
        self._session = ort.InferenceSession(
            str(model_path), onnx_session_options(threads), providers=["CPUExecutionProvider"]
        )
        self.dimension = int(self._session.get_outputs()[0].shape[-1])

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        return self.encode_tokens(self.tokenize(texts))

    def tokenize(self, texts: Sequence[str]) -> Tokens:
        # One text (a query) is tokenised on this thread; a batch goes through the tokenizer's thread pool,
        # whose wake-up would only add to a batch of one.
        encodings = [self._tokenizer.encode(texts[0])] if len(texts) == 1 else self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return Tokens(ids, mask)

    def encode_tokens(self, tokens: Tokens) -> NDArray[np.float32]:
        (vectors,) = self._session.run([OUTPUT_NAME], dict(zip(INPUT_NAMES, (tokens.ids, tokens.mask), strict=True)))
        return np.asarray(vectors, dtype=np.float32)


def _padded_copy(tokenizer: Tokenizer, max_seq_length: int, pad_id: int) -> Tokenizer:
    # A copy, so that padding and truncation never leak into the tokenizer used for counting.
    padded = Tokenizer.from_str(tokenizer.to_str())
    padded.enable_truncation(max_length=max_seq_length)
    padded.enable_padding(pad_id=pad_id, pad_token=tokenizer.id_to_token(pad_id) or "<pad>")
    return padded


def onnx_session_options(threads: int) -> ort.SessionOptions:
    """CPU session options for every ONNX model ragkb runs (embedder and reranker) beside its web servers."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads  # 0: one per physical core, ONNX Runtime's own choice
    options.inter_op_num_threads = 1
    # Idle threads sleep instead of spinning: the models share a few cores with web servers. On 2 cores
    # spinning saved ~1.5 ms per query and no measurable passage throughput, while burning a neighbour's core.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options
