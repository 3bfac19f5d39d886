"""A tiny cross-encoder built on the spot: no pretrained reranker ships offline, so tests that need the real
sentence-transformers `CrossEncoder` path load this instead.

Its weights are random but seeded, so its scores are deterministic and rank nothing meaningfully: tests check
the mechanics (our order follows the model's own scores), never relevance."""

from __future__ import annotations

import string
from pathlib import Path

import torch
from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    *("the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from"),
    *("it", "are", "be", "this", "an", "or", "which", "vitamin", "protein", "cell", "cells", "risk", "study"),
    *("patients", "disease", "leave", "paid", "days", "how", "many", "what", "when", "where", "who", "why"),
]
SEED = 20240611


def build_tiny_cross_encoder(folder: Path, num_labels: int = 1, max_positions: int = 512) -> Path:
    """Write a 2-layer BERT sequence classifier with a small WordPiece vocabulary into `folder`, ready for
    `CrossEncoder(str(folder))` offline; the same seed always gives the same weights.

    `max_positions` below the reranker's max_length gives a model that loads but fails on long inputs (its
    position table is too short), as a real misconfigured model does."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    with torch.random.fork_rng():  # seeded here without changing the caller's random state
        torch.manual_seed(SEED)
        model = _model(tokenizer.vocab_size, num_labels, max_positions)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _model(vocab_size: int, num_labels: int, max_positions: int) -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        # Wider than BERT's 0.02: with the usual init every pair gets nearly the same logit and the order
        # would be left to float noise.
        initializer_range=0.2,
    )
    config.num_labels = num_labels
    model = BertForSequenceClassification(config)
    # A pooler and a head wide enough that the logits spread over both signs (std ≈ 0.6 on SciFact passages)
    # without saturating the pooler's tanh.
    assert model.bert.pooler is not None
    torch.nn.init.normal_(model.bert.pooler.dense.weight, std=0.3)
    torch.nn.init.normal_(model.classifier.weight, std=1.0)
    return model


def _tokenizer() -> BertTokenizer:
    letters = list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation)
    tokens = SPECIAL_TOKENS + letters + [f"##{piece}" for piece in letters] + WORDS
    # transformers 5: BertTokenizer is the fast (Rust) tokenizer, and it takes the WordPiece vocabulary as
    # `vocab` (a dict or a path); `vocab_file=` is silently ignored and leaves only the special tokens.
    vocab = {token: index for index, token in enumerate(dict.fromkeys(tokens))}
    return BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=512)
