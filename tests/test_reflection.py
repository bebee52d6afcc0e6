"""Server reflection lists and describes every service of a running stack
without the ``.proto`` files, over ``grpc.reflection.v1`` and ``v1alpha``,
as ``grpcurl list`` / ``grpcurl describe`` would (grpcurl itself cannot be
installed here).

A client that knows nothing but the reflection protocol asks each service
which services it serves, then for the file declaring each one; it builds a
descriptor pool from those answers alone and holds every service, method and
message to the generated descriptors in ``gen/``, so anything reflection
leaves out fails the test. No credentials are sent: reflection is open like
health (``quire.access.OPEN_PREFIXES``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

import grpc
import pytest
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2 as rpb

from quire.reflection import V1, V1ALPHA
from quire.settings import SERVICES
from quire.stack.supervisor import Stack, StackInfo
from quire.tls import aio_channel

pytestmark = pytest.mark.stack

HEALTH = "grpc.health.v1.Health"
TIMEOUT = 5.0
REFLECTION_METHOD = f"/{V1}/ServerReflectionInfo"


SHARED_APIS = {
    "diagnostics": ("validator", "assembler", "signer"),
    "witness": ("signer",),
    "export": SERVICES,
}
"""APIs of their own package that several processes serve besides their own."""


def _generated_services(service: str) -> dict[str, descriptor.ServiceDescriptor]:
    """Every gRPC service declared in ``quire.<service>.v1`` and in the shared
    packages it serves, from gen/."""
    packages = [service, *(name for name, by in SHARED_APIS.items() if service in by)]
    found: dict[str, descriptor.ServiceDescriptor] = {}
    for name in packages:
        package = importlib.import_module(f"quire.{name}.v1")
        for module in pkgutil.iter_modules(package.__path__):
            if module.name.endswith("_pb2"):
                file = importlib.import_module(f"{package.__name__}.{module.name}").DESCRIPTOR
                found.update({s.full_name: s for s in file.services_by_name.values()})
    return found


class Reflector:
    """One reflection stream: a request, then its answer, as grpcurl does.

    v1 and v1alpha messages are the same bytes, so v1alpha's classes encode
    both; only the method path differs."""

    def __init__(self, channel: grpc.aio.Channel, reflection_service: str) -> None:
        self._call = channel.stream_stream(
            f"/{reflection_service}/ServerReflectionInfo",
            request_serializer=rpb.ServerReflectionRequest.SerializeToString,
            response_deserializer=rpb.ServerReflectionResponse.FromString,
        )(timeout=TIMEOUT)

    async def ask(self, request: rpb.ServerReflectionRequest) -> rpb.ServerReflectionResponse:
        await self._call.write(request)
        answer = await self._call.read()
        assert isinstance(answer, rpb.ServerReflectionResponse)
        assert answer.original_request == request
        return answer

    async def services(self) -> set[str]:
        answer = await self.ask(rpb.ServerReflectionRequest(list_services=""))
        return {s.name for s in answer.list_services_response.service}

    async def files_of(self, symbol: str) -> list[descriptor_pb2.FileDescriptorProto]:
        answer = await self.ask(rpb.ServerReflectionRequest(file_containing_symbol=symbol))
        assert answer.HasField("file_descriptor_response"), (symbol, answer.error_response)
        return [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]

    async def close(self) -> None:
        await self._call.done_writing()
        assert await self._call.code() == grpc.StatusCode.OK


def _pool_of(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A pool of reflected files only, each added after its dependencies;
    fails if an answer leaves out a file another one imports."""
    pool = descriptor_pool.DescriptorPool()
    pending = {f.name: f for f in files}
    added: set[str] = set()
    while pending:
        ready = [f for f in pending.values() if set(f.dependency) <= added]
        assert ready, f"reflection left out imports of {sorted(pending)}"
        for file in ready:
            pool.Add(file)
            added.add(file.name)
            del pending[file.name]
    return pool


def _shape(message: descriptor.Descriptor) -> list[tuple[object, ...]]:
    return [
        (
            f.name,
            f.number,
            f.type,
            f.message_type.full_name if f.message_type else "",
            f.enum_type.full_name if f.enum_type else "",
        )
        for f in message.fields
    ]


def _messages_reachable(service: descriptor.ServiceDescriptor) -> dict[str, descriptor.Descriptor]:
    """Every request, reply and message they hold, by full name."""
    seen: dict[str, descriptor.Descriptor] = {}
    todo = [t for m in service.methods for t in (m.input_type, m.output_type)]
    while todo:
        message = todo.pop()
        if message.full_name not in seen:
            seen[message.full_name] = message
            todo.extend(f.message_type for f in message.fields if f.message_type)
    return seen


def _assert_described_as_generated(
    reflected: descriptor.ServiceDescriptor, generated: descriptor.ServiceDescriptor
) -> None:
    def methods(s: descriptor.ServiceDescriptor) -> list[tuple[object, ...]]:
        return [
            (
                m.name,
                m.input_type.full_name,
                m.output_type.full_name,
                m.client_streaming,
                m.server_streaming,
            )
            for m in s.methods
        ]

    assert methods(reflected) == methods(generated)
    assert methods(reflected), generated.full_name
    theirs = _messages_reachable(generated)
    ours = _messages_reachable(reflected)
    assert set(ours) == set(theirs)
    for name, message in theirs.items():
        assert _shape(ours[name]) == _shape(message), name
    original = descriptor_pb2.FileDescriptorProto()
    generated.file.CopyToProto(original)
    described = descriptor_pb2.FileDescriptorProto()
    reflected.file.CopyToProto(described)
    assert described == original, f"{generated.file.name} is served as it was generated"


async def test_reflection_lists_and_describes_every_service_over_v1_and_v1alpha(
    stack: Stack,
) -> None:
    info = StackInfo.read(stack.data_dir)
    assert set(info.endpoints) == set(SERVICES)
    for service, address in info.endpoints.items():
        generated = _generated_services(service)
        assert generated, f"gen/ declares no service for {service}"
        async with aio_channel(address, None) as channel:
            for version in (V1, V1ALPHA):
                reflector = Reflector(channel, version)
                listed = await reflector.services()
                assert listed == {*generated, HEALTH, V1, V1ALPHA}, (service, version)
                files: list[descriptor_pb2.FileDescriptorProto] = []
                for name in sorted(listed):
                    files.extend(await reflector.files_of(name))
                missing = await reflector.ask(
                    rpb.ServerReflectionRequest(file_containing_symbol="quire.NoSuchService")
                )
                assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
                await reflector.close()
                pool = _pool_of({f.name: f for f in files}.values())
                for name in listed:
                    described = pool.FindServiceByName(name)
                    assert [m.name for m in described.methods], name
                for name, expected in generated.items():
                    _assert_described_as_generated(pool.FindServiceByName(name), expected)
                assert pool.FindServiceByName(V1).file.package == "grpc.reflection.v1"


async def test_the_probe_port_still_serves_health_alone(stack: Stack) -> None:
    info = StackInfo.read(stack.data_dir)
    assert set(info.health_endpoints) == set(SERVICES)
    for service, address in info.health_endpoints.items():
        async with aio_channel(address, None) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=TIMEOUT
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
            # Asked as a unary call: the method is absent whatever its arity,
            # and a streaming client that writes while UNIMPLEMENTED arrives is
            # told INTERNAL by grpcio instead (grpc/grpc#36066).
            probe = channel.unary_unary(REFLECTION_METHOD)
            with pytest.raises(grpc.aio.AioRpcError) as absent:
                await probe(b"", timeout=TIMEOUT)
            assert absent.value.code() == grpc.StatusCode.UNIMPLEMENTED, service
