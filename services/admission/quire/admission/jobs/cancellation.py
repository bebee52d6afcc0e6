"""CancelJob: cancel a job that has not started signing, or say what it reached.

The job gate decides between the cancel and the signer, once. If the cancel
wins, admission records the CANCELLED transition; whichever stage next touches
the job also ends it CANCELLED (the same event id, recorded once), so the
outcome holds even if this publish is lost.

A cancel that comes too late — the job had already ended, or the signer
claimed the job first — changes nothing and is answered, like a cancel of an
ended job always was, with the job as it is (OK, never an error): its state
is not CANCELLED, and that is how a caller tells that the cancel lost
(``ReasonCode.CANCEL_TOO_LATE`` names the outcome in the CLI, the Python
client and the HTTP gateway). The state is audit's view (AuditService.GetJob),
never one older than what the gate holds: audit records the stages' events a
little after the signer claims the job, so after a lost claim admission asks
audit again until its view has reached the state the gate holds (at least
SIGNING, or the ending), for at most ``LOST_WAIT_SECONDS``. Should audit lag
longer, the cancel is refused UNAVAILABLE (``DEPENDENCY_UNAVAILABLE``, with a
retry hint) rather than answered with a state the job has left; repeating it
is safe and changes nothing. (A stage's ending that audit has not recorded
by then is answered from the gate, as before: an ending is final.)
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select

from quire.admission import tables
from quire.admission.jobs.intake import AcceptedJob
from quire.admission.jobs.outstanding import OutstandingJobs
from quire.admission.jobs.views import JobViews
from quire.database import Database
from quire.errors import TransientError
from quire.jobgate import CANCELLED, ENDED, SIGNING, JobGate
from quire.jobs import TERMINAL_STATES, state_name, state_value
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.workqueue import Publisher, event_subject

__all__ = ["Canceller", "LOST_WAIT_SECONDS"]

LOST_WAIT_SECONDS = 10.0
"""How long a lost cancel waits for audit's view to reach what the gate holds."""
LOST_POLL_SECONDS = 0.1
log = logging.getLogger(__name__)


def _reached(state: int, held: str) -> bool:
    """Whether audit's ``state`` is at or past the state the gate holds: for
    SIGNING, SIGNING or a later state (the pipeline's states are numbered in
    order, the terminal ones last); for an ending, a terminal state."""
    if state_name(state) in TERMINAL_STATES:
        return True
    return held == SIGNING and state >= state_value(SIGNING)


class Canceller:
    """Cancels a tenant's job if the job gate lets the cancel win; otherwise
    answers with the job as audit has it."""

    def __init__(
        self,
        *,
        database: Database,
        views: JobViews,
        gate: JobGate,
        publisher: Publisher,
        events: EventFactory,
        outstanding: OutstandingJobs,
    ) -> None:
        self._db = database
        self._views = views
        self._gate = gate
        self._publisher = publisher
        self._events = events
        self._outstanding = outstanding

    async def cancel(self, tenant: str, name: str) -> job_pb2.Job:
        accepted = await self._views.owned(tenant, name)
        current = await self._views.current(accepted)
        state = state_name(current.state)
        if state in TERMINAL_STATES:
            return current
        try:
            decided = await self._gate.cancel(accepted.name)
        except Exception as error:  # noqa: BLE001 - NATS trouble: the caller may retry
            raise TransientError(
                ReasonCode.QUEUE_UNAVAILABLE, "cannot reach the job gate"
            ) from error
        if decided != CANCELLED:
            # Signing began, or a stage ended the job, before the cancel: the
            # cancel lost. Say what the job reached, as audit records it.
            return await self._lost(accepted, decided)
        table = tables.jobs
        task_bytes = await self._db.run(
            lambda s: s.execute(
                select(table.c.task).where(table.c.job == accepted.name)
            ).scalar_one()
        )
        event = self._events.transition(
            queue_pb2.JobTask.FromString(task_bytes),
            state,
            State.CANCELLED,
            attempt=1,
            lease_token=0,
            reason_code=ReasonCode.CANCELLED_BY_CLIENT,
        )
        try:
            await self._publisher.publish(event_subject("admission"), event, event.event_id)
        except TransientError:
            pass  # the gate holds the decision; the next stage records the ending
        await self._outstanding.mark_finished([accepted.name])
        cancelled = job_pb2.Job()
        cancelled.CopyFrom(current)
        cancelled.state = State.CANCELLED.number  # type: ignore[assignment]
        cancelled.reason_code = ReasonCode.CANCELLED_BY_CLIENT
        return cancelled

    async def _lost(self, accepted: AcceptedJob, held: str) -> job_pb2.Job:
        """The job as audit records it once audit's view has reached the state
        the gate holds (``held``: SIGNING, REJECTED or FAILED)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LOST_WAIT_SECONDS
        while True:
            view = await self._views.current(accepted)
            if _reached(view.state, held):
                log.info("cancel of %s came too late: %s", accepted.name, state_name(view.state))
                return view
            if loop.time() >= deadline:
                break
            await asyncio.sleep(LOST_POLL_SECONDS)
        if held in ENDED:
            view.state = state_value(held)  # type: ignore[assignment]
            return view
        raise TransientError(
            ReasonCode.DEPENDENCY_UNAVAILABLE,
            "the cancel came too late (signing began); audit has not recorded the"
            " job's progress yet: ask again",
            retry_after=1.0,
        )
