"""Diagnostics: the original text of a stage's errors, kept a few days for operators.

When a delivery fails (the job ends FAILED, or the delivery is left to be
retried because of an error), the stage runner keeps one row here, in the
stage's own database: the job, stage, process, build, attempt, the stable
reason code the job's status and the ledger carry, and the exception's type
and text (scrubbed and capped: ``quire.diagnosticstext``). The ledger and the
job's status never see the text.

A row is served until its ``expire_time`` (``DiagnosticsSettings``'s
retention after it was kept) and deleted by a sweep each stage process runs
at most every ``sweep_seconds``; an expired row is never served, swept or
not. Every read (``DiagnosticsService.ListDiagnostics``, operators only) is
recorded before the reply: who read which job's diagnostics, and when. A
job's reads are deleted once it has no diagnostics left and they are older
than the retention.

Keeping is best effort: a failed write is logged by its type only and never
changes the delivery's outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
)

from quire.database import Database, as_utc
from quire.diagnosticstext import MAX_MESSAGE, text_of, type_of
from quire.settings import DiagnosticsSettings

__all__ = [
    "DiagnosticTables",
    "Diagnostic",
    "DiagnosticRead",
    "Reading",
    "DiagnosticsStore",
    "diagnostic_tables",
]

log = logging.getLogger(__name__)

MAX_LISTED = 1000
"""Diagnostics one read returns (oldest first): a job fails at most
QUIRE_MAX_DELIVER times per generation, so this is never reached in practice."""
MAX_READS_LISTED = 10_000
"""Most recent reads one read returns (oldest first)."""
KEEP_TIMEOUT_SECONDS = 10.0
"""A delivery waits this long at most for its diagnostic to be written."""


@dataclass(frozen=True)
class DiagnosticTables:
    diagnostics: Table
    reads: Table

    @classmethod
    def of(cls, metadata: MetaData) -> DiagnosticTables:
        """The tables ``diagnostic_tables`` declared in ``metadata``."""
        return cls(metadata.tables["diagnostics"], metadata.tables["diagnostic_reads"])


def diagnostic_tables(metadata: MetaData) -> DiagnosticTables:
    """Declare the two tables in a stage's ``metadata``."""
    diagnostics = Table(
        "diagnostics",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job", String(64), nullable=False),
        Column("stage", String(32), nullable=False),
        Column("instance", String(128), nullable=False),
        Column("build_version", String(64), nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("reason_code", String(64), nullable=False),
        Column("error_type", String(200), nullable=False),
        Column("message", Text, nullable=False),
        Column("create_time", DateTime(timezone=True), nullable=False),
        Column("expire_time", DateTime(timezone=True), nullable=False),
        Index("ix_diagnostics_job", "job", "create_time"),
        Index("ix_diagnostics_expire", "expire_time"),
    )
    reads = Table(
        "diagnostic_reads",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job", String(64), nullable=False),
        Column("reader", String(256), nullable=False),
        Column("read_at", DateTime(timezone=True), nullable=False),
        Index("ix_diagnostic_reads_job", "job", "read_at"),
    )
    return DiagnosticTables(diagnostics, reads)


@dataclass(frozen=True)
class Diagnostic:
    job: str
    stage: str
    instance: str
    build_version: str
    attempt: int
    reason_code: str
    error_type: str
    message: str
    create_time: datetime
    expire_time: datetime


@dataclass(frozen=True)
class DiagnosticRead:
    reader: str
    read_at: datetime


@dataclass(frozen=True)
class Reading:
    """One read: the job's unexpired diagnostics and every recorded read, this one included."""

    diagnostics: tuple[Diagnostic, ...]
    reads: tuple[DiagnosticRead, ...]


def _now() -> datetime:
    return datetime.now(UTC)


class DiagnosticsStore:
    """One stage process's diagnostics: kept by its runner, read by operators."""

    def __init__(
        self,
        database: Database,
        tables: DiagnosticTables,
        *,
        stage: str,
        instance: str,
        build_version: str,
        settings: DiagnosticsSettings,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._db = database
        self._t = tables
        self._stage = stage
        self._instance = instance[:128]
        self._build = build_version[:64]
        self._settings = settings
        self._retention = timedelta(days=settings.retention_days)
        self._clock = clock
        self._sweeper: asyncio.Task[None] | None = None

    async def keep(self, job: str, attempt: int, reason: str, error: BaseException) -> None:
        """Keep what ``error`` says about this delivery of ``job``; never raises."""
        try:
            row = self._row(job, attempt, reason, error)
            async with asyncio.timeout(KEEP_TIMEOUT_SECONDS):  # not wait_for: see sandbox
                await self._db.run(lambda s: s.execute(insert(self._t.diagnostics).values(**row)))
        except Exception as failure:  # noqa: BLE001 - best effort, by design
            log.warning("diagnostic for job %s not kept: %s", job, type(failure).__name__)

    def _row(self, job: str, attempt: int, reason: str, error: BaseException) -> dict[str, object]:
        now = self._clock()
        return {
            "job": job,
            "stage": self._stage,
            "instance": self._instance,
            "build_version": self._build,
            "attempt": attempt,
            "reason_code": str(reason)[:64],
            "error_type": type_of(error),
            "message": text_of(error)[:MAX_MESSAGE],
            "create_time": now,
            "expire_time": now + self._retention,
        }

    async def read(self, job: str, *, reader: str) -> Reading:
        """Record that ``reader`` reads ``job``'s diagnostics, then what it reads."""
        return await self._db.run(lambda s: self._read(s, job, reader[:256]))

    def _read(self, connection: Connection, job: str, reader: str) -> Reading:
        now = self._clock()
        d, r = self._t.diagnostics, self._t.reads
        rows = connection.execute(
            select(d)
            .where(d.c.job == job, d.c.expire_time > now)
            .order_by(d.c.create_time, d.c.id)
            .limit(MAX_LISTED)
        ).all()
        connection.execute(insert(r).values(job=job, reader=reader, read_at=now))
        reads = connection.execute(
            select(r.c.reader, r.c.read_at)
            .where(r.c.job == job)
            .order_by(r.c.id.desc())
            .limit(MAX_READS_LISTED)
        ).all()
        return Reading(
            diagnostics=tuple(
                Diagnostic(
                    job=row.job,
                    stage=row.stage,
                    instance=row.instance,
                    build_version=row.build_version,
                    attempt=row.attempt,
                    reason_code=row.reason_code,
                    error_type=row.error_type,
                    message=row.message,
                    create_time=as_utc(row.create_time),
                    expire_time=as_utc(row.expire_time),
                )
                for row in rows
            ),
            reads=tuple(
                DiagnosticRead(reader=row.reader, read_at=as_utc(row.read_at))
                for row in reversed(reads)
            ),
        )

    async def sweep(self) -> int:
        """Delete expired diagnostics, and the reads of jobs left without any
        once they are older than the retention; how many diagnostics went."""
        return await self._db.run(self._sweep)

    def _sweep(self, connection: Connection) -> int:
        now = self._clock()
        d, r = self._t.diagnostics, self._t.reads
        deleted = connection.execute(delete(d).where(d.c.expire_time <= now))
        gone = deleted.rowcount or 0  # type: ignore[attr-defined]
        connection.execute(
            delete(r).where(
                r.c.read_at <= now - self._retention,
                r.c.job.not_in(select(d.c.job).distinct()),
            )
        )
        return int(gone)

    def start(self) -> None:
        """Sweep now, then every ``sweep_seconds``, until ``stop``."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="diagnostics-sweep")

    async def stop(self) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception as failure:  # noqa: BLE001 - the next sweep tries again
                log.warning("diagnostics sweep failed: %s", type(failure).__name__)
            await asyncio.sleep(self._settings.sweep_seconds)
