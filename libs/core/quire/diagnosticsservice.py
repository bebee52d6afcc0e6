"""``quire.diagnostics.v1.DiagnosticsService`` on every stage's gRPC server.

Operators only: the access policy (``quire.accesspolicy``) admits an
operator's bearer token alone, and the servicer asks admission whose token
it is (``quire.operatorcheck``), so the read is recorded under the
operator's identity as authenticated (``operators/-/tokens/{token}``)
before the reply. A tenant's token, another service's proof or no
credentials are refused before the store is touched.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from quire.diagnostics.v1 import diagnostics_service_pb2 as pb
from quire.diagnostics.v1 import diagnostics_service_pb2_grpc as pb_grpc
from quire.diagnosticstore import Diagnostic, DiagnosticRead, DiagnosticsStore
from quire.grpcstatus import abort_with
from quire.jobs import job_id, job_name, timestamp
from quire.operatorcheck import OperatorCheck

__all__ = ["SERVICE_NAME", "DiagnosticsServicer", "with_diagnostics"]

SERVICE_NAME = "quire.diagnostics.v1.DiagnosticsService"


def _diagnostic(row: Diagnostic) -> pb.Diagnostic:
    return pb.Diagnostic(
        job=row.job,
        stage=row.stage,
        instance=row.instance,
        build_version=row.build_version,
        attempt=row.attempt,
        reason_code=row.reason_code,
        error_type=row.error_type,
        message=row.message,
        create_time=timestamp(row.create_time),
        expire_time=timestamp(row.expire_time),
    )


def _read(read: DiagnosticRead) -> pb.DiagnosticRead:
    return pb.DiagnosticRead(reader=read.reader, read_time=timestamp(read.read_at))


class DiagnosticsServicer(pb_grpc.DiagnosticsServiceServicer):
    def __init__(self, store: DiagnosticsStore, operators: OperatorCheck, *, domain: str) -> None:
        self._store = store
        self._operators = operators
        self._domain = domain

    async def ListDiagnostics(  # noqa: N802 - gRPC method name
        self, request: pb.ListDiagnosticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDiagnosticsResponse:
        try:
            job = job_name(job_id(request.job))
            token = await self._operators.operator_of(context)
            reading = await self._store.read(job, reader=f"operators/-/tokens/{token}")
        except Exception as error:  # noqa: BLE001 - translated here, once
            await abort_with(context, error, self._domain)
        return pb.ListDiagnosticsResponse(
            diagnostics=[_diagnostic(row) for row in reading.diagnostics],
            reads=[_read(read) for read in reading.reads],
        )


def with_diagnostics(
    register: Callable[[grpc.aio.Server], None], servicer: DiagnosticsServicer
) -> Callable[[grpc.aio.Server], None]:
    """``register``, then the diagnostics servicer, on the same server."""

    def both(server: grpc.aio.Server) -> None:
        register(server)
        pb_grpc.add_DiagnosticsServiceServicer_to_server(servicer, server)

    return both
