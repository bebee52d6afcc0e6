"""The end tracker: learns from audit which watched jobs have ended and
records each end once, in one transaction with everything that follows from
it — the job's ``finished_at``, its batch packet's final state, the batch's
terminal count (and the batch's own end), and the tenant's completion
notifications in the outbox.

Watched jobs are the children of batches that have not finished, and the
jobs of tenants with a notification endpoint (made after it was
registered). A job's end is recorded by a compare-and-set on
``jobs.end_recorded_at``, so replicas polling side by side, or a cancel's
refresh racing the poll, record it once. Audit is asked in bounded pages; a
rotating cursor keeps a job that stays parked from hiding the ones after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select, update

from quire.admission import tables
from quire.admission.batches.views import batch_document
from quire.admission.jobs.auditjobs import AUDIT_PAGE, ask_audit
from quire.admission.notifications.outbox import queue_notification
from quire.audit.v1 import audit_service_pb2_grpc
from quire.database import Database
from quire.jobs import TERMINAL_STATES, state_name
from quire.jobstatus import job_status_document
from quire.type import job_pb2

__all__ = ["EndTracker", "record_ends", "settle_batch"]

log = logging.getLogger(__name__)
_COLUMNS = (tables.jobs.c.job, tables.jobs.c.tenant, tables.jobs.c.bundle_id, tables.jobs.c.batch)


def _ended(job: job_pb2.Job | None) -> bool:
    return job is not None and state_name(job.state) in TERMINAL_STATES


def _watched(connection: Connection, *, after: str, limit: int) -> list[Any]:
    """Unrecorded jobs after ``after`` (by name) that a batch or an endpoint waits for.

    Read from what waits, not from the jobs: the unfinished batches' children
    (by batch), and each tenant with an endpoint's unrecorded jobs (by the
    partial index of unrecorded jobs). Neither read grows with the jobs whose
    ends were recorded long ago, nor with other tenants' jobs."""
    jobs, batches, endpoints = tables.jobs, tables.batches, tables.notification_endpoints
    open_batches = list(
        connection.execute(select(batches.c.batch).where(batches.c.finished_at.is_(None))).scalars()
    )
    found: list[Any] = []
    if open_batches:
        found.extend(
            connection.execute(
                select(*_COLUMNS)
                .where(
                    jobs.c.batch.in_(open_batches),
                    jobs.c.end_recorded_at.is_(None),
                    jobs.c.job > after,
                )
                .order_by(jobs.c.job)
                .limit(limit)
            )
        )
    for tenant, since in connection.execute(select(endpoints.c.tenant, endpoints.c.created_at)):
        found.extend(
            connection.execute(
                select(*_COLUMNS)
                .where(
                    jobs.c.tenant == tenant,
                    jobs.c.end_recorded_at.is_(None),
                    jobs.c.created_at >= since,
                    jobs.c.batch.is_(None),
                    jobs.c.job > after,
                )
                .order_by(jobs.c.job)
                .limit(limit)
            )
        )
    return sorted(found, key=lambda row: row.job)[:limit]


def settle_batch(connection: Connection, batch: str, now: datetime) -> bool:
    """End the batch if every packet has its job (or was cancelled) and every
    job has ended: FINISHING becomes DONE, CANCELLED gets its finish time, and
    the tenant's notification is queued. True when it ended here."""
    table = tables.batches
    row = connection.execute(select(table).where(table.c.batch == batch)).one()
    if (
        row.finished_at is not None
        or row.state not in ("FINISHING", "CANCELLED")
        or row.next_index < row.packet_count
        or row.terminal_count < row.dispatched_count
    ):
        return False
    state = "DONE" if row.state == "FINISHING" else "CANCELLED"
    connection.execute(
        update(table)
        .where(table.c.batch == batch)
        .values(state=state, finished_at=now, updated_at=now)
    )
    row = connection.execute(select(table).where(table.c.batch == batch)).one()
    packets = tables.batch_packets
    ended = connection.execute(
        select(packets.c.final_state, func.count())
        # Packets with a job: a packet cancelled before dispatch has none,
        # and its final state (UNDISPATCHED) is no job's state.
        .where(
            packets.c.batch == batch,
            packets.c.job.is_not(None),
            packets.c.final_state.is_not(None),
        )
        .group_by(packets.c.final_state)
    )
    counts = {state: count for state, count in ended}
    queue_notification(
        connection, tenant=row.tenant, subject=batch, document=batch_document(row, counts)
    )
    return True


def record_ends(connection: Connection, ended: Sequence[tuple[job_pb2.Job, Any]]) -> int:
    """Record each (audit's terminal job, its intake row) not yet recorded;
    how many were recorded by this call."""
    now = datetime.now(UTC)
    jobs, packets, batches = tables.jobs, tables.batch_packets, tables.batches
    touched: set[str] = set()
    recorded = 0
    for job, row in ended:
        claimed = connection.execute(
            update(jobs)
            .where(jobs.c.job == job.name, jobs.c.end_recorded_at.is_(None))
            .values(end_recorded_at=now, finished_at=func.coalesce(jobs.c.finished_at, now))
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            continue  # another poll or replica recorded it
        recorded += 1
        if row.batch:
            connection.execute(
                update(packets)
                .where(packets.c.batch == row.batch, packets.c.job == job.name)
                .values(
                    final_state=state_name(job.state),
                    reason_code=job.reason_code or None,
                    finished_at=now,
                )
            )
            connection.execute(
                update(batches)
                .where(batches.c.batch == row.batch)
                .values(terminal_count=batches.c.terminal_count + 1, updated_at=now)
            )
            touched.add(row.batch)
        view = job_pb2.Job()
        view.CopyFrom(job)
        view.bundle_id, view.batch = row.bundle_id or "", row.batch or ""
        queue_notification(
            connection, tenant=row.tenant, subject=job.name, document=job_status_document(view)
        )
    for batch in sorted(touched):
        settle_batch(connection, batch, now)
    return recorded


class EndTracker:
    """Polls audit for the ends of watched jobs and records them."""

    def __init__(
        self,
        database: Database,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        *,
        poll_seconds: float = 0.5,
        page: int = AUDIT_PAGE,
    ) -> None:
        self._db = database
        self._audit = audit
        self._poll_seconds = poll_seconds
        self._page = page
        self._after = ""
        """The last job name looked at; the next poll starts after it."""

    async def run_forever(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception as error:  # noqa: BLE001 - audit may be down; next round
                log.warning("end tracking failed (%s); will retry", type(error).__name__)
            await asyncio.sleep(self._poll_seconds)

    async def poll(self) -> int:
        """One page of watched jobs: ask audit, record the ended. How many were recorded."""
        after = self._after
        rows = await self._db.read(lambda s: _watched(s, after=after, limit=self._page))
        self._after = rows[-1].job if len(rows) == self._page else ""
        return await self.record(rows)

    async def record(self, rows: Sequence[Any]) -> int:
        """Ask audit about these intake rows and record the ones that ended."""
        if not rows:
            return 0
        known = await ask_audit(self._audit, [row.job for row in rows])
        ended = [(known[row.job], row) for row in rows if _ended(known.get(row.job))]
        if not ended:
            return 0
        return await self._db.run(lambda s: record_ends(s, ended))

    async def refresh_batch(self, batch: str) -> dict[str, job_pb2.Job]:
        """Record the ends of the batch's unrecorded children now (a cancel or
        a status read wants fresh counts); audit's view of those still running."""
        jobs = tables.jobs
        rows = await self._db.read(
            lambda s: list(
                s.execute(
                    select(*_COLUMNS).where(jobs.c.batch == batch, jobs.c.end_recorded_at.is_(None))
                )
            )
        )
        if not rows:
            return {}
        known = await ask_audit(self._audit, [row.job for row in rows])
        ended = [(known[row.job], row) for row in rows if _ended(known.get(row.job))]
        if ended:
            await self._db.run(lambda s: record_ends(s, ended))
        return {name: job for name, job in known.items() if not _ended(job)}
