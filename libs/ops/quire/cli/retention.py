"""``quire retention plan|apply`` and ``quire tenants retention``: the
retention policy, as operators see and run it (``quire.retention``).

``plan`` asks the services for their records (a stopped stack's are
exported from each service's database, read-only: ``quire.servicerecords``)
and reads the blob directory, like ``quire check``, and prints what would go
and why; it needs no running stack. ``apply`` retires exactly that plan through the running stack: audit
records each retirement in its ledger before the bytes are deleted, and
admission forgets retired uploads. With blobs in NATS it also sweeps chunks
no object names (uploads that failed or lost a race) once they are an hour
old; it runs with the ``keeper`` login (``quire.storage.keeper_env``), the
only one that may delete blobs there. Lines carry job ids, kinds, blob keys,
digests, sizes, rules and ages: never a file name or document text.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from quire.admission.v1 import tenant_admin_service_pb2 as admin_pb
from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.audit.v1 import audit_service_pb2_grpc as audit_grpc
from quire.blobstore import BlobStore
from quire.cli.args import operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict
from quire.client import TenantAdminClient
from quire.natsblobs import NatsBlobStore
from quire.retention import PlannedRetirement, apply_plan, describe, plan
from quire.retention_records import read_records
from quire.servicerecords import RecordsUnavailable
from quire.settings import DAY, RetentionSettings
from quire.storage import keeper_env, open_blob_store, service_settings, tool_kek_settings
from quire.tls import aio_channel

ORPHAN_AGE_SECONDS = 3600.0
"""Chunks no object names are swept once this old: far longer than any upload takes."""

__all__ = ["run_plan", "run_apply", "tenants_retention"]

TIMEOUT_SECONDS = 30.0


def _as_of(text: str) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--as-of {text!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def open_blobs(data_dir: Path, env: Mapping[str, str]) -> BlobStore:
    """The stack's blob store, opened the way operator tools open it (only
    ``exists`` and ``delete`` are used: nothing is read or written)."""
    settings = service_settings(data_dir, "admission", keeper_env(data_dir, env))
    return open_blob_store(settings, kek=tool_kek_settings(data_dir, env), owner="retention")


def _plan(args: argparse.Namespace) -> tuple[list[PlannedRetirement], BlobStore]:
    data_dir = Path(args.data_dir).resolve()
    env = os.environ
    blobs = open_blobs(data_dir, env)
    try:
        records = read_records(data_dir, env)
    except RecordsUnavailable as error:
        raise CliError(str(error), ExitCode.UNREACHABLE) from None
    planned = plan(records, RetentionSettings.from_env(env), now=_as_of(args.as_of), blobs=blobs)
    return planned, blobs


def _summary(planned: list[PlannedRetirement]) -> str:
    blobs = {item.blob_key: item.size_bytes for item in planned}
    return f"{len(planned)} retirements, {len(blobs)} blobs, {sum(blobs.values())} bytes"


def _document(planned: list[PlannedRetirement]) -> dict[str, object]:
    return {
        "retirements": [asdict(item) for item in planned],
        "summary": _summary(planned) if planned else "nothing to retire",
    }


def run_plan(args: argparse.Namespace, out: Output) -> int:
    if not Path(args.data_dir).is_dir():
        raise CliError(f"no data directory at {args.data_dir}")
    planned, _blobs = _plan(args)
    for item in planned:
        out.line(describe(item))
    out.line(_summary(planned) if planned else "nothing to retire")
    out.result(_document(planned))
    return 0


async def run_apply(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    planned, blobs = _plan(args)
    metadata = operator_metadata(config)
    deleted: list[str] = []
    async with (
        aio_channel(config.audit, config.tls) as channel,
        TenantAdminClient(config.admission, config.operator_token, tls=config.tls) as admin,
    ):
        audit = audit_grpc.AuditServiceStub(channel)

        async def record(item: PlannedRetirement) -> None:
            await audit.RecordRetirement(
                audit_pb.RecordRetirementRequest(
                    tenant=f"tenants/{item.tenant}", job=item.job, retirement=item.message()
                ),
                metadata=metadata,
                timeout=TIMEOUT_SECONDS,
            )
            out.line(f"recorded: {describe(item)}")

        def on_deleted(key: str) -> None:
            deleted.append(key)
            out.line(f"deleted: {key}")

        async def forget(tenant: str, sha256: str) -> None:
            await admin.forget_source(f"tenants/{tenant}", sha256)

        await apply_plan(
            planned,
            record=record,
            blobs=blobs,
            forget=forget,
            deleted=on_deleted,
        )
    swept = 0
    if isinstance(blobs, NatsBlobStore):
        swept = await asyncio.to_thread(blobs.sweep_orphaned_chunks, ORPHAN_AGE_SECONDS)
        out.line(f"swept {swept} orphaned chunk subjects")
    out.line(_summary(planned) if planned else "nothing to retire")
    out.result({**_document(planned), "deleted": deleted, "orphans_swept": swept})
    return 0


def _wire_seconds(period: float | None, unit: float, flag: str) -> int:
    """A period as UpdateTenantRetention takes it, in whole seconds, where 0
    means "the default": a period left out is 0; one given is at least a
    second (the parser has refused 0 already, ``operatorargs._period``)."""
    if period is None:
        return 0
    seconds = round(period * unit)
    if seconds < 1:
        raise CliError(f"{flag} {period:g} is less than a second")
    return seconds


async def tenants_retention(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    retention = admin_pb.TenantRetention(
        sources_seconds=_wire_seconds(args.sources_days, DAY, "--sources-days"),
        packets_seconds=_wire_seconds(args.packets_days, DAY, "--packets-days"),
        artifacts_seconds=_wire_seconds(args.artifacts_days, DAY, "--artifacts-days"),
        unused_uploads_seconds=_wire_seconds(
            args.unused_upload_hours, 3600, "--unused-upload-hours"
        ),
    )
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    tenant = args.tenant if args.tenant.startswith("tenants/") else f"tenants/{args.tenant}"
    async with TenantAdminClient(config.admission, config.operator_token, tls=config.tls) as admin:
        reply = await admin.update_retention(tenant, retention)
    out.line(f"{reply.name}  {retention_line(reply.retention)}")
    out.result({"tenant": reply.name, "retention": message_dict(reply.retention)})
    return 0


def retention_line(retention: admin_pb.TenantRetention) -> str:
    """A tenant's own periods, in days (hours for unused uploads)."""

    def days(seconds: int) -> str:
        return f"{seconds / DAY:g}d" if seconds else "default"

    hours = retention.unused_uploads_seconds
    return (
        f"sources {days(retention.sources_seconds)}  packets {days(retention.packets_seconds)}  "
        f"artifacts {days(retention.artifacts_seconds)}  "
        f"unused uploads {f'{hours / 3600:g}h' if hours else 'default'}"
    )
