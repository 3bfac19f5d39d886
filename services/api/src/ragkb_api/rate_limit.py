"""Per-key rate limit: a token bucket per API key, shared by every api replica through Redis.

Each key may make `burst` requests at once and then `requests_per_minute` on average. A request that does the
work of many (an evaluation runs one search per query) spends that many tokens at once: it is refused while
the key lacks them, and one that needs more than `burst` needs a full bucket and leaves the key in debt
(negative tokens) until the rate has paid for it, so no request runs more searches than the key could
make one by one. With `store = "redis"`
(the default) the buckets live in Redis, so N api replicas give a key one budget, not N; each take is one
Lua script, atomic in Redis and timed by Redis's own clock (replicas' clocks never enter). `store = "memory"`
keeps them in this process (each replica its own), for an api without a shared Redis.

When Redis does not answer, the api keeps limiting with this process's buckets (a per-replica limit) and tries
Redis again after a pause: a Redis outage neither lets a key through unlimited nor refuses every request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, Field
from redis import Redis, RedisError
from redis.exceptions import ResponseError

from ragkb_api.redis_script import ScriptRunner, script_runners
from ragkb_core.errors import TooManyRequests
from ragkb_telemetry import metrics

logger = logging.getLogger(__name__)

# Bucket keys in Redis: one hash per API key id ({tokens, updated}), expiring once it would be full again.
REDIS_KEY_PREFIX = "ragkb:rate:"
# After Redis failed, this process limits on its own for this long before it asks Redis again.
REDIS_RETRY_AFTER_S = 5.0
# One take must not hold a request for long when Redis hangs.
REDIS_TIMEOUT_S = 0.5


class RateLimitSettings(BaseModel):
    """RAGKB_RATE_LIMIT__*: per API key; 0 requests per minute disables the limit."""

    requests_per_minute: int = Field(default=600, ge=0, description="Sustained requests per minute per key.")
    burst: int = Field(default=120, ge=1, description="Requests a key may make at once before the rate applies.")
    store: Literal["redis", "memory"] = Field(
        default="redis",
        description="Where the buckets live: `redis` (RAGKB_REDIS__URL, one budget per key shared by every api "
        "replica) or `memory` (each api process its own, so N replicas allow N times the limit).",
    )


class RateLimiter(Protocol):
    def take(self, key_id: str, tokens: int = 1) -> None:
        """Spend `tokens` requests of `key_id`'s budget, or raise TooManyRequests with the wait until they are
        back (spending nothing)."""
        ...

    async def take_async(self, key_id: str, tokens: int = 1) -> None:
        """`take` on the event loop (the guard's), without a hand-off to a worker thread."""
        ...

    def close(self) -> None: ...

    async def aclose(self) -> None:
        """What `take_async` opened on the running event loop is closed (at the app's shutdown)."""
        ...


def refused(wait_s: float) -> TooManyRequests:
    """The 429 for a key whose next token comes back in `wait_s` seconds (Retry-After: whole seconds, ≥ 1)."""
    retry_after_s = max(1, math.ceil(wait_s))
    metrics.rate_limit_refusals.inc()
    return TooManyRequests(
        f"this key made too many requests; try again in {retry_after_s} s", retry_after_s=retry_after_s
    )


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TokenBuckets:
    """In this process: one bucket per key id, refilled continuously at `rate_per_s` up to `capacity` tokens."""

    def __init__(self, settings: RateLimitSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate_per_s = settings.requests_per_minute / 60
        self._capacity = float(settings.burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        # Takes run in worker threads and on the event loop; a plain lock keeps each one atomic.
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._rate_per_s > 0

    def take(self, key_id: str, tokens: int = 1) -> None:
        if not self.enabled:
            return
        needed = min(tokens, self._capacity)  # more than the burst: a full bucket, then debt
        with self._lock:
            bucket = self._refilled(key_id)
            if bucket.tokens >= needed:
                bucket.tokens -= tokens
                return
            wait_s = (needed - bucket.tokens) / self._rate_per_s
        raise refused(wait_s)

    async def take_async(self, key_id: str, tokens: int = 1) -> None:
        # A few arithmetic steps under a lock no take holds for longer: no need to leave the loop.
        self.take(key_id, tokens)

    def close(self) -> None:
        """Nothing to release: the buckets are this process's memory."""

    async def aclose(self) -> None:
        """Nothing to release."""

    def _refilled(self, key_id: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.setdefault(key_id, _Bucket(tokens=self._capacity, updated=now))
        bucket.tokens = min(self._capacity, bucket.tokens + (now - bucket.updated) * self._rate_per_s)
        bucket.updated = now
        return bucket


# The same bucket as TokenBuckets, in Redis. Numbers travel as strings: Redis would truncate a Lua float
# returned or stored as a number to an integer. A refused take changes nothing but the refill bookkeeping.
_TAKE_SCRIPT = """
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local spend = tonumber(ARGV[3])
local needed = math.min(spend, capacity)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or capacity
local updated = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= needed then
  tokens = tokens - spend
else
  wait = (needed - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'updated', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / rate * 1000) + 1000)
return string.format('%.6f', wait)
"""


class RedisTokenBuckets:
    """The buckets in Redis, shared by every api process that uses the same Redis database. `async_takes` makes
    the runners of `take_async`'s script (one per event loop: an asyncio connection belongs to the loop that
    opened it; ragkb_api.redis_script)."""

    def __init__(
        self,
        settings: RateLimitSettings,
        redis: Redis,
        async_takes: Callable[[], ScriptRunner],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate_per_s = settings.requests_per_minute / 60
        self._capacity = settings.burst
        self._redis = redis
        self._take = redis.register_script(_TAKE_SCRIPT)
        self._new_async_take = async_takes
        self._async_takes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ScriptRunner] = (
            weakref.WeakKeyDictionary()
        )
        self._local = TokenBuckets(settings, clock)
        self._clock = clock
        self._redis_down_until = 0.0

    def take(self, key_id: str, tokens: int = 1) -> None:
        if self._takes_locally():
            self._local.take(key_id, tokens)
            return
        try:
            wait_s = float(self._take(keys=[REDIS_KEY_PREFIX + key_id], args=self._arguments(tokens)))
        except RedisError as exc:
            self._redis_failed(exc)
            self._local.take(key_id, tokens)
            return
        _refuse_if_waiting(wait_s)

    async def take_async(self, key_id: str, tokens: int = 1) -> None:
        if self._takes_locally():
            self._local.take(key_id, tokens)
            return
        script = self._async_take()
        try:
            answer = await script([REDIS_KEY_PREFIX + key_id], self._arguments(tokens))
            if answer is None:  # the script always answers a number: nil is a Redis that is not ours to trust
                raise ResponseError("the rate limit's script answered nil")
        except RedisError as exc:
            self._redis_failed(exc)
            self._local.take(key_id, tokens)
            return
        _refuse_if_waiting(float(answer))

    def close(self) -> None:
        self._redis.close()

    async def aclose(self) -> None:
        take = self._async_takes.pop(asyncio.get_running_loop(), None)
        if take is not None:
            await take.aclose()

    def _takes_locally(self) -> bool:
        """With the limit off (the local buckets then take nothing), or for a while after Redis failed."""
        return self._rate_per_s <= 0 or self._clock() < self._redis_down_until

    def _arguments(self, tokens: int) -> list[float | int]:
        return [self._rate_per_s, self._capacity, tokens]

    def _async_take(self) -> ScriptRunner:
        """The take script's runner on the running loop (made at the loop's first take)."""
        loop = asyncio.get_running_loop()
        take = self._async_takes.get(loop)
        if take is None:
            take = self._new_async_take()
            self._async_takes[loop] = take
        return take

    def _redis_failed(self, exc: RedisError) -> None:
        logger.warning("rate limit: Redis did not answer (%s); limiting per process for a while", exc)
        self._redis_down_until = self._clock() + REDIS_RETRY_AFTER_S


def _refuse_if_waiting(wait_s: float) -> None:
    if wait_s > 0:
        raise refused(wait_s)


def build_rate_limiter(settings: RateLimitSettings, redis_url: str) -> RateLimiter:
    """The limiter the settings name: shared through the Redis at `redis_url`, or this process's own."""
    if settings.store == "memory":
        return TokenBuckets(settings)
    redis = Redis.from_url(redis_url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
    return RedisTokenBuckets(settings, redis, script_runners(redis_url, _TAKE_SCRIPT, REDIS_TIMEOUT_S))
