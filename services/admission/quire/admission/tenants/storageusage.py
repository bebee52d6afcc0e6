"""Recounting each tenant's stored upload bytes from its sources.

``tenant_usage`` moves with every source admission adds or forgets
(``storagepolicy.count_stored``), so the quota check at upload reads one row.
A previous release's replica, still running during a rolling upgrade, adds
and forgets sources without moving it. So admission recounts every tenant
from ``sources`` when it starts and then hourly: each tenant in its own
transaction, under its usage row's lock, so that an upload counted meanwhile
is neither lost nor counted twice.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from sqlalchemy import Connection, select, update

from quire.admission import tables
from quire.admission.tenants.storagepolicy import summed_bytes
from quire.database import Database, insert_if_absent

__all__ = ["UsageRecount", "RECOUNT_SECONDS"]

RECOUNT_SECONDS = 3600.0

log = logging.getLogger(__name__)


def _recount(connection: Connection, *, tenant: str) -> bool:
    """Set ``tenant``'s stored bytes to the sum of its sources; True if they differed."""
    usage = tables.tenant_usage
    insert_if_absent(connection, usage, {"tenant": tenant, "stored_bytes": 0})
    held = connection.execute(
        select(usage.c.stored_bytes).where(usage.c.tenant == tenant).with_for_update()
    ).scalar_one()
    summed = summed_bytes(connection, tenant)
    if held == summed:
        return False
    connection.execute(update(usage).where(usage.c.tenant == tenant).values(stored_bytes=summed))
    return True


class UsageRecount:
    """Recounts every tenant's stored bytes from its sources: at start, then every
    ``interval_seconds`` (``run_forever``)."""

    def __init__(self, database: Database, *, interval_seconds: float = RECOUNT_SECONDS) -> None:
        self._db = database
        self._interval = interval_seconds

    async def recount(self) -> int:
        """Recount every tenant; how many had drifted."""
        tenants = await self._db.read(
            lambda s: list(s.execute(select(tables.tenants.c.id)).scalars())
        )
        drifted = 0
        for tenant in tenants:
            if await self._db.run(partial(_recount, tenant=tenant)):
                drifted += 1
        return drifted

    async def run_forever(self) -> None:
        while True:
            try:
                drifted = await self.recount()
                if drifted:
                    log.warning("stored bytes of %d tenants recounted from their sources", drifted)
            except Exception as error:  # noqa: BLE001 - the next round tries again
                log.warning("storage usage recount failed (%s)", type(error).__name__)
            await asyncio.sleep(self._interval)
