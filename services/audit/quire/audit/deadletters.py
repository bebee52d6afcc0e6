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

from quire.jobgate import CANCELLED, JobGate
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

__all__ = ["DeadLetterOffice"]

log = logging.getLogger(__name__)
STAGE_STATES = {"validate": "VALIDATING", "assemble": "ASSEMBLING", "sign": "SIGNING"}


class DeadLetterOffice:
    def __init__(
        self,
        js: JetStreamContext,
        gate: JobGate,
        events: EventFactory,
        *,
        publisher: Publisher,
        verifier: WireVerifier,
    ) -> None:
        self._js = js
        self._gate = gate
        self._events = events
        self._publisher = publisher
        self._verifier = verifier

    async def handle(self, msg: Msg) -> None:
        advisory = json.loads(msg.data)
        sequence = int(advisory.get("stream_seq", 0))
        stage = str(advisory.get("consumer", "")).split("-")[0]
        try:
            stored = await self._js.get_msg(WORK_STREAM, seq=sequence)
        except NotFoundError:
            await msg.ack()  # already gone (acknowledged after all): nothing to do
            return
        try:
            # The advisory names a sequence; act only on a genuine task stored there.
            self._verifier.producer(stored.subject or "", stored.data or b"", stored.headers)
            task = queue_pb2.JobTask.FromString(stored.data or b"")
        except (ForgedMessage, DecodeError):
            await self._js.delete_msg(WORK_STREAM, sequence)
            await msg.ack()
            return
        deliveries = int(advisory.get("deliveries", 0))
        letter = queue_pb2.DeadLetter(
            task=task,
            stage=stage,
            reason_code=ReasonCode.RETRY_LIMIT_REACHED,
            deliveries=deliveries,
        )
        await self._publisher.publish(
            dead_subject(stage), letter, task_message_id(task.job, f"dead.{stage}", task.generation)
        )
        ending = "FAILED"
        if await self._gate.end(task.job, "FAILED") == CANCELLED:
            ending = "CANCELLED"
        reason = (
            ReasonCode.CANCELLED_BY_CLIENT
            if ending == "CANCELLED"
            else ReasonCode.RETRY_LIMIT_REACHED
        )
        event = self._events.transition(
            task,
            STAGE_STATES.get(stage, ""),
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
            stage,
            advisory.get("deliveries"),
        )
        await msg.ack()
