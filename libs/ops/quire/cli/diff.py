"""``quire diff JOB JOB``: what two jobs were made from and how they ended,
side by side.

Read from each job's ledger entries (their hashed bytes, through audit's
``ListJobEvents``), never from a table: the pinned manifest (its digest and
each position's source digest), the ruleset version and digest, the signing
key and certificate, the output, the final state and reason, and the build
of every worker that moved the job on. Each field takes the job's latest
non-empty value. Exit 0 when every field agrees, 1 (FAILED: the answer is
no) when any differs, as diff(1) does; a job the ledger does not know is
NOT_FOUND (exit REFUSED), not a job with no fields.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from quire.cli.args import job_resource, operator_metadata
from quire.cli.config import ClientConfig
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.history import job_entries
from quire.cli.output import Output
from quire.jobs import state_name
from quire.type import job_pb2, queue_pb2

__all__ = ["diff", "pinned"]

SCALARS = (
    "tenant",
    "manifest_digest",
    "item_count",
    "ruleset_version",
    "ruleset_digest",
    "key_version",
    "certificate_sha256",
    "signer_identity",
    "signature_level",
    "output_digest",
)
"""Event fields compared as they are, each its latest non-empty value."""
SHOWN_ONLY = (".fetch_time",)
"""Shown, never counted as a difference: two jobs that pinned the same bytes
at different times were made from the same sources."""


def pinned(events: Sequence[queue_pb2.TransitionEvent]) -> dict[str, str]:
    """A job's fields, folded from its events in ledger order."""
    fields: dict[str, str] = {}
    sources: list[str] = []
    pins: dict[int, job_pb2.SourcePin] = {}
    for event in events:
        if event.HasField("retirement"):
            continue  # bytes retired later: not what the job was made from
        for name in SCALARS:
            value = getattr(event, name)
            if value:
                fields[name] = str(value)
        if event.source_digests:
            sources = list(event.source_digests)
        fields["state"] = state_name(event.to_state)
        fields["reason_code"] = event.reason_code
        if event.actor.build_version and event.actor.service:
            fields[f"build {event.actor.service}"] = event.actor.build_version
        for pin in event.pins:
            pins[pin.position] = pin
    for position, digest in enumerate(sources):
        fields[f"sources[{position}]"] = digest
    for position, pin in sorted(pins.items()):
        # A source named by reference: where it came from and what was pinned.
        fields[f"sources[{position}].fetched_from"] = f"{pin.system}:{pin.key}"
        fields[f"sources[{position}].fetched_sha256"] = pin.fetched_sha256
        if pin.schema_version:
            fields[f"sources[{position}].schema"] = pin.schema_version
        if pin.normalisations:
            fields[f"sources[{position}].normalised"] = ",".join(pin.normalisations)
        fields[f"sources[{position}].fetch_time"] = pin.fetch_time.ToJsonString()
    return fields


async def _events(stub: Any, job: str, metadata: Any) -> list[queue_pb2.TransitionEvent]:
    return [entry.event for entry in await job_entries(stub, job, metadata)]


async def diff(args: argparse.Namespace, config: ClientConfig, out: Output) -> int:
    from quire.audit.v1 import audit_service_pb2_grpc
    from quire.tls import aio_channel

    first, second = job_resource(args.job), job_resource(args.other)
    metadata = operator_metadata(config)
    async with aio_channel(config.audit, config.tls) as channel:
        stub = audit_service_pb2_grpc.AuditServiceStub(channel)
        found = [await _events(stub, job, metadata) for job in (first, second)]
    for job, events in zip((first, second), found, strict=True):
        if not events:  # as `quire status` answers a job that is not there
            raise CliError(f"NOT_FOUND NOT_FOUND {job}: no such job", ExitCode.REFUSED)
    a, b = (pinned(events) for events in found)
    names = _field_order(a, b)
    rows = [{"field": n, "a": a.get(n, ""), "b": b.get(n, ""),
             "same": a.get(n) == b.get(n) or n.endswith(SHOWN_ONLY)}
            for n in names]  # fmt: skip
    width = max((len(n) for n in names), default=0)
    out.line(f"{'':<{width}}  {first}  {second}")
    for row in rows:
        mark = " " if row["same"] else "≠"
        out.line(f"{mark} {row['field']:<{width}}  {row['a'] or '-'}  {row['b'] or '-'}")
    differing = [str(row["field"]) for row in rows if not row["same"]]
    out.line(f"differ in {len(differing)}: {', '.join(differing)}" if differing else "same")
    out.result({"a": first, "b": second, "fields": rows, "differ": differing})
    return ExitCode.FAILED if differing else ExitCode.OK


_PIN_PARTS = ("fetched_from", "fetched_sha256", "schema", "normalised", "fetch_time")
_ORDER = ("tenant", "state", "reason_code", "manifest_digest", "item_count")
"""Shown first; then the sources by position, the other fields, the builds."""


def _field_order(a: dict[str, str], b: dict[str, str]) -> list[str]:
    present = set(a) | set(b)
    positions = sum(1 for name in present if name.startswith("sources[") and name.endswith("]"))
    sources = [
        name
        for i in range(positions)
        for name in (f"sources[{i}]", *(f"sources[{i}].{part}" for part in _PIN_PARTS))
    ]
    rest = [name for name in SCALARS if name not in _ORDER]
    builds = sorted(name for name in present if name.startswith("build "))
    return [name for name in (*_ORDER, *sources, *rest, *builds) if name in present]
