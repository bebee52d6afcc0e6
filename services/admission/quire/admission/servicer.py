"""AdmissionService: the front door. Every call is authenticated first; another
tenant's job is indistinguishable from one that does not exist.

Uploads are refused (RESOURCE_EXHAUSTED, ``TEMP_SPACE_LOW``) while temporary
space is low, before a byte is written. Storage failing during an upload is
UNAVAILABLE: ``STORAGE_UNAVAILABLE`` when it may pass, ``STORAGE_FAILED`` when
storage refuses writes until an operator acts — still UNAVAILABLE, not
INVALID_ARGUMENT, because the upload itself was not at fault. Either way the
temporary blob is discarded and no source is recorded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from quire.admission import tables
from quire.admission.desks import BatchDesk, NotificationDesk
from quire.admission.jobs.cancellation import Canceller
from quire.admission.jobs.dispatch import Dispatcher
from quire.admission.jobs.evidence import EvidenceDesk
from quire.admission.jobs.intake import Intake
from quire.admission.jobs.views import JobViews, accepted_view, with_intake
from quire.admission.settings import AdmissionSettings
from quire.admission.tenants.directory import TenantDirectory
from quire.admission.uploads.gate import UploadGate
from quire.admission.uploads.inlinesources import InlineSources, KeptSources
from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc
from quire.admission.v1 import batch_pb2, notification_pb2
from quire.admission.watches.relay import WatchRelay
from quire.blobstore import BlobStore
from quire.database import Database
from quire.errors import (
    DataLoss,
    FailedPrecondition,
    FieldViolation,
    InvalidInput,
    NotFound,
    QuireError,
    SystemFailure,
    TransientError,
)
from quire.faults import fault_point
from quire.grpcstatus import at_the_edge
from quire.idempotency import RequestOnce
from quire.jobs import job_id
from quire.reasons import ReasonCode
from quire.telemetry import name_job
from quire.type import job_pb2

__all__ = ["AdmissionServicer"]

DOMAIN = "admission.quire"
CANCEL_JOB = "quire.admission.v1.AdmissionService/CancelJob"
log = logging.getLogger(__name__)


class AdmissionServicer(pb_grpc.AdmissionServiceServicer):
    """Admission's AdmissionService. Authenticates every call, then hands it to
    the part that answers it."""

    def __init__(
        self,
        *,
        database: Database,
        blobs: BlobStore,
        tenants: TenantDirectory,
        uploads: UploadGate,
        intake: Intake,
        dispatcher: Dispatcher,
        views: JobViews,
        canceller: Canceller,
        settings: AdmissionSettings,
        watches: WatchRelay | None = None,
        batches: BatchDesk | None = None,
        notifications: NotificationDesk | None = None,
        evidence: EvidenceDesk | None = None,
    ) -> None:
        self._db = database
        self._blobs = blobs
        self._tenants = tenants
        self._uploads = uploads
        self._inline = InlineSources(uploads, limit_bytes=settings.inline_source_bytes)
        self._intake = intake
        self._dispatcher = dispatcher
        self._views = views
        self._canceller = canceller
        self._settings = settings
        self._watches = watches
        self._batches = batches
        self._notifications = notifications
        self._evidence = evidence

    @at_the_edge(DOMAIN)
    async def UploadSource(  # noqa: N802 - gRPC method name
        self,
        request_iterator: AsyncIterator[pb.UploadSourceRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.Source:
        tenant = await self._tenants.authenticate(context)
        try:
            stored = await self._uploads.receive(
                tenant,
                request_iterator,
                # The token again when the bytes are in, unless revoked meanwhile.
                still_authorized=lambda: self._tenants.reauthenticate(context),
            )
        except SystemFailure as error:
            raise TransientError(error.reason, "storage refuses writes; try again later") from None
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
        kept = screened = None
        key_checked = False
        if request.inline_sources:
            self._intake.check_fields(request)  # nothing is kept for a malformed request
            try:
                # The job's checks are read with the sources' look-up (one read).
                kept, screened = await self._inline.keep(
                    tenant, request, self._intake.screening(tenant, request)
                )
            except SystemFailure as error:
                raise TransientError(
                    error.reason, "storage refuses writes; try again later"
                ) from None
            key_checked = True  # keeping checked that the tenant takes work
            request.ClearField("inline_sources")  # kept: the manifest names them by digest
        try:
            accepted = await self._intake.submit(
                tenant, request, kept, key_checked=key_checked, screened=screened
            )
        finally:
            if kept is not None and not kept.recorded:
                # Refused before the job's transaction: the stored sources are
                # the tenant's all the same (a later packet may name them).
                await _record_alone(kept)
        fault_point("admission.after_commit")
        name_job(accepted.name)
        self._views.accepted(tenant.id, accepted)
        if not accepted.dispatched:
            # Before the reply, so that nothing the client does next (a cancel)
            # can reach the ledger ahead of ACCEPTED.
            try:
                if accepted.handoff is not None:
                    await self._dispatcher.hand_on(*accepted.handoff)
                else:
                    await self._dispatcher.dispatch(accepted.name)
            except Exception:  # noqa: BLE001 - committed: the dispatch sweep hands it on
                log.warning(
                    "job %s accepted; dispatch deferred to the sweep",
                    accepted.name,
                    extra={"job": accepted.name, "tenant": tenant.id},
                )
        if accepted.handoff is not None:  # accepted by this call, not a repeat
            log.info(
                "job accepted",
                extra={"job": accepted.name, "tenant": tenant.id, "items": accepted.item_count},
            )
        return accepted_view(accepted)

    @at_the_edge(DOMAIN)
    async def GetJob(  # noqa: N802 - gRPC method name
        self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        tenant = await self._tenants.authenticate(context)
        return await self._views.status(await self._views.owned(tenant.id, request.name))

    @at_the_edge(DOMAIN)
    async def WatchJob(  # noqa: N802 - gRPC method name
        self, request: pb.WatchJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchJobResponse]:
        tenant = await self._tenants.authenticate(context)
        accepted = await self._views.owned(tenant.id, request.name)
        if request.after_sequence < 0:
            raise InvalidInput(
                ReasonCode.INVALID_PAGE,
                "after_sequence must not be negative",
                (FieldViolation("after_sequence", "negative"),),
            )
        if self._watches is None:
            raise NotFound("this admission service relays no watches")
        changes = self._watches.relay(
            tenant.id,
            accepted.name,
            request.after_sequence,
            context.time_remaining(),
            settled_only=request.settled_only,
        )
        async for change in changes:
            # Source waits as of the relay (a deferral is no change of its own).
            job = await self._views.with_source_waits(with_intake(change.job, accepted))
            yield pb.WatchJobResponse(job=job, sequence=change.sequence)

    @at_the_edge(DOMAIN)
    async def DownloadArtifact(  # noqa: N802 - gRPC method name
        self, request: pb.DownloadArtifactRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadArtifactResponse]:
        tenant = await self._tenants.authenticate(context)
        job = await self._views.current(await self._views.owned(tenant.id, request.name))
        if job.state != job_pb2.JOB_STATE_COMPLETED:
            raise FailedPrecondition(ReasonCode.JOB_NOT_COMPLETED, "the job is not completed")
        key = f"signed/{tenant.id}/{job_id(job.name)}.pdf"
        if not await asyncio.to_thread(self._blobs.exists, key):
            if await self._views.artifact_retired(job.name):
                raise FailedPrecondition(
                    ReasonCode.ARTIFACT_RETIRED,
                    "the artifact's bytes were retired under the retention policy",
                )
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
            if isinstance(error, FailedPrecondition | TransientError):
                raise  # DATA_SHREDDED (crypto-shredded), DATA_KEY_UNAVAILABLE (retry later)
            raise DataLoss(
                ReasonCode.ARTIFACT_DIGEST_MISMATCH, "artifact does not match the ledger"
            ) from error

    @at_the_edge(DOMAIN)
    async def ListJobs(  # noqa: N802 - gRPC method name
        self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListJobsResponse:
        tenant = await self._tenants.authenticate(context)
        page = await self._views.page(
            tenant.id, size=request.page_size, token=request.page_token, state=request.state
        )
        return pb.ListJobsResponse(jobs=page.jobs, next_page_token=page.next_token)

    @at_the_edge(DOMAIN)
    async def CancelJob(  # noqa: N802 - gRPC method name
        self, request: pb.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.Job:
        """Cancel a job that has not started signing (the reply is CANCELLED,
        ``CANCELLED_BY_CLIENT``). A cancel that loses — signing had begun, or
        the job had ended — changes nothing and is answered like a cancel of an
        ended job: OK, with the job as audit records it (never a state older
        than the one the job gate holds). Its state is then not CANCELLED, which
        is how a caller tells the cancel lost (``CANCEL_TOO_LATE`` in the CLI,
        the Python client and the gateway). While audit lags behind the signer's
        claim for longer than ``LOST_WAIT_SECONDS``, UNAVAILABLE
        (``DEPENDENCY_UNAVAILABLE``, retry hint): ask again (``Canceller``)."""
        tenant = await self._tenants.authenticate(context)
        # Cancelling is idempotent by state; the request id returns the first
        # reply itself (what the job had reached then), scoped to the tenant.
        once = RequestOnce(tables.request_ids, tenant.id, CANCEL_JOB, request, job_pb2.Job)
        return await once.around(self._db, lambda: self._canceller.cancel(tenant.id, request.name))

    @at_the_edge(DOMAIN)
    async def GetJobEvidence(  # noqa: N802 - gRPC method name
        self, request: pb.GetJobEvidenceRequest, context: grpc.aio.ServicerContext
    ) -> pb.JobEvidence:
        """The caller's own job's evidence, as audit exports it (``EvidenceDesk``)."""
        tenant = await self._tenants.authenticate(context)
        accepted = await self._views.owned(tenant.id, request.name)
        if self._evidence is None:
            raise NotFound("this admission service serves no evidence")
        return await self._evidence.evidence(tenant.id, accepted.name, request.since_size)

    def _batch_desk(self) -> BatchDesk:
        if self._batches is None:
            raise NotFound("this admission service takes no batches")
        return self._batches

    def _notification_desk(self) -> NotificationDesk:
        if self._notifications is None:
            raise NotFound("this admission service sends no notifications")
        return self._notifications

    @at_the_edge(DOMAIN)
    async def SubmitBatch(  # noqa: N802 - gRPC method name
        self, request: batch_pb2.SubmitBatchRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.Batch:
        tenant = await self._tenants.authenticate(context)
        return await self._batch_desk().submit(tenant, request)

    @at_the_edge(DOMAIN)
    async def GetBatch(  # noqa: N802 - gRPC method name
        self, request: batch_pb2.GetBatchRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.Batch:
        tenant = await self._tenants.authenticate(context)
        return await self._batch_desk().get(tenant, request.name)

    @at_the_edge(DOMAIN)
    async def ListBatchJobs(  # noqa: N802 - gRPC method name
        self, request: batch_pb2.ListBatchJobsRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.ListBatchJobsResponse:
        tenant = await self._tenants.authenticate(context)
        return await self._batch_desk().list_jobs(tenant, request)

    @at_the_edge(DOMAIN)
    async def CancelBatch(  # noqa: N802 - gRPC method name
        self, request: batch_pb2.CancelBatchRequest, context: grpc.aio.ServicerContext
    ) -> batch_pb2.CancelBatchResponse:
        tenant = await self._tenants.authenticate(context)
        return await self._batch_desk().cancel(tenant, request)

    @at_the_edge(DOMAIN)
    async def SetNotificationEndpoint(  # noqa: N802 - gRPC method name
        self,
        request: notification_pb2.SetNotificationEndpointRequest,
        context: grpc.aio.ServicerContext,
    ) -> notification_pb2.SetNotificationEndpointResponse:
        tenant = await self._tenants.authenticate(context)
        return await self._notification_desk().set_endpoint(tenant, request)

    @at_the_edge(DOMAIN)
    async def GetNotificationEndpoint(  # noqa: N802 - gRPC method name
        self,
        request: notification_pb2.GetNotificationEndpointRequest,
        context: grpc.aio.ServicerContext,
    ) -> notification_pb2.NotificationEndpoint:
        tenant = await self._tenants.authenticate(context)
        return await self._notification_desk().get_endpoint(tenant)

    @at_the_edge(DOMAIN)
    async def ListNotificationAttempts(  # noqa: N802 - gRPC method name
        self,
        request: notification_pb2.ListNotificationAttemptsRequest,
        context: grpc.aio.ServicerContext,
    ) -> notification_pb2.ListNotificationAttemptsResponse:
        tenant = await self._tenants.authenticate(context)
        return await self._notification_desk().list_attempts(tenant, request)


async def _record_alone(kept: KeptSources) -> None:
    try:
        await kept.record_alone()
    except Exception as error:  # noqa: BLE001 - the refusal on its way out is the answer
        log.warning("inline sources not recorded (%s)", type(error).__name__)
