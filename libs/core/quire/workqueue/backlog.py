"""The age of the oldest ready message on a stage's queue, read from JetStream.

A message is ready when the consumer has not yet delivered it: its stream
sequence is past the consumer's last delivered one. Its age is the time since
it was stored. Readings are reused for a short while so that a burst of
submissions costs one JetStream round trip, not one each.

Admission sheds load by it; each stage exports its own queue's readings as
metrics (``QueueGauges``).

A rollout's candidate track waits on a consumer of its own
(``<stage>-candidate``, capped); ``candidate=True`` reads that one. The
reconciler asks for the queue a job's task is on, so that a candidate job
held back by its cap is seen in line, not stalled. Admission's shedding
reads the baseline only: the candidate's cap holds its backlog on purpose,
and every tenant's new work must not be refused for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from quire.errors import TransientError
from quire.metrics import ServiceMetrics
from quire.reasons import ReasonCode
from quire.workqueue.topology import (
    PRIORITIES,
    WORK_STREAM,
    candidate_consumer_name,
    candidate_subject,
    consumer_name,
    work_subject,
)

__all__ = ["QueueAgeProbe", "QueueGauges"]

log = logging.getLogger(__name__)


class QueueAgeProbe:
    def __init__(
        self,
        js: JetStreamContext,
        *,
        cache_seconds: float,
        stage: str = "validate",
    ) -> None:
        self._js = js
        self._cache_seconds = cache_seconds
        self._stage = stage
        self._readings: dict[tuple[str, bool], tuple[float, float]] = {}
        self._lock = asyncio.Lock()

    async def oldest_ready_age(self, priority: str, *, candidate: bool = False) -> float:
        """Seconds the oldest undelivered message of ``priority`` has waited (0 if
        none), on the baseline's queue or, with ``candidate``, the candidate track's."""
        key = (priority, candidate)
        now = time.monotonic()
        cached = self._readings.get(key)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        async with self._lock:
            cached = self._readings.get(key)
            if cached is not None and time.monotonic() - cached[0] < self._cache_seconds:
                return cached[1]
            age = await self._read(priority, candidate)
            self._readings[key] = (time.monotonic(), age)
            return age

    async def _read(self, priority: str, candidate: bool) -> float:
        if candidate:
            consumer = candidate_consumer_name(self._stage)
            subject = candidate_subject(self._stage, priority)
        else:
            consumer = consumer_name(self._stage, priority)
            subject = work_subject(self._stage, priority)
        try:
            return await self._age(consumer, subject)
        except NotFoundError:
            return 0.0
        except Exception as error:  # noqa: BLE001 - NATS unreachable: say so, typed
            raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "cannot read the queue") from error

    async def pending(self, priority: str) -> int:
        """Messages of ``priority`` the consumer has not yet delivered."""
        info = await self._js.consumer_info(WORK_STREAM, consumer_name(self._stage, priority))
        return int(info.num_pending or 0)

    async def candidate_pending(self) -> int:
        """Messages of either priority the candidate consumer has not yet delivered."""
        info = await self._js.consumer_info(WORK_STREAM, candidate_consumer_name(self._stage))
        return int(info.num_pending or 0)

    async def ready(self, *, candidate: bool = False) -> tuple[int, float]:
        """The stage's queue as one reading, both priorities together: the
        messages not yet delivered, and the oldest one's age in seconds (0 if
        none); the candidate track's with ``candidate``. (0, 0.0) for a queue
        with no consumer; QUEUE_UNAVAILABLE when NATS cannot say."""
        try:
            if candidate:
                pending = await self.candidate_pending()
            else:
                pending = sum([await self.pending(priority) for priority in PRIORITIES])
        except NotFoundError:
            return 0, 0.0
        except Exception as error:  # noqa: BLE001 - NATS unreachable: say so, typed
            raise TransientError(ReasonCode.QUEUE_UNAVAILABLE, "cannot read the queue") from error
        ages = [await self.oldest_ready_age(p, candidate=candidate) for p in PRIORITIES]
        return pending, max(ages)

    async def _age(self, consumer: str, subject: str) -> float:
        """The age of the oldest message on ``subject`` that ``consumer`` has not delivered."""
        info = await self._js.consumer_info(WORK_STREAM, consumer)
        if not info.num_pending:
            return 0.0
        delivered = info.delivered.stream_seq if info.delivered else 0
        try:
            message = await self._js.get_msg(
                WORK_STREAM,
                seq=(delivered or 0) + 1,
                subject=subject,
                next=True,
            )
        except NotFoundError:
            return 0.0
        if message.time is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - message.time).total_seconds())


class QueueGauges:
    """Samples a stage's queues every ``interval_seconds`` into its metrics:
    pending count, oldest ready age and the age budget, per priority class,
    and the candidate track's consumer's backlog and ages.
    A scrape reads the last sample; a failed read keeps the previous one."""

    def __init__(
        self,
        js: JetStreamContext,
        stage: str,
        metrics: ServiceMetrics,
        *,
        budget_seconds: float,
        interval_seconds: float = 5.0,
    ) -> None:
        self._probe = QueueAgeProbe(js, cache_seconds=0.0, stage=stage)
        self._stage = stage
        self._interval = interval_seconds
        self._pending = metrics.gauge("quire_queue_pending_messages")
        self._age = metrics.gauge("quire_queue_oldest_ready_age_seconds")
        self._candidate_pending = metrics.gauge("quire_queue_candidate_pending_messages")
        self._candidate_age = metrics.gauge("quire_queue_candidate_oldest_ready_age_seconds")
        for priority in PRIORITIES:
            metrics.gauge("quire_queue_age_budget_seconds").labels(
                stage=stage, **{"class": priority}
            ).set(budget_seconds)
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        for priority in PRIORITIES:
            labels = {"stage": self._stage, "class": priority}
            try:
                pending = await self._probe.pending(priority)
                age = await self._probe.oldest_ready_age(priority)
            except Exception as error:  # noqa: BLE001 - NATS away: keep the last reading
                log.debug("queue sample failed: %s", type(error).__name__)
                continue
            self._pending.labels(**labels).set(pending)
            self._age.labels(**labels).set(age)
        await self._sample_candidate()

    async def _sample_candidate(self) -> None:
        """The candidate track's consumer: its backlog (both priorities) and
        each priority's oldest waiting message."""
        try:
            pending = await self._probe.candidate_pending()
            ages = {p: await self._probe.oldest_ready_age(p, candidate=True) for p in PRIORITIES}
        except Exception as error:  # noqa: BLE001 - NATS away: keep the last reading
            log.debug("candidate queue sample failed: %s", type(error).__name__)
            return
        self._candidate_pending.labels(stage=self._stage).set(pending)
        for priority, age in ages.items():
            self._candidate_age.labels(stage=self._stage, **{"class": priority}).set(age)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self._interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
