"""Handing accepted jobs to the validate queue, and the sweep that finishes
any hand-off a crash interrupted."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, delete, select, update

from quire.admission import tables
from quire.database import Database
from quire.faults import fault_point
from quire.pipeline import STAGES
from quire.type import queue_pb2
from quire.workqueue import Publisher, event_subject

__all__ = ["Dispatcher"]

FIRST = STAGES[0].name
"""The stage every accepted job goes to first."""
log = logging.getLogger(__name__)
SWEEP_BATCH = 100


def undispatched(connection: Connection, cutoff: datetime) -> list[str]:
    """The oldest jobs accepted by ``cutoff`` and not yet marked dispatched."""
    table = tables.jobs
    rows = connection.execute(
        select(table.c.job)
        .where(table.c.dispatched_at.is_(None), table.c.created_at <= cutoff)
        .order_by(table.c.created_at)
        .limit(SWEEP_BATCH)
    )
    return [row.job for row in rows]


class Dispatcher:
    """Publishes committed jobs to the validate queue, and sweeps up (``sweep_forever``)
    those a crash left unpublished; republishing is harmless, the queue drops it."""

    def __init__(
        self,
        database: Database,
        publisher: Publisher,
        *,
        sweep_seconds: float = 5.0,
        idempotency: bool = False,
    ) -> None:
        self._db = database
        self._publisher = publisher
        self._sweep_seconds = sweep_seconds
        self._purge_keys = idempotency
        """Also forget idempotency keys past their window on each sweep."""
        self._published: set[str] = set()
        """Jobs handed on but not yet marked; marked in one batch by the sweep."""

    async def dispatch(self, job: str) -> None:
        """Publish the job's ACCEPTED event and validate task from its stored row."""
        table = tables.jobs
        row = await self._db.read(
            lambda s: s.execute(
                select(table.c.task, table.c.accepted_event).where(table.c.job == job)
            ).one()
        )
        await self.hand_on(row.task, row.accepted_event)

    async def hand_on(self, task_bytes: bytes, event_bytes: bytes) -> None:
        """Publish the ACCEPTED event and the validate task of a committed job.

        The job is marked dispatched later, in a batch; a crash before that only
        makes the sweep publish again, which the queue drops by ``Nats-Msg-Id``.
        """
        task = queue_pb2.JobTask.FromString(task_bytes)
        accepted = queue_pb2.TransitionEvent.FromString(event_bytes)
        # Both at once, the event's publish begun first. Should a stage's
        # step still reach audit before ACCEPTED, audit holds it until
        # ACCEPTED is recorded (``quire.audit.succession``); both are
        # acknowledged before the caller hears of the job, so nothing the
        # caller does next comes first.
        await asyncio.gather(
            self._publisher.publish(event_subject("admission"), accepted, accepted.event_id),
            self._publisher.publish_task(FIRST, task),
        )
        fault_point("admission.after_publish")
        self._published.add(task.job)

    async def mark_published(self) -> int:
        jobs, self._published = list(self._published), set()
        if jobs:
            now = datetime.now(UTC)
            table = tables.jobs
            await self._db.run(
                lambda s: s.execute(
                    update(table).where(table.c.job.in_(jobs)).values(dispatched_at=now)
                )
            )
        return len(jobs)

    async def sweep_forever(self) -> None:
        """Republish jobs left undispatched (a crash between commit and publish)."""
        while True:
            try:
                await self.mark_published()
                await self.sweep(older_than=timedelta(seconds=self._sweep_seconds))
                if self._purge_keys:
                    await self.purge_expired_keys()
            except Exception:  # noqa: BLE001 - NATS may be down; try again next round
                log.warning("dispatch sweep failed; will retry")
            await asyncio.sleep(self._sweep_seconds)

    async def sweep(self, *, older_than: timedelta) -> int:
        cutoff = datetime.now(UTC) - older_than
        await self.mark_published()
        jobs = await self._db.read(lambda s: undispatched(s, cutoff))
        dispatched = 0
        for job in jobs:
            try:
                await self.dispatch(job)
                dispatched += 1
            except Exception as error:  # noqa: BLE001 - one job's trouble must not block the rest
                log.warning("dispatch of %s failed (%s)", job, type(error).__name__)
        await self.mark_published()
        return dispatched

    async def purge_expired_keys(self) -> int:
        """Forget idempotency keys past their window (the jobs stay)."""
        keys = tables.idempotency_keys
        now = datetime.now(UTC)
        return await self._db.run(
            lambda s: len(
                s.execute(delete(keys).where(keys.c.expires_at <= now).returning(keys.c.job)).all()
            )
        )
