"""Which admission replica dispatches batches: one lease row in admission's
own database, taken and renewed by a compare-and-set.

A replica holds the lease while its ``expires_at`` is ahead; it renews it on
every tick, and checks it again inside each page's transaction, so a replica
that stalled past its lease (and was replaced) commits no page after that.
Exactly-once child creation does not rest on the lease — each page re-reads
the batch's ``next_index`` under the batch row's lock — the lease keeps one
dispatcher's window, rate and fair-share bookkeeping the only one in force.

Expiry is judged on the database's clock (``quire.database.database_now``:
PostgreSQL's ``now()``), never on a replica's own: a replica whose clock runs
minutes ahead would otherwise take a live lease, and one that runs behind
would keep dispatching past its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, or_, select, update

from quire.admission import tables
from quire.database import as_utc, database_now, insert_if_absent

__all__ = ["DispatchLease"]

DUTY = "batches"


@dataclass(frozen=True)
class DispatchLease:
    """This process's claim on the batch dispatch lease: ``take`` it each tick,
    check it with ``holds`` inside each page's transaction."""

    holder: str
    """This process: unique per start, so a restarted replica is a new holder."""
    seconds: float
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)
    """This process's clock, used only where the database has none (SQLite)."""

    def take(self, connection: Connection) -> bool:
        """Take or renew the lease; False while another holder's is live."""
        table = tables.dispatch_lease
        now = database_now(connection, self.clock)
        expires = now + timedelta(seconds=self.seconds)
        row = {"duty": DUTY, "holder": self.holder, "expires_at": expires}
        if insert_if_absent(connection, table, row):
            return True
        taken = connection.execute(
            update(table)
            .where(
                table.c.duty == DUTY,
                or_(table.c.holder == self.holder, table.c.expires_at <= now),
            )
            .values(holder=self.holder, expires_at=expires)
        )
        return bool(taken.rowcount == 1)  # type: ignore[attr-defined]

    def holds(self, connection: Connection) -> bool:
        """Whether this process holds a live lease, read in the caller's transaction."""
        table = tables.dispatch_lease
        row = connection.execute(select(table).where(table.c.duty == DUTY)).first()
        return (
            row is not None
            and row.holder == self.holder
            and as_utc(row.expires_at) > database_now(connection, self.clock)
        )

    def release(self, connection: Connection) -> None:
        """On drain: let another replica take over at once."""
        table = tables.dispatch_lease
        connection.execute(
            update(table)
            .where(table.c.duty == DUTY, table.c.holder == self.holder)
            .values(expires_at=database_now(connection, self.clock))
        )
