"""The events consumer: every stage's transitions into the ledger, once each.

The queue worker has already checked each event's signature against the
subject (``quire.wire``); here the event must also be one its producer may
make — the actor it names is that producer, and the state it moves to is one
of that producer's steps. Anything else is refused and changes nothing.

Then the step must fit its job's recorded history (``quire.audit.succession``,
judged in the append's transaction): a step that does not is kept aside as a
finding and never appended; one that may yet fit (its job's acceptance, or
its stage's turn, still on the way) is delivered again with backoff, for at
most ``unexplained_seconds`` after it was published, then kept aside too.

Appends go through a group commit: events that arrive while a commit is in
progress are appended together, each in its own savepoint, under one
transaction and one fsync, and each is acknowledged only after that commit.
``EVENTS_IN_FLIGHT`` events are handled at once so that there is something
to group (events are tiny; the slots cost nothing while idle).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from opentelemetry import trace
from sqlalchemy import Connection

from quire.audit import ledger
from quire.audit.history import HistoryWatch
from quire.audit.measures import AuditMeasures
from quire.audit.succession import Refusal
from quire.audit.writes import AuditWrites
from quire.auditword import WordTeller
from quire.backoff import Backoff
from quire.errors import QuireError
from quire.faults import fault_point
from quire.jobs import job_id, state_name
from quire.jobview import JobFacts, moves_no_job
from quire.pipeline import State, steps_of
from quire.reasons import ReasonCode
from quire.telemetry import extract_context
from quire.type import queue_pb2
from quire.wire import verified_producer
from quire.workqueue.settle import ACK, TERM, Settlement, retry, settle
from quire.workqueue.topology import is_event_batch

__all__ = ["EventRecorder", "EVENTS_IN_FLIGHT"]

log = logging.getLogger(__name__)
T = TypeVar("T")
EVENTS_IN_FLIGHT = 32
COMPLETED = State.COMPLETED.number
AUDITS_OWN = frozenset(
    {
        ReasonCode.DEAD_LETTER_RETRIED,
        ReasonCode.BYTES_RETIRED,
        ReasonCode.RULESET_CURRENT_CHANGED,
    }
)
"""Reason codes only audit's own entries carry: a producer's event with one is refused."""
ACTORS_OF_PRODUCER = {
    "audit": frozenset({"audit", "dead-letter"}),
    # The validator's review desk records the operator who decided a parked job.
    "validator": frozenset({"validator", "operator"}),
}


def _events_of(msg: Msg) -> list[queue_pb2.TransitionEvent]:
    """The message's event, or its batch's events in order (none is refused)."""
    if is_event_batch(msg.subject):
        events = list(queue_pb2.EventBatch.FromString(msg.data).events)
        if not events:
            raise DecodeError("an empty batch")
        return events
    return [queue_pb2.TransitionEvent.FromString(msg.data)]


def may_record(producer: str, event: queue_pb2.TransitionEvent) -> bool:
    """Whether ``producer`` (the event's verified signer) may make this step."""
    actors = ACTORS_OF_PRODUCER.get(producer, frozenset({producer}))
    if event.actor.service not in actors:
        return False
    return state_name(event.to_state) in steps_of(producer)


_Appended = tuple[JobFacts | None, list[tuple[int | None, tuple[int, bytes]]]]
"""A job's view after the appends, and the entries appended."""


class EventRecorder:
    """Audit's consumer of the stages' events: appends each event its producer
    may make and that fits its job's history, once; the rest are kept aside or
    delivered again later."""

    def __init__(
        self,
        writes: AuditWrites,
        history: HistoryWatch,
        backoff: Backoff,
        measures: AuditMeasures | None = None,
        *,
        unexplained_seconds: float = 120.0,
        word: WordTeller | None = None,
    ) -> None:
        """``word``: tells the assembler and the signer of each job that
        reached their stage (``quire.auditword``)."""
        self._word = word
        self._measures = measures
        self._writes = writes
        self._unexplained_seconds = unexplained_seconds
        self._backoff = backoff
        self._history = history
        self._tracer = trace.get_tracer("quire.audit")

    async def handle(self, msg: Msg) -> None:
        settlement, appended = await self._record(msg)
        self._tell(appended)
        await settle(msg, settlement)
        self._heard(appended)

    async def record_carried(
        self,
        events: list[queue_pb2.TransitionEvent],
        msg: Msg,
        then: Callable[[Connection], T],
        *,
        tenant: str,
    ) -> T | None:
        """Judge and append the events a task to audit carried (the signer's
        commit, riding on its commit task ``msg``), as ``handle`` does a
        batch's, their producer the task's verified one; ``then`` runs in the
        same transaction, after them (the completion they allow). What
        ``then`` returned, or None when an event was refused before the
        ledger was asked and nothing ran. One still waiting for its job's
        history is left out of the ledger, as ``handle`` leaves it, and
        ``then`` finds the history short. Database trouble raises."""
        _settlement, appended, _waiting, done = await self._recorded(
            events, verified_producer(msg.headers), msg, (then, tenant)
        )
        self._tell(appended)
        self._heard(appended)
        return done

    def _tell(self, appended: dict[str, _Appended]) -> None:
        if self._word is not None:
            for facts, _entries in appended.values():
                if facts is not None:
                    self._word.tell(facts.job, facts.tenant, facts.manifest_digest, facts.state)

    def _heard(self, appended: dict[str, _Appended]) -> None:
        for job, (_facts, entries) in appended.items():
            self._history.appended(job, entries)

    async def _record(self, msg: Msg) -> tuple[Settlement, dict[str, _Appended]]:
        """How to settle ``msg``, and the jobs whose history grew, with their
        views after it and the entries appended (each with the sequence of
        the job's entry before it).

        A message holds one event, or (on a ``.batch`` subject) the events of
        one stage commit in order; they are judged and appended together, in
        one group. Any event refused before the ledger is asked (undecodable,
        or a step its producer may not take) refuses the whole message."""
        try:
            events = _events_of(msg)
        except DecodeError:
            log.warning("undecodable event terminated")
            return TERM, {}
        settlement, appended, _waiting, _done = await self._recorded(
            events, verified_producer(msg.headers), msg, None
        )
        return settlement, appended

    async def _recorded(
        self,
        events: list[queue_pb2.TransitionEvent],
        producer: str,
        msg: Msg,
        then: tuple[Callable[[Connection], T], str] | None,
    ) -> tuple[Settlement, dict[str, _Appended], bool, T | None]:
        """``events`` (of one commit, in order, from ``producer``, which ``msg``
        brought) judged and appended in one group, with ``then`` (work, and
        the tenant whose chain it may append to) after them in it: the
        settlement, the jobs whose history grew, whether an event waits for
        its job's history, and what the work returned."""
        try:
            idents = [job_id(event.job) for event in events]
        except QuireError:
            log.warning("undecodable event terminated")
            return TERM, {}, False, None
        for event in events:
            if (
                event.to_state == COMPLETED
                or event.reason_code in AUDITS_OWN
                or moves_no_job(event)
            ):
                # Only audit writes these: the completion desk after checking the
                # evidence, the dead-letter desk for an operator's retry,
                # RecordRetirement for bytes retired under the retention policy
                # and RecordRulesetChange for a ruleset's current version.
                log.warning("event %s claims a step only audit takes; dropped", event.event_id)
                return TERM, {}, False, None
            if not may_record(producer, event):
                log.warning("event %s is not a step its producer takes; refused", event.event_id)
                return TERM, {}, False, None
        last_chance = self._waited_enough(msg)
        arrivals = [ledger.Arrival(event, producer, last_chance=last_chance) for event in events]
        with self._tracer.start_as_current_span(
            "audit.record",
            context=extract_context(msg.headers),
            attributes={
                "quire.job": idents[0],
                "quire.event": events[0].event_id,
                "quire.events": len(events),
            },
        ) as span:
            done: T | None = None
            try:
                if then is None:
                    outcomes = await self._writes.record(arrivals)
                else:
                    outcomes, done = await self._writes.record_then(
                        arrivals, then[0], tenant=then[1]
                    )
            except Exception as error:  # noqa: BLE001 - database trouble: retry
                if then is not None:
                    # A group that failed is written again item by item: some
                    # of these events may be in the ledger now. Whoever waits
                    # on or watches the job reads its history again.
                    for job in dict.fromkeys(event.job for event in events):
                        self._history.notify(job)
                    raise  # the work's caller settles its own message
                log.warning("events not recorded (%s)", type(error).__name__)
                return retry(self._backoff, msg.metadata.num_delivered, error), {}, False, None
            span.set_attribute("quire.recorded", outcomes[-1].recorded.value)
            appended: dict[str, _Appended] = {}
            waiting = False
            last = len(events) - 1
            for n, (event, ident, outcome) in enumerate(zip(events, idents, outcomes, strict=True)):
                if outcome.recorded is ledger.Recorded.WAITING:
                    waiting = True
                elif outcome.refusal is not None:
                    self._kept_aside(event, producer, outcome.refusal)
                elif outcome.recorded is ledger.Recorded.APPENDED:
                    self._appended(event, ident, lagged=n == last)
                    _facts, entries = appended.get(event.job, (None, []))
                    if outcome.entry is not None:
                        entries.append((outcome.previous, outcome.entry))
                    appended[event.job] = (outcome.facts, entries)  # the latest, in order
        fault_point("audit.after_record")
        if waiting:
            # What was appended stays; delivered again, it is found recorded.
            return retry(self._backoff, msg.metadata.num_delivered), appended, True, done
        return ACK, appended, False, done

    def _appended(self, event: queue_pb2.TransitionEvent, ident: str, *, lagged: bool) -> None:
        if self._measures is not None:
            self._measures.recorded(event, lagged=lagged)
        # DEBUG: several a job; the ledger itself is the record, and audit's
        # INFO line per job is its completion.
        log.debug(
            "transition recorded",
            extra={
                "job": ident,
                "tenant": event.tenant,
                "to_state": state_name(event.to_state),
                "actor": event.actor.service,
            },
        )

    def _waited_enough(self, msg: Msg) -> bool:
        """Whether the event was published ``unexplained_seconds`` ago or more."""
        stored = msg.metadata.timestamp  # when the stream stored it
        return time.time() - stored.timestamp() >= self._unexplained_seconds

    def _kept_aside(self, event: queue_pb2.TransitionEvent, producer: str, kind: Refusal) -> None:
        if self._measures is not None:
            self._measures.refused(kind.value)
        # Ids only: the finding's row holds what the producer claimed.
        log.warning(
            "event kept out of the ledger",
            extra={"event": event.event_id, "job": event.job, "producer": producer, "kind": kind},
        )
