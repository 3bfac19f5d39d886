"""Forks of the task pool wait for the main process's own threads to finish what they are doing.

Celery's prefork pool forks its task processes from the worker's main process (at start, and again whenever one
ends), while two threads of that process go on working: the sweeper and the health server. A fork copies every
lock as it is at that moment into a child that has only the forking thread, so a lock another thread held then
stays held in the child for ever. Import locks are the dangerous ones: the first /ready after a start imports
~70 modules (httpcore, h2, the SQL dialect, encodings.idna…), the launcher asks /ready every half second while
the worker boots, and a fork in the middle of one of those imports left the child's runtime build, and so its
first task, hanging on that module's lock until the hard time limit ended it (16 minutes without ingestion after
a worker restart). Python 3.11 does not release import locks in a child.

So those threads work inside `FORK_GATE.working()`, and a fork first waits, for a bounded time, until no thread is
inside; threads that arrive meanwhile wait for the fork. Work never waits for other work: /ready answers while a
sweep runs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_log = logging.getLogger("ragkb.worker.fork_gate")
# A fork does not wait longer than this for work in progress: a hung check (its own timeouts are shorter)
# must not stop the pool from replacing a task process.
FORK_WAIT_S = 10.0


class ForkGate:
    def __init__(self, fork_wait_s: float = FORK_WAIT_S) -> None:
        # A plain lock, not an RLock: the forking thread releases it in the child too, where an RLock's owner
        # bookkeeping would not be trusted.
        self._state = threading.Condition(threading.Lock())
        self._working = 0
        self._forking = False
        self._fork_wait_s = fork_wait_s
        self._installed = False

    @contextmanager
    def working(self) -> Iterator[None]:
        """Run the block with no fork under way; a fork that starts meanwhile waits for it to end."""
        with self._state:
            self._state.wait_for(lambda: not self._forking)
            self._working += 1
        try:
            yield
        finally:
            with self._state:
                self._working -= 1
                self._state.notify_all()

    def install(self) -> None:
        """Make every fork of this process (and of its children, which inherit the hooks) pass the gate. Once
        only: a second pair of hooks would wait, inside the same fork, for the lock the first one holds."""
        if self._installed:
            return
        self._installed = True
        os.register_at_fork(
            before=self.before_fork, after_in_parent=self.after_fork_in_parent, after_in_child=self.after_fork_in_child
        )

    def before_fork(self) -> None:
        # The lock stays held through the fork: no thread can start work until the fork is over.
        self._state.acquire()
        self._forking = True
        if not self._state.wait_for(lambda: self._working == 0, timeout=self._fork_wait_s):
            _log.warning("forking while %d threads still work (waited %.0f s)", self._working, self._fork_wait_s)

    def after_fork_in_parent(self) -> None:
        self._forking = False
        self._state.notify_all()
        self._state.release()

    def after_fork_in_child(self) -> None:
        # The other threads do not exist here; neither does their work.
        self._forking = False
        self._working = 0
        self._state.release()


FORK_GATE = ForkGate()
