"""Operator calls (reviews, shadow evaluation, dead letters) need an operator
token; the service asks admission, which owns the tokens, whose token it is."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.errors import TransientError, Unauthenticated
from quire.reasons import ReasonCode

__all__ = ["OperatorCheck"]

TIMEOUT_SECONDS = 5.0


class OperatorCheck:
    def __init__(self, admin: admin_grpc.TenantAdminServiceStub) -> None:
        self._admin = admin

    async def operator_of(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's operator token id; UNAUTHENTICATED for anyone else."""
        return await self.operator_in(context.invocation_metadata() or ())

    async def operator_in(self, metadata: Iterable[tuple[str, str | bytes]]) -> str:
        """The operator token id in a call's ``metadata``; UNAUTHENTICATED for anyone else."""
        bearer = [
            (key, value)
            for key, value in metadata
            if key == "authorization" and isinstance(value, str)
        ]
        if not bearer:
            raise Unauthenticated("an operator token is required")
        try:
            reply = await self._admin.WhoAmI(
                admin_pb.WhoAmIRequest(),
                metadata=bearer,
                timeout=TIMEOUT_SECONDS,
                wait_for_ready=True,  # a channel backing off from admission's start waits
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise Unauthenticated("an operator token is required") from None
            raise TransientError(
                ReasonCode.DEPENDENCY_UNAVAILABLE, "admission unavailable"
            ) from None
        return reply.token.rsplit("/", 1)[-1]
