"""Whether interactive work is in the pipeline, read from the queues.

Admission's batch dispatcher asks before each tick: while any stage's
interactive consumer has messages waiting or in progress, or has delivered
one since the last reading — or did, within the hold time, so that a steady
trickle of interactive packets counts as present between arrivals — batch
work is held to a smaller window. The consumers are the truth for every
admission replica alike; readings are reused for a short while so a tick
costs at most one round trip per stage.

Waiting and in-progress counts alone miss most of a trickle: a packet spends
tens of milliseconds at each stage, and a reading every quarter second sees
it only now and then, so the window sprang back to its full size between
sightings and the next packet met a flood of batch work. A consumer's
delivered sequence only grows, so a delivery between two readings is never
missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from quire.workqueue.topology import WORK_STREAM, consumer_name

__all__ = ["InteractivePresence"]


class InteractivePresence:
    def __init__(
        self,
        js: JetStreamContext,
        stages: Sequence[str],
        *,
        hold_seconds: float,
        cache_seconds: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._js = js
        self._stages = tuple(stages)
        self._hold = hold_seconds
        self._cache = cache_seconds
        self._clock = clock
        self._read_at = float("-inf")
        self._seen_at = float("-inf")
        self._delivered: dict[str, int] = {}
        """Each stage's interactive consumer's delivered sequence at the last reading."""

    async def present(self) -> bool:
        """True while interactive work waits or runs at some stage, or did
        within the hold time."""
        now = self._clock()
        if now - self._read_at >= self._cache:
            self._read_at = now
            if await self._busy():
                self._seen_at = now
        return now - self._seen_at < self._hold

    async def _busy(self) -> bool:
        busy = False
        for stage in self._stages:  # every stage read: each one's sequence is kept
            try:
                info = await self._js.consumer_info(
                    WORK_STREAM, consumer_name(stage, "interactive")
                )
            except NotFoundError:
                continue
            delivered = info.delivered.consumer_seq if info.delivered else 0
            last = self._delivered.get(stage)
            self._delivered[stage] = delivered or 0
            if last is not None and (delivered or 0) > last:
                busy = True
            if (info.num_pending or 0) + (info.num_ack_pending or 0) > 0:
                busy = True
        return busy
