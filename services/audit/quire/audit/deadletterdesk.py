"""Operators' desk for dead letters: list them, retry a job, or discard it.

A retry is a new attempt from the stage the job failed in, under a new
generation (new event ids, message ids and stage leases, so nothing of the
failed attempt is mistaken for the new one):

    dead ── gate reopened, ledger: FAILED -> <stage entry state> ──▶ retrying
         ── task (generation + 1) published to the stage's work subject ──▶ retried

The ledger entry and the ``retrying`` mark are one transaction; the publish is
deduplicated by message id, so a retry interrupted anywhere is finished by
asking again.

A retry may give the job a new budget (``quire.audit.retrybudget``): the
retry entry records the new deadline, and the task published carries the
deadline that entry recorded, whoever asked, so the ledger and every stage
hold the job to the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2
from sqlalchemy import Connection, select, update

from quire.audit import ledger, tables
from quire.audit.deadletterbook import letter_row
from quire.audit.retrybudget import (
    DEFAULT_MAX_BUDGET_SECONDS,
    checked_budget,
    hold_to_retry_entry,
    retry_entry,
    with_budget,
)
from quire.database import Database
from quire.errors import FailedPrecondition, NotFound
from quire.jobgate import CANCELLED, JobGate
from quire.paging import Position, keyset_after
from quire.pipeline import State, stage
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.workqueue import Publisher

__all__ = ["DeadLetterDesk"]

OPEN = ("dead", "retrying")


@dataclass(frozen=True)
class DeadLetterDesk:
    """Operators' actions on dead letters: list, retry (a new generation from the
    stage that failed) and discard. Asking again finishes an interrupted retry."""

    database: Database
    publisher: Publisher
    gate: JobGate
    build_version: str
    max_budget_seconds: float = DEFAULT_MAX_BUDGET_SECONDS
    """The longest budget a retry may give (``QUIRE_MAX_JOB_BUDGET_SECONDS``)."""

    async def list(
        self, *, include_resolved: bool, after: Position | None, limit: int
    ) -> list[Any]:
        """At most ``limit`` letters, oldest first, after ``after`` (a
        ``(dead_at, job)`` position: a page of ListDeadLetters)."""
        table = tables.dead_letters
        order = (table.c.dead_at, table.c.job)
        query = select(table).order_by(*order).limit(limit)
        beyond = keyset_after(order, after)
        if beyond is not None:
            query = query.where(beyond)
        if not include_resolved:
            query = query.where(table.c.status.in_(OPEN))
        return await self.database.read(lambda s: list(s.execute(query).all()))

    async def retry(
        self, job: str, operator: str, budget: duration_pb2.Duration | None = None
    ) -> Any:
        """Retry ``job``'s dead letter (with a new ``budget``, if given); the
        letter's row. A letter already retried is returned as it is."""
        new_budget = None if budget is None else checked_budget(budget, self.max_budget_seconds)
        row = await self._letter(job)
        if row.status == "retried":
            return row  # asked twice: already done
        if row.status == "discarded":
            raise FailedPrecondition(
                ReasonCode.DEAD_LETTER_RESOLVED, "the dead letter was discarded"
            )
        failed = queue_pb2.JobTask.FromString(row.task)
        task = queue_pb2.JobTask()
        task.CopyFrom(failed)
        task.generation = row.generation + 1
        if row.status == "dead":
            await self._reopen(job, task.generation)
            event = EventFactory("operator", operator, self.build_version).transition(
                task,
                State.FAILED,
                stage(row.stage).waiting,  # where a retry puts the job back
                attempt=1,
                lease_token=0,
                reason_code=ReasonCode.DEAD_LETTER_RETRIED,
            )
            if new_budget is not None:
                with_budget(event, new_budget)
            await self.database.run(lambda s: _mark_retrying(s, job, row.generation, event))
        # The deadline the recorded retry entry holds (this call's, or that
        # of the call that got there first).
        await self.database.read(lambda s: hold_to_retry_entry(s, task))
        await self.publisher.publish_task(row.stage, task)
        return await self.database.run(lambda s: _resolve(s, job, "retrying", "retried", operator))

    async def deadline_of(self, job: str, generation: int) -> timestamp_pb2.Timestamp | None:
        """The deadline the retry that started ``generation`` recorded, if any."""
        entry = await self.database.read(lambda s: retry_entry(s, job, generation))
        return entry.deadline if entry is not None and entry.HasField("deadline") else None

    async def discard(self, job: str, operator: str) -> Any:
        row = await self._letter(job)
        if row.status == "discarded":
            return row
        if row.status != "dead":
            raise FailedPrecondition(ReasonCode.DEAD_LETTER_RESOLVED, "the job was retried")
        return await self.database.run(lambda s: _resolve(s, job, "dead", "discarded", operator))

    async def _letter(self, job: str) -> Any:
        row = await self.database.read(lambda s: letter_row(s, job))
        if row is None:
            raise NotFound("no dead letter for this job", ReasonCode.DEAD_LETTER_NOT_FOUND)
        return row

    async def _reopen(self, job: str, generation: int) -> None:
        state = await self.database.read(
            lambda s: s.execute(
                select(tables.jobs.c.state).where(tables.jobs.c.job == job)
            ).scalar_one_or_none()
        )
        if state == State.CANCELLED:
            raise FailedPrecondition(ReasonCode.JOB_CANCELLED, "the job was cancelled")
        if state != State.FAILED:
            raise FailedPrecondition(
                ReasonCode.HISTORY_INCOMPLETE, "the job's failure is not recorded yet; try again"
            )
        if await self.gate.reopen(job, generation) == CANCELLED:
            raise FailedPrecondition(ReasonCode.JOB_CANCELLED, "the job was cancelled")


def _mark_retrying(
    connection: Connection, job: str, generation: int, event: queue_pb2.TransitionEvent
) -> None:
    table = tables.dead_letters
    claimed = connection.execute(
        update(table)
        .where(table.c.job == job, table.c.status == "dead", table.c.generation == generation)
        .values(status="retrying")
        .returning(table.c.job)
    ).first()
    if claimed is not None:
        ledger.append(connection, event)
    # Otherwise a concurrent retry claimed it first and appended the same event.


def _resolve(connection: Connection, job: str, current: str, status: str, operator: str) -> Any:
    table = tables.dead_letters
    connection.execute(
        update(table)
        .where(table.c.job == job, table.c.status == current)
        .values(status=status, resolved_at=datetime.now(UTC), resolved_by=operator)
    )
    row = letter_row(connection, job)
    if row is None or row.status != status:  # type: ignore[attr-defined]
        raise FailedPrecondition(ReasonCode.DEAD_LETTER_RESOLVED, "resolved meanwhile")
    return row
