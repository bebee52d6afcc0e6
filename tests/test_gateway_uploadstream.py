"""The gateway's upload stream: admission's refusal passes through as sent,
and grpcio's own INTERNAL "Internal error from Core" (grpc/grpc#36066) is
told apart from it and answered as a transient UPLOAD_INTERRUPTED.

The stub stands in for admission's channel: the code under test is the
mapping around the call, and a real admission cannot be made to hit the
client library's race on demand."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.rpc import code_pb2

from quire.admission.v1 import admission_service_pb2 as pb
from quire.errors import InvalidInput, TransientError
from quire.gateway.problems import from_quire_error, from_rpc_error
from quire.gateway.uploadstream import is_transport_misreport, stream_upload
from quire.grpcstatus import status_for
from quire.reasons import ReasonCode


def _failed(code: grpc.StatusCode, details: str, trailing: tuple = ()) -> grpc.aio.AioRpcError:  # type: ignore[type-arg]
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details)


def _admission_refusal() -> grpc.aio.AioRpcError:
    status = status_for(
        InvalidInput(ReasonCode.CONTENT_TYPE_NOT_ALLOWED, "content type not allowed"), "test"
    )
    assert status.code == code_pb2.INVALID_ARGUMENT
    trailing = (("grpc-status-details-bin", status.SerializeToString()),)
    return _failed(grpc.StatusCode.INVALID_ARGUMENT, status.message, trailing)


class _Stub:
    def __init__(self, error: grpc.aio.AioRpcError | None) -> None:
        self.error = error
        self.sent: list[pb.UploadSourceRequest] = []

    async def UploadSource(  # noqa: N802 - gRPC method name
        self, messages: AsyncIterator[pb.UploadSourceRequest], metadata: object
    ) -> pb.Source:
        async for message in messages:
            self.sent.append(message)
        if self.error is not None:
            raise self.error
        return pb.Source(sha256="a" * 64, size_bytes=1, content_type="application/pdf")


async def _messages() -> AsyncIterator[pb.UploadSourceRequest]:
    yield pb.UploadSourceRequest(header=pb.SourceHeader(sha256="a" * 64, size_bytes=1))
    yield pb.UploadSourceRequest(chunk=b"%")


async def test_grpcios_own_internal_status_becomes_a_transient_interruption() -> None:
    misreport = _failed(grpc.StatusCode.INTERNAL, "Internal error from Core")
    assert is_transport_misreport(misreport)
    with pytest.raises(TransientError) as interrupted:
        await stream_upload(_Stub(misreport), _messages(), ())  # type: ignore[arg-type]
    assert interrupted.value.reason is ReasonCode.UPLOAD_INTERRUPTED
    problem = from_quire_error(interrupted.value)
    assert problem.status_code == 503
    assert problem.headers["retry-after"] == "1"


async def test_admissions_refusal_and_a_real_internal_error_pass_through() -> None:
    refusal = _admission_refusal()
    assert not is_transport_misreport(refusal)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stream_upload(_Stub(refusal), _messages(), ())  # type: ignore[arg-type]
    assert from_rpc_error(refused.value).status_code == 415
    # INTERNAL with Quire's own details is the server's status: still a 500.
    internal = status_for(RuntimeError("boom"), "test")
    server_internal = _failed(
        grpc.StatusCode.INTERNAL,
        internal.message,
        (("grpc-status-details-bin", internal.SerializeToString()),),
    )
    assert not is_transport_misreport(server_internal)
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await stream_upload(_Stub(server_internal), _messages(), ())  # type: ignore[arg-type]
    assert from_rpc_error(failed.value).status_code == 500


async def test_a_stored_source_is_returned_with_every_message_sent() -> None:
    stub = _Stub(None)
    source = await stream_upload(stub, _messages(), ())  # type: ignore[arg-type]
    assert source.sha256 == "a" * 64
    assert [m.WhichOneof("payload") for m in stub.sent] == ["header", "chunk"]
