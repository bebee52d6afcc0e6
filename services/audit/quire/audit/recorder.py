"""The events consumer: every stage's transitions into the ledger, once each."""

from __future__ import annotations

from nats.aio.msg import Msg
from opentelemetry import trace

from quire.audit import ledger
from quire.database import Database
from quire.jobs import job_id
from quire.telemetry import extract_context
from quire.type import queue_pb2

__all__ = ["EventRecorder"]


class EventRecorder:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._tracer = trace.get_tracer("quire.audit")

    async def handle(self, msg: Msg) -> None:
        event = queue_pb2.TransitionEvent.FromString(msg.data)
        with self._tracer.start_as_current_span(
            "audit.record",
            context=extract_context(msg.headers),
            attributes={"quire.job": job_id(event.job), "quire.event": event.event_id},
        ) as span:
            appended = await self._db.run(lambda s: ledger.append(s, event))
            span.set_attribute("quire.duplicate", not appended)
        await msg.ack()
