"""Admission's resources as the HTTP API's documents."""

from __future__ import annotations

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import batch_pb2
from quire.gateway.schemas import (
    BatchCancellation,
    BatchJob,
    BatchJobsPage,
    BatchPacket,
    BatchStatus,
    JobStatus,
    MergeItem,
    SourceDocument,
)
from quire.jobs import state_name
from quire.jobstatus import batch_status_document, job_status_document
from quire.type import job_pb2

__all__ = [
    "job_status",
    "source_document",
    "manifest_of",
    "batch_packet",
    "batch_status",
    "batch_jobs_page",
    "batch_cancellation",
    "resource_id",
]


def resource_id(name: str) -> str:
    """``jobs/{id}`` or ``batches/{id}``: the id."""
    return name.partition("/")[2]


def job_status(job: job_pb2.Job) -> JobStatus:
    return JobStatus(**job_status_document(job))


def source_document(source: pb.Source) -> SourceDocument:
    return SourceDocument(
        name=source.name,
        sha256=source.sha256,
        size_bytes=source.size_bytes,
        content_type=source.content_type,
    )


def _manifest_item(item: MergeItem) -> job_pb2.ManifestItem:
    message = job_pb2.ManifestItem(
        position=item.position, document_id=item.document_id, sha256=item.sha256
    )
    if item.source is not None:
        message.source.CopyFrom(
            job_pb2.SourceReference(
                system=item.source.system,
                key=item.source.key,
                content_type=item.source.content_type,
            )
        )
    return message


def manifest_of(items: list[MergeItem], ruleset: str, render_profile: str) -> job_pb2.Manifest:
    return job_pb2.Manifest(
        items=[_manifest_item(item) for item in items],
        ruleset=ruleset,
        render_profile=render_profile,
    )


def batch_packet(packet: BatchPacket) -> batch_pb2.BatchPacket:
    return batch_pb2.BatchPacket(
        bundle_id=packet.bundle_id,
        manifest=manifest_of(packet.items, packet.ruleset, packet.render_profile),
    )


def batch_status(batch: batch_pb2.Batch) -> BatchStatus:
    return BatchStatus(**batch_status_document(batch))


def batch_jobs_page(reply: batch_pb2.ListBatchJobsResponse) -> BatchJobsPage:
    return BatchJobsPage(
        jobs=[
            BatchJob(
                index=job.index,
                bundle_id=job.bundle_id,
                job_id=resource_id(job.job) or None,
                state=state_name(job.state) if job.job else None,
                cancelled_undispatched=job.cancelled_undispatched,
                reason_code=job.reason_code or None,
            )
            for job in reply.jobs
        ],
        next_page_token=reply.next_page_token or None,
    )


def batch_cancellation(reply: batch_pb2.CancelBatchResponse) -> BatchCancellation:
    return BatchCancellation(
        batch=batch_status(reply.batch),
        not_dispatched_cancelled=reply.not_dispatched_cancelled,
        in_flight_finishing=reply.in_flight_finishing,
        already_terminal=reply.already_terminal,
    )
