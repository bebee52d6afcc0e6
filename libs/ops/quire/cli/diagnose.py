"""``quire diagnose JOB``: operators read what the stages kept about a job's
failed deliveries (the original error text, a few days), and who read it.

Asks the validator, the assembler and the signer with the operator token;
each records the read before it answers, so the read log printed includes
this one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.history import job_entries
from quire.cli.output import Output, message_dict
from quire.client import DiagnosticsClient
from quire.diagnostics.v1 import diagnostics_service_pb2 as pb
from quire.pipeline import WORKER_SERVICES
from quire.stack.info import StackInfo

__all__ = ["diagnose"]


def _assembler(args: argparse.Namespace) -> str:
    """The assembler's address (``ClientConfig`` names the services other
    commands reach): the environment first, then ``stack.json``."""
    address = os.environ.get("QUIRE_ASSEMBLER_ADDR", "")
    if address:
        return address
    data_dir = Path(args.data_dir)
    if (data_dir / "stack.json").exists():
        return StackInfo.read(data_dir).endpoints.get("assembler", "")
    return ""


def _stages(args: argparse.Namespace, config: ClientConfig) -> dict[str, str]:
    stages = {
        "validator": config.validator,
        "assembler": _assembler(args),
        "signer": config.signer,
    }
    missing = [service for service, address in stages.items() if not address]
    if missing:
        names = ", ".join(f"QUIRE_{service.upper()}_ADDR" for service in missing)
        raise CliError(f"no address for {', '.join(missing)}: set {names}", ExitCode.UNREACHABLE)
    return stages


def _when(stamp: object) -> str:
    return stamp.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")  # type: ignore[attr-defined]


def _lines(service: str, reply: pb.ListDiagnosticsResponse) -> list[str]:
    lines = [
        f"{d.stage}  {_when(d.create_time)}  attempt {d.attempt}  {d.reason_code}"
        f"  {d.error_type}: {d.message}  ({d.instance} {d.build_version},"
        f" kept until {_when(d.expire_time)})"
        for d in reply.diagnostics
    ]
    if not reply.diagnostics:
        lines.append(f"{service}: nothing kept")
    lines.extend(f"  read by {r.reader} at {_when(r.read_time)}" for r in reply.reads)
    return lines


async def _known(job: str, config: ClientConfig) -> None:
    """NotFound for a job the ledger holds nothing of: a stage's "nothing
    kept" would say nothing about it (and record a read of it)."""
    from quire.audit.v1 import audit_service_pb2_grpc
    from quire.tls import aio_channel

    async with aio_channel(config.audit, config.tls) as channel:
        await job_entries(
            audit_service_pb2_grpc.AuditServiceStub(channel), job, operator_metadata(config)
        )


async def diagnose(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    if not config.operator_token:
        raise CliError("no operator token: set QUIRE_OPERATOR_TOKEN or run against `quire up`")
    job = job_resource(args.job)
    await _known(job, config)
    async with DiagnosticsClient(
        _stages(args, config), config.operator_token, tls=config.tls
    ) as client:
        replies = await client.list_diagnostics(job)
    for service in WORKER_SERVICES:
        for line in _lines(service, replies[service]):
            out.line(line)
    out.result(
        {
            "job": job,
            "stages": {service: message_dict(replies[service]) for service in WORKER_SERVICES},
        }
    )
    return 0
