"""Which of a tenant's jobs are still outstanding (not terminal).

Admission knows every job it accepted; audit knows which have ended. Jobs are
marked finished here when audit reports them terminal: on status reads, and in
a batch when a tenant reaches its quota, so the common path costs no call.
The ends a watch relays are marked together, twice a second (``ended``): a
mark that comes late only makes a tenant at its quota ask audit first.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, func, select, update

from quire.admission import tables
from quire.admission.jobs.auditjobs import ask_audit
from quire.audit.v1 import audit_service_pb2_grpc
from quire.database import Database
from quire.driversql import DriverStatement
from quire.jobs import TERMINAL_STATES, state_name

__all__ = ["OutstandingJobs", "count_outstanding"]

log = logging.getLogger(__name__)

REFRESH_BATCH = 1000
FLUSH_SECONDS = 0.5
"""How often the ends a watch relayed are marked, together."""


_OUTSTANDING = DriverStatement(
    select(func.count().label("outstanding"))
    .select_from(tables.jobs)
    .where(tables.jobs.c.tenant == bindparam("tenant"), tables.jobs.c.finished_at.is_(None))
)
"""Built once: every submission counts."""


def count_outstanding(connection: Connection, tenant: str) -> int:
    (row,) = _OUTSTANDING.rows(connection, {"tenant": tenant})
    return int(row.outstanding)


class OutstandingJobs:
    """Marks admission's jobs finished once audit has them terminal, so the
    outstanding count a tenant's quota is held to stays a local read."""

    def __init__(self, database: Database, audit: audit_service_pb2_grpc.AuditServiceStub) -> None:
        self._db = database
        self._audit = audit
        self._ended: set[str] = set()

    def ended(self, name: str) -> None:
        """``name`` ended (a watch relayed it): marked with the next flush."""
        self._ended.add(name)

    async def flush(self) -> int:
        """Mark the relayed ends so far, in one transaction; how many."""
        names, self._ended = sorted(self._ended), set()
        await self.mark_finished(names)
        return len(names)

    async def flush_forever(self, interval: float = FLUSH_SECONDS) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except Exception as error:  # noqa: BLE001 - the quota path asks audit anyway
                log.warning(
                    "ends not marked (%s); a tenant at its quota asks audit", type(error).__name__
                )

    async def mark_finished(self, names: list[str]) -> None:
        if not names:
            return
        now = datetime.now(UTC)
        await self._db.run(
            lambda s: s.execute(
                update(tables.jobs)
                .where(tables.jobs.c.job.in_(names), tables.jobs.c.finished_at.is_(None))
                .values(finished_at=now)
            )
        )

    async def refresh(self, tenant: str, quota: int = REFRESH_BATCH) -> None:
        """Ask audit about the tenant's outstanding jobs and mark the ended ones."""
        table = tables.jobs
        names = await self._db.run(
            lambda s: [
                row.job
                for row in s.execute(
                    select(table.c.job)
                    .where(table.c.tenant == tenant, table.c.finished_at.is_(None))
                    .limit(max(REFRESH_BATCH, quota + 1))
                )
            ]
        )
        if not names:
            return
        known = await ask_audit(self._audit, names)
        await self.mark_finished(
            [job.name for job in known.values() if state_name(job.state) in TERMINAL_STATES]
        )
