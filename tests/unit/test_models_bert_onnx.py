"""The hand-built ONNX graphs compute what transformers computes: BertModel + mean pooling + L2 normalisation
(the embedder), and BertForSequenceClassification's one relevance logit (the reranker), checked on small
randomly initialised BERTs saved in the Hugging Face format."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from numpy.typing import NDArray
from transformers import BertConfig, BertForSequenceClassification, BertModel

from ragkb_models.bert_onnx import BertShape, write_bert_onnx, write_cross_encoder_onnx
from ragkb_models.errors import ModelError


def tiny_config(num_labels: int = 1) -> BertConfig:
    config = BertConfig(
        vocab_size=100,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
    )
    config.num_labels = num_labels
    return config


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[BertModel, Path]:
    torch.manual_seed(0)
    model = BertModel(tiny_config()).eval()  # type: ignore[no-untyped-call]
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


def test_relevance_graph_matches_bert_for_sequence_classification(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = BertForSequenceClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    write_cross_encoder_onnx(tmp_path, tmp_path / "model.onnx")
    rng = np.random.default_rng(3)
    ids = rng.integers(4, 100, size=(3, 9), dtype=np.int64)
    mask = np.ones_like(ids)
    mask[2, 4:] = 0
    ids[mask == 0] = 1
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    (actual,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    with torch.no_grad():
        expected = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    assert actual.shape == (3, 1)
    np.testing.assert_allclose(actual, expected, atol=2e-5)


def test_only_one_label_cross_encoders_are_built(tmp_path: Path) -> None:
    BertForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="one-label"):
        write_cross_encoder_onnx(tmp_path, tmp_path / "model.onnx")
