"""One failure policy for every worker task, in one place.

A transient error (the retriever or the database briefly unreachable, a re-index that switched models) is
retried with exponential backoff, up to the task's retry budget; anything else, or a transient error past that
budget, ends the unit of work (a document, a re-index item or job, a KB deletion) failed with a reason a user
can act on. An unexpected error's own text never reaches a user: it is logged with its traceback, and the user
reads what kind of error it was."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ragkb_core.errors import RagkbError

_log = logging.getLogger("ragkb.worker")
# Backoff between retries of a transient failure: 5 s, 10 s, 20 s … capped at 5 minutes.
BACKOFF_BASE_S = 5
BACKOFF_CAP_S = 300

T = TypeVar("T")
# The database driver's errors while the database is unreachable or restarting: as transient as Unavailable.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError, PoolTimeout)


def is_transient(exc: BaseException) -> bool:
    return (isinstance(exc, RagkbError) and exc.transient) or isinstance(exc, DATABASE_UNAVAILABLE)


def failure_reason(exc: BaseException, doing: str) -> str:
    """What a user is told: a ragkb error's own detail, the time limit, or the kind of an unexpected error
    (whose text and traceback go to the log only)."""
    if isinstance(exc, RagkbError):
        return exc.detail
    if isinstance(exc, SoftTimeLimitExceeded):
        return f"{doing} took longer than the task time limit"
    if isinstance(exc, DATABASE_UNAVAILABLE):
        return f"the metadata database did not answer while {doing}"
    _log.error("unexpected error while %s", doing, exc_info=exc)
    return f"internal error while {doing} ({type(exc).__name__})"


def backoff_s(retries: int) -> int:
    return int(min(BACKOFF_BASE_S * 2**retries, BACKOFF_CAP_S))


def run_with_policy(
    task: Task,
    work: Callable[[], T],
    *,
    doing: str,
    max_retries: int,
    on_failure: Callable[[str], T],
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """Run `work`; on a transient error with retries left, call `on_retry` and have Celery run the task again
    after the backoff; on any other error, end the work failed (`on_failure` with the reason)."""
    try:
        return work()
    except Exception as exc:  # every failure ends in exactly one of: retry, or failed with a reason
        reason = failure_reason(exc, doing)
        retries = task.request.retries or 0
        if is_transient(exc) and retries < max_retries:
            _log.warning("%s: transient failure, retry %d: %s", doing, retries + 1, reason)
            if on_retry is not None:
                on_retry(reason)
            raise task.retry(exc=exc, countdown=backoff_s(retries)) from exc
        _log.warning("%s failed: %s", doing, reason)
        return on_failure(reason)
