"""A job's timeline, for operators: every ledger transition with its actor,
time and duration, the deadline budget, the source fetches, whether the
job's evidence verifies, and a link to its trace.

The evidence is exported by audit and verified here against audit's
checkpoint key (``GetCheckpointKey``) as ``quire evidence verify`` does;
the witness's cosignature is checked by ``quire evidence verify
--witness-key``, not on this page.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import grpc
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.evidenceverify import verify_evidence
from quire.gateway.console.pages import console_of, render, serve
from quire.gateway.console.reviews import job_name
from quire.gateway.console.sessions import PATH
from quire.gateway.console.staff import CALL_SECONDS, Staff
from quire.gateway.console.timelinemodel import timeline_of
from quire.grpcstatus import details_of
from quire.type import queue_pb2

__all__ = ["router", "trace_link"]

router = APIRouter(include_in_schema=False)
MAX_ENTRIES = 5000
"""A job has a few dozen entries; a page stops reading past this many."""


def trace_link(template: str, trace_id: str) -> str:
    """The trace's address in the operators' backend; "" without a template."""
    if not template or not trace_id:
        return ""
    return template.replace("{trace_id}", trace_id)


async def _events(staff: Staff, job: str) -> list[queue_pb2.TransitionEvent]:
    events: list[queue_pb2.TransitionEvent] = []
    token = ""
    while len(events) < MAX_ENTRIES:
        reply = await staff.audit.ListJobEvents(
            audit_pb.ListJobEventsRequest(job=job, page_size=1000, page_token=token),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        events.extend(entry.event for entry in reply.entries)
        token = reply.next_page_token
        if not token:
            break
    return events


async def _evidence(staff: Staff, job: str) -> tuple[str, list[str]]:
    """``verified``, ``failed`` with what is wrong, or ``unavailable`` with
    audit's reason (no checkpoint covers the job yet, say)."""
    try:
        key = await staff.audit.GetCheckpointKey(
            audit_pb.GetCheckpointKeyRequest(), metadata=staff.metadata, timeout=CALL_SECONDS
        )
        evidence = await staff.audit.ExportEvidence(
            audit_pb.ExportEvidenceRequest(job=job), metadata=staff.metadata, timeout=CALL_SECONDS
        )
    except grpc.aio.AioRpcError as error:
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise
        return "unavailable", [details_of(error).reason or error.code().name]
    document = json.loads(evidence.json)
    problems = await asyncio.to_thread(verify_evidence, document, key.public_key_sha256)
    return ("failed" if problems else "verified"), problems


@router.get(f"{PATH}/jobs/{{job}}")
async def job_timeline(request: Request, job: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        name = job_name(job)
        events = await _events(staff, name)
        timeline = timeline_of(events, datetime.now(UTC).replace(tzinfo=None))
        verdict, problems = await _evidence(staff, name) if events else ("", [])
        return render(
            request,
            "job.html",
            staff.session,
            job=job,
            name=name,
            timeline=timeline,
            evidence=verdict,
            evidence_problems=problems,
            trace_url=trace_link(console_of(request).trace_url, timeline.trace_id),
        )

    return await serve(request, page, operators_only=True)
