"""Human review: staff (an operator or a reviewer) approve or reject a parked job.

The decision is a compare-and-swap on the review's status, so two people
cannot both decide. The ledger records the decider's staff token
(``operators/-/tokens/{id}`` or ``reviewers/-/tokens/{id}``) as the actor,
never a name the client sends. Repeating
the same decision republishes its messages (same ids, so nothing doubles),
which finishes a hand-off a crash interrupted; a different decision on a
resolved review is refused.

Only a job that can still be decided is listed. A client's cancel of a parked
job is decided in the job gate (``quire.jobgate``), which no stage touches
while the job is parked, so the review row alone still says PENDING. The
listing therefore reads the gate for each pending row it serves — the same
authority ``resolve`` consults, a key-value read on the NATS connection the
validator already holds, with no call to another service and no lag (audit's
view waits for the cancel's event). A row whose job the gate holds CANCELLED
is marked CANCELLED in the reviews table, so later listings skip it without
asking again; one the gate holds ended otherwise (REJECTED, FAILED) is left
out and kept PENDING, so repeating a decision a crash interrupted still
finishes it. Resolved reviews are listed on request, as they were decided;
the filters are ``quire.validator.reviewfilters``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import Connection, select, update

from quire.database import Database
from quire.errors import FailedPrecondition, NotFound, TransientError
from quire.jobgate import CANCELLED, ENDED, JobGate
from quire.paging import Position, keyset_after
from quire.pipeline import State, stage
from quire.reasons import ReasonCode
from quire.settings import BUILD_VERSION
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.validator import tables
from quire.validator.reviewfilters import PENDING, ReviewFilter
from quire.workqueue import Publisher, event_subject

__all__ = ["ReviewDesk", "ReviewRow"]

HANDS_TO = stage("validate").next or ""
"""Where an approved review sends the job: the validate stage's next stage."""
GATE_READS = 16
"""Gate reads one listing keeps in flight at once."""
CANCELLED_REVIEW = "CANCELLED"
"""A review row's status once its job's cancel was found in the gate (never
listed, and shown by GetReview only: ResolveReview refuses a cancelled job first)."""


@dataclass(frozen=True)
class ReviewRow:
    """One review, as stored. ``next_task`` is what approval hands to the assembler."""

    job: str
    status: str
    ruleset: str
    decisions: list[dict[str, object]]
    operator: str | None
    note: str | None
    created_at: datetime
    resolved_at: datetime | None
    next_task: bytes
    tenant: str = ""
    """The job's tenant id ("" on a review parked by a release before it was kept)."""


def _row(row: object) -> ReviewRow:
    return ReviewRow(
        job=row.job,  # type: ignore[attr-defined]
        status=row.status,  # type: ignore[attr-defined]
        ruleset=row.ruleset,  # type: ignore[attr-defined]
        decisions=row.decisions,  # type: ignore[attr-defined]
        operator=row.operator,  # type: ignore[attr-defined]
        note=row.note,  # type: ignore[attr-defined]
        created_at=row.created_at,  # type: ignore[attr-defined]
        resolved_at=row.resolved_at,  # type: ignore[attr-defined]
        next_task=row.next_task,  # type: ignore[attr-defined]
        tenant=row.tenant,  # type: ignore[attr-defined]
    )


class ReviewDesk:
    """Staff's reviews of parked jobs: lists those still decidable (and, asked,
    those decided), and records one decision per review, then hands the job
    on or ends it."""

    def __init__(
        self,
        database: Database,
        publisher: Publisher,
        gate: JobGate | None = None,
        *,
        build_version: str = BUILD_VERSION,
    ) -> None:
        self._db = database
        self._publisher = publisher
        self._gate = gate
        self._build_version = build_version
        """The deployable version on the ledger entries of operators' decisions."""

    async def listed_page(
        self, *, after: Position | None, limit: int, filters: ReviewFilter | None = None
    ) -> list[ReviewRow]:
        """At most ``limit`` reviews the filters choose (pending ones only, by
        default), oldest first, after ``after`` (a ``(created_at, job)``
        position: a page of ListReviews)."""
        table = tables.reviews
        order = (table.c.created_at, table.c.job)
        query = select(table).where((filters or ReviewFilter()).condition())
        query = query.order_by(*order).limit(limit)
        beyond = keyset_after(order, after)
        if beyond is not None:
            query = query.where(beyond)
        rows = await self._db.read(lambda s: s.execute(query).all())
        return [_row(row) for row in rows]

    async def decidable_page(
        self, *, after: Position | None, limit: int, filters: ReviewFilter | None = None
    ) -> list[ReviewRow]:
        """At most ``limit`` reviews the filters choose, oldest first, after
        ``after``: of the pending ones, only those staff can still decide, whose
        job the gate holds neither cancelled nor ended (a page of ListReviews)."""
        found: list[ReviewRow] = []
        while len(found) < limit:
            wanted = limit - len(found)
            rows = await self.listed_page(after=after, limit=wanted, filters=filters)
            if not rows:
                break
            held = await self._gate_holds([row for row in rows if row.status == PENDING])
            cancelled = [job for job, state in held.items() if state == CANCELLED]
            if cancelled:
                await self._db.run(partial(_mark_cancelled, jobs=cancelled))
            found.extend(row for row in rows if not held.get(row.job))
            after = (rows[-1].created_at, rows[-1].job)
            if len(rows) < wanted:
                break
        return found

    async def get(self, job: str) -> ReviewRow:
        """One job's review, pending or decided; a pending one whose job the
        client cancelled shows as CANCELLED. NOT_FOUND for a job never parked."""
        table = tables.reviews
        row = await self._db.read(
            lambda s: s.execute(select(table).where(table.c.job == job)).first()
        )
        if row is None:
            raise NotFound("no review for this job")
        review = _row(row)
        if review.status == PENDING and (await self._gate_holds([review]))[job] == CANCELLED:
            await self._db.run(partial(_mark_cancelled, jobs=[job]))
            review = replace(review, status=CANCELLED_REVIEW)
        return review

    async def _gate_holds(self, rows: Sequence[ReviewRow]) -> dict[str, str]:
        """For each row's job, the ending the gate holds (CANCELLED, REJECTED,
        FAILED), or "" while the job may still be decided."""
        if self._gate is None or not rows:
            return {row.job: "" for row in rows}
        gate = self._gate
        limit = asyncio.Semaphore(GATE_READS)

        async def held(job: str) -> str:
            async with limit:
                state, _ = await gate.claim_of(job)
            return state if state == CANCELLED or state in ENDED else ""

        try:
            states = await asyncio.gather(*(held(row.job) for row in rows))
        except Exception as error:  # noqa: BLE001 - NATS trouble: the caller may retry
            raise TransientError(
                ReasonCode.QUEUE_UNAVAILABLE, "cannot reach the job gate"
            ) from error
        return {row.job: state for row, state in zip(rows, states, strict=True)}

    async def resolve(self, job: str, *, approve: bool, operator: str, note: str) -> ReviewRow:
        """Decide the review; ``operator`` is the decider's staff token name,
        recorded in the review and as the ledger's actor."""
        status = "APPROVED" if approve else "REJECTED"
        if self._gate is not None and not approve:
            if await self._gate.end(job, State.REJECTED) == CANCELLED:
                raise FailedPrecondition(ReasonCode.JOB_CANCELLED, "the job was cancelled")
        if self._gate is not None and approve and await self._gate.is_cancelled(job):
            raise FailedPrecondition(ReasonCode.JOB_CANCELLED, "the job was cancelled")
        review = await self._db.run(lambda s: _decide(s, job, status, operator, note))
        task = queue_pb2.JobTask.FromString(review.next_task)
        actor = EventFactory("operator", review.operator or operator, self._build_version)
        if review.status == "APPROVED":  # what was recorded, not what this caller asked
            event = actor.transition(
                task, State.NEEDS_REVIEW, State.ASSEMBLING, attempt=1, lease_token=0, note=note
            )
            await self._publisher.publish(event_subject("validator"), event, event.event_id)
            await self._publisher.publish_task(HANDS_TO, task)
        else:
            event = actor.transition(
                task,
                State.NEEDS_REVIEW,
                State.REJECTED,
                attempt=1,
                lease_token=0,
                reason_code=ReasonCode.REVIEW_REJECTED,
                note=note,
            )
            await self._publisher.publish(event_subject("validator"), event, event.event_id)
        return review


def _mark_cancelled(connection: Connection, jobs: list[str]) -> None:
    """Pending reviews whose jobs the client cancelled: no longer decidable."""
    table = tables.reviews
    connection.execute(
        update(table)
        .where(table.c.job.in_(jobs), table.c.status == "PENDING")
        .values(status=CANCELLED_REVIEW, resolved_at=datetime.now(UTC))
    )


def _decide(connection: Connection, job: str, status: str, operator: str, note: str) -> ReviewRow:
    table = tables.reviews
    row = connection.execute(select(table).where(table.c.job == job)).first()
    if row is None:
        raise NotFound("no review for this job")
    if row.status == "PENDING":
        connection.execute(
            update(table)
            .where(table.c.job == job, table.c.status == "PENDING")
            .values(status=status, operator=operator, note=note, resolved_at=datetime.now(UTC))
        )
        # Re-read: under concurrent deciders the row shows whose decision won.
        row = connection.execute(select(table).where(table.c.job == job)).one()
    if row.status != status:
        raise FailedPrecondition(
            ReasonCode.REVIEW_ALREADY_RESOLVED, f"the review was already {row.status.lower()}"
        )
    return _row(row)
