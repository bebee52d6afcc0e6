"""In-process notice that a job's ledger history grew.

The events consumer and the completion consumer run in the same audit
process; when a commit task arrives before the job's last events, completion
waits on this notice (bounded) instead of naking and coming back later. With
several audit replicas the events may land on another one, which tells this
one (``replicanews``); if that news is lost, the wait times out and the task
is retried with backoff. A completion watches before it reads the history:
news that arrives while its read is on the way is kept, not lost.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HistoryWatch", "grew"]


class HistoryWatch:
    """Tells the waiters of one job, in this process, that its ledger history grew."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)

    def notify(self, job: str) -> None:
        for waiter in self._waiters.get(job, ()):
            waiter.set()

    def appended(self, job: str, entries: list[tuple[int | None, tuple[int, bytes]]]) -> None:
        """``notify``, by the entries appended (which a subclass may use)."""
        self.notify(job)

    @contextmanager
    def watching(self, job: str) -> Iterator[asyncio.Event]:
        """An event set each time the job's history grows, from now until the
        block ends: taken before reading the history, so that growth during
        the read is not missed."""
        waiter = asyncio.Event()
        self._waiters[job].add(waiter)
        try:
            yield waiter
        finally:
            self._waiters[job].discard(waiter)
            if not self._waiters[job]:
                del self._waiters[job]

    async def wait(self, job: str, timeout: float) -> bool:
        """True if the job's history grew within ``timeout`` seconds."""
        with self.watching(job) as grown:
            return await grew(grown, timeout)


async def grew(grown: asyncio.Event, timeout: float) -> bool:
    """True if ``grown`` (from ``HistoryWatch.watching``) is set within
    ``timeout`` seconds; it is cleared for the next wait."""
    try:
        # Not wait_for, which on Python 3.11 can swallow a cancel that
        # comes as the history grows: the watch would outlive its caller.
        async with asyncio.timeout(timeout):
            await grown.wait()
    except TimeoutError:
        return False
    grown.clear()
    return True
