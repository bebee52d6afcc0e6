"""Audit's writes, all through one group commit.

Events recorded, completions and the completion desk's leases each need a
write transaction, and SQLite has one writer: one that arrives while a
commit is under way waits for it anyway. Here they all wait in one line and
go together, in one transaction and one fsync (``quire.groupcommit``): the
group's events are appended first, with one look-up and one insert
(``ledger.record_many``), then the other writes in their order, so a
completion in the same group sees the events that came with it. A write
that fails is rolled back alone and the rest of its group commits.

Every tenant chain head the group will touch (its events' tenants and the
tenants its other writes name) is locked first, in tenant order, as
``record_many`` locks its own: two audit replicas' groups (PostgreSQL) then
never hold one head each while waiting for the other's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection

from quire.audit import ledger
from quire.database import Database
from quire.groupcommit import BatchCommit

__all__ = ["AuditWrites"]

T = TypeVar("T")


@dataclass(frozen=True)
class _Work:
    work: Callable[[Connection], Any]
    tenant: str
    """The tenant whose chain the work may append to ("" for none)."""


Write = ledger.Arrival | _Work


def _together(connection: Connection, writes: list[Write]) -> list[Any]:
    arrivals = [(n, w) for n, w in enumerate(writes) if isinstance(w, ledger.Arrival)]
    tenants = {w.tenant for w in writes if isinstance(w, _Work)} - {""}
    if not tenants <= {arrival.event.tenant for _n, arrival in arrivals}:
        # record_many locks its events' heads in order itself; the other
        # writes' heads are locked with them, in the same order, first.
        tenants |= {arrival.event.tenant for _n, arrival in arrivals}
        for tenant in sorted(tenants):
            ledger.lock_head(connection, tenant)
    results: list[Any] = [None] * len(writes)
    if arrivals:
        outcomes = ledger.record_many(connection, [arrival for _n, arrival in arrivals])
        for (n, _arrival), outcome in zip(arrivals, outcomes, strict=True):
            results[n] = outcome
    for n, write in enumerate(writes):
        if isinstance(write, _Work):
            results[n] = write.work(connection)
    return results


class AuditWrites:
    """The one line audit's write transactions wait in."""

    def __init__(self, database: Database) -> None:
        self._batches: BatchCommit[Write, Any] = BatchCommit(database, _together)

    async def record(self, arrivals: Sequence[ledger.Arrival]) -> list[ledger.Outcome]:
        """Judge and append ``arrivals``, in order, in one group."""
        return await self._batches.run_all(arrivals)

    async def record_then(
        self, arrivals: Sequence[ledger.Arrival], work: Callable[[Connection], T], *, tenant: str
    ) -> tuple[list[ledger.Outcome], T]:
        """``record(arrivals)`` and ``run(work)`` in one group: ``work`` sees the
        events appended. Either failing raises (what was written stays)."""
        results = await self._batches.run_all([*arrivals, _Work(work, tenant)])
        outcomes: list[ledger.Outcome] = results[:-1]
        done: T = results[-1]
        return outcomes, done

    async def run(self, work: Callable[[Connection], T], *, tenant: str = "") -> T:
        """Run ``work`` in the next group's transaction; ``tenant``: the one
        whose chain it may append to (its head is locked in order first)."""
        result: T = await self._batches.run(_Work(work, tenant))
        return result
