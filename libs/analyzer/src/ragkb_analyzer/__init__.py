"""Text analysis for the BM25 leg: the same analyzer turns chunks and queries into sparse term weights."""

from ragkb_analyzer.analyzer import ANALYZER_VERSION, Analyzer, term_id
from ragkb_analyzer.bm25 import Bm25Encoder

__all__ = ["ANALYZER_VERSION", "Analyzer", "Bm25Encoder", "term_id"]
