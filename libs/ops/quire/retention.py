"""Retention as policy: which stored bytes have outlived their tenant's
period, and retiring them with a record in the ledger first.

The rules (periods per tenant, ``RetentionSettings`` by default):

- ``artifacts``: a COMPLETED job's signed artifact, once the job ended that
  long ago;
- ``packets``: an ended job's assembled packet, once every job whose packet
  it is ended that long ago;
- ``sources``: an upload, once every job that used it ended that long ago;
  likewise a repaired upload's clean rewrite (``normalized/``), once every
  job that used it, or whose sources name that upload, ended that long ago;
  and the bytes a source named by reference was pinned to (``fetched/``),
  once every job that pinned them, or whose sources name the same
  reference, ended that long ago;
- ``unused_uploads``: an upload no job used, that long after the upload.

A job's end is its terminal entry in the ledger (COMPLETED, REJECTED,
FAILED, CANCELLED); a job that has not ended, or that audit has not
recorded, keeps everything it uses. Ledger entries themselves (digests,
manifests, transitions, actors, versions, signer identity) are never
deleted.

``apply`` retires exactly the plan, one blob at a time: first every
retirement entry for it goes into audit's ledger (``RecordRetirement``; a
repeat appends nothing), then the bytes are deleted, then admission forgets
a retired upload (``ForgetSource``) so it stops counting against the quota.
A crash anywhere leaves "recorded, bytes maybe still there": the bytes are
still planned (the record is there, the rule still holds) and a rerun
finishes them. Bytes that are gone with no record are never planned, so
``quire check`` still reports them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from google.protobuf import timestamp_pb2

from quire.blobstore import assembled_key, fetched_key, normalized_key, signed_key
from quire.jobs import job_id
from quire.pipeline import State
from quire.retention_records import (
    AcceptedJob,
    Fetched,
    LedgerJob,
    Records,
    Rewrite,
    StoredBlob,
    TenantPeriods,
    Upload,
)
from quire.settings import RetentionSettings
from quire.type import queue_pb2

__all__ = ["Periods", "PlannedRetirement", "BlobPresence", "plan", "apply_plan", "describe"]

RULE_OF_KIND = {
    "source": "sources",
    "packet": "packets",
    "artifact": "artifacts",
    "upload": "unused_uploads",
    "normalized": "sources",
    "fetched": "sources",
}


class BlobPresence(Protocol):
    """What the plan asks of the blob store."""

    def exists(self, key: str) -> bool: ...


class BlobDeletion(BlobPresence, Protocol):
    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class Periods:
    """One tenant's periods in seconds: its own, or the defaults."""

    sources: float
    packets: float
    artifacts: float
    unused_uploads: float

    @classmethod
    def of(cls, storage: TenantPeriods | None, defaults: RetentionSettings) -> Periods:
        own = storage or TenantPeriods()
        return cls(
            sources=own.sources_seconds or defaults.sources_seconds,
            packets=own.packets_seconds or defaults.packets_seconds,
            artifacts=own.artifacts_seconds or defaults.artifacts_seconds,
            unused_uploads=own.unused_uploads_seconds or defaults.unused_uploads_seconds,
        )

    def of_rule(self, rule: str) -> float:
        return float(getattr(self, rule))


@dataclass(frozen=True)
class PlannedRetirement:
    """One blob retired for one job (or, ``job`` empty, an upload no job used)."""

    tenant: str
    job: str
    kind: str
    blob_key: str
    sha256: str
    size_bytes: int
    rule: str
    period_seconds: int
    since: datetime
    """When the period started: the job's end, or the upload."""
    age_seconds: float
    recorded: bool
    """Already in the ledger: an earlier apply stopped before finishing it."""

    def event_id(self) -> str:
        """The id audit gives its retirement entry (``quire.audit.retirement``)."""
        if self.job:
            return f"{job_id(self.job)}.retired.{self.kind}.{self.sha256}"
        return f"upload.{self.tenant}.{self.sha256}.{_millis(self.since)}"

    def message(self) -> queue_pb2.Retirement:
        since = timestamp_pb2.Timestamp()
        since.FromMilliseconds(_millis(self.since))
        return queue_pb2.Retirement(
            kind=self.kind,
            blob_key=self.blob_key,
            sha256=self.sha256,
            size_bytes=self.size_bytes,
            rule=self.rule,
            period_seconds=self.period_seconds,
            period_start_time=since,
        )


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class _Context:
    records: Records
    defaults: RetentionSettings
    now: datetime
    blobs: BlobPresence

    def periods(self, tenant: str) -> Periods:
        return Periods.of(self.records.tenants.get(tenant), self.defaults)

    def due(self, tenant: str, rule: str, since: datetime) -> bool:
        return since + timedelta(seconds=self.periods(tenant).of_rule(rule)) <= self.now

    def item(
        self,
        tenant: str,
        job: str,
        kind: str,
        blob: StoredBlob | Upload | Rewrite | Fetched,
        since: datetime,
    ) -> PlannedRetirement:
        rule = RULE_OF_KIND[kind]
        planned = PlannedRetirement(
            tenant=tenant,
            job=job,
            kind=kind,
            blob_key=blob.blob_key,
            sha256=blob.sha256,
            size_bytes=blob.size_bytes,
            rule=rule,
            period_seconds=int(self.periods(tenant).of_rule(rule)),
            since=since,
            age_seconds=(self.now - since).total_seconds(),
            recorded=False,
        )
        return _with_recorded(planned, self.records)


def _with_recorded(planned: PlannedRetirement, records: Records) -> PlannedRetirement:
    if planned.job:
        ledger_job = records.ledger.get(planned.job)
        recorded = ledger_job is not None and planned.event_id() in ledger_job.retired
    else:
        recorded = planned.event_id() in records.retired_uploads
    return PlannedRetirement(**{**planned.__dict__, "recorded": recorded})


def _ended(records: Records, job: str) -> tuple[LedgerJob, datetime] | None:
    ledger_job = records.ledger.get(job)
    if ledger_job is None or ledger_job.facts is None or ledger_job.ended_at is None:
        return None
    return ledger_job, ledger_job.ended_at


def _tenant_of(records: Records, job: str) -> str:
    accepted = records.accepted.get(job)
    return accepted.tenant if accepted else ""


def _artifacts(ctx: _Context) -> Iterable[PlannedRetirement]:
    for job, blob in sorted(ctx.records.artifacts.items()):
        ended = _ended(ctx.records, job)
        tenant = _tenant_of(ctx.records, job)
        if ended is None or not tenant or ended[0].facts is None:
            continue
        facts, since = ended[0].facts, ended[1]
        if facts.state != State.COMPLETED or facts.output_digest != blob.sha256:
            continue  # only a completed job's artifact, as the ledger knows it
        if blob.blob_key != signed_key(tenant, job) or not ctx.due(tenant, "artifacts", since):
            continue
        if ctx.blobs.exists(blob.blob_key):
            yield ctx.item(tenant, job, "artifact", blob, since)


def _shared(
    ctx: _Context, users: dict[str, list[str]], rule: str, tenant_of: dict[str, str]
) -> Iterable[tuple[str, str, datetime]]:
    """(key, job, job's end) for each user of each key whose every user is due."""
    for key, jobs in sorted(users.items()):
        tenant = tenant_of[key]
        ends = [_ended(ctx.records, job) for job in jobs]
        if any(end is None for end in ends):
            continue
        if all(ctx.due(tenant, rule, end[1]) for end in ends if end is not None):
            for job, end in zip(jobs, ends, strict=True):
                assert end is not None
                yield key, job, end[1]


def _packets(ctx: _Context) -> Iterable[PlannedRetirement]:
    users: dict[str, list[str]] = defaultdict(list)
    tenant_of: dict[str, str] = {}
    blob_of: dict[str, StoredBlob] = {}
    for job, blob in sorted(ctx.records.packets.items()):
        tenant = _tenant_of(ctx.records, job)
        if not tenant or blob.blob_key != assembled_key(tenant, blob.sha256):
            continue
        users[blob.blob_key].append(job)
        tenant_of[blob.blob_key] = tenant
        blob_of[blob.blob_key] = blob
    for key, job, since in _shared(ctx, users, "packets", tenant_of):
        if ctx.blobs.exists(key):
            yield ctx.item(tenant_of[key], job, "packet", blob_of[key], since)


def _users(records: Records, upload: Upload) -> list[AcceptedJob]:
    """The jobs that used this upload: accepted after it was stored (an earlier
    job naming the same digest used an earlier, retired copy)."""
    return sorted(
        (
            job
            for job in records.accepted.values()
            if job.tenant == upload.tenant
            and upload.sha256 in job.sources
            and job.created_at >= upload.created_at
        ),
        key=lambda job: job.job,
    )


def _uploads(ctx: _Context) -> Iterable[PlannedRetirement]:
    for upload in sorted(ctx.records.uploads, key=lambda u: (u.tenant, u.sha256)):
        users = _users(ctx.records, upload)
        items: list[PlannedRetirement] = []
        if users:
            users_by_key = {upload.blob_key: [job.job for job in users]}
            due = _shared(ctx, users_by_key, "sources", {upload.blob_key: upload.tenant})
            items = [ctx.item(upload.tenant, job, "source", upload, end) for _, job, end in due]
        elif ctx.due(upload.tenant, "unused_uploads", upload.created_at):
            items = [ctx.item(upload.tenant, "", "upload", upload, upload.created_at)]
        # Bytes gone with no record are not ours to explain: `quire check` says so.
        if items and (ctx.blobs.exists(upload.blob_key) or any(i.recorded for i in items)):
            yield from items


def _rewrites(ctx: _Context) -> Iterable[PlannedRetirement]:
    """A repaired upload's clean rewrite goes under the sources rule, once
    every job that used it is due. Users are the jobs whose ledger records
    the repair and the tenant's jobs whose sources name the upload (the same
    upload gives the same rewrite, and a job still validating may have
    stored it before its ledger says so). Only a job whose ledger records
    the rewrite gets an entry: audit accepts no other."""
    recorded: dict[str, dict[str, Rewrite]] = defaultdict(dict)
    for job, ledger_job in sorted(ctx.records.ledger.items()):
        for key, rewrite in ledger_job.repairs.items():
            if key == normalized_key(rewrite.tenant, rewrite.sha256):
                recorded[key][job] = rewrite
    naming: dict[tuple[str, str], set[str]] = defaultdict(set)
    for accepted in ctx.records.accepted.values():
        for sha256 in accepted.sources:
            naming[(accepted.tenant, sha256)].add(accepted.job)
    users: dict[str, list[str]] = {}
    for key, by_job in recorded.items():
        tenant = next(iter(by_job.values())).tenant  # the key names it: one for all
        sources = {rewrite.source_sha256 for rewrite in by_job.values()}
        named = {job for sha256 in sources for job in naming.get((tenant, sha256), set())}
        users[key] = sorted(set(by_job) | named)
    yield from _recorded_blobs(ctx, "normalized", recorded, users)


def _fetched(ctx: _Context) -> Iterable[PlannedRetirement]:
    """The bytes a source named by reference was pinned to go under the
    sources rule, once every job that used them is due. Users are the jobs
    whose ledger records the pin, the jobs the validator pinned to them (its
    own record comes first: a job still validating may have pinned them
    before its ledger says so), and the tenant's jobs whose sources name a
    reference these bytes were pinned from (one still fetching may be about
    to store the same bytes). Only a job whose ledger records the pin gets
    an entry: audit accepts no other."""
    recorded: dict[str, dict[str, Fetched]] = defaultdict(dict)
    for job, ledger_job in sorted(ctx.records.ledger.items()):
        for key, pinned in ledger_job.pins.items():
            if key == fetched_key(pinned.tenant, pinned.sha256):
                recorded[key][job] = pinned
    naming: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for accepted in ctx.records.accepted.values():
        for system, reference in accepted.references:
            naming[(accepted.tenant, system, reference)].add(accepted.job)
    users: dict[str, list[str]] = {}
    for key, by_job in recorded.items():
        tenant = next(iter(by_job.values())).tenant  # the key names it: one for all
        references = {ref for pinned in by_job.values() for ref in pinned.references}
        named = {job for ref in references for job in naming.get((tenant, *ref), set())}
        holding = ctx.records.pinned.get(key, frozenset())
        users[key] = sorted(set(by_job) | named | holding)
    yield from _recorded_blobs(ctx, "fetched", recorded, users)


def _recorded_blobs(
    ctx: _Context,
    kind: str,
    recorded: Mapping[str, Mapping[str, Rewrite | Fetched]],
    users: dict[str, list[str]],
) -> Iterable[PlannedRetirement]:
    """Of blobs some jobs' ledgers record (``recorded``: by key, by job),
    those whose every user is due, one entry per recording job."""
    tenant_of = {key: next(iter(by_job.values())).tenant for key, by_job in recorded.items()}
    items: dict[str, list[PlannedRetirement]] = defaultdict(list)
    for key, job, since in _shared(ctx, users, "sources", tenant_of):
        if job in recorded[key]:
            blob = recorded[key][job]
            items[key].append(ctx.item(tenant_of[key], job, kind, blob, since))
    for key, due in items.items():
        # Bytes gone with no record are not ours to explain: `quire check` says so.
        if ctx.blobs.exists(key) or any(item.recorded for item in due):
            yield from due


def plan(
    records: Records, defaults: RetentionSettings, *, now: datetime, blobs: BlobPresence
) -> list[PlannedRetirement]:
    """What is due for retirement at ``now``, blob by blob."""
    ctx = _Context(records, defaults, now, blobs)
    return [*_artifacts(ctx), *_packets(ctx), *_uploads(ctx), *_rewrites(ctx), *_fetched(ctx)]


def describe(planned: PlannedRetirement) -> str:
    """One line of the plan: ids, digests, sizes, the rule and the age; no names."""
    days = planned.period_seconds / 86400
    return "  ".join(
        (
            planned.job or f"tenants/{planned.tenant} (no job)",
            planned.kind,
            planned.blob_key,
            f"sha256={planned.sha256}",
            f"{planned.size_bytes} bytes",
            f"rule={planned.rule} ({days:g} days after "
            + ("the upload)" if planned.kind == "upload" else "the job ended)"),
            f"age={planned.age_seconds / 86400:.2f} days",
            *(("recorded, finishing",) if planned.recorded else ()),
        )
    )


Record = Callable[[PlannedRetirement], Awaitable[None]]
Forget = Callable[[str, str], Awaitable[None]]


async def apply_plan(
    planned: list[PlannedRetirement],
    *,
    record: Record,
    blobs: BlobDeletion,
    forget: Forget,
    deleted: Callable[[str], None] = lambda _key: None,
) -> int:
    """Retire exactly ``planned``: for each blob, record every retirement in
    the ledger, then delete the bytes, then forget a retired upload. Returns
    how many blobs were deleted; stops at the first error (a rerun finishes)."""
    by_key: dict[str, list[PlannedRetirement]] = defaultdict(list)
    for item in planned:
        by_key[item.blob_key].append(item)
    for key, items in by_key.items():
        for item in items:
            await record(item)
        blobs.delete(key)
        deleted(key)
        if items[0].kind in ("source", "upload"):
            await forget(items[0].tenant, items[0].sha256)
    return len(by_key)
