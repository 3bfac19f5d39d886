"""The schedules of sources: a thread of the api that, every tick, claims the sources whose next run time has
come and starts their runs. Next run times are stored, so a restart keeps the schedule, and a run missed while
no api was up is due at once and runs once (the next time is counted from that run). Any number of api
replicas may run this loop: the claim lets one of them have each run."""

from __future__ import annotations

import logging
import threading

from ragkb_api.sources.runner import SourceRunner
from ragkb_store.ledger.sources import SourceLedger

_log = logging.getLogger("ragkb.api.sources")


class SourceScheduler:
    def __init__(self, ledger: SourceLedger, runner: SourceRunner, tick_s: float) -> None:
        self._ledger = ledger
        self._runner = runner
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ragkb-source-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> list[str]:
        """Start every due source this process can claim; the jobs started."""
        started = []
        for source_id in self._ledger.due():
            job_id = self._runner.start(source_id)
            if job_id is not None:
                _log.info("source %s: scheduled run %s started", source_id, job_id)
                started.append(job_id)
        return started

    def _loop(self) -> None:
        while not self._stop.wait(self._tick_s):
            try:
                self.tick()
            except Exception:  # the database is away for a moment: the next tick tries again
                _log.warning("the source scheduler could not look for due sources", exc_info=True)
