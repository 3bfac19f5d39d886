"""The per-key token bucket in a real Redis: one budget for every limiter on the same database, Redis's
clock, Retry-After, expiry of idle buckets, and a per-process limit while Redis does not answer."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from ragkb_api.rate_limit import (
    REDIS_KEY_PREFIX,
    RateLimiter,
    RateLimitSettings,
    RedisTokenBuckets,
    build_rate_limiter,
)
from ragkb_core.errors import TooManyRequests
from tests.support.redis_db import private_redis_db

pytestmark = pytest.mark.integration


@pytest.fixture
def database() -> Iterator[redis.Redis]:
    with private_redis_db() as connection:
        yield connection


def limiter(database: redis.Redis, per_minute: int, burst: int) -> RedisTokenBuckets:
    kwargs = database.connection_pool.connection_kwargs
    connection = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs["db"])

    def async_connection() -> AsyncRedis:
        return AsyncRedis(host=kwargs["host"], port=kwargs["port"], db=kwargs["db"])

    settings = RateLimitSettings(requests_per_minute=per_minute, burst=burst)
    return RedisTokenBuckets(settings, connection, async_connection)


def spent(take: RateLimiter, key: str, attempts: int) -> tuple[int, list[TooManyRequests]]:
    allowed, refusals = 0, []
    for _ in range(attempts):
        try:
            take.take(key)
            allowed += 1
        except TooManyRequests as exc:
            refusals.append(exc)
    return allowed, refusals


def test_two_limiters_on_one_redis_share_a_keys_budget(database: redis.Redis) -> None:
    first, second = limiter(database, 1, 4), limiter(database, 1, 4)
    taken = [spent(take, "k", 1)[0] for _ in range(5) for take in (first, second)]
    assert sum(taken) == 4  # one burst of 4 across both, not 4 each
    allowed, refusals = spent(first, "k", 1)
    assert allowed == 0
    assert refusals[0].status == 429
    assert 1 <= refusals[0].retry_after_s <= 60  # one token a minute


def test_keys_have_buckets_of_their_own(database: redis.Redis) -> None:
    shared = limiter(database, 1, 2)
    assert spent(shared, "a", 3)[0] == 2
    assert spent(shared, "b", 3)[0] == 2


def test_a_refused_request_costs_nothing_and_tokens_come_back_at_the_rate(database: redis.Redis) -> None:
    fast = limiter(database, 600, 1)  # one token every 0.1 s
    assert spent(fast, "k", 1)[0] == 1
    allowed, refusals = spent(fast, "k", 20)
    assert allowed <= 1 and refusals and refusals[0].headers == {"Retry-After": "1"}
    state = database.hgetall(REDIS_KEY_PREFIX + "k")
    assert float(state[b"tokens"]) < 1  # refusals were not charged below zero
    assert float(state[b"tokens"]) >= 0
    time.sleep(0.25)
    assert spent(fast, "k", 1)[0] == 1


def test_an_idle_bucket_expires_once_it_would_be_full_again(database: redis.Redis) -> None:
    shared = limiter(database, 60, 3)  # one token a second: full again 1 s after one take
    shared.take("k")
    ttl_ms = database.pttl(REDIS_KEY_PREFIX + "k")
    assert 0 < ttl_ms <= 2000


def test_zero_requests_per_minute_disables_the_limit_without_touching_redis(database: redis.Redis) -> None:
    off = limiter(database, 0, 1)
    assert spent(off, "k", 50)[0] == 50
    assert database.exists(REDIS_KEY_PREFIX + "k") == 0


def test_without_redis_each_process_limits_on_its_own() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = RateLimitSettings(requests_per_minute=1, burst=2)
    unreachable = build_rate_limiter(settings, f"redis://127.0.0.1:{port}/0")
    allowed, refusals = spent(unreachable, "k", 5)
    assert allowed == 2 and len(refusals) == 3
    unreachable.close()


def test_memory_store_keeps_buckets_in_the_process(database: redis.Redis) -> None:
    settings = RateLimitSettings(requests_per_minute=1, burst=2, store="memory")
    kwargs = database.connection_pool.connection_kwargs
    first = build_rate_limiter(settings, f"redis://127.0.0.1:{kwargs['port']}/{kwargs['db']}")
    second = build_rate_limiter(settings, f"redis://127.0.0.1:{kwargs['port']}/{kwargs['db']}")
    assert spent(first, "k", 3)[0] == 2
    assert spent(second, "k", 3)[0] == 2
    assert database.keys(REDIS_KEY_PREFIX + "*") == []


def test_a_request_worth_many_tokens_spends_them_at_once_or_nothing_and_a_large_one_leaves_a_debt(
    database: redis.Redis,
) -> None:
    slow = limiter(database, 1, 5)  # one token a minute
    slow.take("k", 3)
    with pytest.raises(TooManyRequests):
        slow.take("k", 3)  # two left: refused whole
    assert float(database.hget(REDIS_KEY_PREFIX + "k", "tokens") or 0) == pytest.approx(2, abs=0.01)
    large = limiter(database, 1, 5)
    large.take("fresh", 12)  # a full bucket lets one larger than the burst through, in debt
    assert float(database.hget(REDIS_KEY_PREFIX + "fresh", "tokens") or 0) == pytest.approx(-7, abs=0.01)
    with pytest.raises(TooManyRequests) as indebted:
        large.take("fresh")
    assert indebted.value.retry_after_s >= 7 * 60


async def _spent_async(take: RateLimiter, key: str, attempts: int) -> int:
    allowed = 0
    for _ in range(attempts):
        try:
            await take.take_async(key)
            allowed += 1
        except TooManyRequests:
            pass
    return allowed


def test_the_guards_take_on_the_event_loop_spends_the_same_budget_as_a_threads_take(database: redis.Redis) -> None:
    kwargs = database.connection_pool.connection_kwargs
    url = f"redis://127.0.0.1:{kwargs['port']}/{kwargs['db']}"
    on_loop = build_rate_limiter(RateLimitSettings(requests_per_minute=1, burst=4), url)
    in_thread = limiter(database, 1, 4)

    async def scenario() -> tuple[int, int]:
        first = await _spent_async(on_loop, "k", 2)
        in_between = spent(in_thread, "k", 1)[0]  # the same bucket in Redis, taken the sync way
        await on_loop.aclose()  # the loop's client closed; a later take opens another
        after = await _spent_async(on_loop, "k", 3)
        await on_loop.aclose()
        return first + in_between, after

    assert asyncio.run(scenario()) == (3, 1)  # a burst of 4 across both ways, then refused
    assert float(database.hget(REDIS_KEY_PREFIX + "k", "tokens") or 0) == pytest.approx(0, abs=0.01)
    on_loop.close()


def test_without_redis_the_take_on_the_event_loop_limits_per_process() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = build_rate_limiter(RateLimitSettings(requests_per_minute=1, burst=2), f"redis://127.0.0.1:{port}/0")

    async def scenario() -> int:
        allowed = await _spent_async(unreachable, "k", 5)
        await unreachable.aclose()
        return allowed

    assert asyncio.run(scenario()) == 2
    unreachable.close()
