"""The per-key token bucket in a real Redis: one budget for every limiter on the same database, Redis's
clock, Retry-After, expiry of idle buckets, and a per-process limit while Redis does not answer. The take on the
event loop (ragkb_api.redis_script) against real Redis servers: its script evicted, its connections killed, a
server that asks for a password, and the redis-py client for the URLs it does not speak."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ragkb_api.rate_limit import (
    _TAKE_SCRIPT,
    REDIS_KEY_PREFIX,
    REDIS_TIMEOUT_S,
    RateLimiter,
    RateLimitSettings,
    RedisTokenBuckets,
    build_rate_limiter,
)
from ragkb_api.redis_script import LeanScript, RedisPyScript, script_runners
from ragkb_core.errors import TooManyRequests
from tests.support.redis_db import private_redis_db

pytestmark = pytest.mark.integration


@pytest.fixture
def database() -> Iterator[redis.Redis]:
    with private_redis_db() as connection:
        yield connection


def url_of(database: redis.Redis, query: str = "") -> str:
    kwargs = database.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs['db']}{query}"


def limiter(database: redis.Redis, per_minute: int, burst: int) -> RedisTokenBuckets:
    kwargs = database.connection_pool.connection_kwargs
    connection = redis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs["db"])
    settings = RateLimitSettings(requests_per_minute=per_minute, burst=burst)
    return RedisTokenBuckets(settings, connection, script_runners(url_of(database), _TAKE_SCRIPT, REDIS_TIMEOUT_S))


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


def test_the_loops_take_runs_the_script_again_after_redis_forgot_it_and_after_its_connection_was_killed(
    database: redis.Redis,
) -> None:
    take = limiter(database, 1, 5)

    async def scenario() -> int:
        allowed = await _spent_async(take, "k", 1)
        assert isinstance(take._async_take(), LeanScript)
        database.script_flush()  # as after a Redis restart: EVALSHA answers NOSCRIPT
        allowed += await _spent_async(take, "k", 1)
        _drop_other_connections_to(database)  # as a Redis restart would
        allowed += await _spent_async(take, "k", 1)
        await take.aclose()
        return allowed

    assert asyncio.run(scenario()) == 3
    # Each take reached Redis: none fell back to the per-process buckets.
    assert float(database.hget(REDIS_KEY_PREFIX + "k", "tokens") or 0) == pytest.approx(2, abs=0.01)
    take.close()


def _drop_other_connections_to(database: redis.Redis) -> None:
    """Kill every connection to the test's own database but the test's (the shared Redis serves other runs)."""
    db = database.connection_pool.connection_kwargs["db"]
    mine = database.client_id()
    for client in database.client_list():
        if int(client["db"]) == db and int(client["id"]) != mine:
            database.client_kill_filter(_id=client["id"])


def test_a_url_with_options_is_taken_through_redis_py_with_the_same_budget(database: redis.Redis) -> None:
    runners = script_runners(url_of(database, "?health_check_interval=30"), _TAKE_SCRIPT, REDIS_TIMEOUT_S)
    settings = RateLimitSettings(requests_per_minute=1, burst=2)
    take = RedisTokenBuckets(settings, redis.Redis.from_url(url_of(database)), runners)

    async def scenario() -> int:
        assert isinstance(take._async_take(), RedisPyScript)
        allowed = await _spent_async(take, "k", 4)
        await take.aclose()
        return allowed

    assert asyncio.run(scenario()) == 2
    assert database.exists(REDIS_KEY_PREFIX + "k") == 1
    take.close()


@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A Redis server of the test's own on a free port that refuses clients without its password."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (make redis installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    password = "s3cret/with:odd@chars"
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--requirepass", password, "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=port, password=password).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield port, password
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_loops_take_authenticates_and_selects_its_database(redis_with_password: tuple[int, str]) -> None:
    port, password = redis_with_password
    quoted = password.replace("/", "%2F").replace(":", "%3A").replace("@", "%40")
    settings = RateLimitSettings(requests_per_minute=1, burst=2)
    url = f"redis://:{quoted}@127.0.0.1:{port}/3"
    take = build_rate_limiter(settings, url)
    wrong = build_rate_limiter(settings, f"redis://:wrong@127.0.0.1:{port}/3")

    async def scenario() -> tuple[int, int]:
        allowed = await _spent_async(take, "k", 3)
        # A refused AUTH is a Redis failure like any other: this process limits on its own meanwhile.
        allowed_without_redis = await _spent_async(wrong, "other", 3)
        await take.aclose()
        await wrong.aclose()
        return allowed, allowed_without_redis

    assert asyncio.run(scenario()) == (2, 2)
    stored = redis.Redis(port=port, password=password, db=3)
    assert stored.exists(REDIS_KEY_PREFIX + "k") == 1 and stored.exists(REDIS_KEY_PREFIX + "other") == 0
    take.close()
    wrong.close()
