"""The per-key token bucket: burst, steady rate, Retry-After, independence of keys, and off switch."""

from __future__ import annotations

import pytest

from ragkb_api.rate_limit import RateLimitSettings, TokenBuckets
from ragkb_core.errors import TooManyRequests


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def buckets(per_minute: int, burst: int, clock: FakeClock) -> TokenBuckets:
    return TokenBuckets(RateLimitSettings(requests_per_minute=per_minute, burst=burst), clock=clock)


def test_a_key_may_spend_its_burst_then_is_refused_with_a_whole_second_retry_after() -> None:
    limiter = buckets(60, 3, FakeClock())
    for _ in range(3):
        limiter.take("k")
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("k")
    assert refused.value.status == 429
    assert refused.value.headers == {"Retry-After": "1"}


def test_tokens_come_back_at_the_configured_rate() -> None:
    clock = FakeClock()
    limiter = buckets(6, 1, clock)  # one token every 10 s
    limiter.take("k")
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("k")
    assert refused.value.retry_after_s == 10
    clock.now += 10
    limiter.take("k")


def test_keys_have_buckets_of_their_own() -> None:
    limiter = buckets(60, 1, FakeClock())
    limiter.take("a")
    limiter.take("b")
    with pytest.raises(TooManyRequests):
        limiter.take("a")


def test_zero_requests_per_minute_disables_the_limit() -> None:
    limiter = buckets(0, 1, FakeClock())
    for _ in range(1000):
        limiter.take("k")


def test_a_request_worth_many_spends_that_many_or_nothing() -> None:
    clock = FakeClock()
    limiter = buckets(60, 5, clock)
    limiter.take("k", 3)
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("k", 3)  # two left: refused whole, and it spends nothing
    assert refused.value.retry_after_s == 1
    limiter.take("k", 2)
    with pytest.raises(TooManyRequests):
        limiter.take("k")


def test_a_request_worth_more_than_the_burst_needs_a_full_bucket_and_leaves_a_debt() -> None:
    clock = FakeClock()
    limiter = buckets(60, 5, clock)  # one token a second
    limiter.take("k")
    with pytest.raises(TooManyRequests) as refused:
        limiter.take("k", 20)
    assert refused.value.retry_after_s == 1  # until the bucket is full again
    clock.now += 1
    limiter.take("k", 20)  # full: runs, 15 tokens in debt
    with pytest.raises(TooManyRequests) as indebted:
        limiter.take("k")
    assert indebted.value.retry_after_s == 16
