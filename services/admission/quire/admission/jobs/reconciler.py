"""The reconciler: accepted work is never stranded by a lost queue message.

JetStream can lose acknowledged messages, and an operator (or an attacker
with an operator's login) can purge a stream. Admission knows every job it
accepted; audit knows where each one is. Every ``interval`` the reconciler
compares the two for unfinished jobs, and re-drives each job that has sat in
one non-terminal state longer than that state's budget — or that audit has
never heard of — by publishing its ACCEPTED event and validate task again.

A re-drive starts no new work of its own: every stage that already committed
the job answers a task for it by republishing what it committed (the stage
runner's "already committed" path), so the job moves from the stages' own
records to the point where it stopped. Each re-drive has a number that makes
its messages new to JetStream (a fresh ``Nats-Msg-Id``); the copies it
causes are duplicates that leases, event ids and the one-artifact rule
already absorb. ``NEEDS_REVIEW`` is parked, not stalled, and is left alone.

A job that merely waits its turn is not re-driven: if the queue of the stage
it waits for holds an undelivered message at least as old as the job's stall,
the job's own task may still be in line (queues are first in, first out), so
a backlog never multiplies itself. A job audit shows at signing may be
waiting in audit's own commit queue (the signer's events ride on that task),
which is looked at too.

A job in a later generation (an operator's dead-letter retry) started from a
task only audit keeps; audit re-drives those itself (``quire.audit.retrydrive``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, select, update

from quire.admission import tables
from quire.admission.jobs.outstanding import OutstandingJobs
from quire.audit.v1 import audit_service_pb2, audit_service_pb2_grpc
from quire.database import Database, as_utc, insert_if_absent
from quire.jobs import PARKED_STATES, TERMINAL_STATES, state_name
from quire.pipeline import AUDIT, STAGES, State, stage, stage_working_in
from quire.settings import ReconcileSettings
from quire.type import job_pb2, queue_pb2
from quire.workqueue import Publisher, event_subject, redriven, task_subject
from quire.workqueue.backlog import QueueAgeProbe
from quire.workqueue.topology import candidate_subject

__all__ = ["Reconciler"]

log = logging.getLogger(__name__)
BATCH = 500
AUDIT_TIMEOUT_SECONDS = 10.0
CLOCK_SLACK_SECONDS = 2.0


class Reconciler:
    """Finds stalled jobs and re-drives them; one pass every ``settings.interval_seconds``."""

    def __init__(
        self,
        *,
        database: Database,
        publisher: Publisher,
        audit: audit_service_pb2_grpc.AuditServiceStub,
        outstanding: OutstandingJobs,
        settings: ReconcileSettings,
        queues: dict[str, QueueAgeProbe],
    ) -> None:
        self._queues = queues
        """Age of the oldest undelivered message, per stage."""
        self._db = database
        self._publisher = publisher
        self._audit = audit
        self._outstanding = outstanding
        self._settings = settings

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval_seconds)
            try:
                redriven_jobs = await self.reconcile()
            except Exception as error:  # noqa: BLE001 - audit or NATS away; next pass
                log.warning("reconcile pass failed (%s); will retry", type(error).__name__)
                continue
            if redriven_jobs:
                log.warning("re-drove %d stalled job(s)", redriven_jobs)

    async def reconcile(self) -> int:
        """One pass; returns how many jobs were re-driven."""
        now = datetime.now(UTC)
        youngest = now - timedelta(seconds=min(self._budgets()))
        after = ""
        redriven_jobs = 0
        while True:
            rows = await self._db.read(
                lambda s, after=after: _unfinished(s, youngest, after)  # type: ignore[misc]
            )
            if not rows:
                return redriven_jobs
            after = rows[-1].job
            views = await self._views([row.job for row in rows])
            await self._outstanding.mark_finished(
                [name for name, view in views.items() if state_name(view.state) in TERMINAL_STATES]
            )
            for row in rows:
                stall = self._stall(row, views.get(row.job), now)
                if stall is not None and await self._redrive(row.job, *stall, now):
                    redriven_jobs += 1

    def _budgets(self) -> list[float]:
        return [self._settings.budget(State.ACCEPTED), *self._settings.stall_seconds.values()]

    async def _views(self, names: list[str]) -> dict[str, job_pb2.Job]:
        reply = await self._audit.BatchGetJobs(
            audit_service_pb2.BatchGetJobsRequest(names=names),
            timeout=AUDIT_TIMEOUT_SECONDS,
            wait_for_ready=True,
        )
        return {job.name: job for job in reply.jobs}

    def _stall(
        self, row: _Row, view: job_pb2.Job | None, now: datetime
    ) -> tuple[str, float] | None:
        """(state, seconds it has sat there) of a job past its budget, else None."""
        state: str
        if view is None:  # audit never heard of it: its ACCEPTED event was lost too
            state, since = State.ACCEPTED, row.created_at
        else:
            state = state_name(view.state)
            if state in TERMINAL_STATES or state in PARKED_STATES:
                return None
            since = view.update_time.ToDatetime(tzinfo=UTC)
        budget = timedelta(seconds=self._settings.budget(state))
        if row.last_redrive is not None and now - as_utc(row.last_redrive) < budget:
            return None  # re-driven recently: give it its budget again
        stalled = now - as_utc(since)
        return (state, stalled.total_seconds()) if stalled > budget else None

    async def _in_line(self, state: str, task: queue_pb2.JobTask, stalled_seconds: float) -> bool:
        """Whether the queue the job waits on still holds messages from before
        its stall: the candidate track's, for a job routed there (its cap holds
        it back on purpose), else the baseline's."""
        # REVIEWING waits on no queue.
        waits_on = stage_working_in(state)
        if waits_on is None:
            return False
        queues = [waits_on]
        if waits_on.next is not None and stage(waits_on.next).service == AUDIT:
            # Its events ride on its task to audit (events_with_commit): a job
            # audit still shows here may be waiting in audit's own queue.
            queues.append(stage(waits_on.next))
        priority = task.priority or "interactive"
        for waiting in queues:
            candidate = task_subject(waiting.name, task) == candidate_subject(
                waiting.name, priority
            )
            probe = self._queues.get(waiting.name)
            if probe is None:
                continue
            oldest = await probe.oldest_ready_age(priority, candidate=candidate)
            if oldest + CLOCK_SLACK_SECONDS >= stalled_seconds:
                return True
        return False

    async def _redrive(self, job: str, state: str, stalled_seconds: float, now: datetime) -> bool:
        row = await self._db.read(
            lambda s: s.execute(
                select(tables.jobs.c.task, tables.jobs.c.accepted_event).where(
                    tables.jobs.c.job == job
                )
            ).one()
        )
        task = queue_pb2.JobTask.FromString(row.task)
        if await self._in_line(state, task, stalled_seconds):
            return False
        count = await self._db.run(lambda s: _count_redrive(s, job, now))
        task.redrive = count
        accepted = queue_pb2.TransitionEvent.FromString(row.accepted_event)
        await self._publisher.publish(
            event_subject("admission"), accepted, redriven(accepted.event_id, count)
        )
        await self._publisher.publish_task(STAGES[0].name, task, count)
        return True


class _Row:
    job: str
    created_at: datetime
    last_redrive: datetime | None


def _unfinished(connection: Connection, youngest: datetime, after: str) -> list[_Row]:
    """Dispatched, unfinished jobs accepted before ``youngest``, by name after ``after``."""
    jobs, redrives = tables.jobs, tables.redrives
    rows = connection.execute(
        select(jobs.c.job, jobs.c.created_at, redrives.c.last_at.label("last_redrive"))
        .outerjoin(redrives, redrives.c.job == jobs.c.job)
        .where(
            jobs.c.finished_at.is_(None),
            jobs.c.dispatched_at.is_not(None),
            jobs.c.created_at <= youngest,
            jobs.c.job > after,
        )
        .order_by(jobs.c.job)
        .limit(BATCH)
    )
    return list(rows)  # type: ignore[arg-type]


def _count_redrive(connection: Connection, job: str, now: datetime) -> int:
    table = tables.redrives
    if insert_if_absent(connection, table, {"job": job, "count": 1, "last_at": now}):
        return 1
    count = connection.execute(select(table.c.count).where(table.c.job == job)).scalar_one() + 1
    connection.execute(update(table).where(table.c.job == job).values(count=count, last_at=now))
    return int(count)
