"""Publishing protobuf messages to JetStream with dedup ids and trace context."""

from __future__ import annotations

from google.protobuf.message import Message
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.telemetry import inject_headers

__all__ = ["Publisher"]


class Publisher:
    """Publishes with ``Nats-Msg-Id`` so a republish of the same message is a no-op."""

    def __init__(self, js: JetStreamContext, *, timeout: float = 10.0) -> None:
        self._js = js
        self._timeout = timeout

    async def publish(self, subject: str, message: Message, msg_id: str) -> None:
        headers = inject_headers({"Nats-Msg-Id": msg_id})
        try:
            await self._js.publish(
                subject, message.SerializeToString(), timeout=self._timeout, headers=headers
            )
        except (NatsError, JetStreamError, TimeoutError) as error:
            raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "publish failed") from error
