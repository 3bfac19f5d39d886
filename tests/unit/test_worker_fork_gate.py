"""The worker's fork gate (ragkb_worker.fork_gate): a fork of the task pool never copies a lock that another thread
of the main process holds in the middle of its work. Each case runs in a fresh interpreter: the gate installs
process-wide fork hooks, which must not stay in the test process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from ragkb_worker.fork_gate import ForkGate

# A thread holds a lock (as an import holds its module's lock) for 0.5 s inside its work; the main thread forks
# meanwhile; the child says whether that lock is free there, and the parent how long the fork waited.
FORK_DURING_WORK = """
import os, sys, threading, time
from ragkb_worker.fork_gate import ForkGate

gate = ForkGate(fork_wait_s=float(sys.argv[2]))
if sys.argv[1] == "gated":
    gate.install()
    gate.install()  # a second install changes nothing (two pairs of hooks would deadlock the fork)
module_lock = threading.Lock()
inside = threading.Event()

def work():
    with gate.working(), module_lock:
        inside.set()
        time.sleep(0.5)

threading.Thread(target=work).start()
inside.wait()
started = time.monotonic()
pid = os.fork()
if pid == 0:
    os._exit(0 if module_lock.acquire(timeout=1) else 1)
waited = time.monotonic() - started
free_in_child = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
print(free_in_child, round(waited, 2))
"""


def fork_during_work(mode: str, fork_wait_s: float = 5.0) -> tuple[bool, float]:
    script = textwrap.dedent(FORK_DURING_WORK)
    done = subprocess.run(
        [sys.executable, "-c", script, mode, str(fork_wait_s)], capture_output=True, text=True, timeout=60, check=True
    )
    free, waited = done.stdout.split()
    return free == "True", float(waited)


def test_without_the_gate_a_child_inherits_a_lock_held_for_ever() -> None:
    # The hazard itself: what a task process met after a worker restart.
    free_in_child, waited = fork_during_work("ungated")
    assert (free_in_child, waited < 0.3) == (False, True)


def test_a_fork_waits_for_the_work_in_progress_so_the_child_finds_the_lock_free() -> None:
    free_in_child, waited = fork_during_work("gated")
    assert free_in_child
    assert waited >= 0.3


def test_a_fork_waits_no_longer_than_its_bound() -> None:
    # A hung check must not stop the pool from replacing a task process: the fork goes ahead after its wait.
    free_in_child, waited = fork_during_work("gated", fork_wait_s=0.1)
    assert not free_in_child
    assert 0.05 <= waited < 0.4


def test_work_never_waits_for_other_work() -> None:
    # /ready answers while a sweep runs: both are inside at once.
    gate = ForkGate()
    both_inside = threading.Barrier(2, timeout=5)

    def work() -> None:
        with gate.working():
            both_inside.wait()

    other = threading.Thread(target=work)
    other.start()
    work()
    other.join(timeout=5)
    assert not other.is_alive()
