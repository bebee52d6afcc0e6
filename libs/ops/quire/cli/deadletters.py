"""``quire dlq list|retry|discard``: operators decide jobs that ended FAILED."""

from __future__ import annotations

import argparse

from google.protobuf.message import Message

from quire.audit.v1 import audit_service_pb2 as pb
from quire.audit.v1 import audit_service_pb2_grpc as pb_grpc
from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.output import Output, message_dict
from quire.client import new_request_id
from quire.tls import aio_channel

__all__ = ["dlq_list", "dlq_retry", "dlq_discard"]

TIMEOUT_SECONDS = 30.0


def _line(record: pb.DeadLetterRecord) -> str:
    when = record.create_time.ToDatetime().strftime("%Y-%m-%dT%H:%M:%SZ")
    line = (
        f"{record.job}  {record.stage}  {record.reason_code}  deliveries={record.deliveries}"
        f"  generation={record.generation}  {record.status}  {when}"
    )
    if record.resolved_by:
        line += f"  by {record.resolved_by}"
    return line


async def dlq_list(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    listed: list[pb.DeadLetterRecord] = []
    token = ""
    async with aio_channel(config.audit, config.tls) as channel:
        stub = pb_grpc.AuditServiceStub(channel)
        while len(listed) < args.limit:  # pages until --limit letters or the last page
            reply = await stub.ListDeadLetters(
                pb.ListDeadLettersRequest(
                    include_resolved=args.all,
                    page_size=args.limit - len(listed),
                    page_token=token,
                ),
                metadata=operator_metadata(config),
                timeout=TIMEOUT_SECONDS,
            )
            for record in reply.dead_letters[: args.limit - len(listed)]:
                out.line(_line(record))
                listed.append(record)
            token = reply.next_page_token
            if not token:
                break
    if not listed:
        out.line("no dead letters")
    out.result({"dead_letters": [message_dict(record) for record in listed]})
    return 0


async def dlq_retry(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    return await _decide(
        config,
        out,
        "RetryDeadLetter",
        pb.RetryDeadLetterRequest(
            job=job_resource(args.job), request_id=args.request_id or new_request_id()
        ),
    )


async def dlq_discard(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    return await _decide(
        config,
        out,
        "DiscardDeadLetter",
        pb.DiscardDeadLetterRequest(
            job=job_resource(args.job), request_id=args.request_id or new_request_id()
        ),
    )


async def _decide(config: ClientConfig, out: Output, method: str, request: Message) -> int:
    async with aio_channel(config.audit, config.tls) as channel:
        call = getattr(pb_grpc.AuditServiceStub(channel), method)
        record = await call(request, metadata=operator_metadata(config), timeout=TIMEOUT_SECONDS)
    out.line(_line(record))
    out.result({"dead_letter": message_dict(record)})
    return 0
