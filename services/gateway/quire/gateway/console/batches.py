"""Batches, for operators: every tenant's, newest first, and one batch's
progress by state with its packets (admission's ``ListTenantBatches``,
``GetTenantBatch`` and ``ListTenantBatchJobs``)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.gateway.console.pages import Refusal, render, serve
from quire.gateway.console.sessions import PATH
from quire.gateway.console.staff import CALL_SECONDS, Staff
from quire.jobs import state_name
from quire.reasons import ReasonCode

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 50


def _plain(part: str) -> str:
    if not part or len(part) > 64 or not all(c.isalnum() or c in "-_" for c in part):
        raise Refusal(404, ReasonCode.NOT_FOUND, "no such batch")
    return part


@router.get(f"{PATH}/batches")
async def batches(request: Request) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        tenant = request.query_params.get("tenant", "").strip()
        reply = await staff.admin.ListTenantBatches(
            admin_pb.ListTenantBatchesRequest(
                tenant=f"tenants/{_plain(tenant.removeprefix('tenants/'))}" if tenant else "",
                page_size=PAGE_SIZE,
                page_token=request.query_params.get("page_token", ""),
            ),
            metadata=staff.metadata,
            timeout=CALL_SECONDS,
        )
        return render(
            request,
            "batches.html",
            staff.session,
            batches=list(reply.batches),
            tenant=tenant,
            following=reply.next_page_token,
        )

    return await serve(request, page, operators_only=True)


@router.get(f"{PATH}/tenants/{{tenant}}/batches/{{batch}}")
async def batch(request: Request, tenant: str, batch: str) -> Response:
    async def page(request: Request, staff: Staff) -> Response:
        owner, name = f"tenants/{_plain(tenant)}", f"batches/{_plain(batch)}"
        found, packets = await asyncio.gather(
            staff.admin.GetTenantBatch(
                admin_pb.GetTenantBatchRequest(tenant=owner, name=name),
                metadata=staff.metadata,
                timeout=CALL_SECONDS,
            ),
            staff.admin.ListTenantBatchJobs(
                admin_pb.ListTenantBatchJobsRequest(
                    tenant=owner,
                    parent=name,
                    page_size=1000,
                    page_token=request.query_params.get("page_token", ""),
                ),
                metadata=staff.metadata,
                timeout=CALL_SECONDS,
            ),
        )
        return render(
            request,
            "batch.html",
            staff.session,
            tenant=tenant,
            batch=found,
            packets=list(packets.jobs),
            following=packets.next_page_token,
            state_name=state_name,
        )

    return await serve(request, page, operators_only=True)
