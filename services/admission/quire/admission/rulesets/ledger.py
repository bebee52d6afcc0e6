"""Promotions of a ruleset's current version, taken to audit's ledger.

``quire.admission.rulesets.currents`` writes each promotion as a row of
``ruleset_changes`` in the promotion's transaction. ``record_pending`` asks
audit to record every row it has not yet acknowledged
(``RecordRulesetChange``: audit appends each change once, however often it
is asked), then marks the row. It runs right after a promotion, and every
few seconds in ``run_forever``, which also adopts the names the catalog
shows for the first time; so a crash or an unreachable audit between the
promotion and its record is made good by any admission replica.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy import Connection, select, update

from quire.admission import tables
from quire.admission.rulesets.catalog import RulesetCatalog
from quire.admission.rulesets.currents import CurrentRulesets
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.database import Database, as_utc
from quire.errors import TransientError
from quire.jobs import timestamp
from quire.type import queue_pb2

__all__ = ["RulesetLedger"]

log = logging.getLogger(__name__)
PROMOTED = "PROMOTED"
"""``RulesetChange.cause`` of a promoted rollout's candidate ruleset."""
OPERATOR = "operator"
"""The actor's service on an operator's decision, as on other operator entries."""
EVERY_SECONDS = 5.0
TIMEOUT_SECONDS = 5.0
BATCH = 100
"""Changes recorded per pass (a handful a year in practice)."""

_PENDING = (
    select(tables.ruleset_changes)
    .where(tables.ruleset_changes.c.recorded_at.is_(None))
    .order_by(tables.ruleset_changes.c.id)
    .limit(BATCH)
)


def _request(row: Any) -> audit_service_pb2.RecordRulesetChangeRequest:
    return audit_service_pb2.RecordRulesetChangeRequest(
        change=queue_pb2.RulesetChange(
            name=row.name,
            previous_version=row.previous_version,
            current_version=row.current_version,
            cause=PROMOTED,
            rollout=row.rollout,
        ),
        change_time=timestamp(as_utc(row.changed_at)),
        actor=queue_pb2.Actor(
            service=OPERATOR, instance=row.operator, build_version=row.build_version
        ),
    )


def _mark(connection: Connection, *, change: int) -> None:
    table = tables.ruleset_changes
    connection.execute(
        update(table).where(table.c.id == change).values(recorded_at=datetime.now(UTC))
    )


class RulesetLedger:
    """Takes each recorded promotion to audit until audit has it; any replica
    finishes what another began."""

    def __init__(
        self,
        database: Database,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        *,
        catalog: RulesetCatalog,
        currents: CurrentRulesets,
    ) -> None:
        self._db = database
        self._audit = audit
        self._catalog = catalog
        self._currents = currents
        self._lock = asyncio.Lock()

    async def record_pending(self) -> int:
        """Record every change audit has not acknowledged yet, oldest first;
        how many were recorded. Stops at the first that fails (its row stays
        pending, and the order is kept)."""
        async with self._lock:
            rows = await self._db.read(lambda s: s.execute(_PENDING).all())
            for row in rows:
                reply = await self._audit.RecordRulesetChange(
                    _request(row), timeout=TIMEOUT_SECONDS
                )
                await self._db.run(partial(_mark, change=row.id))
                log.info(
                    "ruleset change recorded",
                    extra={"ruleset": row.current_version, "event": reply.event_id},
                )
            return len(rows)

    async def run_forever(self, every: float = EVERY_SECONDS) -> None:
        """Adopt the catalog's new names, then record what is pending; again
        every ``every`` seconds."""
        while True:
            try:
                await self._currents.versions(await self._catalog.keys())
            except TransientError:
                pass  # the validator is not serving yet: next time (intake adopts first anyway)
            except Exception as error:  # noqa: BLE001 - the database away: next time
                log.warning("ruleset names not yet adopted (%s)", type(error).__name__)
            try:
                await self.record_pending()
            except Exception as error:  # noqa: BLE001 - audit or the database away: next time
                log.warning("ruleset changes not yet recorded (%s)", type(error).__name__)
            await asyncio.sleep(every)
