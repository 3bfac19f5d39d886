"""Wall time per stage of one request, sent back as a `Server-Timing` header (W3C Server Timing), so that a
client, a browser's network panel or bench/profile_search.py sees where the api's time went."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

SERVER_TIMING_HEADER = "Server-Timing"
# Set by the access guard on the connection's state: its own time (key lookup, rate limit) in ms.
AUTH_MS_STATE = "auth_ms"


class StageTimings:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = (time.perf_counter() - started) * 1000

    def all_ms(self, **earlier_ms: float) -> dict[str, float]:
        """Every stage: `earlier_ms` are stages timed before this object existed (the guard's); total is the
        handler's time since it was made."""
        return {**earlier_ms, **self.ms, "total": (time.perf_counter() - self.started) * 1000}


def server_timing(stages_ms: dict[str, float]) -> str:
    """`auth;dur=0.41, kbs;dur=0.62, retriever;dur=9.80, total;dur=10.93`."""
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in stages_ms.items())
