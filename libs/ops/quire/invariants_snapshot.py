"""What the invariant checker reads of the services' records, as they
answer for them (``quire.servicerecords``): admission's accepted jobs,
audit's ledger (verified here against its hashed bytes and signed
checkpoints: ``quire.invariants_ledger``), job view and refused events, the
assembler's packets and the signer's signature records and inputs
(``quire.invariants_records``).

Only ids, states, reason codes and digests are kept. The services are read
in pipeline order (admission first), so a stack that is idle yields one
consistent picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from quire.export.v1 import export_service_pb2 as pb
from quire.invariants_ledger import StoredRow, checkpoint_files, stored_row, verify_answer
from quire.invariants_records import PacketRef, read_assemblies, read_handed_packets
from quire.jobs import state_name
from quire.ledgerchain import LedgerReport
from quire.pipeline import ADMISSION, AUDIT
from quire.servicerecords import ServiceRecords, Wanted, gather
from quire.type import queue_pb2

__all__ = [
    "AcceptedJob",
    "LedgerEntry",
    "JobView",
    "SignatureRecord",
    "Snapshot",
    "read_snapshot",
]


@dataclass(frozen=True)
class AcceptedJob:
    job: str
    tenant: str


@dataclass(frozen=True)
class LedgerEntry:
    sequence: int
    event_id: str
    job: str
    tenant: str
    from_state: str
    to_state: str
    reason_code: str
    output_digest: str
    """From the hashed event; empty when the event does not decode."""
    decodes: bool
    columns_match: bool
    """Whether the row's columns say what its hashed event says."""
    retired_kind: str = ""
    """For a retirement entry (bytes deleted under the retention policy): what
    was retired ("source", "normalized", "packet", "artifact", "upload"); empty otherwise."""
    ruleset_change: bool = False
    """A change of a ruleset's current version (the operators' chain): no job's."""


@dataclass(frozen=True)
class JobView:
    job: str
    state: str


@dataclass(frozen=True)
class SignatureRecord:
    job: str
    blob_key: str
    sha256: str


@dataclass(frozen=True)
class Snapshot:
    accepted: Mapping[str, AcceptedJob]
    ledger: list[LedgerEntry]
    """Every entry, in sequence order."""
    views: Mapping[str, JobView]
    signatures: Mapping[str, SignatureRecord]
    verification: LedgerReport | None
    """Audit's exported ledger verified; None when audit's database is missing."""
    missing_databases: tuple[str, ...]
    assemblies: Mapping[str, PacketRef] = field(default_factory=dict)
    """The packet the assembler committed for each job."""
    assembler_handed: Mapping[str, list[PacketRef]] = field(default_factory=dict)
    """The packet each committed assembler outcome handed to the signer."""
    signer_inputs: Mapping[str, list[PacketRef]] = field(default_factory=dict)
    """The packet each committed signer outcome signed (its sign task's)."""
    refused_events: list[RefusedEvent] = field(default_factory=list)
    """Events audit's recorder kept out of the ledger, by event id."""


@dataclass(frozen=True)
class RefusedEvent:
    job: str
    producer: str
    kind: str
    to_state: str


WANTED: Wanted = {
    ADMISSION: [pb.COLLECTION_ACCEPTED_JOBS],
    # Head rows before the rows they are checked against (quire.ledgerchain).
    AUDIT: [
        pb.COLLECTION_CHAIN_HEADS,
        pb.COLLECTION_LEDGER_ROWS,
        pb.COLLECTION_JOB_INDEX,
        pb.COLLECTION_REFUSED_EVENTS,
        pb.COLLECTION_CHECKPOINT_KEY,
        pb.COLLECTION_CHECKPOINT_FILES,
    ],
    "assembler": [pb.COLLECTION_PACKETS, pb.COLLECTION_LEASE_OUTCOMES],
    "signer": [pb.COLLECTION_SIGNATURES, pb.COLLECTION_LEASE_OUTCOMES],
}
"""What the checker asks each service for, the services in pipeline order."""


def _said(event: queue_pb2.TransitionEvent) -> tuple[str, ...] | None:
    """The columns a ledger row should have, as its hashed event says them."""
    try:
        return (
            event.event_id,
            event.job,
            event.tenant,
            state_name(event.from_state),
            state_name(event.to_state),
            event.reason_code,
        )
    except ValueError:  # a state number this build does not know
        return None


def _entry(row: StoredRow) -> LedgerEntry:
    """One row as the checker reads it: what audit could not call text
    reads as empty, an event that is not bytes as undecodable, so that each
    becomes a finding."""
    event: queue_pb2.TransitionEvent | None = None
    if row.event is not None:
        try:
            event = queue_pb2.TransitionEvent.FromString(row.event)
        except DecodeError:
            event = None
    columns = (row.event_id, row.job, row.tenant, row.from_state, row.to_state, row.reason_code)
    return LedgerEntry(
        sequence=row.sequence,
        event_id=row.event_id or "",
        job=row.job or "",
        tenant=row.tenant or "",
        from_state=row.from_state or "",
        to_state=row.to_state or "",
        reason_code=row.reason_code or "",
        output_digest=event.output_digest if event is not None else "",
        decodes=event is not None,
        columns_match=event is not None and _said(event) == columns,
        retired_kind=event.retirement.kind if event is not None else "",
        ruleset_change=event is not None and event.HasField("ruleset_change"),
    )


def _accepted(records: ServiceRecords) -> dict[str, AcceptedJob]:
    jobs = (r.accepted_job for r in records.records(ADMISSION, pb.COLLECTION_ACCEPTED_JOBS))
    return {job.job: AcceptedJob(job.job, job.tenant) for job in jobs}


def _views(records: ServiceRecords) -> dict[str, JobView]:
    rows = (r.job_index for r in records.records(AUDIT, pb.COLLECTION_JOB_INDEX))
    return {row.job: JobView(row.job, row.state if row.HasField("state") else "") for row in rows}


def _refused_events(records: ServiceRecords) -> list[RefusedEvent]:
    events = (r.refused_event for r in records.records(AUDIT, pb.COLLECTION_REFUSED_EVENTS))
    return [RefusedEvent(e.job, e.producer, e.kind, e.to_state) for e in events]


def _signatures(records: ServiceRecords) -> dict[str, SignatureRecord]:
    rows = (r.signature for r in records.records("signer", pb.COLLECTION_SIGNATURES))
    return {row.job: SignatureRecord(row.job, row.blob_key, row.sha256) for row in rows}


def _verification(records: ServiceRecords, rows: list[StoredRow]) -> LedgerReport:
    files = checkpoint_files(
        records.records(AUDIT, pb.COLLECTION_CHECKPOINT_KEY),
        records.records(AUDIT, pb.COLLECTION_CHECKPOINT_FILES),
    )
    return verify_answer(
        rows,
        heads=records.records(AUDIT, pb.COLLECTION_CHAIN_HEADS),
        index=records.records(AUDIT, pb.COLLECTION_JOB_INDEX),
        checkpoints=files,
        gaps_are_deletions=records.sequence_gaps_are_deletions(AUDIT, pb.COLLECTION_LEDGER_ROWS),
    )


def snapshot_of(records: ServiceRecords) -> Snapshot:
    """The picture the services' answers give, audit's verified."""
    missing = tuple(service for service in WANTED if service in records.missing)
    rows = [stored_row(r.ledger_row) for r in records.records(AUDIT, pb.COLLECTION_LEDGER_ROWS)]
    return Snapshot(
        accepted=_accepted(records),
        ledger=[_entry(row) for row in rows],
        views=_views(records),
        signatures=_signatures(records),
        verification=None if AUDIT in missing else _verification(records, rows),
        missing_databases=missing,
        assemblies=read_assemblies(records.records("assembler", pb.COLLECTION_PACKETS)),
        assembler_handed=read_handed_packets(
            records.records("assembler", pb.COLLECTION_LEASE_OUTCOMES)
        ),
        signer_inputs=read_handed_packets(records.records("signer", pb.COLLECTION_LEASE_OUTCOMES)),
        refused_events=_refused_events(records),
    )


def read_snapshot(data_dir: Path, env: Mapping[str, str], *, stopped: bool | None) -> Snapshot:
    """Every service's part of the picture, as it answers for it
    (``quire.servicerecords.gather``); a missing database reads as empty."""
    return snapshot_of(gather(WANTED, data_dir, env, stopped=stopped))
