"""The stage runner: one delivery of one job, from lease to ack.

    take a new lease token ── already committed? ──▶ republish outcome, ack
            │
        process (the stage's own work; heartbeats run meanwhile)
            │ permanent error ─▶ outcome: REJECTED with reason, then term
            │ transient error ─▶ nak with capped backoff + jitter,
            │                    or on the last delivery: FAILED RETRY_LIMIT_REACHED
            ▼
    compare-and-swap commit on the token ── superseded? ──▶ discard, publish nothing
            │
    publish events, then the next stage's task (Nats-Msg-Id dedups republishes)
            │
           ack

Acks come after the commit and the publishes, so a crash anywhere leaves the
message to be redelivered, and the redelivery finds the committed outcome.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nats.aio.msg import Msg
from opentelemetry import trace
from sqlalchemy.orm import Session

from quire.errors import (
    JobCancelled,
    PermanentError,
    QuireError,
    Rejected,
    SystemFailure,
    TransientError,
)
from quire.faults import fault_point
from quire.jobgate import CANCELLED, ENDED, JobGate
from quire.leases import Lease, LeaseStore, lease_key
from quire.reasons import ReasonCode
from quire.settings import QueueSettings
from quire.taskbinding import read_task
from quire.telemetry import extract_context
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.wire import ForgedMessage
from quire.workqueue.publisher import Publisher
from quire.workqueue.topology import (
    STAGE_OF_SERVICE,
    dead_subject,
    event_subject,
    redriven,
    task_message_id,
    work_subject,
)

__all__ = ["StageResult", "StageWork", "StageRunner", "retry_delay"]

_Decision = tuple[queue_pb2.StageOutcome, "Callable[[Session], None] | None"]
"""The outcome to commit, and the stage's own rows to write with it."""

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    """What a stage made of a job: the next task, and rows to write with the commit."""

    next_task: queue_pb2.JobTask | None
    extra_events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """Further (from, to, fields) transitions, in order, before the hand-off one."""
    handoff_fields: dict[str, Any] = field(default_factory=dict)
    record: Callable[[Session], None] | None = None


class StageWork(Protocol):
    """A stage's own work; everything else is the runner's."""

    stage_state: str
    """The state a job is in while this stage works on it."""
    next_state: str
    """The state the job enters when this stage hands it on."""
    next_stage: str
    """The work subject's stage name for the hand-off."""

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult: ...

    def record_rejection(
        self, task: queue_pb2.JobTask, error: Exception
    ) -> Callable[[Session], None] | None:
        """Rows to write with a REJECTED or FAILED ending, if the stage keeps any."""


def retry_delay(attempt: int, queue: QueueSettings) -> float:
    """Capped exponential backoff with jitter, in seconds."""
    ceiling = min(queue.backoff_cap_seconds, queue.backoff_base_seconds * 2 ** (attempt - 1))
    return ceiling * random.uniform(0.5, 1.0)


class StageRunner:
    def __init__(
        self,
        *,
        service: str,
        work: StageWork,
        leases: LeaseStore,
        publisher: Publisher,
        events: EventFactory,
        queue: QueueSettings,
        entry_state: str,
        gate: JobGate | None = None,
    ) -> None:
        self._service = service
        self._gate = gate
        self._work = work
        self._leases = leases
        self._publisher = publisher
        self._events = events
        self._queue = queue
        self._entry_state = entry_state
        self._tracer = trace.get_tracer(f"quire.{service}")

    async def handle(self, msg: Msg) -> None:
        try:
            task, ident = read_task(msg.data)
        except ForgedMessage as refused:
            log.warning("task on %s refused: %s", msg.subject, refused.message)
            await msg.term()
            return
        attempt = msg.metadata.num_delivered
        with self._tracer.start_as_current_span(
            f"{self._service}.process",
            context=extract_context(msg.headers),
            attributes={"quire.job": ident, "quire.attempt": attempt},
        ) as span:
            try:
                await self._handle(task, attempt, msg, span)
            except Exception as error:  # noqa: BLE001 - database or queue trouble: retry
                log.warning(
                    "job %s attempt %d: %s; will retry", task.job, attempt, type(error).__name__
                )
                await msg.nak(delay=retry_delay(attempt, self._queue))

    async def _handle(
        self, task: queue_pb2.JobTask, attempt: int, msg: Msg, span: trace.Span
    ) -> None:
        lease = await self._leases.acquire(lease_key(task.job, task.generation))
        span.set_attribute("quire.lease_token", lease.token)
        if lease.committed is not None:
            await self._hand_off(lease.committed, msg, "ack", attempt, task.redrive)
            return
        held, claimant = ("", "") if self._gate is None else await self._gate.claim_of(task.job)
        if held in ENDED and claimant != self._service:
            # Another stage (or the dead-letter office) ended the job: no step may
            # follow, whoever sent this task. An ending this stage claimed itself
            # but did not commit (it crashed in between) is decided again below.
            log.warning("task for job %s refused: the job ended %s", task.job, held)
            await msg.term()
            return
        if held == CANCELLED:
            ending = self._ending(task, lease, attempt, "CANCELLED", ReasonCode.CANCELLED_BY_CLIENT)
            outcome: _Decision | None = (ending, None)
            final = "term"
        else:
            await self._announce_start(task, lease, attempt)
            outcome, final = await self._decide(task, lease, attempt, msg)
        if outcome is None:
            return
        fault_point(f"{self._service}.before_commit")
        if not await self._leases.complete(lease, outcome[0], outcome[1]):
            span.set_attribute("quire.stale", True)
            log.info("stale lease for job %s (token %d); result discarded", task.job, lease.token)
            return
        fault_point(f"{self._service}.after_commit")
        await self._hand_off(outcome[0], msg, final, attempt, task.redrive)

    async def _announce_start(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> None:
        """Make the job's new state visible while the work runs.

        Best effort: the same event (same id) is part of the committed outcome,
        so the ledger gets it exactly once either way.
        """
        for event in self._entry_events(task, lease, attempt):
            try:
                await self._publisher.publish(event_subject(self._service), event, event.event_id)
            except TransientError:
                return

    async def _hand_off(
        self, outcome: queue_pb2.StageOutcome, msg: Msg, final: str, attempt: int, redrive: int
    ) -> None:
        try:
            await self._publish(outcome, redrive)
        except TransientError:
            # Committed but not yet handed on: the redelivery republishes it.
            await msg.nak(delay=retry_delay(attempt, self._queue))
            return
        fault_point(f"{self._service}.after_publish")
        await (msg.term() if final == "term" else msg.ack())

    async def _decide(
        self, task: queue_pb2.JobTask, lease: Lease, attempt: int, msg: Msg
    ) -> tuple[_Decision | None, str]:
        work = self._work
        try:
            result = await work.process(task, lease, attempt)
        except PermanentError as error:
            state = "REJECTED"
            if isinstance(error, JobCancelled):
                state = "CANCELLED"
            elif isinstance(error, SystemFailure):
                state = "FAILED"
            return await self._end(task, lease, attempt, state, error.reason, error), "term"
        except Exception as error:  # noqa: BLE001 - transient by default
            reason = error.reason if isinstance(error, QuireError) else ReasonCode.INTERNAL
            if not isinstance(error, QuireError):
                # The type only: exception text may carry document content.
                log.warning("job %s: unexpected %s", task.job, type(error).__name__)
            if await self._leases.current_token(lease.job) != lease.token:
                return None, ""  # superseded: the newer delivery owns the message
            if attempt < self._queue.max_deliver:
                await msg.nak(delay=retry_delay(attempt, self._queue))
                return None, ""
            log.warning("job %s failed after %d attempts (%s)", task.job, attempt, reason)
            ending = await self._end(
                task, lease, attempt, "FAILED", ReasonCode.RETRY_LIMIT_REACHED, error
            )
            return ending, "term"
        return (self._advance(task, lease, attempt, result), result.record), "ack"

    def _event(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        from_state: str,
        to_state: str,
        *,
        reason: str = "",
        fields: dict[str, Any] | None = None,
    ) -> queue_pb2.TransitionEvent:
        extra = dict(fields or {})
        reason = str(extra.pop("reason_code", reason))
        return self._events.transition(
            task,
            from_state,
            to_state,
            attempt=attempt,
            lease_token=lease.token,
            reason_code=reason,
            **extra,
        )

    def _entry_events(
        self, task: queue_pb2.JobTask, lease: Lease, attempt: int
    ) -> list[queue_pb2.TransitionEvent]:
        if self._entry_state == self._work.stage_state:
            return []
        return [self._event(task, lease, attempt, self._entry_state, self._work.stage_state)]

    def _advance(
        self, task: queue_pb2.JobTask, lease: Lease, attempt: int, result: StageResult
    ) -> queue_pb2.StageOutcome:
        outcome = queue_pb2.StageOutcome(events=self._entry_events(task, lease, attempt))
        for from_state, to_state, fields in result.extra_events:
            outcome.events.append(
                self._event(task, lease, attempt, from_state, to_state, fields=fields)
            )
        if result.next_task is not None:
            last = result.extra_events[-1][1] if result.extra_events else self._work.stage_state
            outcome.events.append(
                self._event(
                    task, lease, attempt, last, self._work.next_state, fields=result.handoff_fields
                )
            )
            outcome.next_task.CopyFrom(result.next_task)
            outcome.next_subject = work_subject(
                self._work.next_stage, task.priority or "interactive"
            )
        return outcome

    async def _end(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        state: str,
        reason: str,
        error: Exception,
    ) -> _Decision:
        """A terminal outcome, unless the client's cancel was recorded first."""
        if self._gate is not None and state != "CANCELLED":
            if await self._gate.end(task.job, state) == CANCELLED:
                state, reason = "CANCELLED", ReasonCode.CANCELLED_BY_CLIENT
        ending = self._ending(task, lease, attempt, state, reason)
        if state == "REJECTED" and isinstance(error, Rejected) and error.detail:
            ending.events[-1].reason_detail = error.detail
        if state == "FAILED":
            # Kept for operators: `quire dlq retry` starts a new generation from it.
            ending.dead_letter.CopyFrom(
                queue_pb2.DeadLetter(
                    task=task,
                    stage=STAGE_OF_SERVICE.get(self._service, self._service),
                    reason_code=str(reason),
                    deliveries=attempt,
                )
            )
        return ending, self._work.record_rejection(task, error)

    def _ending(
        self, task: queue_pb2.JobTask, lease: Lease, attempt: int, state: str, reason: str
    ) -> queue_pb2.StageOutcome:
        outcome = queue_pb2.StageOutcome(events=self._entry_events(task, lease, attempt))
        outcome.events.append(
            self._event(task, lease, attempt, self._work.stage_state, state, reason=str(reason))
        )
        return outcome

    async def _publish(self, outcome: queue_pb2.StageOutcome, redrive: int = 0) -> None:
        """Publish what was committed; a re-driven task (``redrive`` > 0) sends it all
        again under fresh message ids, in case the first copies were lost."""
        for event in outcome.events:
            await self._publisher.publish(
                event_subject(self._service), event, redriven(event.event_id, redrive)
            )
        if outcome.HasField("next_task"):
            stage = outcome.next_subject.split(".")[2]
            task = queue_pb2.JobTask()
            task.CopyFrom(outcome.next_task)
            task.redrive = max(task.redrive, redrive)
            msg_id = redriven(task_message_id(task.job, stage, task.generation), task.redrive)
            await self._publisher.publish(outcome.next_subject, task, msg_id)
        if outcome.HasField("dead_letter"):
            letter = outcome.dead_letter
            await self._publisher.publish(
                dead_subject(letter.stage),
                letter,
                task_message_id(letter.task.job, f"dead.{letter.stage}", letter.task.generation),
            )
