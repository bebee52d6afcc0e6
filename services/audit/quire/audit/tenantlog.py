"""A tenant's ledger as a transparency log (``docs/evidence-format.md``).

Leaf ``i`` of tenant T's log is the ``i``-th ledger entry of T in chain order,
and its bytes are the entry's stored event bytes exactly as hashed into the
chain. The log's name (its checkpoints' origin and key name) is
``quire/<tenant>``.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from quire.audit import tables
from quire.checkpointfiles import log_origin
from quire.errors import DataLoss
from quire.merkle import MerkleTree
from quire.reasons import ReasonCode

__all__ = ["DAMAGED", "origin", "tenant_entries", "tenant_tree"]

DAMAGED = "an entry of this tenant's ledger is damaged; quire audit verify names it"


def origin(tenant: str) -> str:
    """The log's name: ``quire/<tenant>`` (``quire.checkpointfiles``)."""
    return log_origin(tenant)


def tenant_entries(
    connection: Connection, tenant: str, size: int | None = None
) -> list[tuple[int, bytes]]:
    """(sequence, event bytes) of the tenant's first ``size`` entries, in chain order."""
    table = tables.ledger
    query = (
        select(table.c.sequence, table.c.event)
        .where(table.c.tenant == tenant)
        .order_by(table.c.sequence)
    )
    if size is not None:
        query = query.limit(size)
    entries = []
    for row in connection.execute(query):
        if not isinstance(row.event, bytes | bytearray | memoryview):
            raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED)
        entries.append((row.sequence, bytes(row.event)))
    if size is not None and len(entries) < size:
        raise DataLoss(ReasonCode.LEDGER_DAMAGED, DAMAGED)  # fewer entries than its head counts
    return entries


def tenant_tree(entries: list[tuple[int, bytes]]) -> MerkleTree:
    return MerkleTree.from_entries(event for _, event in entries)
