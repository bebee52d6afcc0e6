"""What the invariant checker reads from the services' databases, read-only:
admission's accepted jobs, audit's ledger, job view and chain verification,
the assembler's packets and the signer's signature records and inputs
(``quire.invariants_records``).

Only ids, states, reason codes and digests are kept. Reads go service by
service in pipeline order (admission first), each in one transaction, so a
stack that is idle yields one consistent picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from sqlalchemy import Connection, Engine, select

from quire.admission import tables as admission_tables
from quire.assembler import tables as assembler_tables
from quire.audit import tables as audit_tables
from quire.audit.checkpoints import CheckpointFiles, CheckpointSigner, read_checkpoint_files
from quire.audit.verification import LedgerReport, verify_ledger
from quire.invariants_db import database_exists, read_only_engine, service_settings
from quire.invariants_records import PacketRef, read_assemblies, read_handed_packets
from quire.jobs import state_name
from quire.signer import tables as signer_tables
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
    missing_databases: tuple[str, ...]
    assemblies: Mapping[str, PacketRef] = field(default_factory=dict)
    """The assembler's ``assemblies`` row of each job."""
    assembler_handed: Mapping[str, list[PacketRef]] = field(default_factory=dict)
    """The packet each committed assembler outcome handed to the signer."""
    signer_inputs: Mapping[str, list[PacketRef]] = field(default_factory=dict)
    """The packet each committed signer outcome signed (its sign task's)."""
    refused_events: list[RefusedEvent] = field(default_factory=list)
    """Events audit's recorder kept out of the ledger, oldest first."""


@dataclass(frozen=True)
class RefusedEvent:
    job: str
    producer: str
    kind: str
    to_state: str


def _accepted(connection: Connection) -> dict[str, AcceptedJob]:
    table = admission_tables.jobs
    rows = connection.execute(select(table.c.job, table.c.tenant))
    return {row.job: AcceptedJob(row.job, row.tenant) for row in rows}


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


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _entry(row: Any) -> LedgerEntry:
    """One row as the checker reads it: any column may hold any type (a row
    rewritten in the database); what is not text reads as empty, an event
    that is not bytes as undecodable, so that each becomes a finding."""
    event: queue_pb2.TransitionEvent | None = None
    if isinstance(row.event, bytes | bytearray | memoryview):
        try:
            event = queue_pb2.TransitionEvent.FromString(bytes(row.event))
        except DecodeError:
            event = None
    columns = (row.event_id, row.job, row.tenant, row.from_state, row.to_state, row.reason_code)
    return LedgerEntry(
        sequence=row.sequence,
        event_id=_text(row.event_id),
        job=_text(row.job),
        tenant=_text(row.tenant),
        from_state=_text(row.from_state),
        to_state=_text(row.to_state),
        reason_code=_text(row.reason_code),
        output_digest=event.output_digest if event is not None else "",
        decodes=event is not None,
        columns_match=event is not None and _said(event) == columns,
        retired_kind=event.retirement.kind if event is not None else "",
        ruleset_change=event is not None and event.HasField("ruleset_change"),
    )


def _ledger(connection: Connection) -> list[LedgerEntry]:
    table = audit_tables.ledger
    rows = connection.execute(
        select(
            table.c.sequence,
            table.c.event_id,
            table.c.job,
            table.c.tenant,
            table.c.from_state,
            table.c.to_state,
            table.c.reason_code,
            table.c.event,
        ).order_by(table.c.sequence)
    )
    return [_entry(row) for row in rows]


def _views(connection: Connection) -> dict[str, JobView]:
    table = audit_tables.jobs
    rows = connection.execute(select(table.c.job, table.c.state))
    return {row.job: JobView(row.job, row.state) for row in rows}


def _refused_events(connection: Connection) -> list[RefusedEvent]:
    table = audit_tables.refused_events
    rows = connection.execute(
        select(table.c.job, table.c.producer, table.c.kind, table.c.to_state).order_by(
            table.c.refused_at, table.c.event_id
        )
    )
    return [RefusedEvent(str(r.job), str(r.producer), str(r.kind), str(r.to_state)) for r in rows]


def _signatures(connection: Connection) -> dict[str, SignatureRecord]:
    table = signer_tables.signatures
    rows = connection.execute(select(table.c.job, table.c.blob_key, table.c.sha256))
    return {row.job: SignatureRecord(row.job, row.blob_key, row.sha256 or "") for row in rows}


def _checkpoints(audit_dir: Path) -> CheckpointFiles:
    """The checkpoint folder as audit's key vouches for it; empty if audit never made its key."""
    if not (audit_dir / "keys" / "checkpoint.key").is_file():
        return CheckpointFiles([], [], [])
    signer = CheckpointSigner(audit_dir / "keys")
    return read_checkpoint_files(audit_dir / "checkpoints", signer.public_pem)


def read_snapshot(data_dir: Path, env: Mapping[str, str], *, stopped: bool) -> Snapshot:
    """Read every service's part of the picture; a missing database reads as empty."""
    missing: list[str] = []
    engines: dict[str, Engine] = {}
    for service in ("admission", "audit", "assembler", "signer"):
        url = service_settings(data_dir, service, env).database_url
        if database_exists(url):
            engines[service] = read_only_engine(url, stopped=stopped)
        else:
            missing.append(service)
    try:
        accepted: dict[str, AcceptedJob] = {}
        if "admission" in engines:
            with engines["admission"].begin() as connection:
                accepted = _accepted(connection)
        ledger: list[LedgerEntry] = []
        views: dict[str, JobView] = {}
        verification = None
        refused: list[RefusedEvent] = []
        if "audit" in engines:
            audit_dir = service_settings(data_dir, "audit", env).service_dir
            checkpoints = _checkpoints(audit_dir)
            with engines["audit"].begin() as connection:
                ledger = _ledger(connection)
                views = _views(connection)
                refused = _refused_events(connection)
                verification = verify_ledger(
                    connection,
                    checkpoints.checkpoints,
                    heads=checkpoints.heads,
                    refused=checkpoints.refused,
                    missing=checkpoints.missing,
                )
        assemblies: dict[str, PacketRef] = {}
        assembler_handed: dict[str, list[PacketRef]] = {}
        if "assembler" in engines:
            with engines["assembler"].begin() as connection:
                assemblies = read_assemblies(connection)
                assembler_handed = read_handed_packets(connection, assembler_tables.leases)
        signatures: dict[str, SignatureRecord] = {}
        signer_inputs: dict[str, list[PacketRef]] = {}
        if "signer" in engines:
            with engines["signer"].begin() as connection:
                signatures = _signatures(connection)
                signer_inputs = read_handed_packets(connection, signer_tables.leases)
    finally:
        for engine in engines.values():
            engine.dispose()
    return Snapshot(
        accepted=accepted,
        ledger=ledger,
        views=views,
        signatures=signatures,
        verification=verification,
        missing_databases=tuple(missing),
        assemblies=assemblies,
        assembler_handed=assembler_handed,
        signer_inputs=signer_inputs,
        refused_events=refused,
    )
