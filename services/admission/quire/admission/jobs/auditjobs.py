"""Audit's view of jobs admission accepted, asked in bounded pages.

Admission never reads audit's tables: whether a job has ended, and in which
state, is one ``BatchGetJobs`` call per page of names. Audit being
unreachable is UNAVAILABLE (``DEPENDENCY_UNAVAILABLE``) for the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.type import job_pb2

__all__ = ["ask_audit", "AUDIT_PAGE", "AUDIT_TIMEOUT_SECONDS"]

AUDIT_PAGE = 1000
"""Names one BatchGetJobs call may carry (audit's own limit)."""
AUDIT_TIMEOUT_SECONDS = 5.0


async def ask_audit(
    audit: audit_service_pb2_grpc.AuditServiceStub, names: Sequence[str]
) -> dict[str, job_pb2.Job]:
    """Audit's view of ``names`` (those it has recorded), in bounded calls."""
    known: dict[str, job_pb2.Job] = {}
    for start in range(0, len(names), AUDIT_PAGE):
        try:
            reply = await audit.BatchGetJobs(
                audit_service_pb2.BatchGetJobsRequest(names=names[start : start + AUDIT_PAGE]),
                timeout=AUDIT_TIMEOUT_SECONDS,
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError:
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable") from None
        known.update((job.name, job) for job in reply.jobs)
    return known
