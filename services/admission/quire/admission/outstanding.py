"""Which of a tenant's jobs are still outstanding (not terminal).

Admission knows every job it accepted; audit knows which have ended. Jobs are
marked finished here when audit reports them terminal: on status reads, and in
a batch when a tenant reaches its quota, so the common path costs no call.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, func, select, update

from quire.admission import tables
from quire.admission.auditjobs import ask_audit
from quire.audit.v1 import audit_service_pb2_grpc
from quire.database import Database
from quire.jobs import TERMINAL_STATES, state_name

__all__ = ["OutstandingJobs", "count_outstanding"]

REFRESH_BATCH = 1000


_OUTSTANDING = (
    select(func.count())
    .select_from(tables.jobs)
    .where(tables.jobs.c.tenant == bindparam("tenant"), tables.jobs.c.finished_at.is_(None))
)
"""Built once: every submission counts."""


def count_outstanding(connection: Connection, tenant: str) -> int:
    return int(connection.execute(_OUTSTANDING, {"tenant": tenant}).scalar_one())


class OutstandingJobs:
    def __init__(self, database: Database, audit: audit_service_pb2_grpc.AuditServiceStub) -> None:
        self._db = database
        self._audit = audit

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
