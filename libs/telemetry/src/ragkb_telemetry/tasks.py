"""The request id and the timing of Celery tasks: a publisher (the api, the worker) puts the request id and the
publication time in each task's headers; a task process binds the id for the task's log lines and records how
long the task waited and ran. Celery signals: connected once per process, whatever builds the Celery app."""

from __future__ import annotations

import time
from contextvars import Token
from typing import Any

from celery import Task
from celery.signals import before_task_publish, task_postrun, task_prerun

from ragkb_core import request_context
from ragkb_core.request_context import REQUEST_ID_TASK_HEADER
from ragkb_telemetry import metrics
from ragkb_telemetry.exposition import SENT_AT_TASK_HEADER, task_headers

# Task id → (its start, the token that puts the previous request id back).
_running: dict[str, tuple[float, Token[str | None]]] = {}


def carry_request_id_in_tasks() -> None:
    """Every task published by this process carries the current request id and its publication time."""
    before_task_publish.connect(_add_headers, weak=False, dispatch_uid="ragkb-task-headers")


def observe_tasks() -> None:
    """In a task process: each task's log lines carry its request id; its queue wait and run time are recorded."""
    task_prerun.connect(_task_started, weak=False, dispatch_uid="ragkb-task-started")
    task_postrun.connect(_task_ended, weak=False, dispatch_uid="ragkb-task-ended")


def _add_headers(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is not None:
        headers.update(task_headers(request_context.request_id.get()))


def _task_started(task_id: str, task: Task, **_: Any) -> None:
    sent_id = getattr(task.request, REQUEST_ID_TASK_HEADER, None)
    token = request_context.request_id.set(request_context.accepted_request_id(sent_id))
    _running[task_id] = (time.perf_counter(), token)
    sent_at = getattr(task.request, SENT_AT_TASK_HEADER, None)
    if isinstance(sent_at, int | float):
        queue = (task.request.delivery_info or {}).get("routing_key") or "unknown"
        metrics.task_queue_wait.labels(queue=queue).observe(max(0.0, time.time() - sent_at))


def _task_ended(task_id: str, task: Task, state: str | None = None, **_: Any) -> None:
    started, token = _running.pop(task_id, (None, None))
    if token is not None:
        request_context.request_id.reset(token)
    if started is not None:
        outcome = {"SUCCESS": "success", "RETRY": "retry"}.get(state or "", "failure")
        metrics.task_duration.labels(task=task.name, outcome=outcome).observe(time.perf_counter() - started)
