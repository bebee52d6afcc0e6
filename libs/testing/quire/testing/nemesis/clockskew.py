"""One service replica's clock skewed by minutes, as the nemesis strikes it
(issue 42): kind ``clock-skew``.

The replica's wall clock runs ``seconds`` ahead or behind (the direction
drawn from the nemesis's seed) while its monotonic clock stays the
machine's (``quire.testing.skewedclock``: libfaketime, its offset read from
a file on every call). Healing sets it right again.

Whoever starts the cluster calls ``prepare`` for each service replica before
starting it (and the replica is started with ``python -m``, never forked
from a process that did not load the library)::

    skew = ClockSkew(seconds=300, rng=random.Random(seed))
    env = {**base_env, **skew.prepare(replica.directory, replica.role)}

``prepare`` returns the variables that preload libfaketime with the
replica's clock file (``<replica dir>/clock.skew``, at 0: the replica runs
on the right time until struck), so striking and healing only write that
file: the replica keeps running, mid-work, through both. A replica that was
not prepared is restarted with those variables when struck
(``Process.start(extra_env)``) and restarted without them when healed, as
the interface says a fault that changes a process's environment does.

What Quire does about it is in ``docs/testing.md`` ("Skewed clocks").
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from pathlib import Path

from quire.settings import SERVICES
from quire.testing.nemesis.fault import Cluster
from quire.testing.skewedclock import SkewedClock

__all__ = ["CLOCK_SKEW", "ClockSkew", "clock_file"]

CLOCK_SKEW = "clock-skew"
DEFAULT_SECONDS = 300
START_TRIES = 3
"""Starts of a replica with libfaketime preloaded before the strike fails."""

log = logging.getLogger(__name__)


def clock_file(directory: Path) -> Path:
    """A prepared replica's clock file."""
    return directory / "clock.skew"


class ClockSkew:
    kind = CLOCK_SKEW

    def __init__(
        self,
        *,
        seconds: int = DEFAULT_SECONDS,
        rng: random.Random | None = None,
        preload: bool = True,
        services: Sequence[str] = SERVICES,
    ) -> None:
        """``seconds``: how far a struck clock runs from the right time; each
        strike draws ahead or behind from ``rng``. ``preload``: whether
        ``prepare`` preloads libfaketime into every replica (its clock then
        moves while it runs); without it ``prepare`` does nothing and a
        strike restarts its target with the library. ``services``: whose
        replicas it strikes."""
        self.seconds = seconds
        self._services = tuple(services)
        self._preload = preload
        self._rng = rng or random.Random()
        self._clocks: dict[Path, SkewedClock] = {}
        self._restarted: set[str] = set()

    def prepare(self, directory: Path, role: str) -> dict[str, str]:
        """The variables a service replica in ``directory`` is started with,
        so that its clock can be moved while it runs; none for another role."""
        if role not in SERVICES or not self._preload:
            return {}
        clock = self._clocks.get(directory.resolve())
        if clock is None:
            directory.mkdir(parents=True, exist_ok=True)
            clock = SkewedClock(clock_file(directory))
            self._clocks[directory.resolve()] = clock
        return clock.env()

    def release(self) -> None:
        """Forget the prepared clocks (their files go with the replicas' directories)."""
        self._clocks.clear()
        self._restarted.clear()

    def targets(self, cluster: Cluster) -> list[str]:
        """Every replica of its services."""
        return sorted(name for name, p in cluster.processes().items() if p.role in self._services)

    async def strike(self, cluster: Cluster, target: str) -> dict[str, str]:
        process = cluster.processes()[target]
        offset = self.seconds * self._rng.choice((1, -1))
        clock = self._clocks.get(process.directory.resolve())
        if clock is not None:
            clock.set(offset)
            return {"offset_seconds": f"{offset:+d}", "how": "moved while running"}
        clock = SkewedClock(clock_file(process.directory), offset)
        self._clocks[process.directory.resolve()] = clock
        await asyncio.to_thread(process.stop)
        self._restarted.add(target)
        for tries in range(1, START_TRIES + 1):
            try:
                await asyncio.to_thread(process.start, clock.env())
                break
            except RuntimeError:  # exited before serving: the preloaded library, rarely
                log.warning("%s exited as it started with a skewed clock", target)
                if tries == START_TRIES:
                    raise
        return {
            "offset_seconds": f"{offset:+d}",
            "how": "restarted with it",
            "start_tries": str(tries),
        }

    async def heal(self, cluster: Cluster, target: str) -> None:
        process = cluster.processes()[target]
        clock = self._clocks.get(process.directory.resolve())
        if clock is not None:
            clock.set(0)
        if target in self._restarted:
            self._restarted.discard(target)
            self._clocks.pop(process.directory.resolve(), None)
            await asyncio.to_thread(process.stop)
            await asyncio.to_thread(process.start)
        elif not process.alive:
            await asyncio.to_thread(process.start)
