"""The names of the inputs and outputs of the ONNX graphs ragkb writes (ragkb_models.bert_onnx) and runs
(ragkb_models.onnx_encoder, ragkb_models.cross_encoder).

A module of their own so that running a graph does not import `onnx`, which only writing one needs: its import
(ml_dtypes' extension above all) was ~1.3 s of the retriever's and the worker's start, about a third of their
imports (`python -X importtime`, 2026-12-07; the api never imported it)."""

from __future__ import annotations

INPUT_NAMES = ("input_ids", "attention_mask")
# A sentence-transformers embedding folder's graph: mean pooling over the attention mask, then L2 normalisation.
OUTPUT_NAME = "sentence_embedding"
# A cross-encoder's graph: one relevance logit per (query, passage) pair.
RELEVANCE_OUTPUT_NAME = "logits"
