"""``quire sources …``: the operator registers the source systems a tenant's
manifests may name by reference (where the pipeline fetches those sources)."""

from __future__ import annotations

import argparse

from google.protobuf.duration_pb2 import Duration

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.output import Output, message_dict
from quire.client import TenantAdminClient

__all__ = ["sources_list", "sources_put", "sources_remove", "tenant_resource"]


def _client(config: ClientConfig) -> TenantAdminClient:
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    return TenantAdminClient(config.admission, config.operator_token, tls=config.tls)


def tenant_resource(tenant: str) -> str:
    """``tenants/{tenant}`` whether the user typed the id or the resource name."""
    return tenant if tenant.startswith("tenants/") else f"tenants/{tenant}"


def _seconds(duration: Duration) -> str:
    return f"{duration.seconds + duration.nanos / 1e9:g}s"


def _system_line(system: admin_pb.SourceSystem, out: Output) -> None:
    extras = [
        f"timeout={_seconds(system.timeout)}",
        f"max_bytes={system.max_bytes}",
    ]
    if system.schema:
        extras.append(f"schema={system.schema}")
    if system.credential_ref:
        extras.append(f"credential={system.credential_ref}")
    out.line(f"{system.name}  {system.base_url}  {'  '.join(extras)}")


async def sources_put(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        system = await admin.put_source_system(
            tenant_resource(args.tenant),
            args.system,
            base_url=args.url,
            credential_ref=args.credential,
            timeout=args.timeout,
            max_bytes=args.max_bytes,
            schema=args.schema,
        )
    _system_line(system, out)
    out.result({"source_system": message_dict(system)})
    return 0


async def sources_list(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    async with _client(config) as admin:
        systems = await admin.list_source_systems(tenant_resource(args.tenant))
    for system in systems:
        _system_line(system, out)
    if not systems:
        out.line("no source systems registered")
    out.result({"source_systems": [message_dict(system) for system in systems]})
    return 0


async def sources_remove(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """Removing a system that is not registered is not an error (it is not, after)."""
    tenant = tenant_resource(args.tenant)
    async with _client(config) as admin:
        deleted = await admin.delete_source_system(tenant, args.system)
    name = f"{tenant}/sourceSystems/{args.system}"
    out.line(f"{name}  {'removed' if deleted else 'was not registered'}")
    out.result({"name": name, "deleted": deleted})
    return 0
