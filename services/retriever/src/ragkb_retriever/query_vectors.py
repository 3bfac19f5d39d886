"""A bounded cache of query vectors: the same question asked again (an agent's retry, a user's repeat, a
search-test's four runs) is not embedded again.

Keyed by (embedding model, query text); the least recently used entry goes when the cache is full. A vector
is kept as float32 (what the model produced, 1.5 KB for 384 dimensions) and handed out as a new list of the
same floats, so a cached answer is exactly the computed one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ragkb_telemetry import metrics
from ragkb_telemetry.metrics import child

Key = tuple[str | None, str]


class QueryVectorCache:
    """Thread-safe LRU of query vectors; `capacity` 0 keeps nothing."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._vectors: OrderedDict[Key, NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_embed(self, model: str | None, text: str, embed: Callable[[], list[float]]) -> list[float]:
        key = (model, text)
        with self._lock:
            cached = self._vectors.get(key)
            if cached is not None:
                self._vectors.move_to_end(key)
                self.hits += 1
        if cached is not None:
            child(metrics.query_vector_cache, "hit").inc()
            vector: list[float] = cached.tolist()
            return vector
        # Embedded outside the lock: two threads missing the same query both embed it (same result), but a
        # slow embedding never holds up the hits of other queries.
        computed = embed()
        child(metrics.query_vector_cache, "miss").inc()
        with self._lock:
            self.misses += 1
            if self._capacity > 0:
                self._vectors[key] = np.asarray(computed, dtype=np.float32)
                self._vectors.move_to_end(key)
                while len(self._vectors) > self._capacity:
                    self._vectors.popitem(last=False)
        return computed

    def holds(self, model: str | None, text: str) -> bool:
        """Whether the question's vector is cached (without counting a hit or refreshing it)."""
        with self._lock:
            return (model, text) in self._vectors

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)
