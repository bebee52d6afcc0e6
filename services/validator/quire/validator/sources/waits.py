"""The source systems a job waits for (``tables.source_waits``): what a
client sees in the job's status while the validator has deferred it.

A deferral (``SourceDeferred``) is not a state transition and is never put
in the ledger: the job stays VALIDATING. So that its status still says why,
each deferral writes, in one small transaction, a row per system the job
was deferred for — the system's circuit breaker then ("open", "half-open"
or "closed" when this delivery's tries were spent), when the job's task
comes back (the deferral's delay from now) and since when the job has
waited for that system (kept across deferrals) — and drops the rows of the
job's systems it no longer waits for. Once the job's sources are all pinned,
or the job ends at this stage (rejected, failed), its rows are deleted.
Admission asks for them (``ListSourceWaits``) only for jobs still ACCEPTED
or VALIDATING that have a deadline, so rows of a job that ended elsewhere
(cancelled while waiting) are never shown; a deferral write now and then
(at most every ``sweep_every`` seconds per process) also deletes rows not
updated for ``keep`` seconds, so they do not pile up.

Only jobs naming sources by reference ever touch the table; the rows hold
ids, system ids, states and times, never content.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, bindparam, delete, select, update

from quire.database import Database, as_utc, insert_if_absent
from quire.jobs import timestamp
from quire.reasons import ReasonCode
from quire.type import job_pb2
from quire.validator import tables
from quire.validator.sources.breakers import BreakerState

__all__ = ["BREAKER_NAMES", "SourceWait", "SourceWaits"]

BREAKER_NAMES = {
    BreakerState.CLOSED: "closed",
    BreakerState.HALF_OPEN: "half-open",
    BreakerState.OPEN: "open",
}
"""``SourceWait.breaker``'s values, as ``quire top`` names the states."""

KEEP_SECONDS = 24 * 3600.0
"""Rows not updated for this long belong to jobs that ended elsewhere."""
SWEEP_EVERY_SECONDS = 3600.0

_columns = tables.source_waits.c
_WAITS_OF_JOB = (
    select(tables.source_waits).where(_columns.job == bindparam("job")).order_by(_columns.system)
)
_UPDATE = (
    update(tables.source_waits)
    .where(_columns.job == bindparam("w_job"), _columns.system == bindparam("w_system"))
    .values(
        breaker=bindparam("breaker"),
        retry_at=bindparam("retry_at"),
        updated_at=bindparam("updated_at"),
    )
)
_CLEAR = delete(tables.source_waits).where(_columns.job == bindparam("job"))
"""Built once."""


@dataclass(frozen=True)
class SourceWait:
    """One source system a deferred job waits for, as its status shows it."""

    system: str
    breaker: str
    retry_at: datetime
    since: datetime

    def message(self) -> job_pb2.SourceWait:
        return job_pb2.SourceWait(
            system=self.system,
            breaker=self.breaker,
            retry_time=timestamp(self.retry_at),
            reason_code=ReasonCode.SOURCE_UNAVAILABLE,
            since=timestamp(self.since),
        )


class SourceWaits:
    """The source systems deferred jobs wait for, one row per job and system,
    kept while the job waits and deleted once it no longer does."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Callable[[], float] = time.time,
        keep_seconds: float = KEEP_SECONDS,
        sweep_every_seconds: float = SWEEP_EVERY_SECONDS,
    ) -> None:
        self._database = database
        self._clock = clock
        self._keep = keep_seconds
        self._sweep_every = sweep_every_seconds
        self._swept_at = float("-inf")

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    async def deferred(
        self, job: str, breakers: Mapping[str, BreakerState], retry_after: float
    ) -> None:
        """``job`` was deferred for ``breakers``' systems (each with its
        breaker's state); its task comes back in ``retry_after`` seconds.
        Rows of the job's other systems are dropped: it waits for these."""
        now = self._now()
        retry_at = now + timedelta(seconds=max(0.0, retry_after))
        sweep = self._clock() - self._swept_at >= self._sweep_every
        if sweep:
            self._swept_at = self._clock()

        def write(connection: Connection) -> None:
            connection.execute(
                delete(tables.source_waits).where(
                    _columns.job == job, _columns.system.not_in(sorted(breakers))
                )
            )
            for system, state in sorted(breakers.items()):
                values = {
                    "job": job,
                    "system": system,
                    "breaker": BREAKER_NAMES[state],
                    "retry_at": retry_at,
                    "since": now,
                    "updated_at": now,
                }
                if not insert_if_absent(connection, tables.source_waits, values):
                    connection.execute(
                        _UPDATE,
                        {
                            "w_job": job,
                            "w_system": system,
                            "breaker": values["breaker"],
                            "retry_at": retry_at,
                            "updated_at": now,
                        },
                    )
            if sweep:
                stale = now - timedelta(seconds=self._keep)
                connection.execute(delete(tables.source_waits).where(_columns.updated_at < stale))

        await self._database.run(write)

    async def cleared(self, job: str) -> None:
        """``job`` waits for no system any more."""
        await self._database.run(lambda connection: connection.execute(_CLEAR, {"job": job}))

    async def of(self, job: str) -> list[SourceWait]:
        """What ``job`` waits for, by system id; empty for none."""
        rows = await self._database.read(
            lambda connection: connection.execute(_WAITS_OF_JOB, {"job": job}).all()
        )
        return [
            SourceWait(
                system=row.system,
                breaker=row.breaker,
                retry_at=as_utc(row.retry_at),
                since=as_utc(row.since),
            )
            for row in rows
        ]
