"""Staff calls need a staff token; the service asks admission, which owns the
tokens, whose token it is (WhoAmI).

Staff are operators and reviewers. An operator may make every operator call
(reviews, shadow evaluation, dead letters, diagnostics, exports, ...). A
reviewer may make review calls only: ``staff_of`` admits both, for the few
RPCs that say so; ``operator_of`` admits operators and refuses a reviewer
with PERMISSION_DENIED (``REVIEWER_NOT_ALLOWED``), so every call that asks
for an operator refuses reviewers without saying so itself. Anything else (a
tenant's token, a revoked or unknown one, none) is UNAUTHENTICATED.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.errors import PermissionDenied, TransientError, Unauthenticated
from quire.reasons import ReasonCode

__all__ = ["OPERATOR", "REVIEWER", "OperatorCheck", "Staff", "refuse_reviewer"]

TIMEOUT_SECONDS = 5.0
OPERATOR = "operator"
REVIEWER = "reviewer"


@dataclass(frozen=True)
class Staff:
    """The person behind a staff token, as admission names them."""

    token: str
    """``operators/-/tokens/{id}`` or ``reviewers/-/tokens/{id}``: the actor a
    decision is recorded under."""
    role: str
    """``operator`` or ``reviewer``."""

    @property
    def token_id(self) -> str:
        return self.token.rsplit("/", 1)[-1]

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR


def _staff(reply: admin_pb.Operator) -> Staff:
    """The reply's staff; an admission from before reviewers sends no role,
    and knew operators only."""
    role = reply.role or (REVIEWER if reply.token.startswith("reviewers/") else OPERATOR)
    return Staff(token=reply.token, role=role)


def refuse_reviewer() -> PermissionDenied:
    """What every operator-only call answers a reviewer."""
    return PermissionDenied(
        "a reviewer's token may make review calls only", ReasonCode.REVIEWER_NOT_ALLOWED
    )


class OperatorCheck:
    """Asks admission whose staff token a call carries."""

    def __init__(self, admin: admin_grpc.TenantAdminServiceStub) -> None:
        self._admin = admin

    async def operator_of(self, context: grpc.aio.ServicerContext) -> str:
        """The caller's operator token id; PERMISSION_DENIED for a reviewer,
        UNAUTHENTICATED for anyone else."""
        return await self.operator_in(context.invocation_metadata() or ())

    async def operator_in(self, metadata: Iterable[tuple[str, str | bytes]]) -> str:
        """The operator token id in a call's ``metadata``; PERMISSION_DENIED for
        a reviewer, UNAUTHENTICATED for anyone else."""
        staff = await self.staff_in(metadata)
        if not staff.is_operator:
            raise refuse_reviewer()
        return staff.token_id

    async def staff_of(self, context: grpc.aio.ServicerContext) -> Staff:
        """The operator or reviewer calling: for review calls only."""
        return await self.staff_in(context.invocation_metadata() or ())

    async def staff_in(self, metadata: Iterable[tuple[str, str | bytes]]) -> Staff:
        """The operator or reviewer whose token is in ``metadata``; UNAUTHENTICATED
        for anyone else."""
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
        return _staff(reply)
