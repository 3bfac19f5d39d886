"""A task process's runtime is built once (ragkb_worker.app.once_per_process): the preload thread and a task that
arrives meanwhile share one build, and a build that failed is tried again by the next call."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragkb_worker.app import once_per_process


def test_calls_during_the_build_wait_for_it_and_get_the_same_result() -> None:
    builds: list[int] = []
    started = threading.Event()

    def build() -> object:
        started.set()
        time.sleep(0.2)  # a model loading
        builds.append(1)
        return object()

    runtime = once_per_process(build)
    with ThreadPoolExecutor(4) as pool:
        preload = pool.submit(runtime)
        started.wait(5)
        tasks = [pool.submit(runtime) for _ in range(3)]
        results = {id(future.result()) for future in (preload, *tasks)}
    assert builds == [1] and len(results) == 1


def test_a_build_that_failed_is_tried_again_by_the_next_call() -> None:
    attempts: list[int] = []

    def build() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("the model file is not there yet")
        return "runtime"

    runtime = once_per_process(build)
    with pytest.raises(RuntimeError):
        runtime()
    assert runtime() == "runtime" and runtime() == "runtime" and len(attempts) == 2
