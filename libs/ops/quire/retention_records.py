"""What ``quire retention`` reads from the services' databases, read-only:
admission's tenants (their periods), uploads and accepted jobs (with the
sources their tasks name by reference); each job's ledger entries in audit
(its end, the repaired sources' clean rewrites it used, the fetched bytes
its sources were pinned to, and what is already recorded as retired); the
validator's pins (which job pinned which fetched bytes, before its ledger
says so); the assembler's packets and the signer's artifacts.

Only ids, digests, sizes, keys and times are kept; never a document's name
or content. Like ``quire check``, it opens each service's database through
the URL the service itself uses, read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, Engine, select

from quire.admission import tables as admission_tables
from quire.admission.storagepolicy import TenantStorage, read_storage
from quire.assembler import tables as assembler_tables
from quire.audit import tables as audit_tables
from quire.blobstore import fetched_key, normalized_key
from quire.database import as_utc
from quire.invariants_db import database_exists, read_only_engine, service_settings
from quire.jobs import TERMINAL_STATES
from quire.jobview import JobFacts, apply, is_retirement
from quire.signer import tables as signer_tables
from quire.type import queue_pb2
from quire.validator import tables as validator_tables

__all__ = [
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
    tenants: Mapping[str, TenantStorage]
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


def _sources(task: bytes) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """The source digests ``task`` names, and its references (system, key)."""
    try:
        sources = queue_pb2.JobTask.FromString(task).sources
    except DecodeError:
        return frozenset(), frozenset()
    return (
        frozenset(s.sha256 for s in sources),
        frozenset((s.fetch.system, s.fetch.key) for s in sources if s.HasField("fetch")),
    )


def _admission(connection: Connection) -> tuple[dict[str, TenantStorage], list[Upload], dict]:
    tenant_ids = list(connection.execute(select(admission_tables.tenants.c.id)).scalars())
    table = admission_tables.sources
    uploads = [
        Upload(r.tenant, r.sha256, r.size_bytes, r.blob_key, as_utc(r.created_at))
        for r in connection.execute(select(table))
    ]
    jobs = admission_tables.jobs
    accepted = {
        r.job: AcceptedJob(r.job, r.tenant, as_utc(r.created_at), *_sources(r.task))
        for r in connection.execute(
            select(jobs.c.job, jobs.c.tenant, jobs.c.created_at, jobs.c.task)
        )
    }
    return read_storage(connection, tenant_ids), uploads, accepted


def _ledger(connection: Connection) -> tuple[dict[str, LedgerJob], frozenset[str]]:
    table = audit_tables.ledger
    jobs: dict[str, LedgerJob] = {}
    unused: set[str] = set()
    for row in connection.execute(select(table.c.job, table.c.event).order_by(table.c.sequence)):
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


def _blobs(connection: Connection, table: object) -> dict[str, StoredBlob]:
    rows = connection.execute(
        select(table.c.job, table.c.blob_key, table.c.sha256, table.c.size_bytes)  # type: ignore[attr-defined]
    )
    return {
        r.job: StoredBlob(r.job, r.blob_key, r.sha256, r.size_bytes or 0) for r in rows if r.sha256
    }


def _pinned(connection: Connection) -> dict[str, frozenset[str]]:
    table = validator_tables.source_pins
    jobs: dict[str, set[str]] = {}
    for row in connection.execute(select(table.c.job, table.c.blob_key)):
        jobs.setdefault(row.blob_key, set()).add(row.job)
    return {key: frozenset(names) for key, names in jobs.items()}


def _engines(data_dir: Path, env: Mapping[str, str]) -> dict[str, Engine]:
    engines = {}
    for service in ("admission", "validator", "audit", "assembler", "signer"):
        url = service_settings(data_dir, service, env).database_url
        if database_exists(url):
            engines[service] = read_only_engine(url, stopped=False)
    return engines


def read_records(data_dir: Path, env: Mapping[str, str]) -> Records:
    """Everything the plan needs. Audit is read after admission, so a job
    admission accepted meanwhile is at worst unknown to the ledger (kept);
    the validator's pins are read before audit, so a pin written meanwhile
    is at worst in the ledger already (its job has not ended: kept)."""
    engines = _engines(data_dir, env)
    try:
        tenants: dict[str, TenantStorage] = {}
        uploads: list[Upload] = []
        accepted: dict[str, AcceptedJob] = {}
        if "admission" in engines:
            with engines["admission"].begin() as connection:
                tenants, uploads, accepted = _admission(connection)
        pinned: dict[str, frozenset[str]] = {}
        if "validator" in engines:
            with engines["validator"].begin() as connection:
                pinned = _pinned(connection)
        ledger: dict[str, LedgerJob] = {}
        unused: frozenset[str] = frozenset()
        if "audit" in engines:
            with engines["audit"].begin() as connection:
                ledger, unused = _ledger(connection)
        packets: dict[str, StoredBlob] = {}
        if "assembler" in engines:
            with engines["assembler"].begin() as connection:
                packets = _blobs(connection, assembler_tables.assemblies)
        artifacts: dict[str, StoredBlob] = {}
        if "signer" in engines:
            with engines["signer"].begin() as connection:
                artifacts = _blobs(connection, signer_tables.signatures)
    finally:
        for engine in engines.values():
            engine.dispose()
    return Records(tenants, uploads, accepted, ledger, unused, packets, artifacts, pinned)
