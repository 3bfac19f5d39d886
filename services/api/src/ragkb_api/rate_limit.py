"""Per-key rate limit: a token bucket per API key, kept in this api process's memory.

Each key may make `burst` requests at once and then `requests_per_minute` on average. With several api
replicas each has its own buckets, so a key's effective limit is the per-replica limit times the replicas;
a Redis-backed bucket (shared by the replicas) is the scaled-out option.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragkb_core.errors import TooManyRequests


class RateLimitSettings(BaseModel):
    """RAGKB_RATE_LIMIT__*: per API key and per api process; 0 requests per minute disables the limit."""

    requests_per_minute: int = Field(default=600, ge=0, description="Sustained requests per minute per key.")
    burst: int = Field(default=120, ge=1, description="Requests a key may make at once before the rate applies.")


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """One bucket per key id, refilled continuously at `rate_per_s` up to `capacity` tokens."""

    def __init__(self, settings: RateLimitSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate_per_s = settings.requests_per_minute / 60
        self._capacity = float(settings.burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        # Guards are async but handlers may run in threads; a plain lock keeps each take atomic.
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._rate_per_s > 0

    def take(self, key_id: str) -> None:
        """Spend one token of `key_id`'s bucket, or raise TooManyRequests with the wait until one is back."""
        if not self.enabled:
            return
        with self._lock:
            bucket = self._refilled(key_id)
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return
            wait_s = (1 - bucket.tokens) / self._rate_per_s
        raise TooManyRequests(
            f"this key made too many requests; try again in {math.ceil(wait_s)} s",
            retry_after_s=max(1, math.ceil(wait_s)),
        )

    def _refilled(self, key_id: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.setdefault(key_id, _Bucket(tokens=self._capacity, updated=now))
        bucket.tokens = min(self._capacity, bucket.tokens + (now - bucket.updated) * self._rate_per_s)
        bucket.updated = now
        return bucket
