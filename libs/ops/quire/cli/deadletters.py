"""``quire dlq list|retry|discard``: operators decide jobs that ended FAILED.

A retry may give the job a new budget (``--budget 30s``): without one, a job
whose deadline has passed is retried with it, and a stage that checks it
fails the job ``DEADLINE_EXCEEDED`` again, which the command points out."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

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
    if record.HasField("deadline"):
        line += f"  deadline={record.deadline.ToJsonString()}"
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
    """``quire dlq retry JOB [--budget 30s]``: a new generation from the failed
    stage; with ``--budget``, a new deadline of now plus the budget."""
    request = pb.RetryDeadLetterRequest(
        job=job_resource(args.job), request_id=args.request_id or new_request_id()
    )
    if args.budget is not None:
        request.budget.FromNanoseconds(round(args.budget * 1e9))
    record = await _decide(config, out, "RetryDeadLetter", request)
    if args.budget is None and record.HasField("deadline") and _passed(record.deadline):
        out.note(
            f"note: {record.job}'s deadline ({record.deadline.ToJsonString()}) has passed:"
            " a stage that checks it fails the job DEADLINE_EXCEEDED again; once it is a"
            f" dead letter again, give it a new budget: quire dlq retry {record.job} --budget 30s"
        )
    return 0


def _passed(deadline: Timestamp) -> bool:
    return deadline.ToDatetime(tzinfo=UTC) <= datetime.now(UTC)


async def dlq_discard(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    await _decide(
        config,
        out,
        "DiscardDeadLetter",
        pb.DiscardDeadLetterRequest(
            job=job_resource(args.job), request_id=args.request_id or new_request_id()
        ),
    )
    return 0


async def _decide(
    config: ClientConfig, out: Output, method: str, request: Message
) -> pb.DeadLetterRecord:
    async with aio_channel(config.audit, config.tls) as channel:
        call = getattr(pb_grpc.AuditServiceStub(channel), method)
        record: pb.DeadLetterRecord = await call(
            request, metadata=operator_metadata(config), timeout=TIMEOUT_SECONDS
        )
    out.line(_line(record))
    out.result({"dead_letter": message_dict(record)})
    return record
