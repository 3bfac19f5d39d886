"""Dense pseudo-relevance feedback (Rocchio): the question's vector moved towards the passages a first pass
found best, so that a second pass finds their neighbours (KbRetrieval.feedback_passages, feedback_weight)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def moved_query(query: Sequence[float], passages: Sequence[Sequence[float]], weight: float) -> list[float]:
    """q + weight × mean(passages), scaled to unit length (cosine ranking ignores the length, but the dense leg's
    scores stay cosines, which the relevance calibration reads). No passages: the query as it was."""
    if not passages or weight <= 0:
        return list(query)
    size = len(passages)
    moved = [q + weight * sum(p[i] for p in passages) / size for i, q in enumerate(query)]
    norm = math.sqrt(sum(value * value for value in moved))
    return [value / norm for value in moved] if norm > 0 else list(query)
