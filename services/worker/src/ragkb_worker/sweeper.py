"""Self-healing: re-queue documents whose worker died or whose queue message was lost."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from redis import Redis

from ragkb_store.blobs import BlobStore
from ragkb_store.ledger import DocumentLedger
from ragkb_store.queue import IngestQueue, broker_lists
from ragkb_store.states import Lane
from ragkb_worker.fork_gate import FORK_GATE
from ragkb_worker.settings import TaskSettings

_log = logging.getLogger("ragkb.worker.sweeper")
# Blobs checked against the database per query.
_BLOB_BATCH = 500


class Sweeper:
    def __init__(
        self,
        *,
        ledger: DocumentLedger,
        blobs: BlobStore,
        queue: IngestQueue,
        redis: Redis,
        settings: TaskSettings,
        upload_wait_s: float,
    ) -> None:
        self._ledger = ledger
        self._blobs = blobs
        self._next_blob_sweep = 0.0
        self._upload_wait_s = upload_wait_s
        self._queue = queue
        self._redis = redis
        self._settings = settings
        self._stop = threading.Event()
        # The broker this worker last saw (its run id) and the documents already re-sent since it started.
        self._broker_run_id: str | None = None
        self._resent_to_broker: set[str] = set()

    def sweep_once(self) -> list[str]:
        requeued = self._ledger.release_expired_leases()
        lost = self._lost_with_the_previous_broker()
        # Pending documents are re-sent only when the queue is empty: otherwise their message is most
        # likely still waiting in it, and a duplicate would only be skipped later.
        if self._queue_is_empty():
            requeued += self._ledger.pending_older_than(timedelta(seconds=self._settings.pending_requeue_after_s))
        requeued = list(dict.fromkeys(requeued + lost))
        self._queue.send_again(requeued)
        self._resent_to_broker.update(lost)  # only once sent: a send that failed is tried again next time
        if requeued:
            _log.info("re-queued %d documents: %s", len(requeued), ", ".join(requeued[:10]))
        finished = self._ledger.finish_overdue_jobs(self._upload_wait_s)
        if finished:
            _log.info("finished %d jobs past their deadline: %s", len(finished), ", ".join(finished[:10]))
        return requeued

    def sweep_orphan_blobs(self) -> int:
        """Delete the stored originals and texts that no document uses and that are old enough not to belong
        to an upload still being recorded; how many went."""
        candidates = list(self._blobs.older_than(self._settings.orphan_blob_age_s))
        orphans: set[str] = set()
        for start in range(0, len(candidates), _BLOB_BATCH):
            batch = candidates[start : start + _BLOB_BATCH]
            orphans |= self._blobs.delete_unused(batch, self._ledger.unreferenced_blobs)
        if orphans:
            _log.info("deleted %d stored files no document uses", len(orphans))
        return len(orphans)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name="ragkb-sweeper", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with FORK_GATE.working():  # a pool fork must not copy the locks a sweep holds
                    self.sweep_once()
                    self._sweep_blobs_when_due()
            except Exception:  # the sweeper must outlive a database or broker hiccup
                _log.exception("sweep failed; will try again")
            self._stop.wait(self._settings.sweep_interval_s)

    def _sweep_blobs_when_due(self) -> None:
        if time.monotonic() >= self._next_blob_sweep:
            self._next_blob_sweep = time.monotonic() + self._settings.orphan_blob_sweep_interval_s
            self.sweep_orphan_blobs()

    def _lost_with_the_previous_broker(self) -> list[str]:
        """Documents pending since before the broker (Redis) last started: their message went to the broker
        that was there then and, unless that one persisted its queue, is gone. They are sent again once per
        broker start, at once rather than after the pending re-queue's wait; a duplicate is harmless (a claim
        is a compare-and-set: the second message finds the document taken or done and is skipped)."""
        server = self._redis.info("server")
        run_id, uptime_s = str(server["run_id"]), float(server["uptime_in_seconds"])
        if run_id != self._broker_run_id:
            self._broker_run_id, self._resent_to_broker = run_id, set()
        lost = [
            document_id
            for document_id in self._ledger.pending_older_than(timedelta(seconds=broker_age_s(server)))
            if document_id not in self._resent_to_broker
        ]
        if lost:
            _log.info("the broker started %.0f s ago: re-sending %d documents pending since", uptime_s, len(lost))
        return lost

    def _queue_is_empty(self) -> bool:
        """No message waits in either lane, at any priority."""
        return all(int(self._redis.llen(name)) == 0 for lane in Lane for name in broker_lists(lane))


def broker_age_s(server: dict[str, Any]) -> float:
    """How long the broker has been up, at least, from its INFO `server` section. Redis counts its uptime in
    whole seconds of its clock from the second it started in (`uptime_in_seconds` = now's second − the start's
    second), so `now − uptime` may lie up to a second before the start: a document pending since just before the
    restart then looked younger than the broker, and waited until the sweeps' sub-second drift (or the pending
    re-queue, minutes later) let it through. The end of the start's second is the bound that misses none; a
    document sent to the new broker within that second is sent twice, which is harmless. Without
    `server_time_usec` (an older Redis), now's place in its second is unknown: assuming its start keeps the bound
    late enough."""
    now_in_second_s = (int(server.get("server_time_usec", 0)) % 1_000_000) / 1_000_000
    return float(server["uptime_in_seconds"]) - 1 + now_in_second_s
