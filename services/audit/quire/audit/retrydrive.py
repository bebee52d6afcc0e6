"""Re-driving operators' retries whose messages were lost.

Admission's reconciler re-drives a stalled job from its first task; a job in
a later generation (``quire dlq retry``) started from the task audit's
dead-letter desk published, which only audit keeps. So audit watches its own
retries: a retried job that sits in one non-terminal state longer than that
state's budget gets its retry task published again, under a numbered re-drive
(fresh ``Nats-Msg-Id``s all the way down, see ``quire.stage``). Stages that
already committed that generation republish what they committed; nothing is
done twice. The task carries the deadline the retry's ledger entry recorded
(a new budget's, ``quire.audit.retrybudget``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, select, update

from quire.audit import tables
from quire.audit.retrybudget import hold_to_retry_entry
from quire.database import Database, as_utc, insert_if_absent
from quire.jobs import PARKED_STATES, TERMINAL_STATES
from quire.settings import ReconcileSettings
from quire.type import queue_pb2
from quire.workqueue import Publisher

__all__ = ["RetryRedriver"]

log = logging.getLogger(__name__)
BATCH = 500


class RetryRedriver:
    """Publishes again the task of an operator's retry that stalled past its
    state's budget, under a new re-drive number; one pass per interval."""

    def __init__(
        self, *, database: Database, publisher: Publisher, settings: ReconcileSettings
    ) -> None:
        self._db = database
        self._publisher = publisher
        self._settings = settings

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval_seconds)
            try:
                count = await self.redrive_stalled()
            except Exception as error:  # noqa: BLE001 - database or NATS away; next pass
                log.warning("retry re-drive pass failed (%s)", type(error).__name__)
                continue
            if count:
                log.warning("re-drove %d stalled dead-letter retr(y/ies)", count)

    async def redrive_stalled(self) -> int:
        now = datetime.now(UTC)
        rows = await self._db.read(_retried_and_open)
        count = 0
        for row in rows:
            since = max(as_utc(row.updated_at), as_utc(row.last_at or row.updated_at))
            if now - since <= timedelta(seconds=self._settings.budget(row.state)):
                continue
            generation = row.generation + 1
            number = await self._db.run(
                lambda s, job=row.job, g=generation: _count(s, job, g, now)  # type: ignore[misc]
            )
            task = queue_pb2.JobTask.FromString(row.task)
            task.generation = generation
            task.redrive = number
            # The retry entry's deadline (a new budget's), not the failed task's.
            await self._db.read(lambda s, t=task: hold_to_retry_entry(s, t))  # type: ignore[misc]
            await self._publisher.publish_task(row.stage, task, number)
            count += 1
        return count


def _retried_and_open(connection: Connection) -> list[Any]:
    letters, jobs, drives = tables.dead_letters, tables.jobs, tables.retry_redrives
    return list(
        connection.execute(
            select(
                letters.c.job,
                letters.c.stage,
                letters.c.generation,
                letters.c.task,
                jobs.c.state,
                jobs.c.updated_at,
                drives.c.last_at,
            )
            .join(jobs, jobs.c.job == letters.c.job)
            .outerjoin(
                drives,
                (drives.c.job == letters.c.job) & (drives.c.generation == letters.c.generation + 1),
            )
            .where(
                letters.c.status == "retried",
                jobs.c.state.not_in([*TERMINAL_STATES, *PARKED_STATES]),
            )
            .limit(BATCH)
        ).all()
    )


def _count(connection: Connection, job: str, generation: int, now: datetime) -> int:
    table = tables.retry_redrives
    values = {"job": job, "generation": generation, "count": 1, "last_at": now}
    if insert_if_absent(connection, table, values):
        return 1
    row = connection.execute(
        select(table.c.generation, table.c.count).where(table.c.job == job)
    ).one()
    count = int(row[1]) + 1 if row[0] == generation else 1
    connection.execute(
        update(table)
        .where(table.c.job == job)
        .values(generation=generation, count=count, last_at=now)
    )
    return int(count)
