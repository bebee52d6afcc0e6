"""The dead-letter office: the backstop for work whose worker died on its last
delivery (so no stage could end the job). JetStream's max-deliveries advisory
is kept in the dead-letter stream; here each one moves its message out of the
work queue into ``quire.dead.<stage>`` and ends the job FAILED
(``RETRY_LIMIT_REACHED``) — unless the client cancelled it first — so no
accepted job is forgotten in a queue."""

from __future__ import annotations

import json
import logging

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from quire.backoff import Backoff
from quire.jobgate import CANCELLED, JobGate
from quire.pipeline import STAGES, Stage, State
from quire.reasons import ReasonCode
from quire.transitions import EventFactory
from quire.type import queue_pb2
from quire.wire import ForgedMessage, WireVerifier
from quire.workqueue import (
    WORK_STREAM,
    Publisher,
    dead_subject,
    event_subject,
    task_message_id,
)
from quire.workqueue.settle import ACK, TERM, Settlement, retry, settle

__all__ = ["DeadLetterOffice", "stage_of_consumer"]

log = logging.getLogger(__name__)


def stage_of_consumer(consumer: str) -> Stage | None:
    """The stage a work consumer (``<stage>-<priority>``) serves."""
    return next((s for s in STAGES if consumer.startswith(f"{s.name}-")), None)


class DeadLetterOffice:
    """Handles JetStream's max-deliveries advisories: moves the message to
    ``quire.dead.<stage>`` and ends its job FAILED, unless the client cancelled
    it first."""

    def __init__(
        self,
        js: JetStreamContext,
        gate: JobGate,
        events: EventFactory,
        *,
        publisher: Publisher,
        verifier: WireVerifier,
        backoff: Backoff,
    ) -> None:
        self._backoff = backoff
        self._js = js
        self._gate = gate
        self._events = events
        self._publisher = publisher
        self._verifier = verifier

    async def handle(self, msg: Msg) -> None:
        try:
            settlement = await self._end(msg)
        except Exception as error:  # noqa: BLE001 - NATS trouble: the advisory comes back
            log.warning("dead-letter advisory not handled (%s)", type(error).__name__)
            settlement = retry(self._backoff, msg.metadata.num_delivered, error)
        await settle(msg, settlement)

    async def _end(self, msg: Msg) -> Settlement:
        """End the job whose task exhausted its deliveries; ACK once it is done."""
        try:
            advisory = json.loads(msg.data)
            sequence = int(advisory.get("stream_seq", 0))
        except (ValueError, TypeError, AttributeError):
            log.warning("undecodable max-deliveries advisory terminated")
            return TERM
        gave_up = stage_of_consumer(str(advisory.get("consumer", "")))
        if gave_up is None:
            log.warning("max-deliveries advisory from a consumer of no stage; ignored")
            return ACK
        try:
            stored = await self._js.get_msg(WORK_STREAM, seq=sequence)
        except NotFoundError:
            return ACK  # already gone (acknowledged after all): nothing to do
        try:
            # The advisory names a sequence; act only on a genuine task stored there.
            self._verifier.producer(stored.subject or "", stored.data or b"", stored.headers)
            task = queue_pb2.JobTask.FromString(stored.data or b"")
        except (ForgedMessage, DecodeError):
            await self._js.delete_msg(WORK_STREAM, sequence)
            return ACK
        deliveries = int(advisory.get("deliveries", 0))
        letter = queue_pb2.DeadLetter(
            task=task,
            stage=gave_up.name,
            reason_code=ReasonCode.RETRY_LIMIT_REACHED,
            deliveries=deliveries,
        )
        await self._publisher.publish(
            dead_subject(gave_up.name),
            letter,
            task_message_id(task.job, f"dead.{gave_up.name}", task.generation),
        )
        ending, reason = State.FAILED, ReasonCode.RETRY_LIMIT_REACHED
        if await self._gate.end(task.job, State.FAILED, task.generation) == CANCELLED:
            ending, reason = State.CANCELLED, ReasonCode.CANCELLED_BY_CLIENT
        event = self._events.transition(
            task,
            gave_up.working,
            ending,
            attempt=deliveries,
            lease_token=0,
            reason_code=reason,
        )
        await self._publisher.publish(event_subject("audit"), event, event.event_id)
        await self._js.delete_msg(WORK_STREAM, sequence)
        log.warning(
            "job %s dead-lettered from %s after %s deliveries",
            task.job,
            gave_up.name,
            advisory.get("deliveries"),
        )
        return ACK
