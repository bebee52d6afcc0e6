"""``quire tenants …`` and ``quire tokens …``: the operator's commands."""

from __future__ import annotations

import argparse

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.output import Output, message_dict
from quire.cli.retention import retention_line
from quire.client import TenantAdminClient

__all__ = ["tenants_create", "tenants_limits", "tenants_list", "tokens_create", "tokens_revoke"]


def _client(config: ClientConfig) -> TenantAdminClient:
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    return TenantAdminClient(config.admission, config.operator_token, tls=config.tls)


async def tenants_create(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        reply = await admin.create_tenant(
            args.name,
            max_upload_bytes=args.max_upload_bytes,
            max_outstanding_jobs=args.max_outstanding_jobs,
            storage_quota_bytes=args.storage_quota_bytes,
            request_id=args.request_id,
            scheduling_weight=args.weight,
        )
    out.line(f"{reply.tenant.name}  {reply.tenant.display_name}")
    _secret_lines(reply, out)
    out.result(
        {
            "tenant": message_dict(reply.tenant),
            "token": reply.secret,
            "secret_withheld": reply.secret_withheld,
        }
    )
    return 0


def _secret_lines(
    reply: admin_pb.CreateTenantResponse | admin_pb.CreateTokenResponse, out: Output
) -> None:
    if reply.secret_withheld:  # a repeat of --request-id: the secret is not kept
        out.line(
            "token not shown: this --request-id was answered before, and the secret"
            " is shown only once; revoke the token (quire tokens revoke) and create another"
        )
    else:
        out.line(f"token (shown once): {reply.secret}")


async def tenants_list(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    tenants: list[admin_pb.Tenant] = []
    page_token = ""
    async with _client(config) as admin:
        while True:  # every page, printed as it arrives
            page = await admin.list_tenants_page(page_token=page_token)
            for tenant in page.tenants:
                _tenant_lines(tenant, out)
            tenants.extend(page.tenants)
            page_token = page.next_page_token
            if not page_token:
                break
    out.result({"tenants": [message_dict(tenant) for tenant in tenants]})
    return 0


async def tenants_limits(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """Set the limits given; the others keep the values ListTenants shows."""
    async with _client(config) as admin:
        current = next((t for t in await admin.list_tenants() if t.name == args.tenant), None)
        if current is None:
            raise CliError(f"no tenant {args.tenant}")
        now = current.limits
        tenant = await admin.update_limits(
            args.tenant,
            max_upload_bytes=_given(args.max_upload_bytes, now.max_upload_bytes),
            max_outstanding_jobs=_given(args.max_outstanding_jobs, now.max_outstanding_jobs),
            storage_quota_bytes=_given(args.storage_quota_bytes, now.storage_quota_bytes),
            scheduling_weight=_given(args.weight, now.scheduling_weight),
            request_id=args.request_id,
        )
    tenant.display_name = tenant.display_name or current.display_name
    _tenant_lines(tenant, out)
    out.result({"tenant": message_dict(tenant)})
    return 0


def _given(flag: int | None, current: int) -> int:
    return current if flag is None else flag


def _tenant_lines(tenant: admin_pb.Tenant, out: Output) -> None:
    limits = tenant.limits
    upload = limits.max_upload_bytes or "default"
    outstanding = limits.max_outstanding_jobs or "default"
    quota = limits.storage_quota_bytes or "default"
    out.line(
        f"{tenant.name}  {tenant.display_name}  upload≤{upload}  outstanding≤{outstanding}"
        f"  stored≤{quota}  weight={limits.scheduling_weight or 1}"
        f"  {retention_line(tenant.retention)}"
    )
    for token in tenant.tokens:
        state = "revoked" if token.HasField("revoke_time") else "valid"
        out.line(f"    {token.name}  {state}")


async def tokens_create(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        reply = await admin.create_token(args.tenant, request_id=args.request_id)
    out.line(reply.token.name)
    _secret_lines(reply, out)
    out.result(
        {
            "token": message_dict(reply.token),
            "secret": reply.secret,
            "secret_withheld": reply.secret_withheld,
        }
    )
    return 0


async def tokens_revoke(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        token = await admin.revoke_token(args.token, request_id=args.request_id)
    out.line(f"{token.name}  revoked")
    out.result({"token": message_dict(token)})
    return 0
