"""Who gets the sandbox's next free worker: interactive work before batch work.

A pool has ``slots`` tasks running at most, and each lane its own worker
processes (a lane never runs more tasks than it has processes). When a slot
frees, the waiters of the first lane in ``LANES`` are served before any of the
next: a priority hand-off, not first come first served, so an interactive
task waits for at most the tasks already running, never for queued batch
work. Within a lane, callers are served in arrival order, and the idle
worker handed out is the one most recently given back: its caches (the CPU's,
and the memory its libraries warmed) still hold the work it just did, and at
low load the same one or two processes serve every task.

Batch work's share is bounded by its processes (``workers - reserved``), so a
burst of batch work can never hold every slot; interactive work can use all
of them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, TypeVar

__all__ = ["LANES", "INTERACTIVE", "BATCH", "LaneGate", "sandbox_lane", "current_lane"]

INTERACTIVE = "interactive"
BATCH = "batch"
LANES = (INTERACTIVE, BATCH)
"""The lanes, first served first; the same names as the queues' priority classes."""

W = TypeVar("W")

_lane: ContextVar[str] = ContextVar("quire_sandbox_lane", default=INTERACTIVE)
"""The lane of the sandbox calls the running task makes; set by ``sandbox_lane``."""


@contextmanager
def sandbox_lane(lane: str) -> Iterator[None]:
    """Run the sandbox calls made within (and by tasks started within) in
    ``lane``: the stage runner sets each delivery's priority class here, so a
    stage's own code need not pass it on to every call."""
    if lane not in LANES:
        raise ValueError(f"no sandbox lane {lane!r}")
    token = _lane.set(lane)
    try:
        yield
    finally:
        _lane.reset(token)


def current_lane() -> str:
    """The lane set by the innermost ``sandbox_lane``; interactive outside any."""
    return _lane.get()


class LaneGate(Generic[W]):
    """Idle workers per lane and a count of free slots, handed out by priority."""

    def __init__(self, workers: Mapping[str, Sequence[W]], *, slots: int) -> None:
        self._order = [lane for lane in LANES if lane in workers]
        self._idle: dict[str, deque[W]] = {lane: deque(workers[lane]) for lane in self._order}
        self._waiting: dict[str, deque[asyncio.Future[W]]] = {lane: deque() for lane in self._order}
        self._free = slots

    async def acquire(self, lane: str) -> W:
        """An idle worker of ``lane`` and a slot, once nobody ahead waits."""
        if not self._anyone_ahead(lane) and self._startable(lane):
            return self._take(lane)
        waiter: asyncio.Future[W] = asyncio.get_running_loop().create_future()
        self._waiting[lane].append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(lane, waiter.result())  # handed over just as it gave up
            elif waiter in self._waiting[lane]:
                self._waiting[lane].remove(waiter)
            raise

    def release(self, lane: str, worker: W) -> None:
        """Give back a worker and its slot, and hand them on by priority (the
        worker is the next one handed out: ``_take``)."""
        self._idle[lane].append(worker)
        self._free += 1
        self._hand_on()

    def _anyone_ahead(self, lane: str) -> bool:
        for other in self._order:
            if self._waiting[other]:
                return True
            if other == lane:
                return False
        return False

    def _startable(self, lane: str) -> bool:
        return self._free > 0 and bool(self._idle[lane])

    def _take(self, lane: str) -> W:
        """The lane's most recently released idle worker, and a slot."""
        self._free -= 1
        return self._idle[lane].pop()

    def _hand_on(self) -> None:
        for lane in self._order:
            waiting = self._waiting[lane]
            while waiting and self._startable(lane):
                waiter = waiting.popleft()
                if not waiter.done():  # a cancelled waiter is skipped
                    waiter.set_result(self._take(lane))
            if waiting:
                return  # this lane still waits: no later lane goes before it
