"""AdmissionService: the front door. Every call is authenticated first; another
tenant's job is indistinguishable from one that does not exist."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from sqlalchemy import select

from quire.admission import tables
from quire.admission.dispatch import Dispatcher
from quire.admission.intake import AcceptedJob, Intake
from quire.admission.tenants import TenantDirectory
from quire.admission.uploads import UploadGate
from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.blobstore import LocalBlobStore
from quire.database import Database
from quire.errors import DataLoss, FailedPrecondition, NotFound, QuireError, TransientError
from quire.grpcstatus import at_the_edge
from quire.jobs import job_id, job_name, state_value, timestamp
from quire.reasons import ReasonCode
from quire.settings import AdmissionSettings
from quire.type import job_pb2

__all__ = ["AdmissionServicer"]

DOMAIN = "admission.quire"
log = logging.getLogger(__name__)
AUDIT_TIMEOUT_SECONDS = 5.0


class AdmissionServicer(pb_grpc.AdmissionServiceServicer):
    def __init__(
        self,
        *,
        database: Database,
        blobs: LocalBlobStore,
        tenants: TenantDirectory,
        uploads: UploadGate,
        intake: Intake,
        dispatcher: Dispatcher,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        settings: AdmissionSettings,
    ) -> None:
        self._db = database
        self._blobs = blobs
        self._tenants = tenants
        self._uploads = uploads
        self._intake = intake
        self._dispatcher = dispatcher
        self._audit = audit
        self._settings = settings

    @at_the_edge(DOMAIN)
    async def UploadSource(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[pb.UploadSourceRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.Source:
        tenant = await self._tenants.authenticate(context)
        stored = await self._uploads.receive(tenant.id, request_iterator)
        return pb.Source(
            name=f"sources/{stored.sha256}",
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            content_type=stored.content_type,
        )

    @at_the_edge(DOMAIN)
    async def SubmitJob(  # noqa: N802 - gRPC method name
        self, request: pb.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        tenant = await self._tenants.authenticate(context)
        accepted = await self._intake.submit(tenant.id, request)
        if not accepted.dispatched:
            try:
                await self._dispatcher.dispatch(accepted.name)
            except Exception:  # noqa: BLE001 - committed: the dispatch sweep hands it on
                log.warning("job %s accepted; dispatch deferred to the sweep", accepted.name)
        return self._accepted_view(accepted)

    @at_the_edge(DOMAIN)
    async def GetJob(  # noqa: N802 - gRPC method name
        self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        tenant = await self._tenants.authenticate(context)
        accepted = await self._owned_job(tenant.id, request.name)
        return await self._current_view(accepted)

    @at_the_edge(DOMAIN)
    async def DownloadArtifact(  # noqa: N802 - gRPC method name
        self, request: pb.DownloadArtifactRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadArtifactResponse]:
        tenant = await self._tenants.authenticate(context)
        accepted = await self._owned_job(tenant.id, request.name)
        job = await self._current_view(accepted)
        if job.state != job_pb2.JOB_STATE_COMPLETED:
            raise FailedPrecondition(ReasonCode.JOB_NOT_COMPLETED, "the job is not completed")
        key = f"signed/{tenant.id}/{job_id(job.name)}.pdf"
        chunks = self._blobs.read_verified(key, job.output_digest, self._settings.chunk_bytes)
        first = True
        try:
            # File reads run off the event loop; the digest is checked after the last chunk.
            while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
                yield pb.DownloadArtifactResponse(
                    chunk=chunk, sha256=job.output_digest if first else ""
                )
                first = False
        except QuireError as error:
            raise DataLoss(
                ReasonCode.ARTIFACT_DIGEST_MISMATCH, "artifact does not match the ledger"
            ) from error

    async def _owned_job(self, tenant: str, name: str) -> AcceptedJob:
        job = job_name(job_id(name))
        table = tables.jobs
        row = await self._db.run(
            lambda s: s.execute(
                select(table).where(table.c.job == job, table.c.tenant == tenant)
            ).first()
        )
        if row is None:
            raise NotFound("job not found")
        return AcceptedJob(
            name=row.job,
            manifest_digest=row.manifest_digest,
            item_count=row.item_count,
            created_at=row.created_at,
            dispatched=row.dispatched_at is not None,
        )

    async def _current_view(self, accepted: AcceptedJob) -> job_pb2.Job:
        try:
            return await self._audit.GetJob(
                audit_service_pb2.GetJobRequest(name=accepted.name), timeout=AUDIT_TIMEOUT_SECONDS
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return self._accepted_view(accepted)  # audit has not recorded it yet
            raise TransientError(ReasonCode.DEPENDENCY_UNAVAILABLE, "audit unavailable") from None

    @staticmethod
    def _accepted_view(accepted: AcceptedJob) -> job_pb2.Job:
        return job_pb2.Job(
            name=accepted.name,
            state=state_value("ACCEPTED"),  # type: ignore[arg-type]
            item_count=accepted.item_count,
            manifest_digest=accepted.manifest_digest,
            create_time=timestamp(accepted.created_at),
            update_time=timestamp(accepted.created_at),
        )
