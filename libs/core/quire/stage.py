"""The stage runner: one delivery of one job, from lease to ack.

    take a new lease token ── already committed? ──▶ republish outcome, ack
            │
        process (the stage's own work, or the verdict it began beside the lease
            │    when it judges before one: ``StartsEarly``; heartbeats run meanwhile)
            │    ─▶ its verdict:
            │ hand on / park ─▶ outcome: its steps (and the next stage's task)
            │ reject ─────────▶ outcome: REJECTED with reason, then term
            │ permanent error ─▶ outcome: REJECTED, FAILED or CANCELLED, then term
            │ transient error ─▶ retry (the error's delay, else capped backoff + jitter),
            │                    or on the last delivery: FAILED RETRY_LIMIT_REACHED;
            │                    a wait that is the job's own is deferred off the queue
            ▼
    compare-and-swap commit on the token ── superseded? ──▶ discard, publish nothing
            │
    publish events, then the next stage's task (Nats-Msg-Id dedups republishes)
            │
           ack

Acks come after the commit and the publishes, so a crash anywhere leaves the
message to be redelivered, and the redelivery finds the committed outcome.
Every path ends in one ``Settlement``, applied in one place (``settle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from sqlalchemy import Connection

from quire.authority import JobAuthority, JobEnded
from quire.errors import (
    JobCancelled,
    PermanentError,
    QuireError,
    Rejected,
    SystemFailure,
    TransientError,
)
from quire.faults import fault_point
from quire.fullstorage import as_storage_error
from quire.jobgate import CANCELLED, ENDED, JobGate
from quire.leases import Lease, LeaseStore, lease_key
from quire.metrics import StageMeter, delivery_timings
from quire.pipeline import AUDIT, Stage, State
from quire.pipeline import stage as stage_named
from quire.queueclock import QueueClock
from quire.reasons import ReasonCode
from quire.sandboxlanes import BATCH, INTERACTIVE, sandbox_lane
from quire.settings import QueueSettings
from quire.taskbinding import read_task
from quire.telemetry import extract_context, record_failure
from quire.transitions import EventFactory
from quire.type import job_pb2, queue_pb2
from quire.wire import ForgedMessage
from quire.workqueue.deferral import Deferrals, prior_deliveries
from quire.workqueue.publisher import Publisher
from quire.workqueue.settle import ACK, LEAVE, TERM, Action, Settlement, retry, settle
from quire.workqueue.topology import (
    batch_message_id,
    dead_subject,
    event_batch_subject,
    event_subject,
    redriven,
    task_message_id,
    task_subject,
)

__all__ = [
    "Verdict",
    "Step",
    "StageResult",
    "StageWork",
    "StartsEarly",
    "Decided",
    "Diagnostics",
    "StageRunner",
]

Record = Callable[[Connection], None]
"""A stage's own rows, written in the transaction that commits its outcome."""

log = logging.getLogger(__name__)


class Verdict(Enum):
    HAND_ON = "hand_on"
    """The job goes to the next stage."""
    PARK = "park"
    """The job waits (for an operator's review); nothing is handed on."""
    REJECT = "reject"
    """The job ends REJECTED with the result's reason."""
    FAIL = "fail"
    """The job ends FAILED with the result's reason: not the input's fault,
    and nothing a retry could change (a dead letter an operator may retry)."""


@dataclass(frozen=True)
class Step:
    """A transition the stage made on its way to its verdict."""

    from_state: State
    to_state: State
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageResult:
    """What a stage decided about a job. The stage never changes the task it was
    given: ``task`` is the job as the stage leaves it (a copy, with what the
    stage pinned or made), which its events describe and the next stage gets."""

    verdict: Verdict
    task: queue_pb2.JobTask
    steps: tuple[Step, ...] = ()
    """Transitions, in order, before the hand-off or the ending."""
    handoff_fields: Mapping[str, Any] = field(default_factory=dict)
    rejection: PermanentError | None = None
    """Why the job ends (``REJECT``, ``FAIL``): its reason, and detail if a ``Rejected``."""
    record: Record | None = None

    @classmethod
    def hand_on(
        cls,
        task: queue_pb2.JobTask,
        *,
        steps: tuple[Step, ...] = (),
        fields: Mapping[str, Any] | None = None,
        record: Record | None = None,
    ) -> StageResult:
        return cls(Verdict.HAND_ON, task, steps, fields or {}, None, record)

    @classmethod
    def park(
        cls, task: queue_pb2.JobTask, *, steps: tuple[Step, ...], record: Record | None = None
    ) -> StageResult:
        return cls(Verdict.PARK, task, steps, record=record)

    @classmethod
    def reject(
        cls, task: queue_pb2.JobTask, rejection: PermanentError, *, record: Record | None = None
    ) -> StageResult:
        return cls(Verdict.REJECT, task, rejection=rejection, record=record)

    @classmethod
    def fail(
        cls, task: queue_pb2.JobTask, failure: SystemFailure, *, record: Record | None = None
    ) -> StageResult:
        """End the job FAILED, its events describing ``task`` (what the stage
        pinned or made before it failed)."""
        return cls(Verdict.FAIL, task, rejection=failure, record=record)


class StageWork(Protocol):
    """A stage's own work; everything else is the runner's. An error it raises
    decides for it: permanent ends the job (REJECTED, FAILED or CANCELLED),
    anything else is retried."""

    async def process(self, task: queue_pb2.JobTask, lease: Lease, attempt: int) -> StageResult: ...


Decided = Callable[[Lease], StageResult]
"""A verdict reached before the lease was taken, waiting for it to record under."""


@runtime_checkable
class StartsEarly(Protocol):
    """A stage's work that can judge a delivery while its lease is being
    taken, because until it records it only reads (and stores nothing a
    later delivery would not store the same): the runner starts ``early``
    with the lease, and uses its verdict instead of ``process`` once the
    lease is taken and the job may still move. None: this delivery waits
    for its lease (``process``). Fencing is unchanged: the verdict is
    recorded under the lease and committed only if it is still current."""

    def early(self, task: queue_pb2.JobTask, attempt: int) -> Awaitable[Decided] | None: ...


class Diagnostics(Protocol):
    """Where a failed delivery's original error text is kept for operators
    (``quire.diagnosticstore``); never raises, never changes the outcome."""

    async def keep(self, job: str, attempt: int, reason: str, error: BaseException) -> None: ...


_OUTCOMES = {
    Action.ACK: "done",
    Action.TERM: "ended",
    Action.RETRY: "retry",
    Action.DEFER: "deferred",
    Action.LEAVE: "stale",
}
"""How a settled delivery is counted (``quire_stage_outcomes_total``)."""


def _priority_of(subject: str) -> str:
    """``quire.work.<stage>.<priority>[.candidate]``'s priority."""
    parts = subject.split(".")
    return parts[3] if len(parts) > 3 else parts[-1]


def _queued_since(msg: Msg) -> int | None:
    """When JetStream stored the message (ns since the epoch), if it says."""
    stamp = getattr(msg.metadata, "timestamp", None)
    if not isinstance(stamp, datetime):
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1e9)


async def _drained(early: asyncio.Future[Decided]) -> None:
    """An early verdict, seen to its end before its delivery ends: one the
    delivery did not use (its job had moved on, or an earlier delivery's
    outcome was committed) still holds the delivery's slot while it runs, so
    the stage's limit bounds it; it is not cancelled, since cancelling a
    sandbox call kills the worker. Its result or error is dropped."""
    await asyncio.wait({early})  # its own end, however it ends; a cancel of ours still stops us
    if not early.cancelled():
        early.exception()  # read, and dropped


@dataclass(frozen=True)
class _Commit:
    """An outcome to commit under the lease, then how to settle the message."""

    outcome: queue_pb2.StageOutcome
    record: Record | None
    then: Settlement


class StageRunner:
    """Runs one stage's deliveries (the module's diagram): each task is
    verified, leased, worked by the stage's ``StageWork``, committed under
    lease fencing and settled. What it sends goes through the ``Publisher``
    (``publish_task`` for the next stage, signed, traced, deduplicated by
    message id) and the job's events through audit's subjects; the optional
    parts confirm with audit first (``authority``), claim the signing step
    (``gate``), keep operators' diagnostics and defer waits off the queue."""

    def __init__(
        self,
        *,
        stage: Stage,
        work: StageWork,
        leases: LeaseStore,
        publisher: Publisher,
        events: EventFactory,
        queue: QueueSettings,
        gate: JobGate | None = None,
        meter: StageMeter | None = None,
        diagnostics: Diagnostics | None = None,
        deferrals: Deferrals | None = None,
        authority: JobAuthority | None = None,
        queue_clock: QueueClock | None = None,
    ) -> None:
        self._authority = authority
        """Audit, asked before any work (the assembler and the signer)."""
        self._queue_clock = queue_clock
        """Told when JetStream stored each task, before its work judges a time."""
        self._stage = stage
        self._deferrals = deferrals
        self._diagnostics = diagnostics
        self._meter = meter
        self._service = stage.service
        self._gate = gate
        self._work = work
        self._leases = leases
        self._publisher = publisher
        self._events = events
        self._max_deliver = queue.max_deliver
        self._announce_after = queue.announce_after_seconds
        self._events_ride = (
            queue.events_with_commit
            and stage.next is not None
            and stage_named(stage.next).service == AUDIT
        )
        """Whether this stage's events go with its task to audit, in one message."""
        self._backoff = queue.backoff
        self._tracer = trace.get_tracer(f"quire.{stage.service}")

    async def handle(self, msg: Msg) -> None:
        await settle(msg, await self._deliver(msg), self._deferrals)

    async def _deliver(self, msg: Msg) -> Settlement:
        try:
            task, ident = read_task(msg.data)
        except ForgedMessage as refused:
            log.warning("task on %s refused: %s", msg.subject, refused.message)
            if self._meter is not None:
                self._meter.settled(_priority_of(msg.subject), "refused", 0)
            return TERM
        # A deferred task comes back as a new message (quire.workqueue.deferral):
        # its deliveries before that count too.
        attempt = prior_deliveries(msg.headers) + msg.metadata.num_delivered
        priority = task.priority or "interactive"
        queued = _queued_since(msg)
        if queued is not None and self._queue_clock is not None:
            self._queue_clock.observe(queued / 1e9)
        parent = extract_context(msg.headers)
        if queued is not None:
            # The wait on the queue as its own span, so a waterfall shows it.
            self._tracer.start_span(
                f"{self._stage.name}.queue_wait",
                context=parent,
                kind=SpanKind.CONSUMER,
                start_time=queued,
                attributes={"quire.job": ident, "quire.attempt": attempt},
            ).end()
        waited = 0.0 if queued is None else max(0.0, (time.time_ns() - queued) / 1e9)
        with self._tracer.start_as_current_span(
            f"{self._service}.process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "quire.job": ident,
                "quire.tenant": task.tenant,
                "quire.attempt": attempt,
                "quire.stage": self._stage.name,
                "quire.class": priority,
                "messaging.system": "nats",
                "messaging.destination.name": msg.subject,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                # The job's class is the lane of every sandbox call its work makes.
                with sandbox_lane(BATCH if priority == BATCH else INTERACTIVE):
                    if self._meter is None:
                        settlement = await self._run(task, attempt, span)
                    else:
                        with self._meter.delivery(priority, waited):
                            settlement = await self._run(task, attempt, span)
            except Exception as error:  # noqa: BLE001 - database or queue trouble: retry
                log.warning(
                    "job %s attempt %d: %s; will retry", task.job, attempt, type(error).__name__
                )
                reason = str(getattr(error, "reason", "") or "")
                record_failure(span, error, reason)
                await self._keep(task.job, attempt, reason or ReasonCode.INTERNAL, error)
                settlement = retry(self._backoff, attempt, error)
            outcome = _OUTCOMES[settlement.action]
            span.set_attribute("quire.outcome", outcome)
            if self._meter is not None:
                self._meter.settled(priority, outcome, attempt)
            log.info(
                "job %s %s at attempt %d",
                task.job,
                outcome,
                attempt,
                extra={"job": task.job, "tenant": task.tenant},
            )
            return settlement

    async def _run(self, task: queue_pb2.JobTask, attempt: int, span: trace.Span) -> Settlement:
        early = self._early(task, attempt)
        if early is None:
            return await self._leased(task, attempt, span, None)
        try:
            settlement = await self._leased(task, attempt, span, early)
        except asyncio.CancelledError:
            early.cancel()  # the worker is halting: nothing waits for it
            raise
        except BaseException:
            await _drained(early)
            raise
        await _drained(early)
        return settlement

    def _early(self, task: queue_pb2.JobTask, attempt: int) -> asyncio.Future[Decided] | None:
        """The work's early verdict, started now, if it judges before its lease."""
        if not isinstance(self._work, StartsEarly):
            return None
        judged = self._work.early(task, attempt)
        return None if judged is None else asyncio.ensure_future(judged)

    async def _leased(
        self,
        task: queue_pb2.JobTask,
        attempt: int,
        span: trace.Span,
        early: asyncio.Future[Decided] | None,
    ) -> Settlement:
        # The gate is read and audit asked while the lease is taken: none
        # depends on the others, and a cancel or an ending recorded after the
        # read is still caught when this delivery ends the job or claims signing.
        confirming = (
            asyncio.ensure_future(self._confirmed(task)) if self._authority is not None else None
        )
        try:
            lease, (held, claimant) = await asyncio.gather(
                self._leases.acquire(lease_key(task.job, task.generation)),
                self._claim_of(task.job, task.generation),
            )
            span.set_attribute("quire.lease_token", lease.token)
            if lease.committed is not None:
                return await self._hand_off(lease.committed, ACK, task, attempt)
            if held in ENDED and claimant != self._service:
                # Another stage (or the dead-letter office) ended the job: no step may
                # follow, whoever sent this task. An ending this stage claimed itself
                # but did not commit (it crashed in between) is decided again below.
                log.warning("task for job %s refused: the job ended %s", task.job, held)
                return TERM
            if confirming is not None:
                refused = await confirming
                if refused is not None:
                    return refused
        finally:
            if confirming is not None:
                if not confirming.done():
                    confirming.cancel()
                elif not confirming.cancelled():
                    confirming.exception()  # seen: the delivery was decided without it
        stored: frozenset[str] = frozenset()
        # The working state's entry, made once, as the work starts: announced
        # or sent with the outcome, it says when the work began.
        entry = self._entry_events(task, lease, attempt)
        if held == CANCELLED:
            ending = self._ending(
                task, lease, attempt, State.CANCELLED, ReasonCode.CANCELLED_BY_CLIENT, entry
            )
            decision: _Commit | Settlement = _Commit(ending, None, TERM)
        else:
            # The announcement need not delay the work: it is best effort, and
            # the committed outcome carries the same event (same id) anyway.
            # Work that commits before it is due sends the event with its
            # outcome instead, in the same message; a delivery that ends
            # without an outcome (a retry, a wait), or that fetches from a
            # source system, announces at once.
            due, publishing = asyncio.Event(), asyncio.Event()
            if _fetches(task):
                due.set()  # work that waits on outside systems shows its state at once
            announced = asyncio.create_task(self._announce_start(entry, due, publishing))
            decided: _Commit | Settlement | None = None
            try:
                decided = await self._decide(task, lease, attempt, entry, early)
            finally:
                if isinstance(decided, _Commit) and not publishing.is_set():
                    announced.cancel()
                else:
                    due.set()
                    stored = await announced
            assert decided is not None
            decision = decided
        if isinstance(decision, Settlement):
            return decision
        _record_timings(decision.outcome, self._stage.name)
        fault_point(f"{self._service}.before_commit")
        if not await self._leases.complete(lease, decision.outcome, decision.record):
            span.set_attribute("quire.stale", True)
            log.info("stale lease for job %s (token %d); result discarded", task.job, lease.token)
            return LEAVE
        fault_point(f"{self._service}.after_commit")
        return await self._hand_off(decision.outcome, decision.then, task, attempt, stored)

    async def _confirmed(self, task: queue_pb2.JobTask) -> Settlement | None:
        """None when audit confirms the task; TERM when it is forged or its job
        ended. Audit's own trouble raises (the delivery is retried)."""
        assert self._authority is not None
        try:
            await self._authority.confirm(task)
        except ForgedMessage as refused:
            log.warning("task for job %s refused: %s", task.job, refused.message)
            return TERM
        except JobEnded as ended:
            log.warning("task for job %s refused: the job ended %s", task.job, ended.state)
            return TERM
        return None

    async def _claim_of(self, job: str, generation: int) -> tuple[str, str]:
        """What the job gate holds for ``job``'s ``generation``, and who claimed it."""
        return ("", "") if self._gate is None else await self._gate.claim_of(job, generation)

    async def _announce_start(
        self,
        entry: list[queue_pb2.TransitionEvent],
        due: asyncio.Event,
        publishing: asyncio.Event,
    ) -> frozenset[str]:
        """Make the job's new state visible while the work runs, once it has
        run ``announce_after_seconds`` or ``due`` is set (``publishing`` is
        set as the publish begins: until then the announcement may be called
        off); the ids of the events the queue acknowledged (stored), which
        this delivery's hand-off need not publish again.

        Best effort: the same event (same id) is part of the committed outcome,
        so the ledger gets it exactly once either way, and a redelivery that
        finds the outcome committed publishes all of it.
        """
        if self._announce_after > 0:
            # Not wait_for, which on Python 3.11 can swallow a cancel that
            # comes just as ``due`` is set.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._announce_after):
                    await due.wait()
        publishing.set()
        stored: set[str] = set()
        for event in entry:
            try:
                await self._publisher.publish(event_subject(self._service), event, event.event_id)
            except Exception as error:  # noqa: BLE001 - best effort: the outcome carries it
                log.warning("announcement not sent (%s)", type(error).__name__)
                break
            stored.add(event.event_id)
        return frozenset(stored)

    async def _hand_off(
        self,
        outcome: queue_pb2.StageOutcome,
        then: Settlement,
        task: queue_pb2.JobTask,
        attempt: int,
        stored: frozenset[str] = frozenset(),
    ) -> Settlement:
        try:
            await self._publish(outcome, task.redrive, stored)
        except TransientError as error:
            # Committed but not yet handed on: the redelivery republishes it.
            await self._keep(task.job, attempt, error.reason, error)
            return retry(self._backoff, attempt, error)
        fault_point(f"{self._service}.after_publish")
        return then

    async def _decide(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        entry: list[queue_pb2.TransitionEvent],
        early: asyncio.Future[Decided] | None = None,
    ) -> _Commit | Settlement:
        try:
            if early is not None:
                result = (await early)(lease)
            else:
                result = await self._work.process(task, lease, attempt)
        except PermanentError as error:
            state = State.REJECTED
            if isinstance(error, JobCancelled):
                state = State.CANCELLED
            elif isinstance(error, SystemFailure):
                state = State.FAILED
            return await self._end(task, lease, attempt, state, error, entry=entry)
        except Exception as raised:  # noqa: BLE001 - transient by default
            failure = as_storage_error(raised)  # a full disk met outside the blob store
            reason = failure.reason if isinstance(failure, QuireError) else ReasonCode.INTERNAL
            if not isinstance(failure, QuireError):
                # The type only: exception text may carry document content.
                log.warning("job %s: unexpected %s", task.job, type(failure).__name__)
            if await self._leases.current_token(lease.job) != lease.token:
                await self._keep(task.job, attempt, reason, failure)
                return LEAVE  # superseded: the newer delivery owns the message
            if attempt < self._max_deliver:
                await self._keep(task.job, attempt, reason, failure)
                return retry(self._backoff, attempt, failure)
            log.warning("job %s failed after %d attempts (%s)", task.job, attempt, reason)
            return await self._end(
                task,
                lease,
                attempt,
                State.FAILED,
                failure,
                reason=ReasonCode.RETRY_LIMIT_REACHED,
                entry=entry,
            )
        if result.verdict in (Verdict.REJECT, Verdict.FAIL):
            assert result.rejection is not None
            state = State.REJECTED if result.verdict is Verdict.REJECT else State.FAILED
            return await self._end(
                result.task,
                lease,
                attempt,
                state,
                result.rejection,
                record=result.record,
                entry=entry,
            )
        return _Commit(self._advance(lease, attempt, result, entry), result.record, ACK)

    async def _keep(self, job: str, attempt: int, reason: str, error: BaseException) -> None:
        """Keep the error's own text for operators (``quire.diagnosticstore``): the
        job's status and the ledger carry ``reason`` alone."""
        if self._diagnostics is None:
            return
        try:
            await self._diagnostics.keep(job, attempt, str(reason), error)
        except Exception as failure:  # noqa: BLE001 - never the delivery's outcome
            log.warning("diagnostic for job %s not kept: %s", job, type(failure).__name__)

    def _event(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        from_state: str,
        to_state: str,
        *,
        reason: str = "",
        fields: Mapping[str, Any] | None = None,
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
        if self._stage.waiting == self._stage.working:
            return []
        return [self._event(task, lease, attempt, self._stage.waiting, self._stage.working)]

    def _advance(
        self,
        lease: Lease,
        attempt: int,
        result: StageResult,
        entry: list[queue_pb2.TransitionEvent],
    ) -> queue_pb2.StageOutcome:
        task = result.task
        outcome = queue_pb2.StageOutcome(events=entry)
        for step in result.steps:
            outcome.events.append(
                self._event(
                    task, lease, attempt, step.from_state, step.to_state, fields=step.fields
                )
            )
        if result.verdict is Verdict.HAND_ON:
            assert self._stage.next is not None
            last = result.steps[-1].to_state if result.steps else self._stage.working
            outcome.events.append(
                self._event(
                    task, lease, attempt, last, self._stage.hands_on, fields=result.handoff_fields
                )
            )
            outcome.next_task.CopyFrom(task)
            outcome.next_subject = task_subject(self._stage.next, task)
        return outcome

    async def _end(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        state: State,
        error: QuireError | Exception,
        *,
        reason: str | None = None,
        record: Record | None = None,
        entry: list[queue_pb2.TransitionEvent],
    ) -> _Commit:
        """A terminal outcome, unless the client's cancel was recorded first."""
        reason = reason or (error.reason if isinstance(error, QuireError) else ReasonCode.INTERNAL)
        if self._gate is not None and state != State.CANCELLED:
            if await self._gate.end(task.job, state, task.generation) == CANCELLED:
                state, reason = State.CANCELLED, ReasonCode.CANCELLED_BY_CLIENT
        if state == State.FAILED:
            await self._keep(task.job, attempt, reason, error)
        ending = self._ending(task, lease, attempt, state, reason, entry)
        span = trace.get_current_span()
        span.set_attributes({"quire.ended": str(state), "quire.reason": str(reason)})
        if state != State.CANCELLED:
            span.set_status(Status(StatusCode.ERROR, f"{state}: {reason}"))
        if state == State.REJECTED and isinstance(error, Rejected):
            ending.events[-1].reason_detail = error.detail
            ending.events[-1].disagreements.extend(error.disagreements)
        if state == State.FAILED:
            # Kept for operators: `quire dlq retry` starts a new generation from it.
            ending.dead_letter.CopyFrom(
                queue_pb2.DeadLetter(
                    task=task,
                    stage=self._stage.name,
                    reason_code=str(reason),
                    deliveries=attempt,
                )
            )
        return _Commit(ending, record, TERM)

    def _ending(
        self,
        task: queue_pb2.JobTask,
        lease: Lease,
        attempt: int,
        state: State,
        reason: str,
        entry: list[queue_pb2.TransitionEvent],
    ) -> queue_pb2.StageOutcome:
        outcome = queue_pb2.StageOutcome(events=entry)
        outcome.events.append(
            self._event(task, lease, attempt, self._stage.working, state, reason=str(reason))
        )
        return outcome

    async def _publish(
        self,
        outcome: queue_pb2.StageOutcome,
        redrive: int = 0,
        stored: frozenset[str] = frozenset(),
    ) -> None:
        """Publish what was committed: the events (several as one
        ``EventBatch`` message, in order, so the ledger keeps the job's order)
        and the next task, at once; a re-driven task (``redrive`` > 0) sends it
        all again under fresh message ids, in case the first copies were lost.
        Events this delivery's announcement already stored (``stored``: the
        queue acknowledged them) are not sent twice; they come first in the
        outcome, so the order holds. Should the next stage's step reach audit
        before these events, audit holds it until they are recorded
        (``quire.audit.succession``). A task to audit itself (the signer's, to
        the commit stage) carries the events instead (``events_with_commit``):
        one message, and audit records them as it completes the job."""
        publishing: list[Awaitable[object]] = []
        pending = [event for event in outcome.events if event.event_id not in stored]
        # Riding, they go with the task, below.
        riding = self._events_ride and outcome.HasField("next_task")
        if not riding and len(pending) == 1:
            (event,) = pending
            publishing.append(
                self._publisher.publish(
                    event_subject(self._service), event, redriven(event.event_id, redrive)
                )
            )
        elif not riding and pending:
            publishing.append(
                self._publisher.publish(
                    event_batch_subject(self._service),
                    queue_pb2.EventBatch(events=pending),
                    redriven(batch_message_id(pending), redrive),
                )
            )
        if outcome.HasField("next_task"):
            assert self._stage.next is not None
            task = queue_pb2.JobTask()
            task.CopyFrom(outcome.next_task)
            task.redrive = max(task.redrive, redrive)
            # Never events a task came with from elsewhere: only this commit's.
            del task.events[:]
            if riding:
                task.events.extend(pending)
            publishing.append(self._publisher.publish_task(self._stage.next, task, task.redrive))
        await asyncio.gather(*publishing)
        if outcome.HasField("dead_letter"):
            letter = outcome.dead_letter
            await self._publisher.publish(
                dead_subject(letter.stage),
                letter,
                task_message_id(letter.task.job, f"dead.{letter.stage}", letter.task.generation),
            )


def _fetches(task: queue_pb2.JobTask) -> bool:
    """Whether the job names a source still to be fetched from a source system."""
    return any(s.HasField("fetch") and not s.HasField("pin") for s in task.sources)


def _record_timings(outcome: queue_pb2.StageOutcome, stage: str) -> None:
    """This delivery's phases, on the event that moves the job on (or ends
    it): committed with it, so a redelivery republishes the same bytes."""
    if not outcome.events:
        return
    for name, seconds in delivery_timings().items():
        phase, _, system = name.partition(":")  # "fetch:<system>": one source system's share
        timing = job_pb2.PhaseTiming(stage=stage, phase=phase, source_system=system)
        timing.duration.FromMicroseconds(round(seconds * 1e6))
        outcome.events[-1].timings.append(timing)
