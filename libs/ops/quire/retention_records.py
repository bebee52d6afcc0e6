"""What ``quire retention`` reads of the services' records, as they answer
for them (``quire.servicerecords``): admission's tenants (their periods),
uploads and accepted jobs (with the sources their tasks name by reference);
each job's ledger entries in audit (its end, the repaired sources' clean
rewrites it used, the fetched bytes its sources were pinned to, and what is
already recorded as retired), folded from their hashed bytes
(``quire.jobview``); the validator's pins (which job pinned which fetched
bytes, before its ledger says so); the assembler's packets and the signer's
artifacts.

Only ids, digests, sizes, keys and times are kept; never a document's name
or content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.message import DecodeError

from quire.blobstore import fetched_key, normalized_key
from quire.export.v1 import export_service_pb2 as pb
from quire.jobs import TERMINAL_STATES
from quire.jobview import JobFacts, apply, is_retirement
from quire.pipeline import ADMISSION, AUDIT
from quire.servicerecords import ServiceRecords, Wanted, gather
from quire.type import queue_pb2

__all__ = [
    "TenantPeriods",
    "Upload",
    "AcceptedJob",
    "LedgerJob",
    "Rewrite",
    "Fetched",
    "StoredBlob",
    "Records",
    "read_records",
]


@dataclass(frozen=True)
class TenantPeriods:
    """A tenant's own retention periods in seconds; 0 (or None) follows the default."""

    sources_seconds: int | None = None
    packets_seconds: int | None = None
    artifacts_seconds: int | None = None
    unused_uploads_seconds: int | None = None


@dataclass(frozen=True)
class Upload:
    """An upload admission holds: ``sources`` row."""

    tenant: str
    sha256: str
    size_bytes: int
    blob_key: str
    created_at: datetime


@dataclass(frozen=True)
class AcceptedJob:
    """A job admission accepted, and the source digests its task names."""

    job: str
    tenant: str
    created_at: datetime
    sources: frozenset[str]
    references: frozenset[tuple[str, str]] = frozenset()
    """The (system, key) of each source its task names by reference."""


@dataclass(frozen=True)
class Rewrite:
    """A repaired source's clean rewrite, as a job's ledger entry records it
    (``SourceRepair``): stored under ``normalized_key(tenant, sha256)``."""

    tenant: str
    source_sha256: str
    """The uploaded bytes' digest it was rewritten from."""
    blob_key: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class Fetched:
    """Bytes a source named by reference was pinned to, as a job's ledger
    entry records it (``SourcePin``): stored under ``fetched_key(tenant, sha256)``."""

    tenant: str
    references: frozenset[tuple[str, str]]
    """The (system, key) of each of the job's sources pinned to these bytes."""
    blob_key: str
    sha256: str
    size_bytes: int


@dataclass
class LedgerJob:
    """A job as its ledger entries say: the view, when it ended, the clean
    rewrites of its repaired sources, the fetched bytes its sources were
    pinned to, what is retired."""

    facts: JobFacts | None = None
    ended_at: datetime | None = None
    """When its last terminal entry occurred; None while it has not ended."""
    retired: set[str] = field(default_factory=set)
    """Event ids of its retirement entries."""
    repairs: dict[str, Rewrite] = field(default_factory=dict)
    """Its repaired sources' clean rewrites, by blob key."""
    pins: dict[str, Fetched] = field(default_factory=dict)
    """The fetched bytes its sources were pinned to, by blob key."""

    def take(self, event: queue_pb2.TransitionEvent) -> None:
        if is_retirement(event):
            self.retired.add(event.event_id)
            return
        for repair in event.repairs:
            if event.tenant and repair.normalized_sha256:
                key = normalized_key(event.tenant, repair.normalized_sha256)
                self.repairs[key] = Rewrite(
                    event.tenant,
                    repair.sha256,
                    key,
                    repair.normalized_sha256,
                    repair.normalized_size_bytes,
                )
        for pin in event.pins:
            if event.tenant and pin.sha256:
                key = fetched_key(event.tenant, pin.sha256)
                known = self.pins.get(key)
                references = frozenset({(pin.system, pin.key)})
                self.pins[key] = Fetched(
                    event.tenant,
                    references | (known.references if known else frozenset()),
                    key,
                    pin.sha256,
                    pin.size_bytes,
                )
        before = self.facts.state if self.facts else ""
        self.facts = apply(self.facts, event)
        if self.facts.state not in TERMINAL_STATES:
            self.ended_at = None
        elif before not in TERMINAL_STATES:
            self.ended_at = event.occur_time.ToDatetime().replace(tzinfo=UTC)


@dataclass(frozen=True)
class StoredBlob:
    """A packet or artifact one job's stage recorded."""

    job: str
    blob_key: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class Records:
    tenants: Mapping[str, TenantPeriods]
    uploads: list[Upload]
    accepted: Mapping[str, AcceptedJob]
    ledger: Mapping[str, LedgerJob]
    retired_uploads: frozenset[str]
    """Event ids of retirement entries without a job (uploads no job used)."""
    packets: Mapping[str, StoredBlob]
    artifacts: Mapping[str, StoredBlob]
    pinned: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The validator's own pins: for each fetched blob key, the jobs it
    pinned to those bytes (written as soon as they were stored, before the
    job's ledger records them)."""


WANTED: Wanted = {
    ADMISSION: [
        pb.COLLECTION_TENANT_PERIODS,
        pb.COLLECTION_UPLOADS,
        pb.COLLECTION_ACCEPTED_JOBS,
    ],
    # The validator's pins before audit's ledger: a pin written meanwhile is
    # at worst in the ledger already (its job has not ended: kept).
    "validator": [pb.COLLECTION_SOURCE_PINS],
    AUDIT: [pb.COLLECTION_LEDGER_ROWS],
    "assembler": [pb.COLLECTION_PACKETS],
    "signer": [pb.COLLECTION_SIGNATURES],
}
"""What retention asks each service for. Audit is read after admission, so
a job admission accepted meanwhile is at worst unknown to the ledger (kept)."""


def _time(stamp: object) -> datetime:
    return stamp.ToDatetime().replace(tzinfo=UTC)  # type: ignore[attr-defined]


def _periods(record: pb.TenantPeriods) -> TenantPeriods:
    return TenantPeriods(
        sources_seconds=record.sources_seconds or None,
        packets_seconds=record.packets_seconds or None,
        artifacts_seconds=record.artifacts_seconds or None,
        unused_uploads_seconds=record.unused_uploads_seconds or None,
    )


def _accepted(job: pb.AcceptedJob) -> AcceptedJob:
    return AcceptedJob(
        job.job,
        job.tenant,
        _time(job.create_time),
        frozenset(job.source_sha256),
        frozenset((ref.system, ref.key) for ref in job.references),
    )


def _ledger(records: Iterable[pb.Record]) -> tuple[dict[str, LedgerJob], frozenset[str]]:
    jobs: dict[str, LedgerJob] = {}
    unused: set[str] = set()
    for record in records:
        row = record.ledger_row
        try:
            event = queue_pb2.TransitionEvent.FromString(row.event)
        except DecodeError:
            continue  # `quire check` and `quire audit verify` report it
        if not event.job:
            if is_retirement(event):
                unused.add(event.event_id)
            continue
        jobs.setdefault(event.job, LedgerJob()).take(event)
    return jobs, frozenset(unused)


def _blobs(records: Iterable[pb.Record], kind: str) -> dict[str, StoredBlob]:
    rows = (getattr(record, kind) for record in records)
    return {r.job: StoredBlob(r.job, r.blob_key, r.sha256, r.size_bytes) for r in rows if r.sha256}


def _pinned(records: Iterable[pb.Record]) -> dict[str, frozenset[str]]:
    jobs: dict[str, set[str]] = {}
    for record in records:
        jobs.setdefault(record.source_pin.blob_key, set()).add(record.source_pin.job)
    return {key: frozenset(names) for key, names in jobs.items()}


def records_of(answers: ServiceRecords) -> Records:
    """Everything the plan needs, from the services' answers."""
    ledger, unused = _ledger(answers.records(AUDIT, pb.COLLECTION_LEDGER_ROWS))
    return Records(
        tenants={
            r.tenant_periods.tenant: _periods(r.tenant_periods)
            for r in answers.records(ADMISSION, pb.COLLECTION_TENANT_PERIODS)
        },
        uploads=[
            Upload(u.tenant, u.sha256, u.size_bytes, u.blob_key, _time(u.create_time))
            for u in (r.upload for r in answers.records(ADMISSION, pb.COLLECTION_UPLOADS))
        ],
        accepted={
            r.accepted_job.job: _accepted(r.accepted_job)
            for r in answers.records(ADMISSION, pb.COLLECTION_ACCEPTED_JOBS)
        },
        ledger=ledger,
        retired_uploads=unused,
        packets=_blobs(answers.records("assembler", pb.COLLECTION_PACKETS), "packet"),
        artifacts=_blobs(answers.records("signer", pb.COLLECTION_SIGNATURES), "signature"),
        pinned=_pinned(answers.records("validator", pb.COLLECTION_SOURCE_PINS)),
    )


def read_records(data_dir: Path, env: Mapping[str, str]) -> Records:
    """Everything the plan needs, as the services answer for it: asked of a
    running stack, exported from a stopped one's databases."""
    return records_of(gather(WANTED, data_dir, env, stopped=None))
