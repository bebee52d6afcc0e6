"""The seed endpoints and a job's other operations: submit a manifest, read
its status, cancel it, download its signed artifact (streamed)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Annotated

import grpc
from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from quire.admission.v1 import admission_service_pb2 as pb
from quire.errors import NotFound
from quire.gateway.admission import Admission, admission_of, caller_metadata
from quire.gateway.documents import job_status, manifest_of
from quire.gateway.idempotency import request_id_of
from quire.gateway.problems import problem_responses
from quire.gateway.schemas import JobStatus, MergeRequest
from quire.jobs import state_name
from quire.pipeline import State
from quire.reasons import ReasonCode

__all__ = ["router", "job_location"]

router = APIRouter(tags=["jobs"])
AdmissionDep = Annotated[Admission, Depends(admission_of)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=256,
        description="Maps to request_id: the same key and request return the same job.",
    ),
]
JOB_ID = "Lower-case hex id of the job, as in its name jobs/{job_id}."


class JobCancellation(JobStatus):
    """The job status document after a cancel, and whether the cancel took effect."""

    cancelled: bool = Field(
        description="true: the job is CANCELLED. false: the cancel came too late (signing had"
        " begun, or the job had ended) and changed nothing; state is the state the job had"
        " reached, as the audit ledger records it."
    )
    cancel_outcome: str = Field(
        description='"CANCELLED", or "CANCEL_TOO_LATE" when the cancel lost.'
    )


def job_location(job_id: str) -> str:
    return f"/v1/pdf/job/get/{job_id}"


def _name(job_id: str) -> str:
    return f"jobs/{job_id}"


@router.post(
    "/v1/pdf/merge",
    status_code=202,
    response_model=JobStatus,
    summary="Submit an ordered manifest; the packet is merged, validated and signed.",
    responses={
        202: {
            "description": "Accepted: the job's status; poll its Location.",
            "headers": {
                "Location": {"description": "The job's status URL.", "schema": {"type": "string"}}
            },
        },
        **problem_responses(),
    },
)
async def merge(
    body: MergeRequest,
    request: Request,
    admission: AdmissionDep,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    submit = pb.SubmitJobRequest(
        request_id=request_id_of(idempotency_key, body.idempotency_key),
        manifest=manifest_of(body.items, body.ruleset, body.render_profile),
        priority=body.priority,
        bundle_id=body.bundle_id,
        inline_sources=[
            pb.InlineSource(
                header=pb.SourceHeader(
                    sha256=source.sha256,
                    size_bytes=len(source.content),
                    content_type=source.content_type,
                ),
                content=source.content,
            )
            for source in body.sources
        ],
    )
    if body.budget_seconds is not None:
        submit.budget.FromNanoseconds(round(body.budget_seconds * 1e9))
    job = await admission.unary(admission.stub.SubmitJob, submit, request)
    status = job_status(job)
    return JSONResponse(
        status.model_dump(mode="json"),
        status_code=202,
        headers={"Location": job_location(status.job_id)},
    )


@router.get(
    "/v1/pdf/job/get/{job_id}",
    response_model=JobStatus,
    summary="The job's state, ordered item count, output digest or failure code.",
    responses=problem_responses(),
)
async def get_job(job_id: str, request: Request, admission: AdmissionDep) -> JobStatus:
    job = await admission.unary(
        admission.stub.GetJob, pb.GetJobRequest(name=_name(job_id)), request
    )
    return job_status(job)


@router.post(
    "/v1/pdf/job/cancel/{job_id}",
    response_model=JobCancellation,
    summary="Cancel a job that has not started signing; otherwise its state as it is"
    " (cancelled false, CANCEL_TOO_LATE).",
    responses=problem_responses(),
)
async def cancel_job(
    job_id: str,
    request: Request,
    admission: AdmissionDep,
    idempotency_key: IdempotencyKey = None,
) -> JobCancellation:
    job = await admission.unary(
        admission.stub.CancelJob,
        pb.CancelJobRequest(name=_name(job_id), request_id=idempotency_key or ""),
        request,
    )
    cancelled = state_name(job.state) == State.CANCELLED
    return JobCancellation(
        **job_status(job).model_dump(),
        cancelled=cancelled,
        cancel_outcome="CANCELLED" if cancelled else ReasonCode.CANCEL_TOO_LATE.value,
    )


@router.get(
    "/v1/pdf/job/get/{job_id}/artifact",
    response_class=StreamingResponse,
    summary="The signed PDF, streamed; Repr-Digest carries its sha-256.",
    responses={
        200: {
            "description": "The signed PDF.",
            "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
            "headers": {
                "Repr-Digest": {
                    "description": "RFC 9530: sha-256=:<base64 of the digest>:",
                    "schema": {"type": "string"},
                }
            },
        },
        **problem_responses(),
    },
)
async def download_artifact(
    job_id: str, request: Request, admission: AdmissionDep
) -> StreamingResponse:
    call = admission.stub.DownloadArtifact(
        pb.DownloadArtifactRequest(name=_name(job_id)), metadata=caller_metadata(request)
    )
    try:
        first = await call.read()
    except BaseException:
        call.cancel()
        raise
    if first is grpc.aio.EOF:
        raise NotFound("the job has no artifact", ReasonCode.ARTIFACT_MISSING)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield first.chunk
            while (message := await call.read()) is not grpc.aio.EOF:
                yield message.chunk
        finally:
            call.cancel()

    digest = base64.b64encode(bytes.fromhex(first.sha256)).decode()
    headers = {
        "Repr-Digest": f"sha-256=:{digest}:",
        "Content-Disposition": f'attachment; filename="{job_id}.pdf"',
    }
    if first.size_bytes:  # announced: a length; otherwise the body is chunked
        headers["Content-Length"] = str(first.size_bytes)
    return StreamingResponse(chunks(), media_type="application/pdf", headers=headers)
