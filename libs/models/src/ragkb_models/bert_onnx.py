"""Writes ONNX graphs for BERT folders, with `input_ids` and `attention_mask` in and one of two heads:

- `sentence_embedding`: a sentence-transformers embedding folder — mean pooling over the attention mask and
  L2 normalisation;
- `logits`: a cross-encoder (transformers `BertForSequenceClassification`, one label) — the first token through
  the pooler (dense + tanh) and the classifier; one relevance logit per (query, passage) pair.

The graph is built here from the folder's weights instead of being traced: tracing transformers 5 models
with the TorchScript exporter bakes shapes in, the dynamo exporter needs onnxscript, and optimum-onnx (what
sentence-transformers' ONNX backend uses) requires transformers < 4.58. The graph follows BertModel's
arithmetic (exact-erf GELU, absolute positions from 0, token type 0), which the tests check against torch."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

from ragkb_models.errors import ModelError
from ragkb_models.graph_io import INPUT_NAMES, OUTPUT_NAME, RELEVANCE_OUTPUT_NAME

# The first opset with LayerNormalization. ReduceSum takes its axes as an input, ReduceL2 as an attribute.
OPSET = 17
# A BertForSequenceClassification checkpoint prefixes the encoder's weights with this.
CLASSIFIER_ENCODER_PREFIX = "bert."


@dataclass(frozen=True)
class BertShape:
    hidden: int
    layers: int
    heads: int
    layer_norm_eps: float

    @classmethod
    def from_config(cls, config_path: Path) -> BertShape:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute":
            raise ModelError(f"{config_path}: only BERT models with absolute positions can be built as ONNX")
        return cls(
            config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"], config["layer_norm_eps"]
        )


def write_bert_onnx(model_dir: Path, output: Path) -> None:
    shape = BertShape.from_config(model_dir / "config.json")
    weights = load_file(str(model_dir / "model.safetensors"))
    onnx.save_model(build_bert_graph(shape, weights), str(output))


def write_cross_encoder_onnx(model_dir: Path, output: Path) -> None:
    """The relevance graph of a one-label BertForSequenceClassification folder (config.json, model.safetensors)."""
    shape = BertShape.from_config(model_dir / "config.json")
    weights = load_file(str(model_dir / "model.safetensors"))
    onnx.save_model(build_cross_encoder_graph(shape, weights), str(output))


def build_bert_graph(shape: BertShape, weights: dict[str, NDArray[np.float32]]) -> onnx.ModelProto:
    graph = _GraphBuilder(weights)
    x = _encoder(graph, shape)
    graph.mean_pool_normalised(x, graph.node("Cast", ["attention_mask"], to=TensorProto.FLOAT))
    return graph.model(OUTPUT_NAME, shape.hidden)


def build_cross_encoder_graph(shape: BertShape, weights: dict[str, NDArray[np.float32]]) -> onnx.ModelProto:
    encoder = {k.removeprefix(CLASSIFIER_ENCODER_PREFIX): v for k, v in weights.items()}
    if encoder["classifier.weight"].shape[0] != 1:
        raise ModelError("only one-label cross-encoders (one relevance logit per pair) can be built as ONNX")
    graph = _GraphBuilder(encoder)
    graph.relevance_logit(_encoder(graph, shape))
    return graph.model(RELEVANCE_OUTPUT_NAME, 1)


def _encoder(graph: _GraphBuilder, shape: BertShape) -> str:
    x = graph.embeddings(shape.layer_norm_eps)
    # The fused Attention op takes the raw (batch, sequence) 0/1 mask as int32.
    key_mask = graph.node("Cast", ["attention_mask"], to=TensorProto.INT32)
    for layer in range(shape.layers):
        x = graph.encoder_layer(x, f"encoder.layer.{layer}", shape, key_mask)
    return x


class _GraphBuilder:
    """Accumulates nodes and initializers; each method returns the name of the tensor it produced."""

    def __init__(self, weights: dict[str, NDArray[np.float32]]) -> None:
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    def node(self, op: str, inputs: list[str], domain: str = "", **attributes: Any) -> str:
        output = f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def const(self, name: str, value: NDArray[np.generic]) -> str:
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        value = self.weights[name]
        # torch.nn.Linear keeps (out, in); MatMul wants (in, out).
        return self.const(name, np.ascontiguousarray(value.T) if transpose else value)

    def scalar(self, value: float) -> str:
        return self.const(f"const_{value!r}", np.array(value, dtype=np.float32))

    def ints(self, *values: int) -> str:
        return self.const("ints_" + "_".join(map(str, values)), np.array(values, dtype=np.int64))

    def embeddings(self, eps: float) -> str:
        words = self.node("Gather", [self.weight("embeddings.word_embeddings.weight"), "input_ids"])
        seq_len = self.node("Gather", [self.node("Shape", ["input_ids"]), self.ints(1)])
        positions = self.node(
            "Range",
            [
                self.const("zero_i64", np.array(0, np.int64)),
                self.node("Squeeze", [seq_len]),
                self.const("one_i64", np.array(1, np.int64)),
            ],
        )
        pos = self.node("Gather", [self.weight("embeddings.position_embeddings.weight"), positions])
        # Every token has type 0, so its embedding is one constant row.
        type0 = self.const("token_type_0", self.weights["embeddings.token_type_embeddings.weight"][0])
        summed = self.node("Add", [self.node("Add", [words, pos]), type0])
        return self.layer_norm(summed, "embeddings.LayerNorm", eps)

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        return self.node(
            "LayerNormalization",
            [x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")],
            axis=-1,
            epsilon=eps,
        )

    def linear(self, x: str, prefix: str) -> str:
        return self.node(
            "Add",
            [self.node("MatMul", [x, self.weight(f"{prefix}.weight", transpose=True)]), self.weight(f"{prefix}.bias")],
        )

    def encoder_layer(self, x: str, prefix: str, shape: BertShape, key_mask: str) -> str:
        context = self.attention(x, f"{prefix}.attention.self", shape, key_mask)
        attended = self.linear(context, f"{prefix}.attention.output.dense")
        x = self.layer_norm(
            self.node("Add", [attended, x]), f"{prefix}.attention.output.LayerNorm", shape.layer_norm_eps
        )
        inner = self.gelu(self.linear(x, f"{prefix}.intermediate.dense"))
        out = self.linear(inner, f"{prefix}.output.dense")
        return self.layer_norm(self.node("Add", [out, x]), f"{prefix}.output.LayerNorm", shape.layer_norm_eps)

    def attention(self, x: str, prefix: str, shape: BertShape, mask: str) -> str:
        # ONNX Runtime's fused Attention op (com.microsoft): packed Q/K/V projection, scaled dot-product
        # attention over unmasked keys, heads merged back. Its CPU kernel is what makes the graph faster than
        # torch; the same graph written with standard ops ran slower than torch on 2 cores.
        names = [f"{prefix}.{part}" for part in ("query", "key", "value")]
        packed_weight = np.concatenate([self.weights[f"{n}.weight"].T for n in names], axis=1)
        packed_bias = np.concatenate([self.weights[f"{n}.bias"] for n in names])
        inputs = [
            x,
            self.const(f"{prefix}.qkv.weight", packed_weight),
            self.const(f"{prefix}.qkv.bias", packed_bias),
            mask,
        ]
        return self.node("Attention", inputs, domain="com.microsoft", num_heads=shape.heads)

    def gelu(self, x: str) -> str:
        # 0.5·x·(1 + erf(x/√2)), written in the order ONNX Runtime's Gelu fusion recognises.
        erf = self.node("Erf", [self.node("Div", [x, self.scalar(math.sqrt(2.0))])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [erf, self.scalar(1.0)])]), self.scalar(0.5)])

    def mean_pool_normalised(self, x: str, mask: str) -> str:
        weights = self.node("Unsqueeze", [mask, self.ints(2)])
        summed = self.node("ReduceSum", [self.node("Mul", [x, weights]), self.ints(1)], keepdims=0)
        # Same floors as sentence-transformers' Pooling (count ≥ 1e-9) and Normalize (norm ≥ 1e-12).
        count = self.node("Max", [self.node("ReduceSum", [weights, self.ints(1)], keepdims=0), self.scalar(1e-9)])
        mean = self.node("Div", [summed, count])
        norm = self.node("Max", [self.node("ReduceL2", [mean], axes=[1], keepdims=1), self.scalar(1e-12)])
        self.nodes.append(helper.make_node("Div", [mean, norm], [OUTPUT_NAME], name=OUTPUT_NAME))
        return OUTPUT_NAME

    def relevance_logit(self, x: str) -> str:
        # BertPooler: the first token's hidden state through dense + tanh; then the one-label classifier.
        first = self.node("Gather", [x, self.const("zero_i64", np.array(0, np.int64))], axis=1)
        pooled = self.node("Tanh", [self.linear(first, "pooler.dense")])
        logit = self.linear(pooled, "classifier")
        self.nodes.append(helper.make_node("Identity", [logit], [RELEVANCE_OUTPUT_NAME], name=RELEVANCE_OUTPUT_NAME))
        return RELEVANCE_OUTPUT_NAME

    def model(self, output: str, width: int) -> onnx.ModelProto:
        inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in INPUT_NAMES]
        outputs = [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", width])]
        graph = helper.make_graph(self.nodes, f"bert_{output}", inputs, outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
            producer_name="ragkb_models",
        )
        onnx.checker.check_model(model)
        return model
