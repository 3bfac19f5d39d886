"""BM25 as sparse vectors: documents carry the term-frequency part, the engine applies IDF (modifier)."""

from __future__ import annotations

import threading
from collections import Counter

from ragkb_analyzer.analyzer import Analysis, Analyzer, term_id
from ragkb_core.contracts import SparseTerms
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings

_encoders: dict[tuple[str, str], Bm25Encoder] = {}
_encoders_lock = threading.Lock()


class Bm25Encoder:
    """Document weight of term t: tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len)); query weight: 1 per term.
    k1 and b are the KB's (KbAnalyzer), avg_len the server's (AnalyzerSettings).

    With Qdrant's IDF modifier on the sparse vector, the dot product of the two is exactly BM25. len counts
    the text's word terms only (Analysis.length): extra recall terms (sub-words, bigrams) get weights but do
    not lengthen the text, so avg_len means the same for every analyzer configuration.
    """

    def __init__(self, analyzer: Analyzer, settings: AnalyzerSettings) -> None:
        self.analyzer = analyzer
        self._k1 = analyzer.config.bm25_k1
        self._b = analyzer.config.bm25_b
        self._avg_len = settings.avg_len

    @property
    def version(self) -> str:
        return self.analyzer.version

    def encode_document(self, text: str, title: str = "") -> SparseTerms:
        """A chunk's weights; `text` is what is embedded (title and heading path, then the chunk), and the
        analyzer's title_weight counts the document's `title` that many times in all."""
        extra_titles = [title] * (self.analyzer.config.title_weight - 1) if title else []
        return _to_sparse(self.term_weights(self.analyzer.analyze("\n".join([*extra_titles, text]))))

    def term_weights(self, analysis: Analysis) -> dict[str, float]:
        """The document weight of each distinct term of an analysed text (what encode_document sends)."""
        counts = Counter(analysis.terms)
        length_norm = self._k1 * (1 - self._b + self._b * analysis.length / self._avg_len)
        return {term: tf * (self._k1 + 1) / (tf + length_norm) for term, tf in counts.items()}

    def encode_query(self, text: str) -> SparseTerms:
        return _to_sparse(dict.fromkeys(self.analyzer.terms(text), 1.0))


def bm25_encoder_for(config: KbAnalyzer, settings: AnalyzerSettings) -> Bm25Encoder:
    """The encoder for a KB's analyzer, made once per process and configuration, then shared (thread-safe)."""
    key = (config.model_dump_json(), settings.model_dump_json())
    with _encoders_lock:
        if (encoder := _encoders.get(key)) is None:
            encoder = _encoders[key] = Bm25Encoder(Analyzer(config), settings)
        return encoder


def _to_sparse(weights: dict[str, float]) -> SparseTerms:
    # Two distinct terms may share a 32-bit id; add their weights rather than sending a duplicate index.
    by_id: dict[int, float] = {}
    for term, weight in weights.items():
        key = term_id(term)
        by_id[key] = by_id.get(key, 0.0) + weight
    ordered = sorted(by_id.items())
    return SparseTerms(indices=[i for i, _ in ordered], values=[v for _, v in ordered])
