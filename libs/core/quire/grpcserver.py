"""gRPC server bootstrap: grpc.aio, the access check on every call, the
health service (also on its own plaintext port), trace context from
metadata, and a graceful drain on SIGTERM/SIGINT.

Drain order: mark NOT_SERVING, stop the queue workers from pulling and let
in-flight work finish (the caller's ``on_drain``), then stop the server with a
grace period so in-flight RPCs complete.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from quire.callers import CallerProofInterceptors
from quire.identity import ServiceIdentity
from quire.metrics import ServiceMetrics, serve_metrics
from quire.reflection import enable_reflection
from quire.telemetry import extract_context, inject_headers
from quire.tls import TlsSettings, aio_channel

__all__ = [
    "serve",
    "generic_dispatch",
    "TraceServerInterceptor",
    "TraceClientInterceptors",
    "service_channel",
]

log = logging.getLogger(__name__)
EXCLUSIVE_PORT = (("grpc.so_reuseport", 0),)
"""Server options: the port is this server's alone."""


def _traced(
    tracer: trace.Tracer, behavior: Callable[..., Any], method: str, streaming_response: bool
) -> Callable[..., Any]:
    def _context(servicer_context: grpc.aio.ServicerContext) -> otel_context.Context:
        metadata = {
            k: v for k, v in (servicer_context.invocation_metadata() or ()) if isinstance(v, str)
        }
        return extract_context(metadata)

    service, _, name = method.lstrip("/").rpartition("/")
    attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}

    def _span(servicer_context: grpc.aio.ServicerContext) -> trace.Span:
        # A failure is recorded where it is turned into a status (abort_with):
        # by reason code, never by the exception's text.
        return tracer.start_span(
            method,
            context=_context(servicer_context),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    if streaming_response:

        async def stream_wrapper(request: Any, servicer_context: grpc.aio.ServicerContext) -> Any:
            # The span is current only while the handler makes its next item,
            # never across a yield: gRPC may resume or close this generator
            # from another task, whose context cannot detach a token attached
            # in this one ("Failed to detach context", logged at ERROR).
            span = _span(servicer_context)
            items = behavior(request, servicer_context).__aiter__()
            try:
                while True:
                    token = otel_context.attach(trace.set_span_in_context(span))
                    try:
                        item = await items.__anext__()
                    except StopAsyncIteration:
                        return
                    finally:
                        otel_context.detach(token)
                    yield item
            finally:
                close = getattr(items, "aclose", None)
                if close is not None:
                    await close()
                span.end()

        return stream_wrapper

    async def unary_wrapper(request: Any, servicer_context: grpc.aio.ServicerContext) -> Any:
        with trace.use_span(
            _span(servicer_context),
            end_on_exit=True,
            record_exception=False,
            set_status_on_exception=False,
        ):
            return await behavior(request, servicer_context)

    return unary_wrapper


def generic_dispatch(server: grpc.aio.Server) -> grpc.aio.Server:
    """``server``, finding every method through the servicers' generic handlers.

    The generated ``add_*Servicer_to_server`` adds each service twice: as a
    generic handler, and as "registered methods". grpcio's asyncio server
    (1.85) keeps one pending accept per registered method and waits on all
    of them, plus one, for every call it takes (``asyncio.wait`` over some
    forty futures on admission, for each RPC). With the registered methods
    left out the same handlers answer every call, and a unary call costs the
    server about an eighth less CPU (``bench/grpc_dispatch.py``)."""
    server.add_registered_method_handlers = _generic_only  # type: ignore[method-assign]
    return server


def _generic_only(service_name: str, method_handlers: Any) -> None:
    """Registers nothing: the generic handler added beside it answers."""


class TraceServerInterceptor(grpc.aio.ServerInterceptor):
    """Starts a server span per RPC as a child of the caller's trace context."""

    def __init__(self) -> None:
        # Once, not per call: getting a tracer builds its instrumentation scope.
        self._tracer = trace.get_tracer("quire.grpc")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith("/grpc.health"):
            return handler
        method = details.method
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _traced(self._tracer, handler.unary_unary, method, False),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _traced(self._tracer, handler.stream_unary, method, False),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _traced(self._tracer, handler.unary_stream, method, True),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


class _MetadataInjector:
    def _with_trace(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = list(details.metadata or ())
        metadata.extend(inject_headers().items())
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnary(_MetadataInjector, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_trace(details), request)


class _UnaryStream(_MetadataInjector, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_trace(details), request)


class _StreamUnary(_MetadataInjector, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._with_trace(details), requests)


def TraceClientInterceptors() -> list[grpc.aio.ClientInterceptor]:  # noqa: N802 - reads as a value
    """Client interceptors that put the current trace context into call metadata."""
    return [_UnaryUnary(), _UnaryStream(), _StreamUnary()]


def service_channel(
    address: str, tls: TlsSettings | None, *, identity: ServiceIdentity
) -> grpc.aio.Channel:
    """A channel to another Quire service: every call carries the trace context
    and a proof that it comes from ``identity`` (``quire.callers``)."""
    return aio_channel(
        address, tls, [*TraceClientInterceptors(), *CallerProofInterceptors(identity)]
    )


def _bind(server: grpc.aio.Server, address: str, tls: TlsSettings | None) -> None:
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, tls.server_credentials())
    if bound == 0:
        raise RuntimeError(f"cannot bind {address}")


async def serve(
    *,
    address: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
    access: grpc.aio.ServerInterceptor,
    health_address: str | None = None,
    on_drain: Callable[[], Awaitable[None]] | None = None,
    drain_seconds: float = 20.0,
    ready: Callable[[], Awaitable[None]] | None = None,
    tls: TlsSettings | None = None,
    metrics: ServiceMetrics | None = None,
    metrics_address: str = "",
    max_receive_bytes: int = 0,
) -> None:
    """Run a gRPC server until SIGTERM/SIGINT, then drain and stop.

    ``access`` admits or refuses every call but health's and reflection's
    (``quire.access``). Reflection (v1 and v1alpha, ``quire.reflection``)
    lists ``service_names`` and health, so tools describe the API without
    the ``.proto`` files; it is on the service port only, behind its TLS.
    With ``health_address``, ``grpc.health.v1`` alone is also served there,
    in plaintext, so that a kubelet's gRPC probe works while the service port
    demands mutual TLS; the service port keeps its own health service too.
    With ``metrics`` and ``metrics_address``, Prometheus scrapes ``/metrics`` there.
    ``max_receive_bytes`` raises the largest request message the service port
    takes above gRPC's 4 MiB default (admission's inline sources).
    """
    # No SO_REUSEPORT (gRPC's default): a second server on the same port must
    # fail to bind, not silently share its connections with the first.
    options: tuple[tuple[str, int], ...] = EXCLUSIVE_PORT
    if max_receive_bytes:
        options += (("grpc.max_receive_message_length", max_receive_bytes),)
    server = generic_dispatch(
        grpc.aio.server(interceptors=[access, TraceServerInterceptor()], options=options)
    )
    register(server)
    enable_reflection(server, service_names)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    servers = [server]
    if health_address:
        probes = generic_dispatch(grpc.aio.server(options=EXCLUSIVE_PORT))
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probes)
        _bind(probes, health_address, None)
        servers.append(probes)
    # grpc's servicer starts SERVING; say so only once ``ready`` has run (a
    # stage warmed and pulling), so readiness probes and the stack wait for it.
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    _bind(server, address, tls)
    if metrics is not None:
        serve_metrics(metrics, metrics_address)
    for each in servers:
        await each.start()
    if ready is not None:
        await ready()
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving on %s (health also on %s)", address, health_address or "-")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info("draining")
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    if on_drain is not None:
        try:
            async with asyncio.timeout(drain_seconds):  # wait_for may swallow a cancel (3.11)
                await on_drain()
        except TimeoutError:
            log.warning("drain timed out; unfinished work will be redelivered")
    for each in servers:
        await each.stop(grace=min(drain_seconds, 5.0))
