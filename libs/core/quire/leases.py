"""Per-job lease tokens: the fence that a JetStream ack-wait cannot provide.

Every delivery of a job's message increments the job's token in the stage's own
database. The stage's final write is a compare-and-swap on the token it was
given; a worker whose token was superseded commits nothing and publishes
nothing. The committed outcome is kept so that a redelivery after the commit
(a crash before the publish or the ack) republishes exactly the same messages.

Leases taken and outcomes committed while another is being written go
together, in one transaction and one fsync (``quire.groupcommit``); each
keeps its own compare-and-swap, so fencing stays per job, and one that
fails is rolled back alone while the others commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    bindparam,
    select,
    update,
)

from quire.database import Database, upsert_insert
from quire.driversql import DriverStatement
from quire.groupcommit import GroupCommit, Writes
from quire.type import queue_pb2

__all__ = ["Lease", "LeaseStore", "lease_table", "lease_key"]


def lease_key(job: str, generation: int = 0) -> str:
    """The lease row of a job's generation: a dead-letter retry starts afresh,
    while every delivery within a generation is fenced by the same row."""
    return f"{job}.g{generation}" if generation else job


def lease_table(metadata: MetaData) -> Table:
    return Table(
        "stage_leases",
        metadata,
        Column("job", String(64), primary_key=True),
        Column("token", Integer, nullable=False),
        Column("outcome", LargeBinary, nullable=True),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        # When the current delivery took its token (migration 0002; empty on
        # rows from before it): with ``updated_at`` at the commit, how long the
        # stage held the job, and how many jobs it held at once.
        Column("leased_at", DateTime(timezone=True), nullable=True),
    )


@dataclass(frozen=True)
class Lease:
    """This delivery's claim on a job."""

    job: str
    token: int
    committed: queue_pb2.StageOutcome | None
    """The outcome an earlier delivery already committed, if any."""


class LeaseStore:
    def __init__(self, database: Database, table: Table, *, writes: Writes | None = None) -> None:
        """``writes``: the group commit to share (a service whose other writes
        should go in the same transactions); its own otherwise."""
        self._db = database
        self._writes: Writes = writes or GroupCommit(database, name="leases")
        self._table = table
        # Built once: building a statement per call costs more than running it.
        self._takes: dict[str, DriverStatement] = {}
        self._commit = DriverStatement(
            update(table)
            .where(
                table.c.job == bindparam("b_job"),
                table.c.token == bindparam("b_token"),
                table.c.outcome.is_(None),
            )
            .values(outcome=bindparam("b_outcome"), updated_at=bindparam("b_now"))
            .returning(table.c.job)
        )

    def _take(self, dialect: str) -> DriverStatement:
        """The job's first token (1), or the next one: one upsert, built once
        per dialect."""
        statement = self._takes.get(dialect)
        if statement is None:
            table = self._table
            insert = upsert_insert(table, dialect).values(
                {name: bindparam(name) for name in ("job", "token", "updated_at", "leased_at")}
            )
            statement = insert.on_conflict_do_update(
                index_elements=[table.c.job],
                set_={
                    "token": table.c.token + 1,
                    "updated_at": insert.excluded.updated_at,
                    "leased_at": insert.excluded.leased_at,
                },
            ).returning(table.c.token, table.c.outcome)
            statement = DriverStatement(statement)
            self._takes[dialect] = statement
        return statement

    async def acquire(self, job: str) -> Lease:
        """Take a new token for ``job``, superseding every earlier delivery."""
        return await self._writes.run(lambda s: self.acquire_in(s, job))

    def acquire_in(self, connection: Connection, job: str) -> Lease:
        """``acquire`` inside the caller's transaction."""
        # One atomic statement, so concurrent deliveries always get distinct tokens.
        now = datetime.now(UTC)
        (row,) = self._take(connection.dialect.name).rows(
            connection, {"job": job, "token": 1, "updated_at": now, "leased_at": now}
        )
        committed = None
        if row.outcome is not None:
            committed = queue_pb2.StageOutcome.FromString(row.outcome)
        return Lease(job=job, token=row.token, committed=committed)

    async def complete(
        self,
        lease: Lease,
        outcome: queue_pb2.StageOutcome,
        record: Callable[[Connection], None] | None = None,
    ) -> bool:
        """Commit ``outcome`` (and ``record``'s writes) only if ``lease`` is still current."""
        return await self._writes.run(lambda s: self.complete_in(s, lease, outcome, record))

    def complete_in(
        self,
        connection: Connection,
        lease: Lease,
        outcome: queue_pb2.StageOutcome,
        record: Callable[[Connection], None] | None = None,
    ) -> bool:
        """``complete`` inside the caller's transaction."""
        result = self._commit.first(
            connection,
            {
                "b_job": lease.job,
                "b_token": lease.token,
                "b_outcome": outcome.SerializeToString(),
                "b_now": datetime.now(UTC),
            },
        )
        if result is None:
            return False
        if record is not None:
            record(connection)
        return True

    async def current_token(self, job: str) -> int | None:
        def read(connection: Connection) -> int | None:
            return connection.execute(
                select(self._table.c.token).where(self._table.c.job == job)
            ).scalar_one_or_none()

        return await self._db.read(read)
