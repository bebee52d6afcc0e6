"""A job's ledger entries as operators read them, and ``quire audit history JOB``.

Audit's ``ListJobEvents`` lists what the ledger holds for a job: every page
is read. A job the ledger holds nothing of does not exist as far as an
operator can prove: NOT_FOUND, never an empty history (``quire diff`` of two
unknown jobs would otherwise call them the same).
"""

from __future__ import annotations

import argparse
from typing import Any

from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.audit.v1 import audit_service_pb2_grpc as audit_grpc
from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.exitcodes import ExitCode
from quire.cli.output import Output, message_dict
from quire.errors import NotFound
from quire.jobs import state_name
from quire.tls import aio_channel

__all__ = ["audit_history", "entry_line", "job_entries"]

PAGE = 200
TIMEOUT_SECONDS = 60.0


async def job_entries(
    stub: audit_grpc.AuditServiceStub, job: str, metadata: Any
) -> list[audit_pb.LedgerEntry]:
    """Every ledger entry of ``job``, in ledger order; NotFound when there is none."""
    entries: list[audit_pb.LedgerEntry] = []
    token = ""
    while True:
        page = await stub.ListJobEvents(
            audit_pb.ListJobEventsRequest(job=job, page_size=PAGE, page_token=token),
            metadata=metadata,
            timeout=TIMEOUT_SECONDS,
        )
        entries.extend(page.entries)
        token = page.next_page_token
        if not token:
            break
    if not entries:
        raise NotFound(f"{job} has no ledger entries: no such job")
    return entries


def entry_line(entry: audit_pb.LedgerEntry) -> str:
    """``#12  2026-…Z  VALIDATING → ASSEMBLING  validator  attempt 1`` and what
    the entry pins (reason, ruleset, key, output digest, note)."""
    event = entry.event
    when = event.occur_time.ToJsonString() if event.HasField("occur_time") else "-"
    move = f"{state_name(event.from_state)} -> {state_name(event.to_state)}"
    if not event.from_state:
        move = state_name(event.to_state)
    parts = [f"#{entry.sequence}", when, move, event.actor.service or "-"]
    parts.append(f"attempt {event.attempt}")
    for label, value in (
        ("reason", event.reason_code),
        ("detail", event.reason_detail),
        ("ruleset", event.ruleset_version),
        ("track", event.track),
        ("key", event.key_version),
        ("output", event.output_digest),
    ):
        if value:
            parts.append(f"{label}={value}")
    if event.HasField("retirement"):
        parts.append(f"retired={event.retirement.kind}")
    if event.note:
        parts.append(f"note={event.note!r}")
    return "  ".join(parts)


async def audit_history(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    """``quire audit history JOB``: the job's transitions as the ledger holds them."""
    job = job_resource(args.job)
    async with aio_channel(config.audit, config.tls) as channel:
        entries = await job_entries(
            audit_grpc.AuditServiceStub(channel), job, operator_metadata(config)
        )
    for entry in entries:
        out.line(entry_line(entry))
    out.result(
        {
            "job": job,
            "entries": [
                {
                    **message_dict(entry),
                    "from_state": state_name(entry.event.from_state),
                    "to_state": state_name(entry.event.to_state),
                }
                for entry in entries
            ],
        }
    )
    return ExitCode.OK
