"""What one unit of work is about, for the log lines and the calls it makes: the request id (accepted from and
echoed in `X-Request-ID`, carried to the retriever in that header and to the worker in the task's headers), and
the KB and document it touches. Context variables: each request (a task in the worker) sees only its own, and
a thread started for a sync handler inherits them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

REQUEST_ID_HEADER = "X-Request-ID"
# The Celery message header that carries the request id from the api to the worker.
REQUEST_ID_TASK_HEADER = "ragkb_request_id"
# A caller's id is echoed and logged: only short, printable ids are taken, so no one can forge log lines.
_ACCEPTED_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")

request_id: ContextVar[str | None] = ContextVar("ragkb_request_id", default=None)
kb_id: ContextVar[str | None] = ContextVar("ragkb_kb_id", default=None)
document_id: ContextVar[str | None] = ContextVar("ragkb_document_id", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def accepted_request_id(sent: str | None) -> str:
    """The caller's id when it is a plausible one, otherwise a fresh one."""
    if sent and _ACCEPTED_ID.fullmatch(sent):
        return sent
    return new_request_id()


@contextmanager
def bound(*, request: str | None = None, kb: str | None = None, document: str | None = None) -> Iterator[None]:
    """Set the ids given for the block (those left out keep their value), then put the previous ones back."""
    tokens = [
        (var, var.set(value)) for var, value in ((request_id, request), (kb_id, kb), (document_id, document)) if value
    ]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current() -> dict[str, str]:
    """The ids set now, by the names a log line carries."""
    values = {"request_id": request_id.get(), "kb_id": kb_id.get(), "document_id": document_id.get()}
    return {name: value for name, value in values.items() if value}
