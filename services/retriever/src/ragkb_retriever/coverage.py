"""The question's keyword coverage of each answered passage, for its relevance (ragkb_core.fusion.keyword_coverage).

The coverage weighs each of the question's terms by its IDF in the KB's keyword index. No engine tells a term's
document frequency, so the index reads each IDF off a one-term search (VectorIndex.term_idfs): one batch of
small searches per question. IDFs move only as a KB's documents change and only shift a relevance a little, so
they are kept for a short while per KB generation (TERM_IDF_TTL_S) and the common terms of a KB's questions
are not searched again on every question.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ragkb_core.fusion import keyword_coverage
from ragkb_retriever.index.port import VectorIndex

# How long a term's IDF is reused: a KB that grows from 1,000 to 2,000 passages in this time moves an IDF by
# at most ln 2 / ln 1000 ≈ 10 %, well inside what a relevance threshold can tell apart.
TERM_IDF_TTL_S = 60.0
# Terms kept across all KBs (about 100 bytes each): the vocabulary of many questions, bounded.
MAX_CACHED_TERMS = 100_000

_IdfKey = tuple[str, int | None, int]


class TermIdfCache:
    """Each term's IDF in a KB generation's keyword index, reused for TERM_IDF_TTL_S; thread-safe."""

    def __init__(
        self,
        index: VectorIndex,
        *,
        ttl_s: float = TERM_IDF_TTL_S,
        max_terms: int = MAX_CACHED_TERMS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._index = index
        self._ttl_s = ttl_s
        self._max_terms = max_terms
        self._clock = clock
        self._entries: OrderedDict[_IdfKey, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def idfs(self, kb_id: str, generation: int | None, terms: Sequence[int]) -> dict[int, float]:
        found, missing = self._cached(kb_id, generation, terms)
        if missing:
            fresh = self._index.term_idfs(kb_id, missing, generation=generation)
            self._keep(kb_id, generation, fresh)
            found.update(fresh)
        return found

    def _cached(self, kb_id: str, generation: int | None, terms: Sequence[int]) -> tuple[dict[int, float], list[int]]:
        now = self._clock()
        found: dict[int, float] = {}
        missing: list[int] = []
        with self._lock:
            for term in dict.fromkeys(terms):
                entry = self._entries.get((kb_id, generation, term))
                if entry is not None and now - entry[1] < self._ttl_s:
                    found[term] = entry[0]
                else:
                    missing.append(term)
        return found, missing

    def _keep(self, kb_id: str, generation: int | None, idfs: dict[int, float]) -> None:
        now = self._clock()
        with self._lock:
            for term, idf in idfs.items():
                key = (kb_id, generation, term)
                self._entries[key] = (idf, now)
                self._entries.move_to_end(key)
            while len(self._entries) > self._max_terms:
                self._entries.popitem(last=False)


class KeywordCoverage:
    """The question's keyword coverage of passages in a KB's index, IDFs read through a TermIdfCache."""

    def __init__(self, index: VectorIndex, idfs: TermIdfCache | None = None) -> None:
        self._index = index
        self._idfs = idfs if idfs is not None else TermIdfCache(index)

    def of(
        self, kb_id: str, generation: int | None, query_terms: Sequence[int], point_ids: Sequence[str]
    ) -> dict[str, float]:
        """Each passage's coverage by point id (0 for a question without terms)."""
        if not point_ids:
            return {}
        if not query_terms:
            return dict.fromkeys(point_ids, 0.0)
        idfs = self._idfs.idfs(kb_id, generation, query_terms)
        held = self._index.sparse_term_ids(kb_id, list(dict.fromkeys(point_ids)), generation=generation)
        return {point: keyword_coverage(query_terms, held.get(point, set()), idfs) for point in point_ids}
