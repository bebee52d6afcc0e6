"""gRPC server reflection, ``grpc.reflection.v1`` and ``v1alpha``, so that
``grpcurl`` and API linters list and describe a running service without its
``.proto`` files.

grpcio-reflection ships only the v1alpha service, which older tools ask for;
newer ones (grpcurl among them) ask v1 first. The two protocols are the same
messages under two package names, so v1 is served by the same servicer: its
file descriptor is v1alpha's renamed (registered once in the default pool,
so that v1 itself can be described), and its method decodes and encodes with
v1alpha's message classes, whose bytes on the wire are identical.

Reflection answers only with schema, which is not secret; the access check
lets it through like health (``quire.access.OPEN_PREFIXES``), and with
mutual TLS on, the service port still demands a client certificate.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

__all__ = ["V1", "V1ALPHA", "enable_reflection"]

V1ALPHA: str = reflection.SERVICE_NAME
V1 = "grpc.reflection.v1.ServerReflection"
_V1_PACKAGE = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Add ``grpc/reflection/v1/reflection.proto`` to ``pool`` (once), as
    upstream publishes it: v1alpha's messages and service in the v1 package."""
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    alpha = f".{file.package}."
    file.name = _V1_FILE
    file.package = _V1_PACKAGE
    file.options.Clear()
    file.options.java_package = "io.grpc.reflection.v1"
    file.options.java_outer_classname = "ServerReflectionProto"
    file.options.java_multiple_files = True
    file.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(alpha):
                field.type_name = f".{_V1_PACKAGE}.{field.type_name[len(alpha) :]}"
    for service in file.service:
        for method in service.method:
            method.input_type = f".{_V1_PACKAGE}.{method.input_type[len(alpha) :]}"
            method.output_type = f".{_V1_PACKAGE}.{method.output_type[len(alpha) :]}"
    pool.AddSerializedFile(file.SerializeToString())


def enable_reflection(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    """Serve reflection (v1 and v1alpha) on ``server``, listing
    ``service_names``, health and reflection itself."""
    _register_v1_descriptor(descriptor_pool.Default())
    servicer = reflection.aio.ReflectionServicer((*service_names, health.SERVICE_NAME, V1, V1ALPHA))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.method_handlers_generic_handler(
        V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))
