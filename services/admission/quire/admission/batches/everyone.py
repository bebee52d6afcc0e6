"""Every tenant's batches, as operators read them (TenantAdminService's
ListTenantBatches, GetTenantBatch and ListTenantBatchJobs).

One batch and its packets are shown exactly as the tenant sees them through
GetBatch and ListBatchJobs: the same desk (``Batches``) answers, scoped to
the tenant the operator names. The listing is newest first, across tenants
or for one; it reads admission's own rows only, so its batches carry their
counts (packets, dispatched, ended) but not each running job's state, which
GetTenantBatch asks audit for, one batch at a time.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from quire.admission import tables
from quire.admission.batches.desk import Batches
from quire.admission.batches.views import batch_message
from quire.admission.v1 import batch_pb2
from quire.admission.v1 import tenant_admin_service_pb2 as pb
from quire.database import Database, as_utc
from quire.errors import NotFound
from quire.paging import PageTokens, Position, keyset_after

__all__ = ["TenantBatches", "tenant_id_of"]

LIST_TENANT_BATCHES = "quire.admission.v1.TenantAdminService/ListTenantBatches"
LIST_TENANT_BATCH_JOBS = "quire.admission.v1.TenantAdminService/ListTenantBatchJobs"
TENANT_PREFIX = "tenants/"


def tenant_id_of(name: str) -> str:
    """The id in ``tenants/{tenant}``; NOT_FOUND for anything else."""
    ident = name.removeprefix(TENANT_PREFIX)
    if not name.startswith(TENANT_PREFIX) or not ident or "/" in ident or len(ident) > 64:
        raise NotFound("tenant not found")
    return ident


def _position(row: Any) -> Position:
    return as_utc(row.created_at), row.batch


def _newest_first(
    connection: Connection, tenant: str, after: Position | None, limit: int
) -> list[Any]:
    table = tables.batches
    order = (table.c.created_at, table.c.batch)
    query = select(table).order_by(*(column.desc() for column in order)).limit(limit)
    if tenant:
        query = query.where(table.c.tenant == tenant)
    beyond = keyset_after(order, after, descending=True)
    if beyond is not None:
        query = query.where(beyond)
    return list(connection.execute(query))


class TenantBatches:
    """Operators' reads of every tenant's batches. The caller has checked the
    operator's token."""

    def __init__(self, database: Database, batches: Batches, *, pages: PageTokens) -> None:
        self._db = database
        self._batches = batches
        self._pages = pages

    async def list(self, request: pb.ListTenantBatchesRequest) -> pb.ListTenantBatchesResponse:
        """Newest first; every tenant's, or the one ``request.tenant`` names."""
        tenant = tenant_id_of(request.tenant) if request.tenant else ""
        page = self._pages.page(
            LIST_TENANT_BATCHES, request.page_size, request.page_token, {"tenant": tenant}
        )
        rows = await self._db.read(lambda s: _newest_first(s, tenant, page.after, page.fetch))
        served, token = page.cut(rows, _position)
        return pb.ListTenantBatchesResponse(
            batches=[
                pb.TenantBatch(tenant=f"{TENANT_PREFIX}{row.tenant}", batch=batch_message(row))
                for row in served
            ],
            next_page_token=token,
        )

    async def get(self, request: pb.GetTenantBatchRequest) -> batch_pb2.Batch:
        """As GetBatch answers the tenant."""
        return await self._batches.get_of(tenant_id_of(request.tenant), request.name)

    async def list_jobs(
        self, request: pb.ListTenantBatchJobsRequest
    ) -> batch_pb2.ListBatchJobsResponse:
        """As ListBatchJobs answers the tenant."""
        asked = batch_pb2.ListBatchJobsRequest(
            parent=request.parent, page_size=request.page_size, page_token=request.page_token
        )
        return await self._batches.list_jobs_of(
            tenant_id_of(request.tenant), asked, rpc=LIST_TENANT_BATCH_JOBS
        )
