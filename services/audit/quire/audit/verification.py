"""Ledger verification of audit's own database (``quire audit verify``):
every tenant's hash chain recomputed and compared with its head row, the
job index and the checkpoints held outside the database.

The rules, and what each finding means, are ``quire.ledgerchain``'s: the
operator tools apply the same ones to what audit exports (``quire check``).
This module only reads the rows: the head rows first (an append after that
read only lengthens a chain past its head row, which is allowed), then the
entries in sequence order, in batches, then the job index.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Connection, select

from quire.audit import tables
from quire.checkpoint import Checkpoint as LogHead
from quire.checkpointfiles import ChainCheckpoint
from quire.ledgerchain import Finding, LedgerReport, verify_chains

__all__ = ["Finding", "LedgerReport", "verify_ledger", "ledger_rows"]

BATCH = 5000


def ledger_rows(connection: Connection, *, after: int = 0, limit: int | None = None) -> Any:
    """The stored entries after sequence ``after``, in sequence order."""
    table = tables.ledger
    query = (
        select(
            table.c.sequence,
            table.c.event_id,
            table.c.job,
            table.c.tenant,
            table.c.from_state,
            table.c.to_state,
            table.c.reason_code,
            table.c.event,
            table.c.prev_hash,
            table.c.entry_hash,
        )
        .where(table.c.sequence > after)
        .order_by(table.c.sequence)
    )
    return connection.execute(query if limit is None else query.limit(limit)).all()


def _rows(connection: Connection) -> Iterator[Any]:
    after = 0
    while True:
        batch = ledger_rows(connection, after=after, limit=BATCH)
        if not batch:
            return
        yield from batch
        after = batch[-1].sequence


def _index(connection: Connection) -> Iterator[Any]:
    yield from connection.execute(select(tables.jobs))


def verify_ledger(
    connection: Connection,
    checkpoints: list[ChainCheckpoint],
    *,
    heads: Iterable[tuple[str, LogHead]] = (),
    refused: Iterable[str] = (),
    missing: Iterable[tuple[str, int]] = (),
) -> LedgerReport:
    """Verify every chain, every column, the job index, and the checkpoints:
    ``checkpoints`` (signed chain heads), ``heads`` (signed log heads) and the
    names of checkpoint files that did not verify (``refused``)."""
    head_rows = connection.execute(select(tables.chain_heads)).all()
    return verify_chains(
        _rows(connection),
        head_rows=head_rows,
        index=_index(connection),
        checkpoints=checkpoints,
        log_heads=heads,
        refused=refused,
        missing=missing,
        gaps_are_deletions=connection.dialect.name == "sqlite",
    )
