"""``quire dlq list|retry|discard``: operators decide jobs that ended FAILED."""

from __future__ import annotations

import argparse

from quire.audit.v1 import audit_service_pb2 as pb
from quire.audit.v1 import audit_service_pb2_grpc as pb_grpc
from quire.cli.config import ClientConfig
from quire.cli.reviews import operator_metadata
from quire.tls import aio_channel

__all__ = ["dlq_list", "dlq_retry", "dlq_discard"]

TIMEOUT_SECONDS = 30.0


def _name(job: str) -> str:
    return job if job.startswith("jobs/") else f"jobs/{job}"


def _line(record: pb.DeadLetterRecord) -> str:
    when = record.dead_at.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")
    line = (
        f"{record.job}  {record.stage}  {record.reason_code}  deliveries={record.deliveries}"
        f"  generation={record.generation}  {record.status}  {when}"
    )
    if record.resolved_by:
        line += f"  by {record.resolved_by}"
    return line


async def dlq_list(args: argparse.Namespace, config: ClientConfig) -> int:
    async with aio_channel(config.audit, config.tls) as channel:
        reply = await pb_grpc.AuditServiceStub(channel).ListDeadLetters(
            pb.ListDeadLettersRequest(include_resolved=args.all, page_size=args.limit),
            metadata=operator_metadata(config),
            timeout=TIMEOUT_SECONDS,
        )
    for record in reply.dead_letters:
        print(_line(record))
    if not reply.dead_letters:
        print("no dead letters")
    return 0


async def dlq_retry(args: argparse.Namespace, config: ClientConfig) -> int:
    async with aio_channel(config.audit, config.tls) as channel:
        record = await pb_grpc.AuditServiceStub(channel).RetryDeadLetter(
            pb.RetryDeadLetterRequest(job=_name(args.job)),
            metadata=operator_metadata(config),
            timeout=TIMEOUT_SECONDS,
        )
    print(_line(record))
    return 0


async def dlq_discard(args: argparse.Namespace, config: ClientConfig) -> int:
    async with aio_channel(config.audit, config.tls) as channel:
        record = await pb_grpc.AuditServiceStub(channel).DiscardDeadLetter(
            pb.DiscardDeadLetterRequest(job=_name(args.job)),
            metadata=operator_metadata(config),
            timeout=TIMEOUT_SECONDS,
        )
    print(_line(record))
    return 0
