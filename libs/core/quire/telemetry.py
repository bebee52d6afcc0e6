"""OpenTelemetry: one job is one trace across all five services.

The W3C trace context travels in gRPC metadata (``traceparent``) and in NATS
message headers. Spans carry ids, digests, counts and reason codes only;
a failure is recorded by its type and reason code, never its message (which
may quote what a parser read).

Where spans go is configured by the standard ``OTEL_*`` variables, as any
OpenTelemetry SDK reads them:

- ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console`` or ``none`` (comma list).
  Unset, spans go to OTLP when an OTLP endpoint is configured
  (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
  and are dropped otherwise, so a laptop without a collector logs no
  connection errors.
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``:
  ``grpc`` (default) or ``http/protobuf``; endpoint, headers, timeout,
  compression and certificates are read by the exporter itself.
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the process
  (``quire-<service>`` unless set); ``OTEL_TRACES_SAMPLER`` and its argument
  choose the sampler (parent-based, always on, by default). When spans go
  nowhere (no exporter, no trace file), no span is made at all: a caller's
  trace context still passes through untouched, so a traced caller's job
  stays one trace, and nothing is paid for spans nobody reads.

``QUIRE_TRACE_FILE`` appends finished spans to a file as JSON lines as well,
which the tests read to follow one job through every service.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = [
    "configure_tracing",
    "exporters_from_env",
    "inject_headers",
    "extract_context",
    "record_failure",
    "name_job",
    "JsonLinesSpanExporter",
    "child_span",
]

log = logging.getLogger(__name__)


def _span_record(span: ReadableSpan) -> dict[str, object]:
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{ctx.trace_id:032x}" if ctx else "",
        "span_id": f"{ctx.span_id:016x}" if ctx else "",
        "parent_id": f"{parent.span_id:016x}" if parent else "",
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "status_description": span.status.description or "",
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": event.name, "attributes": dict(event.attributes or {})}
            for event in span.events
        ],
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
    }


class JsonLinesSpanExporter(SpanExporter):
    """Appends finished spans to a file, one JSON object per line."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(_span_record(span)) + "\n" for span in spans)
        with self._lock, open(self._path, "a", encoding="utf-8") as handle:
            handle.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        return HttpSpanExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not grpc or http/protobuf")


def exporters_from_env(env: Mapping[str, str]) -> list[SpanExporter]:
    """The span exporters the ``OTEL_*`` variables ask for (see the module's notes)."""
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        names = ["otlp"] if endpoint else []
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            exporters.append(_otlp_exporter(env))
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            raise ValueError(f"OTEL_TRACES_EXPORTER: {name!r} is not otlp, console or none")
    return exporters


def configure_tracing(
    service: str,
    instance: str,
    trace_file: Path | None,
    env: Mapping[str, str] | None = None,
) -> TracerProvider:
    """Install this process's tracer provider; call once from ``main``."""
    env = os.environ if env is None else env
    attributes: dict[str, str] = {"service.instance.id": instance, "service.namespace": "quire"}
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service
    exporters = exporters_from_env(env)
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME too.
    provider = TracerProvider(resource=Resource.create(attributes))
    if not exporters and trace_file is None:
        return provider  # not installed: the API's tracer makes no spans
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    if trace_file is not None:
        provider.add_span_processor(
            BatchSpanProcessor(JsonLinesSpanExporter(trace_file), schedule_delay_millis=200)
        )
    trace.set_tracer_provider(provider)
    return provider


def name_job(job: str) -> None:
    """Name ``job`` (``jobs/{id}`` or its id) on the current span, as every
    stage's spans name theirs (``quire.job``), so a call about one job (a
    watch, a download) is found with the rest of its work."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute("quire.job", job.removeprefix("jobs/"))


def record_failure(span: Span, error: BaseException, reason: str = "") -> None:
    """Mark ``span`` failed: the error's type and reason code, never its text."""
    attributes = {"exception.type": type(error).__qualname__}
    if reason:
        attributes["quire.reason"] = reason
    span.add_event("exception", attributes)
    span.set_status(Status(StatusCode.ERROR, reason or type(error).__qualname__))


@contextmanager
def child_span(
    tracer: trace.Tracer,
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    start_time: int | None = None,
    attributes: Mapping[str, str | int | bool] | None = None,
) -> Iterator[Span]:
    """A span under the current one (or a new trace's first, outside any)
    that records any failure escaping it. None is made where it would record
    nothing: tracing off, or under a span of a trace not sampled (its child
    is not sampled either); the current span is yielded as it is."""
    current = trace.get_current_span()
    if not current.is_recording() and (current.get_span_context().is_valid or _tracing_off(tracer)):
        yield current
        return
    with tracer.start_as_current_span(
        name,
        kind=kind,
        start_time=start_time,
        attributes=dict(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as error:
            record_failure(span, error, str(getattr(error, "reason", "") or ""))
            raise


def _tracing_off(tracer: trace.Tracer) -> bool:
    """Whether ``tracer`` makes no spans: the API's own, with no provider
    installed (``configure_tracing`` installs one only where spans go)."""
    return isinstance(tracer, trace.NoOpTracer) or (
        isinstance(tracer, trace.ProxyTracer)
        and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    )


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """Headers (NATS) or metadata (gRPC) carrying the current trace context."""
    carrier: dict[str, str] = {} if headers is None else headers
    propagate.inject(carrier)
    return carrier


def extract_context(carrier: Mapping[str, str] | None) -> otel_context.Context:
    """The trace context carried by message headers or call metadata."""
    return propagate.extract(dict(carrier or {}))
