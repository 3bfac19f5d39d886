"""Text analysis for the BM25 leg: the same analyzer turns chunks and queries into sparse term weights."""

from ragkb_analyzer.analyzer import ANALYZER_VERSION, Analysis, Analyzer, shared_dictionary, term_id
from ragkb_analyzer.bm25 import Bm25Encoder, bm25_encoder_for
from ragkb_analyzer.words import BIGRAM_PREFIX

__all__ = [
    "ANALYZER_VERSION",
    "BIGRAM_PREFIX",
    "Analysis",
    "Analyzer",
    "Bm25Encoder",
    "bm25_encoder_for",
    "shared_dictionary",
    "term_id",
]
