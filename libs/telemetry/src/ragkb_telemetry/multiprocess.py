"""Multi-process metrics for the worker's prefork pool. Imports nothing of prometheus_client: it must run before
prometheus_client is first imported, which reads PROMETHEUS_MULTIPROC_DIR once, at import."""

from __future__ import annotations

import os
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess_dir(path: Path) -> None:
    """Point prometheus_client at `path` for this process and its children, emptied of an earlier run's files
    (their counts would otherwise be added to this run's). An operator's PROMETHEUS_MULTIPROC_DIR wins."""
    directory = Path(os.environ.get(MULTIPROC_ENV) or path)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(directory)


def forget_process(pid: int) -> None:
    """A task process ended: its live gauges no longer count (its counters and histograms still do)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
