"""The nemesis: a seeded schedule of faults struck one at a time on a
cluster while a workload runs, and the timeline of what struck where.

The seed (``random.Random(seed)``) decides everything the nemesis decides:
which kinds strike in which order (every kind once before any twice), when
each strikes (after how many submits the workload has had acknowledged),
which of the targets the fault offers at that moment it strikes, and how
long it lasts. What the cluster offers (which member leads, which replica
holds a lease) is the cluster's; the timeline says what was struck.

A strike waits until some job is in flight (the history shows it
acknowledged and not ended), so that it lands mid-work: the last look at
the history and the strike's start happen with no await between them, so
the jobs in flight that the record later shows are the ones it waited
for (a job seen to end while the targets were found is not counted on).
Every fault is
healed after its hold, and ``run`` heals whatever is still open when it
ends, however it ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quire.testing.nemesis.fault import Cluster, Fault, FaultRecord, Timeline

__all__ = ["Nemesis", "Planned", "plan"]

log = logging.getLogger(__name__)

STRIKE_TIMEOUT_SECONDS = 90.0
HEAL_TIMEOUT_SECONDS = 240.0
TARGET_WAIT_SECONDS = 20.0
IN_FLIGHT_WAIT_SECONDS = 30.0
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Planned:
    """One strike as the seed planned it."""

    kind: str
    after_acknowledged: int
    """Strikes once the workload has had this many submits acknowledged."""
    pick: float
    """In [0, 1): which of the targets offered at the time (sorted by name)."""
    hold: float
    """Seconds the fault lasts once struck."""


def plan(
    seed: int,
    kinds: Sequence[str],
    *,
    strikes: int,
    jobs: int,
    hold: tuple[float, float],
) -> list[Planned]:
    """``strikes`` strikes over a workload of ``jobs`` submits: kinds in a
    shuffled round (every kind once before any twice), each paced by the
    acknowledgements, spread over the first three quarters of the submits."""
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < strikes:
        round_ = list(kinds)
        rng.shuffle(round_)
        order.extend(round_)
    span = max(1, (jobs * 3) // 4)
    marks = sorted(rng.randint(1, span) for _ in range(strikes))
    return [
        Planned(kind, mark, rng.random(), round(rng.uniform(*hold), 1))
        for kind, mark in zip(order[:strikes], marks, strict=True)
    ]


class Nemesis:
    def __init__(
        self,
        cluster: Cluster,
        faults: Sequence[Fault],
        planned: Sequence[Planned],
        timeline: Timeline,
        *,
        acknowledged: Callable[[], int],
        in_flight: Callable[[], Sequence[str]],
    ) -> None:
        self.cluster = cluster
        self.faults = {fault.kind: fault for fault in faults}
        self.planned = list(planned)
        self.timeline = timeline
        self._acknowledged = acknowledged
        self._in_flight = in_flight

    async def run(self, stop: asyncio.Event) -> Timeline:
        """Strike as planned until done or ``stop`` is set; heal everything."""
        try:
            for planned in self.planned:
                if not await self._until(self._reached(planned.after_acknowledged), stop, None):
                    break
                await self._until(lambda: bool(self._in_flight()), stop, IN_FLIGHT_WAIT_SECONDS)
                if stop.is_set():
                    break
                record = await self._strike(planned)
                if record is None:
                    continue
                # A fault may say how long it lasts once struck (its own ``hold``).
                await self._hold(getattr(self.faults[planned.kind], "hold", planned.hold), stop)
                await self._heal(record)
        finally:
            for record in self.timeline.open():
                await self._heal(record)
        return self.timeline

    def _reached(self, acknowledged: int) -> Callable[[], bool]:
        return lambda: self._acknowledged() >= acknowledged

    async def _until(
        self, condition: Callable[[], bool], stop: asyncio.Event, timeout: float | None
    ) -> bool:
        """Until ``condition`` holds (True), ``stop`` is set or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            if stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def _hold(self, seconds: float, stop: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _targets(self, fault: Fault) -> list[str]:
        deadline = time.monotonic() + TARGET_WAIT_SECONDS
        while True:
            targets = sorted(await asyncio.to_thread(fault.targets, self.cluster))
            if targets or time.monotonic() > deadline:
                return targets
            await asyncio.sleep(POLL_SECONDS)

    async def _strike(self, planned: Planned) -> FaultRecord | None:
        fault = self.faults[planned.kind]
        deadline = time.monotonic() + IN_FLIGHT_WAIT_SECONDS
        while True:
            targets = await self._targets(fault)
            # No await from this look at the history to the record's start.
            if not targets or self._in_flight() or time.monotonic() > deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
        if not targets:
            self.timeline.records.append(
                FaultRecord(planned.kind, "", time.monotonic(), time.monotonic(), error="NoTarget")
            )
            return None
        target = targets[int(planned.pick * len(targets))]
        record = FaultRecord(planned.kind, target, time.monotonic(), wall_start=time.time())
        self.timeline.records.append(record)
        log.info("nemesis strikes: %s on %s", planned.kind, target)
        try:
            record.detail = await asyncio.wait_for(
                fault.strike(self.cluster, target), STRIKE_TIMEOUT_SECONDS
            )
        except Exception as error:  # noqa: BLE001 - recorded; the heal still runs
            record.error = type(error).__name__
        return record

    async def _heal(self, record: FaultRecord) -> None:
        fault = self.faults[record.kind]
        try:
            await asyncio.wait_for(fault.heal(self.cluster, record.target), HEAL_TIMEOUT_SECONDS)
        except Exception as error:  # noqa: BLE001 - recorded; the run's verdicts decide
            record.error = record.error or f"heal: {type(error).__name__}"
        finally:
            record.end = time.monotonic()
