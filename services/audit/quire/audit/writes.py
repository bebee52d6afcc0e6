"""Audit's writes, all through one group commit.

Events recorded, completions and the completion desk's leases each need a
write transaction, and SQLite has one writer: one that arrives while a
commit is under way waits for it anyway. Here they all wait in one line and
go together, in one transaction and one fsync (``quire.groupcommit``): the
group's events are appended first, with one look-up and one insert
(``ledger.record_many``), then the other writes in their order, so a
completion in the same group sees the events that came with it. A write
that fails is rolled back alone and the rest of its group commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection

from quire.audit import ledger
from quire.database import Database
from quire.groupcommit import BatchCommit

__all__ = ["AuditWrites"]

T = TypeVar("T")
Write = ledger.Arrival | Callable[[Connection], Any]


def _together(connection: Connection, writes: list[Write]) -> list[Any]:
    arrivals = [(n, w) for n, w in enumerate(writes) if isinstance(w, ledger.Arrival)]
    results: list[Any] = [None] * len(writes)
    if arrivals:
        outcomes = ledger.record_many(connection, [arrival for _n, arrival in arrivals])
        for (n, _arrival), outcome in zip(arrivals, outcomes, strict=True):
            results[n] = outcome
    for n, write in enumerate(writes):
        if not isinstance(write, ledger.Arrival):
            results[n] = write(connection)
    return results


class AuditWrites:
    """The one line audit's write transactions wait in."""

    def __init__(self, database: Database) -> None:
        self._batches: BatchCommit[Write, Any] = BatchCommit(database, _together)

    async def record(self, arrivals: Sequence[ledger.Arrival]) -> list[ledger.Outcome]:
        """Judge and append ``arrivals``, in order, in one group."""
        return await self._batches.run_all(arrivals)

    async def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in the next group's transaction."""
        result: T = await self._batches.run(work)
        return result
