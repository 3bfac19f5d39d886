"""ragkb observability: Prometheus metrics (ragkb_telemetry.metrics), traces (ragkb_telemetry.tracing) and
structured logs (ragkb_telemetry.logs), shared by the api, the worker and the retriever."""
