"""A client for Quire's admission API: upload, submit, wait, download.

Used by the ``quire`` CLI, the tests and the benchmark. Bytes are streamed in
chunks both ways, and the downloaded artifact is checked against the digest
the server announces before it is moved into place. Waiting does not poll:
``watch`` follows the job's ``WatchJob`` stream and, when the stream breaks
(admission or audit restarting), watches again after the last ledger
sequence it saw, so every state change arrives once and in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import grpc
from google.protobuf import duration_pb2

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import admission_service_pb2_grpc as pb_grpc
from quire.admission.v1 import batch_pb2, notification_pb2
from quire.admission.v1 import rollout_pb2 as rollout_pb
from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as admin_grpc
from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.audit.v1 import audit_service_pb2_grpc as audit_grpc
from quire.diagnostics.v1 import diagnostics_service_pb2 as diagnostics_pb
from quire.diagnostics.v1 import diagnostics_service_pb2_grpc as diagnostics_grpc
from quire.export.v1 import export_service_pb2 as export_pb
from quire.export.v1 import export_service_pb2_grpc as export_grpc
from quire.grpcserver import TraceClientInterceptors
from quire.jobs import PARKED_STATES, TERMINAL_STATES, state_name, state_value
from quire.paging import MAX_PAGE_SIZE
from quire.pipeline import State
from quire.tls import TlsSettings, aio_channel
from quire.type import job_pb2
from quire.validator.v1 import validator_service_pb2 as validator_pb
from quire.validator.v1 import validator_service_pb2_grpc as validator_grpc

__all__ = [
    "AdmissionClient",
    "TenantAdminClient",
    "RolloutReadsClient",
    "DiagnosticsClient",
    "RecordsClient",
    "PacketItem",
    "ArtifactDigestMismatch",
    "Cancellation",
    "new_request_id",
]

CHUNK_BYTES = 256 * 1024
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
"""A watch that ends with these broke on the way (a restart, a drain): watch again."""
RESUME_DELAY_CAP_SECONDS = 1.0


class ArtifactDigestMismatch(Exception):
    """The downloaded bytes do not match the digest the server announced."""


@dataclass(frozen=True)
class Cancellation:
    """CancelJob's answer, said plainly: ``job`` as audit records it, and
    whether the cancel took effect. A cancel that lost (signing had begun, or
    the job had ended) changed nothing: ``lost`` is true, ``outcome`` is
    ``CANCEL_TOO_LATE`` and ``job.state`` is the state the job had reached."""

    job: job_pb2.Job

    @property
    def cancelled(self) -> bool:
        """The job is CANCELLED (by this cancel, or by an earlier one)."""
        return state_name(self.job.state) == State.CANCELLED

    @property
    def lost(self) -> bool:
        return not self.cancelled

    @property
    def state(self) -> str:
        return state_name(self.job.state)

    @property
    def outcome(self) -> str:
        """``CANCELLED`` or ``CANCEL_TOO_LATE`` (a stable reason code)."""
        return "CANCELLED" if self.cancelled else "CANCEL_TOO_LATE"


@dataclass(frozen=True)
class PacketItem:
    """One document of a packet: the sha256 of an upload, or ``source``, a
    record the pipeline fetches from one of the tenant's registered source
    systems: ``(system, key, content_type)``. Exactly one of the two."""

    document_id: str
    sha256: str = ""
    source: tuple[str, str, str] | None = None

    @classmethod
    def reference(
        cls, document_id: str, system: str, key: str, content_type: str = "application/json"
    ) -> PacketItem:
        """A document named by reference: ``key`` in source system ``system``."""
        return cls(document_id, source=(system, key, content_type))

    def manifest_item(self, position: int) -> job_pb2.ManifestItem:
        item = job_pb2.ManifestItem(
            position=position, document_id=self.document_id, sha256=self.sha256
        )
        if self.source is not None:
            system, key, content_type = self.source
            item.source.CopyFrom(
                job_pb2.SourceReference(system=system, key=key, content_type=content_type)
            )
        return item


def duration(seconds: float | timedelta) -> duration_pb2.Duration:
    """A protobuf Duration of ``seconds`` (or of a timedelta)."""
    message = duration_pb2.Duration()
    if isinstance(seconds, timedelta):
        message.FromTimedelta(seconds)
    else:
        message.FromNanoseconds(round(seconds * 1e9))
    return message


INLINE_LIMIT_BYTES = 4 * 1024 * 1024
"""Admission's default inline limit: sources up to this much in all ride in
``SubmitJob`` itself (``inline_source``); larger packets are uploaded first."""


def inline_source(data: bytes, content_type: str = "application/pdf") -> pb.InlineSource:
    """A source sent inside ``SubmitJob``, declared as an upload would be."""
    return pb.InlineSource(
        header=pb.SourceHeader(
            sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data), content_type=content_type
        ),
        content=data,
    )


def new_request_id() -> str:
    """A fresh AIP-155 request id (a UUID4). Keep it to retry a call whose reply
    was lost: the server answers a repeat with the first reply."""
    return str(uuid.uuid4())


def _digest_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class AdmissionClient:
    def __init__(self, address: str, token: str, *, tls: TlsSettings | None = None) -> None:
        self._channel = aio_channel(address, tls, TraceClientInterceptors())
        self._stub = pb_grpc.AdmissionServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AdmissionClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def upload(
        self,
        path: Path,
        content_type: str = "application/pdf",
        *,
        digest: tuple[str, int] | None = None,
    ) -> pb.Source:
        """Stream the file; ``digest`` (its sha256 and size, when the caller
        has read them already) saves reading it twice."""
        if digest is None:
            digest = await asyncio.to_thread(_digest_file, path)
        sha256, size = digest

        async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
            yield pb.UploadSourceRequest(
                header=pb.SourceHeader(sha256=sha256, size_bytes=size, content_type=content_type)
            )
            with open(path, "rb") as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    yield pb.UploadSourceRequest(chunk=chunk)

        return await self._stub.UploadSource(requests(), metadata=self._metadata)

    async def upload_stream(self, requests: AsyncIterator[pb.UploadSourceRequest]) -> pb.Source:
        """Send hand-built upload messages (for tests of the upload gate)."""
        return await self._stub.UploadSource(requests, metadata=self._metadata)

    async def upload_bytes(self, data: bytes, content_type: str) -> pb.Source:
        """Upload bytes held in memory (a batch's manifest, say)."""

        async def requests() -> AsyncIterator[pb.UploadSourceRequest]:
            header = pb.SourceHeader(
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                content_type=content_type,
            )
            yield pb.UploadSourceRequest(header=header)
            for start in range(0, len(data), CHUNK_BYTES):
                yield pb.UploadSourceRequest(chunk=data[start : start + CHUNK_BYTES])

        return await self._stub.UploadSource(requests(), metadata=self._metadata)

    async def submit(
        self,
        items: Sequence[PacketItem],
        *,
        request_id: str | None = None,
        positions: Sequence[int] | None = None,
        ruleset: str = "",
        render_profile: str = "",
        priority: str = "",
        budget: float | timedelta | None = None,
        inline: Sequence[pb.InlineSource] = (),
    ) -> job_pb2.Job:
        """Submit a packet. ``budget`` (seconds, or a timedelta) is the time the
        job has from acceptance to end; None: the service's default for a
        packet naming sources by reference, no deadline otherwise. ``inline``
        sources (``inline_source``) travel with the request; items name them
        by sha256, as they would uploads."""
        order = list(positions) if positions is not None else list(range(len(items)))
        manifest = job_pb2.Manifest(
            items=[
                item.manifest_item(position) for position, item in zip(order, items, strict=True)
            ],
            ruleset=ruleset,
            render_profile=render_profile,
        )
        request = pb.SubmitJobRequest(
            request_id=request_id or uuid.uuid4().hex,
            manifest=manifest,
            priority=priority,
            inline_sources=inline,
        )
        if budget is not None:
            request.budget.CopyFrom(duration(budget))
        return await self.submit_request(request)

    async def submit_request(self, request: pb.SubmitJobRequest) -> job_pb2.Job:
        return await self._stub.SubmitJob(request, metadata=self._metadata)

    async def get_job(self, name: str) -> job_pb2.Job:
        return await self._stub.GetJob(pb.GetJobRequest(name=name), metadata=self._metadata)

    async def list_jobs(
        self, *, page_size: int = 0, page_token: str = "", state: str = ""
    ) -> pb.ListJobsResponse:
        request = pb.ListJobsRequest(page_size=page_size, page_token=page_token)
        if state:
            request.state = state_value(state)  # type: ignore[assignment]
        return await self._stub.ListJobs(request, metadata=self._metadata)

    async def cancel(self, name: str, *, request_id: str | None = None) -> job_pb2.Job:
        """Cancel the job; ``request_id`` (a fresh one if None) makes a retry safe.

        The reply is the job as audit records it: CANCELLED when the cancel took
        effect; any other state means it came too late (``try_cancel`` says so)."""
        return await self._stub.CancelJob(
            pb.CancelJobRequest(name=name, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    async def try_cancel(self, name: str, *, request_id: str | None = None) -> Cancellation:
        """Cancel the job and say whether the cancel took effect or lost
        (``Cancellation.lost``: signing had begun or the job had ended)."""
        return Cancellation(await self.cancel(name, request_id=request_id))

    # Batches: a portfolio of packets, persisted at once, turned into jobs by
    # admission's dispatcher (batch.proto).

    async def submit_batch(
        self,
        packets: Sequence[batch_pb2.BatchPacket] = (),
        *,
        manifest_sha256: str = "",
        request_id: str | None = None,
    ) -> batch_pb2.Batch:
        """One SubmitBatch: the packets inline, or the sha256 of an uploaded
        manifest (application/json) holding them. ``request_id`` (a fresh one
        if None) makes a retry return the same batch."""
        return await self._stub.SubmitBatch(
            batch_pb2.SubmitBatchRequest(
                request_id=request_id or new_request_id(),
                packets=packets,
                manifest_sha256=manifest_sha256,
            ),
            metadata=self._metadata,
        )

    async def get_batch(self, name: str) -> batch_pb2.Batch:
        return await self._stub.GetBatch(
            batch_pb2.GetBatchRequest(name=name), metadata=self._metadata
        )

    async def list_batch_jobs(
        self, name: str, *, page_size: int = 0, page_token: str = ""
    ) -> batch_pb2.ListBatchJobsResponse:
        """One page of the batch's packets and their jobs; follow ``next_page_token``."""
        return await self._stub.ListBatchJobs(
            batch_pb2.ListBatchJobsRequest(parent=name, page_size=page_size, page_token=page_token),
            metadata=self._metadata,
        )

    async def batch_jobs(
        self, name: str, *, page_size: int = 0
    ) -> AsyncIterator[batch_pb2.BatchJob]:
        """Every packet of the batch in index order, page after page to the last."""
        token = ""
        while True:
            page = await self.list_batch_jobs(name, page_size=page_size, page_token=token)
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def cancel_batch(
        self, name: str, *, request_id: str | None = None
    ) -> batch_pb2.CancelBatchResponse:
        """Stop the packets not yet dispatched; those dispatched finish. The
        reply counts both, and those already ended."""
        return await self._stub.CancelBatch(
            batch_pb2.CancelBatchRequest(name=name, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    # Completion notifications (README "Completion notifications").
    async def set_notification_endpoint(
        self, url: str, *, rotate_secret: bool = False, request_id: str | None = None
    ) -> notification_pb2.SetNotificationEndpointResponse:
        """Register ``url`` for this tenant's completion notifications (empty:
        remove it). The reply holds the HMAC secret when one was made."""
        return await self._stub.SetNotificationEndpoint(
            notification_pb2.SetNotificationEndpointRequest(
                url=url, rotate_secret=rotate_secret, request_id=request_id or new_request_id()
            ),
            metadata=self._metadata,
        )

    async def get_notification_endpoint(self) -> notification_pb2.NotificationEndpoint:
        return await self._stub.GetNotificationEndpoint(
            notification_pb2.GetNotificationEndpointRequest(), metadata=self._metadata
        )

    async def list_notification_attempts(
        self, subject: str
    ) -> notification_pb2.ListNotificationAttemptsResponse:
        """Every delivery attempt for ``subject`` ("jobs/{job}" or "batches/{batch}")."""
        return await self._stub.ListNotificationAttempts(
            notification_pb2.ListNotificationAttemptsRequest(subject=subject),
            metadata=self._metadata,
        )

    async def watch_changes(
        self,
        name: str,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
        settled_only: bool = False,
    ) -> AsyncGenerator[pb.WatchJobResponse, None]:
        """Each change of the job's state after ``after_sequence`` (0: from its
        first), with its ledger sequence, until a terminal state; only those
        into a terminal or parked state if ``settled_only``. A broken
        stream is watched again after the last sequence seen; DEADLINE_EXCEEDED
        once ``timeout`` has passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        position = after_sequence
        delay = 0.05
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            call = self._stub.WatchJob(
                pb.WatchJobRequest(name=name, after_sequence=position, settled_only=settled_only),
                metadata=self._metadata,
                timeout=remaining,
            )
            try:
                async for change in call:
                    position = change.sequence
                    delay = 0.05
                    yield change
                    if state_name(change.job.state) in TERMINAL_STATES:
                        return
                return  # ended by the server: nothing after ``position`` is to come
            except grpc.aio.AioRpcError as error:
                if error.code() not in RESUMABLE:
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    raise  # still away when the time ran out: say why, not "timed out"
            finally:
                call.cancel()
            if deadline is not None and time.monotonic() + delay >= deadline:
                await asyncio.sleep(max(deadline - time.monotonic(), 0))
                continue  # the next call fails DEADLINE_EXCEEDED at once
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESUME_DELAY_CAP_SECONDS)

    async def watch(self, name: str, *, timeout: float | None = None) -> AsyncIterator[job_pb2.Job]:
        """The job after each change of its state, from its first state, once
        each and in order, ending at a terminal state (see ``watch_changes``)."""
        async with contextlib.aclosing(self.watch_changes(name, timeout=timeout)) as changes:
            async for change in changes:
                yield change.job

    async def wait(
        self, name: str, *, timeout: float = 120.0, stop_when_parked: bool = True
    ) -> job_pb2.Job:
        """Watch until the job is terminal (or parked, unless told otherwise).

        A job ending FAILED is watched once more from there: an operator's
        dead-letter retry may have reopened it already."""
        deadline = time.monotonic() + timeout
        position = 0
        job: job_pb2.Job | None = None
        try:
            while True:
                seen = position
                changes = self.watch_changes(
                    name,
                    after_sequence=position,
                    timeout=max(deadline - time.monotonic(), 0.001),
                    settled_only=True,  # the states in between are not waited for
                )
                async with contextlib.aclosing(changes):
                    async for change in changes:
                        position, job = change.sequence, change.job
                        if stop_when_parked and state_name(job.state) in PARKED_STATES:
                            return job
                if job is None:
                    return await self.get_job(name)  # the stream said nothing
                if state_name(job.state) != State.FAILED or position == seen:
                    return job
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        state = state_name(job.state) if job is not None else "unseen"
        raise TimeoutError(f"{name} still {state} after {timeout:.0f}s")

    async def evidence(self, name: str, *, since_size: int = 0) -> pb.JobEvidence:
        """The job's evidence document (``docs/evidence-format.md``), to verify
        offline; ``since_size``: a checkpoint size seen earlier to prove it extends."""
        return await self._stub.GetJobEvidence(
            pb.GetJobEvidenceRequest(name=name, since_size=since_size), metadata=self._metadata
        )

    async def download(self, name: str, output: Path) -> str:
        """Stream the signed artifact to ``output``; returns its verified sha256."""
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=output.parent, prefix=".quire-download-")
        digest = hashlib.sha256()
        announced = ""
        try:
            with os.fdopen(fd, "wb") as handle:
                stream = self._stub.DownloadArtifact(
                    pb.DownloadArtifactRequest(name=name), metadata=self._metadata
                )
                async for message in stream:
                    announced = announced or message.sha256
                    digest.update(message.chunk)
                    handle.write(message.chunk)
            if digest.hexdigest() != announced:
                raise ArtifactDigestMismatch(name)
            os.replace(temp_name, output)
        finally:
            Path(temp_name).unlink(missing_ok=True)
        return announced


class TenantAdminClient:
    """The operators' API: tenants, limits, tokens and source systems."""

    def __init__(
        self, address: str, operator_token: str, *, tls: TlsSettings | None = None
    ) -> None:
        self._channel = aio_channel(address, tls, TraceClientInterceptors())
        self._stub = admin_grpc.TenantAdminServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {operator_token}"),)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> TenantAdminClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def create_tenant(
        self,
        name: str,
        *,
        max_upload_bytes: int = 0,
        max_outstanding_jobs: int = 0,
        storage_quota_bytes: int = 0,
        retention: admin_pb.TenantRetention | None = None,
        request_id: str | None = None,
        scheduling_weight: int = 0,
    ) -> admin_pb.CreateTenantResponse:
        """A new tenant and its first token. Every mutation here takes a
        ``request_id`` (AIP-155; a fresh one if None): a retry with the same id
        returns the first reply instead of acting twice."""
        return await self._stub.CreateTenant(
            admin_pb.CreateTenantRequest(
                request_id=request_id or new_request_id(),
                display_name=name,
                limits=admin_pb.TenantLimits(
                    max_upload_bytes=max_upload_bytes,
                    max_outstanding_jobs=max_outstanding_jobs,
                    storage_quota_bytes=storage_quota_bytes,
                    scheduling_weight=scheduling_weight,
                ),
                retention=retention,
            ),
            metadata=self._metadata,
        )

    async def update_retention(
        self,
        tenant: str,
        retention: admin_pb.TenantRetention,
        *,
        request_id: str | None = None,
    ) -> admin_pb.Tenant:
        """Set the tenant's retention periods (seconds; 0 is the default)."""
        return await self._stub.UpdateTenantRetention(
            admin_pb.UpdateTenantRetentionRequest(
                name=tenant, retention=retention, request_id=request_id or new_request_id()
            ),
            metadata=self._metadata,
        )

    async def forget_source(
        self, tenant: str, sha256: str, *, request_id: str | None = None
    ) -> bool:
        """Have admission forget an upload whose bytes were retired."""
        reply = await self._stub.ForgetSource(
            admin_pb.ForgetSourceRequest(
                tenant=tenant, sha256=sha256, request_id=request_id or new_request_id()
            ),
            metadata=self._metadata,
        )
        return reply.forgotten

    async def list_tenants(self) -> list[admin_pb.Tenant]:
        """Every tenant, in creation order: each page of ListTenants to the last."""
        tenants: list[admin_pb.Tenant] = []
        token = ""
        while True:
            page = await self.list_tenants_page(page_token=token)
            tenants.extend(page.tenants)
            token = page.next_page_token
            if not token:
                return tenants

    async def list_tenants_page(
        self, *, page_size: int = 0, page_token: str = ""
    ) -> admin_pb.ListTenantsResponse:
        """One page of tenants; follow ``next_page_token`` until it is empty."""
        return await self._stub.ListTenants(
            admin_pb.ListTenantsRequest(page_size=page_size, page_token=page_token),
            metadata=self._metadata,
        )

    async def update_limits(
        self,
        tenant: str,
        *,
        max_upload_bytes: int = 0,
        max_outstanding_jobs: int = 0,
        storage_quota_bytes: int = 0,
        request_id: str | None = None,
        scheduling_weight: int = 0,
    ) -> admin_pb.Tenant:
        """Set every limit of ``tenant`` (0: the default); ``scheduling_weight``
        is its share of batch dispatch, 1 to 100."""
        return await self._stub.UpdateTenantLimits(
            admin_pb.UpdateTenantLimitsRequest(
                request_id=request_id or new_request_id(),
                name=tenant,
                limits=admin_pb.TenantLimits(
                    max_upload_bytes=max_upload_bytes,
                    max_outstanding_jobs=max_outstanding_jobs,
                    storage_quota_bytes=storage_quota_bytes,
                    scheduling_weight=scheduling_weight,
                ),
            ),
            metadata=self._metadata,
        )

    async def create_token(
        self, tenant: str, *, request_id: str | None = None
    ) -> admin_pb.CreateTokenResponse:
        return await self._stub.CreateToken(
            admin_pb.CreateTokenRequest(tenant=tenant, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    async def revoke_token(self, token: str, *, request_id: str | None = None) -> admin_pb.Token:
        return await self._stub.RevokeToken(
            admin_pb.RevokeTokenRequest(name=token, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    async def put_source_system(
        self,
        tenant: str,
        system: str,
        *,
        base_url: str,
        credential_ref: str = "",
        timeout: float | timedelta = 0.0,
        max_bytes: int = 0,
        schema: str = "",
    ) -> admin_pb.SourceSystem:
        """Register (or replace) ``system`` for ``tenant`` ("tenants/ID"):
        where the pipeline fetches the sources its manifests name by
        reference. ``credential_ref`` is "env:NAME" or "file:/path", never the
        credential; 0 means the default for ``timeout`` (seconds) and ``max_bytes``."""
        message = admin_pb.SourceSystem(
            name=f"{tenant}/sourceSystems/{system}",
            base_url=base_url,
            credential_ref=credential_ref,
            max_bytes=max_bytes,
            schema=schema,
        )
        if timeout:
            message.timeout.CopyFrom(duration(timeout))
        return await self._stub.PutSourceSystem(
            admin_pb.PutSourceSystemRequest(source_system=message), metadata=self._metadata
        )

    async def list_source_systems(self, tenant: str) -> list[admin_pb.SourceSystem]:
        """The tenant's source systems, by name."""
        reply = await self._stub.ListSourceSystems(
            admin_pb.ListSourceSystemsRequest(parent=tenant), metadata=self._metadata
        )
        return list(reply.source_systems)

    async def delete_source_system(self, tenant: str, system: str) -> bool:
        """Forget ``system``; False when it was not registered. Jobs already
        accepted keep the registration they were accepted with."""
        reply = await self._stub.DeleteSourceSystem(
            admin_pb.DeleteSourceSystemRequest(name=f"{tenant}/sourceSystems/{system}"),
            metadata=self._metadata,
        )
        return reply.deleted

    # -- rollouts (quire.admission.rollouts.records) --------------------------------

    async def start_rollout(
        self,
        *,
        stage: str,
        share_basis_points: int,
        concurrency_cap: int,
        candidate_version: str = "",
        candidate_ruleset: str = "",
        tenants: list[str] | None = None,
        request_id: str | None = None,
    ) -> rollout_pb.Rollout:
        """Open a rollout (CANARY): ``share_basis_points`` (0 to 10,000) of new
        jobs (of ``tenants``, "tenants/ID", or of every tenant) are pinned to
        the candidate track. Refused FAILED_PRECONDITION (ROLLOUT_OPEN) while
        another rollout of ``stage`` is open."""
        return await self._stub.StartRollout(
            rollout_pb.StartRolloutRequest(
                rollout=rollout_pb.Rollout(
                    stage=stage,
                    candidate_version=candidate_version,
                    candidate_ruleset=candidate_ruleset,
                    share_basis_points=share_basis_points,
                    tenants=tenants or [],
                    concurrency_cap=concurrency_cap,
                ),
                request_id=request_id or new_request_id(),
            ),
            metadata=self._metadata,
        )

    async def get_rollout(self, name: str) -> rollout_pb.Rollout:
        """``name`` is "rollouts/ID"."""
        return await self._stub.GetRollout(
            rollout_pb.GetRolloutRequest(name=name), metadata=self._metadata
        )

    async def list_rollouts(
        self, *, stage: str = "", open_only: bool = False
    ) -> list[rollout_pb.Rollout]:
        """Every rollout, newest first (rollouts are never deleted)."""
        reply = await self._stub.ListRollouts(
            rollout_pb.ListRolloutsRequest(stage=stage, open_only=open_only),
            metadata=self._metadata,
        )
        return list(reply.rollouts)

    async def promote_rollout(
        self, name: str, *, request_id: str | None = None
    ) -> rollout_pb.Rollout:
        """CANARY → PROMOTED (share 10,000); ROLLOUT_NOT_OPEN for a closed one."""
        return await self._stub.PromoteRollout(
            rollout_pb.PromoteRolloutRequest(name=name, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    async def rollback_rollout(
        self, name: str, *, request_id: str | None = None
    ) -> rollout_pb.Rollout:
        """CANARY → ROLLED_BACK (share 0): new jobs are baseline again; jobs
        already pinned keep their track. ROLLOUT_NOT_OPEN for a closed one."""
        return await self._stub.RollbackRollout(
            rollout_pb.RollbackRolloutRequest(name=name, request_id=request_id or new_request_id()),
            metadata=self._metadata,
        )

    async def list_current_rulesets(self) -> list[rollout_pb.CurrentRuleset]:
        """Each ruleset name's current version (what a job naming none gets), by name."""
        reply = await self._stub.ListCurrentRulesets(
            rollout_pb.ListCurrentRulesetsRequest(), metadata=self._metadata
        )
        return list(reply.rulesets)


class RolloutReadsClient:
    """The operators' reads that judge a rollout, beside ``TenantAdminClient``'s
    rollout methods: audit's per-track comparison (``CompareTracks``) and the
    validator's recorded decision (``GetValidation``) and shadow evaluation
    (``EvaluateManifest``, which records nothing). Every call presents the
    operator token."""

    def __init__(
        self,
        *,
        audit: str,
        validator: str,
        operator_token: str,
        tls: TlsSettings | None = None,
    ) -> None:
        self._audit_channel = aio_channel(audit, tls, TraceClientInterceptors())
        self._validator_channel = aio_channel(validator, tls, TraceClientInterceptors())
        self._audit = audit_grpc.AuditServiceStub(self._audit_channel)
        self._validator = validator_grpc.ValidatorServiceStub(self._validator_channel)
        self._metadata = (("authorization", f"Bearer {operator_token}"),)

    async def close(self) -> None:
        await self._audit_channel.close()
        await self._validator_channel.close()

    async def __aenter__(self) -> RolloutReadsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def compare_tracks(
        self,
        *,
        start: datetime,
        end: datetime | None = None,
        stage: str = "",
        sample_size: int = 0,
    ) -> list[audit_pb.TrackSummary]:
        """The jobs accepted in [``start``, ``end``) (``end`` None: now), per
        rollout track: candidate, baseline, then "" (tracks without a job are
        left out). ``stage`` limits the versions listed to that stage's
        workers'; ``sample_size`` (at most 200) completed jobs are named per
        track, newest first."""
        request = audit_pb.CompareTracksRequest(stage=stage, sample_size=sample_size)
        request.start_time.FromDatetime(start)
        if end is not None:
            request.end_time.FromDatetime(end)
        reply = await self._audit.CompareTracks(request, metadata=self._metadata)
        return list(reply.tracks)

    async def get_validation(self, job: str) -> validator_pb.Validation:
        """What the validator decided for ``job`` ("jobs/ID") and why, per rule."""
        return await self._validator.GetValidation(
            validator_pb.GetValidationRequest(job=job), metadata=self._metadata
        )

    async def evaluate_manifest(self, job: str, *, ruleset: str = "") -> validator_pb.Evaluation:
        """``ruleset`` ("name@version"; empty: the job's own) over ``job``'s
        sources: the decisions only, with no state, ledger entry, signature or
        artifact."""
        return await self._validator.EvaluateManifest(
            validator_pb.EvaluateManifestRequest(job=job, ruleset=ruleset),
            metadata=self._metadata,
        )


class DiagnosticsClient:
    """The operators' read of what each stage kept about a job's failed
    deliveries (``DiagnosticsService.ListDiagnostics`` on validator,
    assembler and signer). Every call presents the operator token, and every
    stage records the read before it answers."""

    def __init__(
        self,
        stages: Mapping[str, str],
        operator_token: str,
        *,
        tls: TlsSettings | None = None,
    ) -> None:
        """``stages``: each stage service's address, by service name."""
        self._channels = {
            service: aio_channel(address, tls, TraceClientInterceptors())
            for service, address in stages.items()
        }
        self._metadata = (("authorization", f"Bearer {operator_token}"),)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    async def __aenter__(self) -> DiagnosticsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def list_diagnostics(
        self, job: str, *, timeout: float = 30.0
    ) -> dict[str, diagnostics_pb.ListDiagnosticsResponse]:
        """Each stage's diagnostics of ``job`` ("jobs/ID") and its read log, by
        service name, asked of every stage at once; the first refusal raises."""
        services = list(self._channels)
        replies = await asyncio.gather(
            *(
                diagnostics_grpc.DiagnosticsServiceStub(self._channels[service]).ListDiagnostics(
                    diagnostics_pb.ListDiagnosticsRequest(job=job),
                    metadata=self._metadata,
                    timeout=timeout,
                )
                for service in services
            )
        )
        return dict(zip(services, replies, strict=True))


class RecordsClient:
    """The operators' export of what each service owns
    (``ExportService.ExportRecords``), for ``quire check`` and ``quire
    retention``: a collection page by page, with the operator token. What
    comes back is the service's claim; the caller verifies it."""

    def __init__(
        self,
        services: Mapping[str, str],
        operator_token: str,
        *,
        tls: TlsSettings | None = None,
    ) -> None:
        """``services``: each service's address, by service name."""
        self._channels = {
            service: aio_channel(address, tls, TraceClientInterceptors())
            for service, address in services.items()
        }
        self._metadata = (("authorization", f"Bearer {operator_token}"),)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    async def __aenter__(self) -> RecordsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def pages(
        self, service: str, collection: export_pb.Collection, *, timeout: float = 60.0
    ) -> AsyncIterator[export_pb.ExportRecordsResponse]:
        """Every page of ``service``'s ``collection``, in order; each call
        has ``timeout`` seconds."""
        stub = export_grpc.ExportServiceStub(self._channels[service])
        token = ""
        while True:
            page = await stub.ExportRecords(
                export_pb.ExportRecordsRequest(
                    collection=collection, page_size=MAX_PAGE_SIZE, page_token=token
                ),
                metadata=self._metadata,
                timeout=timeout,
            )
            yield page
            token = page.next_page_token
            if not token:
                return
