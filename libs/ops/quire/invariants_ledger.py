"""Audit's answer, verified: the ledger rows, chain heads, job index and
checkpoint files audit exports are claims, checked here by the ledger's own
rules (``quire.ledgerchain``) against the hashed bytes they carry, and the
checkpoint files against audit's key (``quire.checkpointfiles``).

A row's column that audit exported unset held something other than text
(or bytes) in its database: it stays ``None`` here, which no hashed event
says, so it is a finding like any other disagreement, never an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from cryptography.exceptions import UnsupportedAlgorithm

from quire.checkpointfiles import CheckpointFiles, read_checkpoint_documents
from quire.export.v1 import export_service_pb2 as pb
from quire.ledgerchain import LedgerReport, verify_chains

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["StoredRow", "IndexRow", "HeadRow", "stored_row", "checkpoint_files", "verify_answer"]


def _claimed(message: Any, name: str) -> Any:
    """An optional field's value, or None when the exporter left it unset."""
    return getattr(message, name) if message.HasField(name) else None


Claimed = TypeVar("Claimed", bound="DataclassInstance")


def _as_claimed(kind: type[Claimed], message: Any, **given: Any) -> Claimed:
    """``kind`` as ``message`` claims it: the fields ``given``, and each other
    field the message's value of the same name (None where it was left unset)."""
    claimed = {f.name: _claimed(message, f.name) for f in fields(kind) if f.name not in given}
    return kind(**given, **claimed)


@dataclass(frozen=True)
class StoredRow:
    """A ledger row as audit says its database holds it."""

    sequence: int
    event_id: str | None
    job: str | None
    tenant: str | None
    from_state: str | None
    to_state: str | None
    reason_code: str | None
    event: bytes | None
    prev_hash: str | None
    entry_hash: str | None


def stored_row(row: pb.LedgerRow) -> StoredRow:
    return _as_claimed(StoredRow, row, sequence=row.sequence)


@dataclass(frozen=True)
class IndexRow:
    """A row of audit's job index as audit says it holds it."""

    job: str
    tenant: str | None
    state: str | None
    reason_code: str | None
    item_count: int | None
    manifest_digest: str | None
    output_digest: str | None
    ruleset_version: str | None
    key_version: str | None


def _index_row(row: pb.JobIndexRow) -> IndexRow:
    return _as_claimed(IndexRow, row, job=row.job)


@dataclass(frozen=True)
class HeadRow:
    """A tenant's chain head row."""

    tenant: str
    head_hash: str | None
    length: int


def checkpoint_files(key: Iterable[pb.Record], files: Iterable[pb.Record]) -> CheckpointFiles:
    """The exported checkpoint files as the exported key vouches for them:
    none without a key (audit never made one); every one refused when the
    key is not one."""
    documents = [(r.checkpoint_file.name, r.checkpoint_file.content) for r in files]
    pems = [r.checkpoint_key.public_key_pem for r in key]
    if not pems:
        return CheckpointFiles([], [], [])
    try:
        return read_checkpoint_documents(documents, pems[0])
    except (ValueError, UnsupportedAlgorithm):
        return CheckpointFiles([], [], [name for name, _ in documents])


def verify_answer(
    rows: list[StoredRow],
    *,
    heads: Iterable[pb.Record],
    index: Iterable[pb.Record],
    checkpoints: CheckpointFiles,
    gaps_are_deletions: bool,
) -> LedgerReport:
    """Audit's exported ledger, verified as audit verifies its own."""
    return verify_chains(
        rows,
        head_rows=[
            HeadRow(r.chain_head.tenant, _claimed(r.chain_head, "head_hash"), r.chain_head.length)
            for r in heads
        ],
        index=[_index_row(r.job_index) for r in index],
        checkpoints=checkpoints.checkpoints,
        log_heads=checkpoints.heads,
        refused=checkpoints.refused,
        missing=checkpoints.missing,
        gaps_are_deletions=gaps_are_deletions,
    )
