"""Log lines of every service: readable console lines (`make run`) or JSON objects, one per line, for a log
pipeline (RAGKB_LOG__FORMAT=json). Both carry the request id and, when a trace is recorded, its trace id, and
the KB and document ids the line is about (ragkb_core.request_context). What ragkb logs never includes an API
key, a query or a document's text: messages name ids and counts."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from opentelemetry import trace

from ragkb_core import request_context
from ragkb_core.settings import LogSettings

# Loggers that say too much at INFO: httpx logs every call to the retriever (a second line per search), the
# access log is replaced by the request lines of ragkb_http.observability.
QUIET_LOGGERS = ("httpx", "uvicorn.access")


class ContextFilter(logging.Filter):
    """Puts the current ids on every record, so that both formats (and a handler of an operator's) see them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in request_context.current().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        return True


# Attributes every LogRecord has: what is not among them was given as `extra=` and becomes a JSON field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "service"}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self._service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({key: value for key, value in vars(record).items() if key not in _STANDARD})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class ConsoleFormatter(logging.Formatter):
    """`2026-12-05 09:30:00 api INFO ragkb.search: search 2 KBs … [request_id=…]`."""

    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(f"{name}={getattr(record, name)}" for name in ("request_id", "kb_id", "document_id")
                       if getattr(record, name, None))  # fmt: skip
        text = super().format(record)
        return f"{text} [{ids}]" if ids else text


def configure_logging(service: str, settings: LogSettings) -> None:
    """The root logger of this process writes `settings.format` lines at `settings.level` to stderr."""
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter(service) if settings.format == "json" else ConsoleFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # uvicorn's own loggers propagate to ours instead of printing in their format.
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
