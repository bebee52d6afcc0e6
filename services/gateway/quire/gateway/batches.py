"""Batch operations over HTTP: a portfolio submitted at once and turned into
jobs by admission's dispatcher; its progress, its packets, its cancellation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse

from quire.admission.v1 import batch_pb2
from quire.gateway.admission import Admission, admission_of
from quire.gateway.documents import (
    batch_cancellation,
    batch_jobs_page,
    batch_packet,
    batch_status,
)
from quire.gateway.idempotency import request_id_of
from quire.gateway.problems import problem_responses
from quire.gateway.schemas import BatchCancellation, BatchJobsPage, BatchRequest, BatchStatus

__all__ = ["router", "batch_location"]

router = APIRouter(tags=["batches"])
AdmissionDep = Annotated[Admission, Depends(admission_of)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=256)]


def batch_location(batch_id: str) -> str:
    return f"/v1/pdf/batch/get/{batch_id}"


def _name(batch_id: str) -> str:
    return f"batches/{batch_id}"


@router.post(
    "/v1/pdf/batch/submit",
    status_code=202,
    response_model=BatchStatus,
    summary="Submit a portfolio of up to 10,000 packets; its jobs are created in pages.",
    responses={
        202: {
            "description": "Accepted: the batch's status; poll its Location.",
            "headers": {
                "Location": {"description": "The batch's URL.", "schema": {"type": "string"}}
            },
        },
        **problem_responses(),
    },
)
async def submit_batch(
    body: BatchRequest,
    request: Request,
    admission: AdmissionDep,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    submit = batch_pb2.SubmitBatchRequest(
        request_id=request_id_of(idempotency_key, body.idempotency_key),
        packets=[batch_packet(packet) for packet in body.packets],
        manifest_sha256=body.manifest_sha256,
    )
    batch = await admission.unary(admission.stub.SubmitBatch, submit, request)
    status = batch_status(batch)
    return JSONResponse(
        status.model_dump(mode="json"),
        status_code=202,
        headers={"Location": batch_location(status.batch_id)},
    )


@router.get(
    "/v1/pdf/batch/get/{batch_id}",
    response_model=BatchStatus,
    summary="The batch's counts by state and its progress.",
    responses=problem_responses(),
)
async def get_batch(batch_id: str, request: Request, admission: AdmissionDep) -> BatchStatus:
    batch = await admission.unary(
        admission.stub.GetBatch, batch_pb2.GetBatchRequest(name=_name(batch_id)), request
    )
    return batch_status(batch)


@router.get(
    "/v1/pdf/batch/jobs/{batch_id}",
    response_model=BatchJobsPage,
    summary="One page of the batch's packets, each with its job once dispatched.",
    responses=problem_responses(),
)
async def list_batch_jobs(
    batch_id: str,
    request: Request,
    admission: AdmissionDep,
    page_size: Annotated[int, Query(ge=0, le=1000)] = 0,
    page_token: Annotated[str, Query(max_length=2048)] = "",
) -> BatchJobsPage:
    reply = await admission.unary(
        admission.stub.ListBatchJobs,
        batch_pb2.ListBatchJobsRequest(
            parent=_name(batch_id), page_size=page_size, page_token=page_token
        ),
        request,
    )
    return batch_jobs_page(reply)


@router.post(
    "/v1/pdf/batch/cancel/{batch_id}",
    response_model=BatchCancellation,
    summary="Stop the packets not yet dispatched; jobs already dispatched finish.",
    responses=problem_responses(),
)
async def cancel_batch(
    batch_id: str,
    request: Request,
    admission: AdmissionDep,
    idempotency_key: IdempotencyKey = None,
) -> BatchCancellation:
    reply = await admission.unary(
        admission.stub.CancelBatch,
        batch_pb2.CancelBatchRequest(name=_name(batch_id), request_id=idempotency_key or ""),
        request,
    )
    return batch_cancellation(reply)
