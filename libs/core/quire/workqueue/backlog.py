"""The age of the oldest ready message on the validate queue, read from JetStream.

A message is ready when the consumer has not yet delivered it: its stream
sequence is past the consumer's last delivered one. Its age is the time since
it was stored. Readings are reused for a short while so that a burst of
submissions costs one JetStream round trip, not one each.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from quire.errors import TransientError
from quire.reasons import ReasonCode
from quire.workqueue import WORK_STREAM, consumer_name, work_subject

__all__ = ["QueueAgeProbe"]


class QueueAgeProbe:
    def __init__(
        self, js: JetStreamContext, *, cache_seconds: float, stage: str = "validate"
    ) -> None:
        self._js = js
        self._cache_seconds = cache_seconds
        self._stage = stage
        self._readings: dict[str, tuple[float, float]] = {}
        self._lock = asyncio.Lock()

    async def oldest_ready_age(self, priority: str) -> float:
        """Seconds the oldest undelivered message of ``priority`` has waited (0 if none)."""
        now = time.monotonic()
        cached = self._readings.get(priority)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        async with self._lock:
            cached = self._readings.get(priority)
            if cached is not None and time.monotonic() - cached[0] < self._cache_seconds:
                return cached[1]
            age = await self._read(priority)
            self._readings[priority] = (time.monotonic(), age)
            return age

    async def _read(self, priority: str) -> float:
        try:
            return await self._age(priority)
        except NotFoundError:
            return 0.0
        except Exception as error:  # noqa: BLE001 - NATS unreachable: say so, typed
            raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "cannot read the queue") from error

    async def _age(self, priority: str) -> float:
        info = await self._js.consumer_info(WORK_STREAM, consumer_name(self._stage, priority))
        if not info.num_pending:
            return 0.0
        delivered = info.delivered.stream_seq if info.delivered else 0
        try:
            message = await self._js.get_msg(
                WORK_STREAM,
                seq=(delivered or 0) + 1,
                subject=work_subject(self._stage, priority),
                next=True,
            )
        except NotFoundError:
            return 0.0
        if message.time is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - message.time).total_seconds())
