"""CancelJob: cancel a job that has not started signing, or say what it reached.

The job gate decides between the cancel and the signer, once. If the cancel
wins, admission records the CANCELLED transition; whichever stage next touches
the job also ends it CANCELLED (the same event id, recorded once), so the
outcome holds even if this publish is lost. If signing already started, the
job is returned as it is.
"""

from __future__ import annotations

from sqlalchemy import select

from quire.admission import tables
from quire.admission.jobviews import JobViews
from quire.admission.outstanding import OutstandingJobs
from quire.database import Database
from quire.errors import TransientError
from quire.jobgate import CANCELLED, JobGate
from quire.jobs import TERMINAL_STATES, state_name, state_value
from quire.pipeline import State
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.workqueue import Publisher, event_subject

__all__ = ["Canceller"]


class Canceller:
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
            # Signing began, or a stage ended the job, before the cancel: say which.
            view = await self._views.current(accepted)
            if (
                decided in (State.REJECTED, State.FAILED)
                and state_name(view.state) not in TERMINAL_STATES
            ):
                view.state = state_value(decided)  # type: ignore[assignment]
            return view
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
