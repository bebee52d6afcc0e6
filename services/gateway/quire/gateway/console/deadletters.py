"""Dead letters and stuck work, for operators: FAILED jobs with their
reason and a retry button, each stage queue's oldest message, and what the
stages kept about a job's failed deliveries.

A retry is audit's ``RetryDeadLetter`` (optionally with a new budget), with
a request id made when the page was served, so a form posted twice retries
once. Diagnostics are read as ``quire diagnose`` reads them: each stage
checks the operator's token and records the read before it answers, and the
page shows that read log.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from google.protobuf import duration_pb2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.diagnostics.v1 import diagnostics_service_pb2 as diagnostics_pb
from quire.gateway.console.pages import Refusal, form_of, render, request_id_of, serve
from quire.gateway.console.reviews import job_name
from quire.gateway.console.sessions import PATH
from quire.gateway.console.staff import CALL_SECONDS, DIAGNOSING, Staff
from quire.reasons import ReasonCode

__all__ = ["router", "budget_seconds"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 50
MAX_BUDGET_SECONDS = 7 * 24 * 3600


def budget_seconds(text: str) -> int | None:
    """The retry form's budget in whole seconds; None when left empty."""
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) <= MAX_BUDGET_SECONDS:
        raise Refusal(
            400, ReasonCode.BUDGET_TOO_SHORT, f"a budget of 1 to {MAX_BUDGET_SECONDS} seconds"
        )
    return int(text)


@router.get(f"{PATH}/dead-letters")
async def dead_letters(request: Request) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        letters, queues = await asyncio.gather(
            staff.audit.ListDeadLetters(
                audit_pb.ListDeadLettersRequest(
                    page_size=PAGE_SIZE, page_token=request.query_params.get("page_token", "")
                ),
                metadata=staff.metadata,
                timeout=CALL_SECONDS,
            ),
            staff.admin.ListQueues(
                admin_pb.ListQueuesRequest(), metadata=staff.metadata, timeout=CALL_SECONDS
            ),
        )
        return render(
            request,
            "dead_letters.html",
            staff.session,
            letters=list(letters.dead_letters),
            following=letters.next_page_token,
            queues=list(queues.queues),
        )

    return await serve(request, page, operators_only=True)


@router.post(f"{PATH}/dead-letters/{{job}}/retry")
async def retry(request: Request, job: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        name = job_name(job)
        form = await form_of(request, staff.session)
        wanted = audit_pb.RetryDeadLetterRequest(
            job=name, request_id=request_id_of(str(form.get("request_id", "")))
        )
        seconds = budget_seconds(str(form.get("budget_seconds", "")))
        if seconds is not None:
            wanted.budget.CopyFrom(duration_pb2.Duration(seconds=seconds))
        await staff.audit.RetryDeadLetter(wanted, metadata=staff.metadata, timeout=CALL_SECONDS)
        return RedirectResponse(f"{PATH}/jobs/{job}", status_code=303)

    return await serve(request, page, operators_only=True)


@router.get(f"{PATH}/jobs/{{job}}/diagnostics")
async def diagnostics(request: Request, job: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        name = job_name(job)
        known = await staff.audit.ListJobEvents(
            audit_pb.ListJobEventsRequest(job=name, page_size=1),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        if not known.entries:  # a read of nothing would still be recorded
            raise Refusal(404, ReasonCode.NOT_FOUND, "the ledger holds nothing of this job")
        replies = await asyncio.gather(
            *(
                staff.diagnostics(service).ListDiagnostics(
                    diagnostics_pb.ListDiagnosticsRequest(job=name),
                    metadata=staff.metadata,
                    timeout=CALL_SECONDS,
                )
                for service in DIAGNOSING
            )
        )
        return render(
            request,
            "diagnostics.html",
            staff.session,
            job=job,
            kept=dict(zip(DIAGNOSING, replies, strict=True)),
        )

    return await serve(request, page, operators_only=True)
