"""TenantAdminService: operators create tenants, set their limits, and issue
and revoke tokens. Every call needs the operator token."""

from __future__ import annotations

import asyncio

import grpc

from quire.admission.tenants import Tenant, TenantDirectory, TokenRecord
from quire.admission.v1 import tenant_admin_service_pb2 as pb
from quire.admission.v1 import tenant_admin_service_pb2_grpc as pb_grpc
from quire.errors import NotFound
from quire.grpcstatus import at_the_edge
from quire.jobs import timestamp

__all__ = ["TenantAdminServicer"]

DOMAIN = "admission.quire"


def _tenant_id(name: str) -> str:
    prefix, _, ident = name.partition("/")
    if prefix != "tenants" or not ident or "/" in ident:
        raise NotFound("tenant not found")
    return ident


def _token(record: TokenRecord) -> pb.Token:
    token = pb.Token(
        name=f"tenants/{record.tenant}/tokens/{record.token_id}",
        create_time=timestamp(record.created_at),
    )
    if record.revoked_at is not None:
        token.revoke_time.CopyFrom(timestamp(record.revoked_at))
    return token


def _tenant(tenant: Tenant, tokens: list[TokenRecord]) -> pb.Tenant:
    message = pb.Tenant(
        name=f"tenants/{tenant.id}",
        display_name=tenant.name,
        limits=pb.TenantLimits(
            max_upload_bytes=tenant.max_upload_bytes or 0,
            max_outstanding_jobs=tenant.max_outstanding_jobs or 0,
        ),
        tokens=[_token(t) for t in tokens],
    )
    if tenant.created_at is not None:
        message.create_time.CopyFrom(timestamp(tenant.created_at))
    return message


class TenantAdminServicer(pb_grpc.TenantAdminServiceServicer):
    def __init__(self, tenants: TenantDirectory) -> None:
        self._tenants = tenants

    @at_the_edge(DOMAIN)
    async def CreateTenant(  # noqa: N802 - gRPC method name
        self, request: pb.CreateTenantRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTenantResponse:
        await self._tenants.authenticate_operator(context)
        tenant, secret = await asyncio.to_thread(
            self._tenants.create_tenant,
            request.display_name,
            max_upload_bytes=request.limits.max_upload_bytes,
            max_outstanding_jobs=request.limits.max_outstanding_jobs,
        )
        assert tenant.created_at is not None
        record = TokenRecord(secret.split("_")[1], tenant.id, tenant.created_at, None)
        return pb.CreateTenantResponse(tenant=_tenant(tenant, [record]), secret=secret)

    @at_the_edge(DOMAIN)
    async def ListTenants(  # noqa: N802 - gRPC method name
        self, request: pb.ListTenantsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTenantsResponse:
        await self._tenants.authenticate_operator(context)
        return pb.ListTenantsResponse(
            tenants=[
                _tenant(t, tokens)
                for t, tokens in await asyncio.to_thread(self._tenants.list_tenants)
            ]
        )

    @at_the_edge(DOMAIN)
    async def UpdateTenantLimits(  # noqa: N802 - gRPC method name
        self, request: pb.UpdateTenantLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.Tenant:
        await self._tenants.authenticate_operator(context)
        tenant = await asyncio.to_thread(
            self._tenants.update_limits,
            _tenant_id(request.name),
            max_upload_bytes=request.limits.max_upload_bytes,
            max_outstanding_jobs=request.limits.max_outstanding_jobs,
        )
        return _tenant(tenant, [])

    @at_the_edge(DOMAIN)
    async def CreateToken(  # noqa: N802 - gRPC method name
        self, request: pb.CreateTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTokenResponse:
        await self._tenants.authenticate_operator(context)
        record, secret = await asyncio.to_thread(
            self._tenants.create_token, _tenant_id(request.tenant)
        )
        return pb.CreateTokenResponse(token=_token(record), secret=secret)

    @at_the_edge(DOMAIN)
    async def WhoAmI(  # noqa: N802 - gRPC method name
        self, request: pb.WhoAmIRequest, context: grpc.aio.ServicerContext
    ) -> pb.Operator:
        token_id = await self._tenants.authenticate_operator(context)
        return pb.Operator(token=f"operators/-/tokens/{token_id}")

    @at_the_edge(DOMAIN)
    async def RevokeToken(  # noqa: N802 - gRPC method name
        self, request: pb.RevokeTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.Token:
        await self._tenants.authenticate_operator(context)
        parts = request.name.split("/")
        if len(parts) != 4 or parts[0] != "tenants" or parts[2] != "tokens":
            raise NotFound("token not found")
        return _token(await asyncio.to_thread(self._tenants.revoke_token, parts[1], parts[3]))
