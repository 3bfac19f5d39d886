"""OpenTelemetry traces: one trace from an api request through the Celery task to the retriever's answer.
Started only when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, with the
standard OTEL_* variables (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER…); otherwise
nothing is installed and a request pays nothing for it."""

from __future__ import annotations

import atexit
import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_configured() -> bool:
    return any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def start_tracing(service: str) -> bool:
    """Export this process's spans over OTLP/HTTP and instrument httpx (calls to the retriever), Celery (task
    publication and execution) and SQLAlchemy (engines made from now on). False, and nothing done, when no
    endpoint is configured. Call it before the app builds its clients and engines."""
    if not tracing_configured():
        return False
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    name = os.environ.get("OTEL_SERVICE_NAME") or f"ragkb-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument()
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]
    # Its declared range stops below SQLAlchemy 2.1, and out of range it instruments nothing without a word;
    # the event API it hooks is the same in 2.1 (tests/e2e/test_observability.py sees the statements' spans).
    SQLAlchemyInstrumentor().instrument(skip_dep_check=True)
    # Spans still buffered at exit are sent, not lost.
    atexit.register(provider.shutdown)
    return True
