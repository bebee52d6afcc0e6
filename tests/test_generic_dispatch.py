"""A service's gRPC server finds its methods through the generic handlers
(``quire.grpcserver.generic_dispatch``): grpcio's asyncio server then waits
on one pending accept per call it takes, not on one per registered method,
and every method still answers.

The server's waits are counted by wrapping ``asyncio.wait``, which grpcio's
server loop calls for each call it accepts; the same server without
``generic_dispatch`` waits on one accept per method (the control, so the
count can fail)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from quire.admission.v1 import admission_service_pb2 as admission_pb2
from quire.admission.v1 import admission_service_pb2_grpc as admission_grpc
from quire.grpcserver import generic_dispatch

CALLS = 5


async def _widest_wait(
    monkeypatch: pytest.MonkeyPatch, made: Callable[[grpc.aio.Server], grpc.aio.Server]
) -> int:
    """The most futures one ``asyncio.wait`` was given while a server made by
    ``made`` took ``CALLS`` health checks (every check must answer SERVING),
    a health watch and a call to a method it does not have."""
    widths: list[int] = []
    real = asyncio.wait

    async def counted(fs: Any, **options: Any) -> Any:
        futures = list(fs)
        widths.append(len(futures))
        return await real(futures, **options)

    monkeypatch.setattr(asyncio, "wait", counted)
    server = made(grpc.aio.server())
    # A real service's methods (never called), and health's, which are.
    admission_grpc.add_AdmissionServiceServicer_to_server(
        admission_grpc.AdmissionServiceServicer(), server
    )
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for _ in range(CALLS):
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
            # A streaming method answers too, and a method no servicer has is
            # UNIMPLEMENTED, as before.
            watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)
            first = await watch.read()
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            watch.cancel()
            unknown = channel.unary_unary("/quire.admission.v1.AdmissionService/NoSuchMethod")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await unknown(b"", timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)
        monkeypatch.undo()
    return max(widths, default=0)


async def test_each_call_is_accepted_by_waiting_on_one_accept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await _widest_wait(monkeypatch, generic_dispatch) == 1


async def test_registered_methods_would_be_waited_on_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The control: grpcio's registered methods, as the generated code adds them."""
    methods = admission_pb2.DESCRIPTOR.services_by_name["AdmissionService"].methods
    assert await _widest_wait(monkeypatch, lambda server: server) > len(methods)
