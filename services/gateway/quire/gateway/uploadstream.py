"""One upload streamed to admission, and the answer as admission gave it.

Admission answers before the end of an upload's stream only to refuse it.
Should that answer reach grpcio's asyncio client while the gateway is still
writing, the client may report ``INTERNAL`` "Internal error from Core" in its
place (grpc/grpc#36066). That status is not admission's, and a 500 would
blame the server for a refusal: it becomes a transient UPLOAD_INTERRUPTED
(503 with a retry hint), since uploading again is safe (sources are stored
under their digest) and gets admission's answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc
from quire.errors import TransientError
from quire.gateway.admission import Metadata
from quire.grpcstatus import details_of
from quire.reasons import ReasonCode

__all__ = ["stream_upload", "is_transport_misreport"]

CORE_INTERNAL = "Internal error from Core"
"""grpcio's details when a write failed as the call ended (``set_internal_error``)."""

RETRY_AFTER_SECONDS = 1.0


def is_transport_misreport(error: grpc.RpcError) -> bool:
    """Whether a failed call's status is grpcio's own, not the server's: INTERNAL
    with grpcio's fixed details and none of the ``google.rpc`` details every
    Quire status carries."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    return (
        code == grpc.StatusCode.INTERNAL
        and details == CORE_INTERNAL
        and not details_of(error).reason
    )


async def stream_upload(
    stub: pb_grpc.AdmissionServiceStub,
    messages: AsyncIterator[pb.UploadSourceRequest],
    metadata: Metadata,
) -> pb.Source:
    """``UploadSource`` with ``messages``; a transport misreport raises
    UPLOAD_INTERRUPTED, any other failure propagates as admission sent it."""
    try:
        return await stub.UploadSource(messages, metadata=metadata)
    except grpc.aio.AioRpcError as error:
        if not is_transport_misreport(error):
            raise
        raise TransientError(
            ReasonCode.UPLOAD_INTERRUPTED,
            "the upload was interrupted before admission's answer arrived; upload again",
            retry_after=RETRY_AFTER_SECONDS,
        ) from None
