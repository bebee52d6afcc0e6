"""A tenant's own evidence, asked of audit on its behalf (``GetJobEvidence``).

Admission has already authenticated the tenant and found the job among its
own (another tenant's job is NOT_FOUND before audit is asked). Audit is then
asked with admission's service identity and the tenant named
(``ExportEvidenceRequest.tenant``); audit checks that name against the job's
hashed ledger entries itself, so a mistake here still cannot hand one tenant
another's entries. The document comes back as audit wrote it: the tenant
verifies those bytes offline exactly as an operator's export.
"""

from __future__ import annotations

import grpc

from quire.admission.v1 import admission_service_pb2 as pb
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.errors import DataLoss, FailedPrecondition, NotFound, QuireError, TransientError
from quire.reasons import ReasonCode

__all__ = ["EvidenceDesk", "EXPORT_TIMEOUT_SECONDS"]

EXPORT_TIMEOUT_SECONDS = 60.0
"""Audit signs a fresh checkpoint before it exports (the newest entry covered)."""

_NOT_YET = (
    "no evidence for this job yet: audit has not recorded it or no checkpoint covers it"
    " (or none of the size given)"
)


class EvidenceDesk:
    """Asks audit for one job's evidence, scoped to the tenant that owns it."""

    def __init__(self, audit: audit_service_pb2_grpc.AuditServiceStub) -> None:
        self._audit = audit

    async def evidence(self, tenant: str, job: str, since_size: int) -> pb.JobEvidence:
        """``job``'s evidence (a job ``tenant`` owns, checked by the caller)."""
        request = audit_service_pb2.ExportEvidenceRequest(
            job=job, tenant=f"tenants/{tenant}", since_size=since_size
        )
        try:
            reply = await self._audit.ExportEvidence(
                request, timeout=EXPORT_TIMEOUT_SECONDS, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as error:
            raise _answer(error) from None
        return pb.JobEvidence(job=reply.job, json=reply.json)


def _answer(error: grpc.aio.AioRpcError) -> QuireError:
    """What the tenant is told when audit does not export: audit's reason
    code, in admission's own words (no text of another service travels on)."""
    code = error.code()
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(_NOT_YET)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return FailedPrecondition(  # audit's one precondition on an export
            ReasonCode.CHECKPOINT_INCONSISTENT,
            "the tenant's log is smaller than the checkpoint given",
        )
    if code == grpc.StatusCode.DATA_LOSS:
        return DataLoss(ReasonCode.LEDGER_DAMAGED, "the ledger cannot prove this job's history")
    return TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable")
