"""Publishing protobuf messages to JetStream with dedup ids, trace context and
the producing service's signature (see ``quire.wire``)."""

from __future__ import annotations

from google.protobuf.message import Message
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.telemetry import child_span, inject_headers
from quire.type import queue_pb2
from quire.wire import SIGNATURE_HEADER, WireSigner
from quire.workqueue.topology import redriven, task_message_id, task_subject

__all__ = ["Publisher"]


class Publisher:
    """Publishes with ``Nats-Msg-Id`` so a republish of the same message is a no-op.

    With a ``signer`` every message is signed for its subject; consumers that
    verify (every Quire service) refuse what is not.
    """

    def __init__(
        self, js: JetStreamContext, *, signer: WireSigner | None = None, timeout: float = 10.0
    ) -> None:
        self._js = js
        self._signer = signer
        self._timeout = timeout
        self._tracer = trace.get_tracer("quire.workqueue")

    async def publish(self, subject: str, message: Message, msg_id: str) -> None:
        await self.publish_bytes(subject, message.SerializeToString(), msg_id)

    async def publish_task(self, stage: str, task: queue_pb2.JobTask, redrive: int = 0) -> None:
        """Hand ``task`` to ``stage``: on its subject for the task's track and
        priority (``task_subject``), under the message id of the job's
        generation at that stage (a republish is dropped), made fresh by a
        re-drive's number (``redrive`` > 0) in case the first copy was lost."""
        msg_id = redriven(task_message_id(task.job, stage, task.generation), redrive)
        await self.publish(task_subject(stage, task), task, msg_id)

    async def publish_bytes(self, subject: str, payload: bytes, msg_id: str) -> None:
        # A producer span: the consumer's spans hang under the send, not the sender's work.
        with child_span(
            self._tracer,
            f"publish {subject}",
            kind=SpanKind.PRODUCER,
            attributes={"messaging.system": "nats", "messaging.destination.name": subject},
        ):
            headers = inject_headers({"Nats-Msg-Id": msg_id})
            if self._signer is not None:
                headers[SIGNATURE_HEADER] = self._signer.header(subject, payload)
            try:
                await self._js.publish(subject, payload, timeout=self._timeout, headers=headers)
            except (NatsError, JetStreamError, TimeoutError) as error:
                raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "publish failed") from error
