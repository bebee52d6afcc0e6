"""Gathering what the system holds after a run, through its APIs as an
operator does (``SystemFacts``), for the history checker.

It never reads a service's tables or files: audit answers for the ledger
(``ListJobEvents``, ``VerifyLedger``, ``ExportEvidence`` verified offline
against the key ``GetCheckpointKey`` pins), the signer for its signatures
(``GetSignature``, its export of every record, ``ListKeys`` to verify
artifacts with), and admission for what its tenants see (``GetJob``,
``DownloadArtifact``, with each tenant's own token) and for the jobs it
accepted (its export). So it runs the same against the embedded stack and a
cluster whose nodes are cut off from one another.

Jobs still running are first given ``grace`` seconds to end (``settle``),
watched through audit's view; those that do not are the checker's to count.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

import grpc

from quire.audit.v1 import audit_service_pb2 as audit_pb
from quire.client import AdmissionClient, RecordsClient
from quire.export.v1 import export_service_pb2 as export_pb
from quire.invariants_snapshot import LedgerEntry
from quire.jobs import PARKED_STATES, TERMINAL_STATES, state_name
from quire.jobview import JobFacts, apply, moves_no_job
from quire.pipeline import ADMISSION, State
from quire.testing.history.facts import (
    JobRecord,
    LedgerFinding,
    LedgerVerification,
    SystemFacts,
)
from quire.testing.history.operator import Operator, SystemAccess, artifact_of, evidence_of
from quire.testing.history.ops import History
from quire.testing.history.workload import retrying

__all__ = ["SystemAccess", "gather_facts", "patiently", "settle"]

SETTLE_POLL_SECONDS = 0.25
"""How often ``settle`` asks audit for the jobs not yet ended."""
PATIENCE_SECONDS = 60.0
"""How long a read refused as transient (a replica just healed, a member
still electing) is asked again before the gathering fails."""

Answer = TypeVar("Answer")


async def patiently(call: Callable[[], Awaitable[Answer]]) -> Answer:
    """``call()``, asked again while the answer says try again (as any
    careful operator's tool does), for up to ``PATIENCE_SECONDS``."""
    return await retrying(call, time.monotonic() + PATIENCE_SECONDS)


def _jobs_named(history: History) -> list[str]:
    return sorted(set(history.acknowledged()) | set(history.observations()))


async def settle(operator: Operator, jobs: Iterable[str], grace: float) -> None:
    """Until every job in ``jobs`` is terminal or parked in audit's view, or
    ``grace`` seconds have passed (the checker then counts those still running)."""
    waiting = set(jobs)
    deadline = time.monotonic() + grace
    while waiting:
        views = await patiently(functools.partial(operator.views, sorted(waiting)))
        waiting = {
            name
            for name in waiting
            if name not in views
            or state_name(views[name].state) not in TERMINAL_STATES | PARKED_STATES
        }
        if not waiting or time.monotonic() >= deadline:
            return
        await asyncio.sleep(SETTLE_POLL_SECONDS)


async def gather_facts(
    access: SystemAccess,
    history: History,
    workdir: Path,
    *,
    grace: float = 60.0,
    concurrency: int = 8,
) -> SystemFacts:
    """What the system holds of every job ``history`` names, after ``grace``
    seconds for those still running; artifacts are downloaded under ``workdir``."""
    jobs = _jobs_named(history)
    async with Operator(access) as operator:
        await settle(operator, jobs, grace)
        signatures = await patiently(lambda: _signature_records(access))
        gate = asyncio.Semaphore(concurrency)
        tenants: dict[str, AdmissionClient] = {}
        try:

            async def one(job: str) -> JobRecord:
                async with gate:
                    return await patiently(
                        lambda: _job_record(operator, access, tenants, job, signatures, workdir)
                    )

            records = await asyncio.gather(*(one(job) for job in jobs))
        finally:
            for client in tenants.values():
                await client.close()
        # After the evidence: its exports took the checkpoints this verifies.
        ledger = await patiently(operator.verify_ledger)
    by_job = {record.job: record for record in records}
    held = sorted({record.tenant for record in records if record.tenant})
    accepted = await patiently(lambda: _accepted_jobs(access))
    unclaimed = sorted(
        job for job, tenant in accepted.items() if tenant in held and job not in by_job
    )
    return SystemFacts(
        jobs=by_job,
        ledger=_verification(ledger),
        unclaimed=tuple(unclaimed),
        grace_seconds=grace,
        tenants=tuple(held),
    )


def _verification(reply: audit_pb.VerifyLedgerResponse) -> LedgerVerification:
    return LedgerVerification(
        ok=reply.ok,
        entries=reply.entries,
        chains=reply.chains,
        checkpoints_checked=reply.checkpoints_checked,
        findings=tuple(
            LedgerFinding(
                f.kind + (f":{f.column}" if f.column else ""), f.sequence, f.tenant, f.job
            )
            for f in reply.findings
        ),
    )


def _ledger_entry(entry: audit_pb.LedgerEntry) -> LedgerEntry:
    """An entry as ``ListJobEvents`` answers it (audit decoded its bytes)."""
    event = entry.event
    return LedgerEntry(
        sequence=entry.sequence,
        event_id=event.event_id,
        job=event.job,
        tenant=event.tenant,
        from_state=state_name(event.from_state),
        to_state=state_name(event.to_state),
        reason_code=event.reason_code,
        output_digest=event.output_digest,
        decodes=True,
        columns_match=True,
        retired_kind=event.retirement.kind,
        ruleset_change=event.HasField("ruleset_change"),
    )


def _views(entries: list[audit_pb.LedgerEntry]) -> tuple[str, ...]:
    """The job's state after each entry, by the ledger's own fold."""
    view: JobFacts | None = None
    states = []
    for entry in entries:
        if not moves_no_job(entry.event):
            view = apply(view, entry.event)
        states.append(view.state if view is not None else "")
    return tuple(states)


async def _job_record(
    operator: Operator,
    access: SystemAccess,
    tenants: dict[str, AdmissionClient],
    job: str,
    signatures: Mapping[str, tuple[str, ...]],
    workdir: Path,
) -> JobRecord:
    entries = await operator.entries(job)
    if not entries:
        return JobRecord(job)
    tenant = entries[0].event.tenant
    if tenant not in tenants:
        tenants[tenant] = AdmissionClient(access.admission, access.token_of(tenant), tls=access.tls)
    client = tenants[tenant]
    try:
        state = state_name((await client.get_job(job)).state)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        state = ""
    ledger = tuple(_ledger_entry(entry) for entry in entries)
    done = any(entry.to_state == State.COMPLETED for entry in ledger)
    return JobRecord(
        job=job,
        tenant=tenant,
        state=state,
        entries=ledger,
        views=_views(entries),
        signature_records=signatures.get(job, ()),
        signature=await operator.signature(job) if done else None,
        artifact=await artifact_of(client, operator, job, workdir) if done else None,
        evidence=await evidence_of(operator, job, tenant),
    )


async def _signature_records(access: SystemAccess) -> dict[str, tuple[str, ...]]:
    """Every signature record the signer exports, by job."""
    found: dict[str, list[str]] = defaultdict(list)
    services = {"signer": access.signer}
    async with RecordsClient(services, access.operator_token, tls=access.tls) as records:
        async for page in records.pages("signer", export_pb.COLLECTION_SIGNATURES):
            for record in page.records:
                found[record.signature.job].append(record.signature.sha256)
    return {job: tuple(digests) for job, digests in found.items()}


async def _accepted_jobs(access: SystemAccess) -> dict[str, str]:
    """Every job admission accepted, with its tenant's id."""
    accepted: dict[str, str] = {}
    services = {ADMISSION: access.admission}
    async with RecordsClient(services, access.operator_token, tls=access.tls) as records:
        async for page in records.pages(ADMISSION, export_pb.COLLECTION_ACCEPTED_JOBS):
            for record in page.records:
                job = record.accepted_job
                accepted[job.job] = job.tenant.removeprefix("tenants/")
    return accepted
