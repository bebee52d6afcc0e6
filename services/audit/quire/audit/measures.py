"""What audit measures: jobs ending (completed, rejected, failed), how far the
ledger lags the services' events, and the dead letters waiting for an
operator (counted from the dead-letter book at an interval, off the hot path)."""

from __future__ import annotations

import asyncio
import logging
import time

from sqlalchemy import Connection, func, select

from quire.audit import tables
from quire.database import Database
from quire.metrics import ServiceMetrics
from quire.pipeline import STAGES, State
from quire.type import queue_pb2

__all__ = ["AuditMeasures"]

log = logging.getLogger(__name__)

_REJECTED = State.REJECTED.number
_FAILED = State.FAILED.number


class AuditMeasures:
    """Audit's metrics: jobs ending, ledger lag, refused events and checkpoints,
    and the dead letters waiting."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._completed = metrics.counter("quire_jobs_completed_total")
        self._rejected = metrics.counter("quire_jobs_rejected_total")
        self._failed = metrics.counter("quire_jobs_failed_total")
        self._lag = metrics.histogram("quire_audit_lag_seconds")
        self._dead = metrics.gauge("quire_dead_letters")
        self._refused = metrics.counter("quire_audit_events_refused_total")
        self._checkpoints_refused = metrics.counter("quire_audit_checkpoints_refused_total")
        for priority in ("interactive", "batch"):
            self._completed.labels(**{"class": priority})
        for stage in STAGES:
            self._dead.labels(stage=stage.name).set(0)

    def completed(self, priority: str) -> None:
        self._completed.labels(**{"class": priority or "interactive"}).inc()

    def checkpoint_refused(self) -> None:
        """A tenant's ledger no longer extends its last checkpoint: nothing signed."""
        self._checkpoints_refused.inc()

    def refused(self, kind: str) -> None:
        """An event kept out of the ledger as a finding (``quire.audit.succession``)."""
        self._refused.labels(kind=kind).inc()

    def recorded(self, event: queue_pb2.TransitionEvent, *, lagged: bool = True) -> None:
        """A new ledger entry: its lag behind the event (``lagged``: not for an
        earlier event of a batch, which waited for its commit's last one, not
        for audit), and how the job ended."""
        if lagged and event.HasField("occur_time"):
            lag = time.time() - event.occur_time.ToNanoseconds() / 1e9
            self._lag.labels(producer=event.actor.service or "unknown").observe(max(0.0, lag))
        if event.to_state == _REJECTED:
            self._rejected.labels(reason=event.reason_code or "UNKNOWN").inc()
        elif event.to_state == _FAILED:
            self._failed.labels(reason=event.reason_code or "UNKNOWN").inc()

    async def count_dead_letters(self, database: Database) -> None:
        def read(connection: Connection) -> list[tuple[str, int]]:
            query = (
                select(tables.dead_letters.c.stage, func.count())
                .where(tables.dead_letters.c.status == "dead")
                .group_by(tables.dead_letters.c.stage)
            )
            return [(stage, count) for stage, count in connection.execute(query)]

        counts = dict(await database.read(read))
        for stage in STAGES:
            self._dead.labels(stage=stage.name).set(counts.get(stage.name, 0))

    async def count_dead_letters_forever(self, database: Database, interval: float = 15.0) -> None:
        while True:
            try:
                await self.count_dead_letters(database)
            except Exception as error:  # noqa: BLE001 - database busy: the last count stands
                log.debug("dead letters not counted (%s)", type(error).__name__)
            await asyncio.sleep(interval)
