"""An OTLP/gRPC trace receiver for tests, built on opentelemetry-proto's
service definitions: what a collector would receive from Quire's services."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

__all__ = ["ReceivedSpan", "OtlpReceiver"]


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    span: trace_pb2.Span
    attributes: dict[str, object] = field(default_factory=dict)
    resource: dict[str, object] = field(default_factory=dict)

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    def Export(  # noqa: N802 - gRPC method name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    received.append(ReceivedSpan(service, span, attributes, resource))
        with self.lock:
            self.spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpReceiver:
    """Listens on 127.0.0.1 (a free port); ``endpoint`` is what OTEL_EXPORTER_OTLP_ENDPOINT takes."""

    def __init__(self) -> None:
        self._collector = _Collector()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self._collector, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()

    def spans(self) -> list[ReceivedSpan]:
        with self._collector.lock:
            return list(self._collector.spans)
