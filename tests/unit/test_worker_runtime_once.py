"""A task process's runtime is built once (ragkb_worker.app.once_per_process): the preload thread and a task that
arrives meanwhile share one build, a build that failed is tried again by the next call, and a build that hangs
ends its process (ragkb_worker.app.preload_runtime)."""

from __future__ import annotations

import subprocess
import sys
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


# A task process whose preload builds with `sys.argv[1]` ("hangs" or "loads"), stuck after 0.5 s; it lives
# `sys.argv[2]` seconds after its start unless it is ended.
PRELOAD = """
import sys, threading, time
from celery.signals import worker_process_init
from ragkb_worker.app import preload_runtime

def model_load_that_never_ends():
    threading.Event().wait()

def model_load():
    time.sleep(0.1)

preload_runtime(model_load_that_never_ends if sys.argv[1] == "hangs" else model_load, stuck_after_s=0.5)
worker_process_init.send(sender=None)
time.sleep(float(sys.argv[2]))
"""


def run_preload(build: str, lives_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELOAD, build, str(lives_s)], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_preload_that_hangs_writes_every_threads_stack_and_ends_the_process() -> None:
    # The pool starts another process; before, tasks waited for the build until the hard time limit (16 min).
    started = time.monotonic()
    ended = run_preload("hangs", lives_s=60)
    assert ended.returncode == 1 and time.monotonic() - started < 30
    assert "model_load_that_never_ends" in ended.stderr and "Thread" in ended.stderr


def test_a_preload_that_ends_leaves_the_process_alone() -> None:
    ended = run_preload("loads", lives_s=1.5)
    assert (ended.returncode, ended.stderr) == (0, "")
