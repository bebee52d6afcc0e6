"""The events consumer: every stage's transitions into the ledger, once each."""

from __future__ import annotations

import logging

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from opentelemetry import trace

from quire.audit import ledger
from quire.audit.history import HistoryWatch
from quire.database import Database
from quire.errors import QuireError
from quire.faults import fault_point
from quire.jobs import job_id, state_value
from quire.reasons import ReasonCode
from quire.telemetry import extract_context
from quire.type import queue_pb2

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0
COMPLETED = state_value("COMPLETED")


class EventRecorder:
    def __init__(self, database: Database, history: HistoryWatch) -> None:
        self._db = database
        self._history = history
        self._tracer = trace.get_tracer("quire.audit")

    async def handle(self, msg: Msg) -> None:
        try:
            event = queue_pb2.TransitionEvent.FromString(msg.data)
            ident = job_id(event.job)
        except (DecodeError, QuireError):
            log.warning("undecodable event terminated")
            await msg.term()
            return
        if event.to_state == COMPLETED or event.reason_code == ReasonCode.DEAD_LETTER_RETRIED:
            # Only audit writes these: the completion desk after checking the
            # evidence, the dead-letter desk for an operator's retry.
            log.warning("event %s claims a step only audit takes; dropped", event.event_id)
            await msg.term()
            return
        with self._tracer.start_as_current_span(
            "audit.record",
            context=extract_context(msg.headers),
            attributes={"quire.job": ident, "quire.event": event.event_id},
        ) as span:
            try:
                appended = await self._db.run(lambda s: ledger.append(s, event))
            except Exception as error:  # noqa: BLE001 - database trouble: retry
                log.warning("event %s not recorded (%s)", event.event_id, type(error).__name__)
                await msg.nak(delay=RETRY_SECONDS)
                return
            span.set_attribute("quire.duplicate", not appended)
        fault_point("audit.after_record")
        await msg.ack()
        if appended:
            self._history.notify(event.job)
