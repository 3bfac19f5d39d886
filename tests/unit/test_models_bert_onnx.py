"""The hand-built ONNX graph computes what transformers' BertModel + mean pooling + L2 normalisation compute,
checked on a small randomly initialised BERT saved in the Hugging Face format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from numpy.typing import NDArray
from transformers import BertConfig, BertModel

from ragkb_models.bert_onnx import BertShape, write_bert_onnx
from ragkb_models.errors import ModelError


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[BertModel, Path]:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
    )
    model = BertModel(config).eval()  # type: ignore[no-untyped-call]
    folder = tmp_path_factory.mktemp("tiny-bert")
    model.save_pretrained(folder)
    write_bert_onnx(folder, folder / "model.onnx")
    return model, folder


def reference_embeddings(model: BertModel, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> NDArray[np.float32]:
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    weights = torch.from_numpy(mask).unsqueeze(-1).float()
    mean = (hidden * weights).sum(1) / weights.sum(1)
    normalised: NDArray[np.float32] = torch.nn.functional.normalize(mean, dim=-1).numpy()
    return normalised


def test_graph_matches_bert_with_mean_pooling_on_a_padded_batch(tiny_bert: tuple[BertModel, Path]) -> None:
    model, folder = tiny_bert
    rng = np.random.default_rng(1)
    ids = rng.integers(4, 100, size=(3, 11), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    ids[mask == 0] = 1
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    (actual,) = session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
    expected = reference_embeddings(model, ids, mask)
    assert actual.shape == (3, 64)
    np.testing.assert_allclose(actual, expected, atol=2e-5)


def test_padding_does_not_change_a_text_s_vector(tiny_bert: tuple[BertModel, Path]) -> None:
    _, folder = tiny_bert
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([[5, 6, 7, 8]], dtype=np.int64)
    padded = np.array([[5, 6, 7, 8, 1, 1, 1]], dtype=np.int64)
    (alone,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    (in_padding,) = session.run(None, {"input_ids": padded, "attention_mask": (padded != 1).astype(np.int64)})
    np.testing.assert_allclose(alone, in_padding, atol=1e-6)


def test_only_absolute_position_bert_models_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "xlm-roberta", "hidden_size": 8}')
    with pytest.raises(ModelError, match="only BERT"):
        BertShape.from_config(tmp_path / "config.json")
