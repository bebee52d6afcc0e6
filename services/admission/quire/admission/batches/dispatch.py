"""The batch dispatcher: turns batch packets into jobs, in pages, at a
bounded rate, in the tenants' weighted fair shares.

Each tick, on the one replica holding the dispatch lease:

1. the window: batch children in flight (created and not yet known ended,
   ``dispatched_count - terminal_count`` over unfinished batches) may not
   exceed ``BatchSettings.window``, all tenants together, or the smaller
   ``shared_window`` while interactive work waits or runs at any stage
   (``InteractivePresence``): the capacity batch work leaves to it;
2. the batch class's queue: while its oldest ready message is older than the
   queue-age budget, nothing is created (deferred, never failed);
3. tenants with DISPATCHING batches take turns by deficit round robin
   (``fairshare``), a quantum proportional to ``tenants.scheduling_weight``;
   within a tenant, its oldest batch first; a tenant at its outstanding-job
   quota is skipped this tick;
4. a token bucket caps children per second.

A page is one transaction: the batch row is locked and re-read (a cancel
that committed first leaves it CANCELLED, and the page creates nothing), each
child is made through intake's own insert under the deterministic request id
``batch:{batch}:{index}`` and recorded on its packet, and ``next_index`` and
``dispatched_count`` advance. A crash before the commit creates none of the
page's children; after it, all of them, and the dispatch sweep publishes any
the crash kept from the queue (``Nats-Msg-Id`` drops a second publish).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select, update

from quire.admission import tables
from quire.admission.batches.dispatchlease import DispatchLease
from quire.admission.batches.fairshare import DeficitRoundRobin, TokenBucket
from quire.admission.jobs.dispatch import Dispatcher
from quire.admission.jobs.intake import CHILD_KEY_PREFIX, Intake
from quire.admission.jobs.outstanding import OutstandingJobs, count_outstanding
from quire.admission.settings import AdmissionSettings, BatchSettings
from quire.admission.v1 import admission_service_pb2 as pb
from quire.database import Database
from quire.errors import QuireError
from quire.metrics import ServiceMetrics
from quire.type import job_pb2
from quire.workqueue.backlog import QueueAgeProbe
from quire.workqueue.interactive import InteractivePresence

__all__ = ["BatchDispatcher", "child_request_id"]

log = logging.getLogger(__name__)
QUOTA_REFRESH_SECONDS = 2.0
"""How often a tenant deferred at its quota asks audit which of its jobs ended."""


class _DispatchMeter:
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.created = metrics.counter("quire_batch_children_created_total")
        self.deferrals = metrics.counter("quire_batch_deferrals_total")
        self._in_flight = metrics.gauge("quire_batch_in_flight")
        self._window = metrics.gauge("quire_batch_window")

    def in_flight(self, count: int) -> None:
        """Read from the batches' rows every tick, whether or not anything is
        left to dispatch: children end (complete, fail, are cancelled) after
        their batch has dispatched its last page."""
        self._in_flight.set(count)

    def window(self, window: int) -> None:
        self._window.set(window)


def child_request_id(batch: str, index: int) -> str:
    """The request id (idempotency key) of a packet's job: one per packet, ever."""
    return f"{CHILD_KEY_PREFIX}{batch.removeprefix('batches/')}:{index}"


@dataclass(frozen=True)
class _Plan:
    in_flight: int
    weights: dict[str, int]
    """Tenants with DISPATCHING batches and their scheduling weights."""
    quotas: dict[str, int]


@dataclass
class _Page:
    handoffs: list[tuple[bytes, bytes]] = field(default_factory=list)
    over_quota: bool = False


class BatchDispatcher:
    """Turns batch packets into jobs, a page at a time (``run_forever``), only
    while this replica holds the dispatch lease; ``release`` on drain."""

    def __init__(
        self,
        database: Database,
        intake: Intake,
        dispatcher: Dispatcher,
        settings: BatchSettings,
        admission: AdmissionSettings,
        *,
        lease: DispatchLease,
        backlog: QueueAgeProbe | None = None,
        outstanding: OutstandingJobs | None = None,
        interactive: InteractivePresence | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._meter = _DispatchMeter(metrics) if metrics is not None else None
        self._db = database
        self._interactive = interactive
        self._intake = intake
        self._dispatcher = dispatcher
        self._settings = settings
        self._admission = admission
        self._lease = lease
        self._backlog = backlog
        self._outstanding = outstanding
        self._fair = DeficitRoundRobin(settings.page_size)
        self._bucket = TokenBucket(settings.rate, burst=settings.page_size)
        self._refreshed: dict[str, float] = {}
        self._renew_at = 0.0
        """When to renew the lease (monotonic); 0 when not held."""

    async def run_forever(self) -> None:
        while True:
            try:
                created = await self.tick()
            except Exception as error:  # noqa: BLE001 - the database or NATS may be down
                log.warning("batch dispatch failed (%s); will retry", type(error).__name__)
                created = 0
            pause = self._bucket.wait_seconds() if created else self._settings.tick_seconds
            await asyncio.sleep(max(pause, 0.01))

    async def release(self) -> None:
        self._renew_at = 0.0
        await self._db.run(self._lease.release)

    async def _holds_lease(self) -> bool:
        """Take the lease, or renew it once a third of it has run: a write every
        few seconds, not every tick. Each page re-checks it in its own
        transaction, so a lease lost meanwhile commits nothing."""
        if time.monotonic() < self._renew_at:
            return True
        taken = await self._db.run(self._lease.take)
        self._renew_at = time.monotonic() + self._settings.lease_seconds / 3 if taken else 0.0
        return bool(taken)

    async def tick(self) -> int:
        """One round of the tenants; how many children it created."""
        plan = await self._db.read(lambda s: _plan(s, self._admission))
        if self._meter is not None:
            self._meter.in_flight(plan.in_flight)
        if not plan.weights:
            return 0  # nothing to dispatch: no lease write, no queue reads
        if not await self._holds_lease():
            return 0
        window = await self._window()
        free = window - plan.in_flight
        if self._meter is not None:
            self._meter.window(window)
        if free <= 0:
            self._defer("window")
            return 0
        if await self._queue_behind():
            self._defer("queue_age")
            return 0
        created = 0
        for tenant in self._fair.order(plan.weights):
            limit = min(free, self._bucket.available(), self._settings.page_size)
            if limit <= 0:
                if free > 0:
                    self._defer("rate")
                break  # the round resumes here next tick
            granted = self._fair.grant(tenant, plan.weights)
            allowed = min(granted, limit)
            try:
                page = await self._page_for(tenant, allowed, plan.quotas[tenant])
            except QuireError as error:  # this tenant's trouble holds up no other tenant
                log.warning("batch page refused (%s)", error.reason.value, extra={"tenant": tenant})
                self._fair.forfeit(tenant)
                continue
            if page.over_quota:
                self._defer("quota")
                self._fair.forfeit(tenant)
                await self._refresh_quota(tenant, plan.quotas[tenant])
                continue
            count = len(page.handoffs)
            self._intake.count_accepted("batch", count)  # committed: the page's new jobs
            cut_short = allowed < granted
            self._fair.spend(tenant, count, exhausted=count < allowed, cut_short=cut_short)
            self._bucket.take(count)
            free -= count
            created += count
            await self._hand_on(page.handoffs)
            if cut_short:
                break  # the tenant's turn goes on next tick
        if created and self._meter is not None:
            self._meter.created.inc(created)
        return created

    def _defer(self, reason: str) -> None:
        if self._meter is not None:
            self._meter.deferrals.labels(reason=reason).inc()

    async def _page_for(self, tenant: str, allowed: int, quota: int) -> _Page:
        if allowed <= 0:
            return _Page()
        return await self._db.run(lambda s: self._page(s, tenant, allowed, quota))

    def _page(self, connection: Connection, tenant: str, allowed: int, quota: int) -> _Page:
        """Create up to ``allowed`` children of the tenant's oldest DISPATCHING batch."""
        if not self._lease.holds(connection):
            return _Page()
        room = quota - count_outstanding(connection, tenant)
        if room <= 0:
            return _Page(over_quota=True)
        batches, packets = tables.batches, tables.batch_packets
        batch = connection.execute(
            select(batches)
            .where(batches.c.tenant == tenant, batches.c.state == "DISPATCHING")
            .order_by(batches.c.created_at, batches.c.batch)
            .limit(1)
            .with_for_update()
        ).first()
        if batch is None:
            return _Page()
        rows = connection.execute(
            select(packets)
            .where(packets.c.batch == batch.batch, packets.c.index >= batch.next_index)
            .order_by(packets.c.index)
            .limit(min(allowed, room))
        ).all()
        page = _Page()
        for row in rows:
            accepted = self._intake.create_child(
                connection, tenant, _request(row), batch=batch.batch
            )
            if accepted.handoff is not None:
                page.handoffs.append(accepted.handoff)
            connection.execute(
                update(packets)
                .where(packets.c.batch == row.batch, packets.c.index == row.index)
                .values(job=accepted.name)
            )
        next_index = batch.next_index + len(rows)
        connection.execute(
            update(batches)
            .where(batches.c.batch == batch.batch)
            .values(
                next_index=next_index,
                dispatched_count=batches.c.dispatched_count + len(rows),
                state="FINISHING" if next_index >= batch.packet_count else "DISPATCHING",
                updated_at=datetime.now(UTC),
            )
        )
        return page

    async def _hand_on(self, handoffs: list[tuple[bytes, bytes]]) -> None:
        for task, event in handoffs:
            try:
                await self._dispatcher.hand_on(task, event)
            except Exception as error:  # noqa: BLE001 - committed: the sweep hands it on
                log.warning("batch child handed to the sweep (%s)", type(error).__name__)

    async def _window(self) -> int:
        """The full window, or the shared one while interactive work is in the
        pipeline: batch work leaves it the rest of the capacity."""
        if self._interactive is not None:
            try:
                if await self._interactive.present():
                    return min(self._settings.shared_window, self._settings.window)
            except Exception as error:  # noqa: BLE001 - NATS unreadable: assume it is there
                log.warning("interactive presence unknown (%s)", type(error).__name__)
                return min(self._settings.shared_window, self._settings.window)
        return self._settings.window

    async def _queue_behind(self) -> bool:
        if self._backlog is None:
            return False
        age = await self._backlog.oldest_ready_age("batch")
        return age > self._admission.queue_age_budget_seconds

    async def _refresh_quota(self, tenant: str, quota: int) -> None:
        """Some of the tenant's jobs may have ended unseen: ask audit, now and then."""
        now = time.monotonic()
        if self._outstanding is None or now - self._refreshed.get(tenant, 0.0) < (
            QUOTA_REFRESH_SECONDS
        ):
            return
        self._refreshed[tenant] = now
        try:
            await self._outstanding.refresh(tenant, quota)
        except Exception as error:  # noqa: BLE001 - audit may be down; deferred either way
            log.warning("quota refresh failed (%s)", type(error).__name__)


def _request(packet: Any) -> pb.SubmitJobRequest:
    return pb.SubmitJobRequest(
        request_id=child_request_id(packet.batch, packet.index),
        manifest=job_pb2.Manifest.FromString(packet.manifest),
        priority="batch",
        bundle_id=packet.bundle_id,
    )


def _plan(connection: Connection, admission: AdmissionSettings) -> _Plan:
    batches, tenants = tables.batches, tables.tenants
    in_flight = connection.execute(
        select(
            func.coalesce(func.sum(batches.c.dispatched_count - batches.c.terminal_count), 0)
        ).where(batches.c.finished_at.is_(None))
    ).scalar_one()
    rows = connection.execute(
        select(tenants.c.id, tenants.c.scheduling_weight, tenants.c.max_outstanding_jobs).where(
            tenants.c.id.in_(
                select(batches.c.tenant).where(batches.c.state == "DISPATCHING").distinct()
            )
        )
    ).all()
    return _Plan(
        in_flight=int(in_flight),
        weights={row.id: max(row.scheduling_weight or 1, 1) for row in rows},
        quotas={row.id: row.max_outstanding_jobs or admission.max_outstanding_jobs for row in rows},
    )
