"""OpenTelemetry: one job is one trace across all five services.

The W3C trace context travels in gRPC metadata (``traceparent``) and in NATS
message headers. Spans carry ids, digests, counts and reason codes only.
Without an exporter configured, spans are created and dropped; with
``QUIRE_TRACE_FILE`` they are appended to a file as JSON lines, which is what
the tests read to follow one job through every service.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

__all__ = [
    "configure_tracing",
    "inject_headers",
    "extract_context",
    "JsonLinesSpanExporter",
]


class JsonLinesSpanExporter(SpanExporter):
    """Appends finished spans to a file, one JSON object per line."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            parent = span.parent
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "service": span.resource.attributes.get("service.name"),
                        "trace_id": f"{ctx.trace_id:032x}" if ctx else "",
                        "span_id": f"{ctx.span_id:016x}" if ctx else "",
                        "parent_id": f"{parent.span_id:016x}" if parent else "",
                        "attributes": dict(span.attributes or {}),
                    }
                )
            )
        with self._lock, open(self._path, "a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def configure_tracing(service: str, instance: str, trace_file: Path | None) -> TracerProvider:
    """Install this process's tracer provider; call once from ``main``."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.instance.id": instance})
    )
    if trace_file is not None:
        provider.add_span_processor(
            BatchSpanProcessor(JsonLinesSpanExporter(trace_file), schedule_delay_millis=200)
        )
    trace.set_tracer_provider(provider)
    return provider


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Headers (NATS) or metadata (gRPC) carrying the current trace context."""
    carrier: dict[str, str] = {} if headers is None else headers
    propagate.inject(carrier)
    return carrier


def extract_context(carrier: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by message headers or call metadata."""
    return propagate.extract(dict(carrier or {}))
