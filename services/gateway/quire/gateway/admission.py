"""The gateway's one collaborator: admission's gRPC API, called with the
HTTP caller's own bearer token.

The token is forwarded as it came, never read, kept or logged; admission
alone decides who the caller is. A header value gRPC metadata cannot carry
(not printable ASCII) is not forwarded, so admission refuses the call as
unauthenticated instead of the gateway failing on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from fastapi import Request

from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc

__all__ = ["Admission", "caller_metadata"]

Metadata = tuple[tuple[str, str], ...]
Reply = TypeVar("Reply")


def caller_metadata(request: Request) -> Metadata:
    """The caller's ``Authorization`` header as gRPC metadata, when it has one."""
    value = request.headers.get("authorization", "")
    if not value or not value.isascii() or not value.isprintable():
        return ()
    return (("authorization", value),)


@dataclass(frozen=True)
class Admission:
    """Admission's stub and the limits of each call the gateway makes."""

    stub: pb_grpc.AdmissionServiceStub
    call_timeout_seconds: float
    """Deadline of each unary call; streams are bounded by admission itself."""
    upload_chunk_bytes: int
    """Largest piece of an HTTP body sent as one upload message."""

    async def unary(
        self, method: Callable[..., Awaitable[Reply]], message: Any, request: Request
    ) -> Reply:
        """One unary call to admission as the HTTP caller, under the gateway's
        deadline; a channel backing off from admission's restart waits for it."""
        return await method(
            message,
            metadata=caller_metadata(request),
            timeout=self.call_timeout_seconds,
            wait_for_ready=True,
        )

    @classmethod
    def over(
        cls, channel: grpc.aio.Channel, *, call_timeout_seconds: float, upload_chunk_bytes: int
    ) -> Admission:
        return cls(
            pb_grpc.AdmissionServiceStub(channel),
            call_timeout_seconds,
            upload_chunk_bytes,
        )


def admission_of(request: Request) -> Admission:
    """The app's ``Admission`` (a FastAPI dependency)."""
    return request.app.state.admission  # type: ignore[no-any-return]
